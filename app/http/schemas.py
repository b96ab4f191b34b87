"""Request and response models of both APIs (v1 and LibreTranslate), with examples for /docs."""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

GLOSSARY_DOC = (
    "Terms that must come out as given: source term -> target term (docs/glossaries.md). "
    "Whole words; a term in lowercase matches in any case, one with a capital letter only "
    "exactly; the longest term wins where several start; over the server's glossary for the "
    "pair."
)
CONFIDENCE_DOC = (
    "A confidence per translation, 0-1: exp of the mean log-probability per output token the "
    "model gave its translation (all its sentences; through a pivot, the product of both "
    "models'). Ranks translations by how likely they are right (docs/glossaries.md)."
)


def json_text(value: str) -> object:
    """A form field's JSON text, parsed; ValueError where it is no JSON, nesting deeper than
    the parser's recursion included (it raises RecursionError there)."""
    try:
        return json.loads(value)
    except RecursionError:
        raise ValueError("the JSON is nested too deeply") from None


# ---------------------------------------------------------------- v1


class TranslateOptionsIn(BaseModel):
    """Decoding options; unset ones take the model's defaults. Limits apply per sentence."""

    model_config = ConfigDict(extra="forbid")

    beam_size: int | None = Field(None, ge=1, description="1 = greedy search.", examples=[4])
    length_penalty: float | None = Field(
        None, ge=0, le=5, description="Beam scores are divided by length ** length_penalty."
    )
    max_length: int | None = Field(
        None, ge=1, le=1024, description="Output tokens per sentence at most (EOS included)."
    )
    max_length_ratio: float | None = Field(
        None, gt=0, le=10, description="Output tokens at most: 10 + ratio x source tokens."
    )
    alternatives: int = Field(0, ge=0, description="Extra translations to return, best first.")
    return_scores: bool = Field(
        False, strict=True, description="Return length-normalized log-probabilities."
    )
    confidence: bool = Field(False, strict=True, description=CONFIDENCE_DOC)
    rerank: bool = Field(
        True, strict=True,
        description="Rank the beam's best translations again with the model's language model, "
        "where it has one (beam search only; scores stay the translation model's).",
    )
    keep_target_language: bool = Field(
        True, strict=True,
        description="With a named source, a text of four words or more that reads as the "
        "target language already comes back as it is (`model` `identity`); false translates "
        "it as the source named.",
    )

    @field_validator(
        "beam_size", "length_penalty", "max_length", "max_length_ratio", "alternatives",
        mode="before",
    )
    @classmethod
    def _json_numbers_only(cls, value: object) -> object:
        # as the schema says: "4" and true are not numbers (pydantic would coerce them)
        if isinstance(value, (str, bool)):
            raise ValueError("Input should be a JSON number")
        return value


class TranslateRequest(BaseModel):
    """One or more texts to translate from `source` to `target`."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"text": "Hello world. How are you?", "source": "en", "target": "de"},
                {
                    "text": ["Open the file.", "Save your changes?"],
                    "source": "en",
                    "target": "de",
                    "options": {"beam_size": 4, "alternatives": 2, "return_scores": True},
                },
                {
                    "text": ["Open the file manager.", "Ouvrez le gestionnaire de fichiers."],
                    "source": "auto",
                    "target": "de",
                    "glossary": {"file manager": "Dateiverwaltung"},
                    "options": {"confidence": True},
                },
            ]
        },
    )

    text: str | list[str] = Field(description="A text or a list of texts.")
    source: str = Field(description="Source language code, or `auto`.", examples=["en"])
    target: str = Field(description="Target language code.", examples=["de"])
    format: Literal["text", "html"] = Field("text", description="`html` keeps the markup.")
    options: TranslateOptionsIn = Field(default_factory=TranslateOptionsIn)
    glossary: dict[str, str] | None = Field(
        None, description=GLOSSARY_DOC, examples=[{"file manager": "Dateiverwaltung"}]
    )


class DetectedLanguage(BaseModel):
    """A detected source language, as LibreTranslate's detectedLanguage."""

    language: str = Field(examples=["en"])
    confidence: float = Field(description="0-100.", examples=[92.4])


class Translation(BaseModel):
    text: str
    score: float | None = Field(None, description="Mean sentence score, when asked for.")
    alternatives: list[str] | None = None
    confidence: float | None = Field(
        None, description="With options.confidence: " + CONFIDENCE_DOC + " Absent where no "
        "model ran (the source is the target, or the text has no words).",
    )
    detected: DetectedLanguage | None = Field(
        None, description="With source `auto`: this text's source language (a text of 40 "
        "characters or more is detected on its own, a shorter one takes the language of all "
        "the request's texts together). With a named source: only on a text found to be in "
        "the target language already (four words or more), which comes back as it is.",
    )
    model: str | None = Field(
        None, description="With source `auto`, or a named source where a text was in the "
        "target language already: the model (or models, through a pivot) that translated this "
        "text; `identity` when it was in the target language already.",
    )


class TranslateResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "translations": [{"text": "Hallo Welt. Wie geht es dir?"}],
                    "model": "en-de",
                    "source": "en",
                    "target": "de",
                    "sentences": 2,
                    "elapsed_ms": 41.7,
                }
            ]
        }
    )

    translations: list[Translation] = Field(description="One per input text, in order.")
    model: str = Field(
        description="Name of the model that translated; through a pivot, the names of both "
        "models joined by '+', e.g. 'fr-en+en-de'; 'identity' when source and target are the "
        "same language (the text is returned as it is). With source `auto` and texts found in "
        "different languages, every route's name, joined by ', ' (see each translation's "
        "`model`)."
    )
    source: str = Field(description="The source language; with `auto`, the one detected, or "
                        "`auto` when the texts were found in different languages.")
    target: str
    pivot: str | None = Field(
        None,
        description="Set when no model translates source to target directly: the language "
        "the text was translated through (source -> pivot -> target).",
    )
    sentences: int = Field(description="Sentences sent to the engine.")
    elapsed_ms: float = Field(description="Server-side time for this request.")


