"""Request and response models of both APIs (v1 and LibreTranslate), with examples for /docs."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

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
            ]
        },
    )

    text: str | list[str] = Field(description="A text or a list of texts.")
    source: str = Field(description="Source language code, or `auto`.", examples=["en"])
    target: str = Field(description="Target language code.", examples=["de"])
    format: Literal["text", "html"] = Field("text", description="`html` keeps the markup.")
    options: TranslateOptionsIn = Field(default_factory=TranslateOptionsIn)


class Translation(BaseModel):
    text: str
    score: float | None = Field(None, description="Mean sentence score, when asked for.")
    alternatives: list[str] | None = None


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
        "same language (the text is returned as it is)."
    )
    source: str
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


class PivotInfo(BaseModel):
    source: str
    target: str
    via: str = Field(description="The pivot language: source -> via -> target.")


class ModelsResponse(BaseModel):
    models: list[ModelInfo]
    pivots: list[PivotInfo] = Field(
        default_factory=list, description="Pairs served through a pivot language (no direct model)."
    )


class ErrorBody(BaseModel):
    """Every error of both APIs (see app.http.errors)."""

    error: str = Field(description="What went wrong, naming the field and the limit.")
    code: str = Field(description="A stable machine-readable code, e.g. `too_large`.")
    field: str | None = Field(None, description="The field (or header) at fault.")
    limit: int | float | None = Field(None, description="The limit that was exceeded.")


class JobProgress(BaseModel):
    done: int = Field(description="Sentences translated so far.", examples=[320])
    total: int = Field(description="Sentences to translate (0 until the job has started).",
                       examples=[1250])


class DocumentJob(BaseModel):
    """A document job of /v1/documents."""

    model_config = ConfigDict(json_schema_extra={"examples": [{
        "id": "5d41402abc4b2a76b9719d911017c592", "state": "running", "filename": "report.docx",
        "source": "en", "target": "de", "segments": 412,
        "progress": {"done": 320, "total": 1250}, "error": None,
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


class LibreLanguage(BaseModel):
    code: str
    name: str
    targets: list[str]