class ModelInfo(BaseModel):
    name: str
    source: str
    target: str
    variant: str | None = Field(None, description="The loaded precision variant.")
    variants: list[str] = Field(default_factory=list, description="Variants in the bundle.")
    scores: dict = Field(default_factory=dict, description="Evaluation scores from the manifest.")
    decoding: dict = Field(default_factory=dict, description="Decoding defaults.")
    rerank: dict | None = Field(
        None, description="The language model that ranks beam search's best translations "
        "again (weight, candidates), where the model has one and the server reranks.")


class PivotInfo(BaseModel):
    source: str
    target: str
    via: str = Field(description="The pivot language: source -> via -> target.")


class KernelsInfo(BaseModel):
    active: list[str] = Field(description="Our native kernels the engine runs "
                              "(app.engine.kernels), e.g. attention, int8_matmul.")
    inactive: dict[str, str] = Field(
        default_factory=dict, description="Each of the others, with why it does not run.")


class ModelsResponse(BaseModel):
    models: list[ModelInfo]
    pivots: list[PivotInfo] = Field(
        default_factory=list, description="Pairs served through a pivot language (no direct model)."
    )
    kernels: KernelsInfo | None = Field(None, description="Our native kernels in this server.")


class ErrorBody(BaseModel):
    """Every error of both APIs (see app.http.errors)."""

    error: str = Field(description="What went wrong, naming the field and the limit.")
    code: str = Field(description="A stable machine-readable code, e.g. `too_large`.")
    field: str | None = Field(None, description="The field (or header) at fault.")
    limit: int | float | None = Field(None, description="The limit that was exceeded.")


class JobProgress(BaseModel):
    done: int = Field(description="Sentences translated so far (never less than before, "
                                   "never above `total`).", examples=[320])
    total: int = Field(description="Sentences to translate (0 until the job has started).",
                       examples=[1250])
    pages_read: int = Field(0, description="Pages of a PDF read so far; a long PDF takes a "
                                           "while to read, before its sentences are known. "
                                           "Never less than before: a job that reads its PDF "
                                           "again (resumed) keeps it until passed.",
                            examples=[261])
    pages: int = Field(0, description="Pages of a PDF (0 until its reading starts, and for "
                                      "the other formats).", examples=[261])


class DocumentJob(BaseModel):
    """A document job of /v1/documents."""

    model_config = ConfigDict(json_schema_extra={"examples": [{
        "id": "5d41402abc4b2a76b9719d911017c592", "state": "running", "filename": "report.docx",
        "source": "en", "target": "de", "segments": 412,
        "progress": {"done": 320, "total": 1250, "pages_read": 0, "pages": 0}, "error": None,
        "created": "2026-11-22T22:40:01Z", "started": "2026-11-22T22:40:02Z",
        "finished": None, "expires": None, "result": None,
    }]})

    id: str
    state: Literal["queued", "running", "done", "failed", "cancelled"]
    filename: str
    source: str = Field(description="As requested (`auto` stays `auto`).")
    target: str
    segments: int = Field(description="Paragraphs, cues or entries of the document.")
    progress: JobProgress
    error: str | None = Field(None, description="Why a failed job failed.")
    created: str = Field(description="ISO 8601, UTC.")
    started: str | None = None
    finished: str | None = None
    expires: str | None = Field(None, description="When a finished job and its result go.")
    result: str | None = Field(None, description="The download path, once done.")


class Health(BaseModel):
    status: str
    models: list[str] = Field(default_factory=list)


# ---------------------------------------------------------------- LibreTranslate


class LibreTranslateRequest(BaseModel):
    """LibreTranslate's `/translate` body (JSON or form)."""

    model_config = ConfigDict(
        extra="ignore",  # LibreTranslate ignores unknown fields
        json_schema_extra={"examples": [{"q": "Hello world!", "source": "en", "target": "de"}]},
    )

    q: str | list[str]
    source: str = "auto"
    target: str
    format: Literal["text", "html"] = "text"
    alternatives: int = Field(0, ge=0)
    api_key: str | None = None
    # extensions (LibreTranslate has neither; its clients never send them)
    glossary: dict[str, str] | None = Field(
        None, description=GLOSSARY_DOC + " A JSON object; in a form body, a JSON string."
    )
    confidence: bool = Field(
        False, description="Add `confidence` to the answer (a number, or a list for a list "
        "q): " + CONFIDENCE_DOC
    )

    @field_validator("confidence", mode="before")
    @classmethod
    def _boolean_words_only(cls, value: object) -> object:
        # a form field is a string: `true` or `false`, as the schema's boolean reads there
        if isinstance(value, str) and value not in ("true", "false"):
            raise ValueError("Input should be true or false")
        return value

    @field_validator("glossary", mode="before")
    @classmethod
    def _glossary_from_form(cls, value: object) -> object:
        # a form field is a string: the glossary's JSON text
        if isinstance(value, str):
            try:
                return json_text(value)
            except ValueError:
                raise ValueError("glossary must be a JSON object (source term -> target "
                                 "term)") from None
        return value


class LibreLanguage(BaseModel):
    code: str
    name: str
    targets: list[str]
