"""A request's path between the routes and the batcher: limits -> segmentation -> one batched
engine call for all sentences of all texts -> rejoin, scores, alternatives."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from app.batcher import Batcher
from app.config import Settings
from app.engine.bundle import DECODING_KEYS
from app.engine.types import Result, TranslationOptions
from app.errors import InvalidInput, TooLarge
from app.registry import LoadedModel
from app.schemas import TranslateOptionsIn
from app.text import Segments, segment

# a UTF-16 surrogate left in a decoded str: a lone or reversed "\ud800" escape in the JSON, which
# no UTF-8 encoder, tokenizer or JSON response can carry
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class TextResult:
    text: str
    score: float | None = None
    alternatives: list[str] = dataclasses.field(default_factory=list)


def as_list(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def check_limits(texts: list[str], settings: Settings, field: str) -> None:
    """413 naming the field and the limit when a request is too big; 422 (LibreTranslate: 400)
    for a text with a lone surrogate, before anything tokenizes it."""
    if len(texts) > settings.max_texts_per_request:
        raise TooLarge(
            f"{field} has {len(texts)} texts; the limit is {settings.max_texts_per_request}",
            field=field, limit=settings.max_texts_per_request,
        )
    total = 0
    for i, text in enumerate(texts):
        name = f"{field}[{i}]" if len(texts) > 1 else field
        if len(text) > settings.max_chars_per_text:
            raise TooLarge(
                f"{name} has {len(text)} characters; the limit is {settings.max_chars_per_text}",
                field=name, limit=settings.max_chars_per_text,
            )
        total += len(text)
        if bad := _SURROGATE.search(text):
            raise InvalidInput(
                f"{name} has a lone surrogate (U+{ord(bad.group()):04X}) at character "
                f"{bad.start()}; send valid Unicode text",
                field=name,
            )
    if total > settings.max_total_chars:
        raise TooLarge(
            f"{field} has {total} characters in all; the limit is {settings.max_total_chars}",
            field=field, limit=settings.max_total_chars,
        )


def build_options(
    requested: TranslateOptionsIn, model: LoadedModel, settings: Settings
) -> TranslationOptions:
    """The model's decoding defaults overridden by the request, within the server's limits."""
    values = {key: getattr(model.default_options, key) for key in DECODING_KEYS}
    if requested.beam_size is not None:
        values["beam_size"] = requested.beam_size
    if requested.length_penalty is not None:
        values["length_penalty"] = requested.length_penalty
    if requested.max_length_ratio is not None:
        values["max_len_b"] = requested.max_length_ratio
    if requested.max_length is not None:
        values["max_len_a"], values["max_len_b"] = requested.max_length, 0.0
    if requested.alternatives > settings.max_alternatives:
        raise InvalidInput(
            f"options.alternatives is {requested.alternatives}; the limit is "
            f"{settings.max_alternatives}",
            field="options.alternatives", limit=settings.max_alternatives,
        )
    if requested.alternatives:
        values["num_alternatives"] = requested.alternatives
        if requested.beam_size is None:
            values["beam_size"] = max(values.get("beam_size", 1), requested.alternatives + 1)
        elif requested.beam_size <= requested.alternatives:
            raise InvalidInput(
                f"options.beam_size ({requested.beam_size}) must be larger than "
                f"options.alternatives ({requested.alternatives})",
                field="options.beam_size", limit=requested.alternatives + 1,
            )
    if values.get("beam_size", 1) > settings.max_beam_size:
        raise InvalidInput(
            f"options.beam_size is {values['beam_size']}; the limit is {settings.max_beam_size}",
            field="options.beam_size", limit=settings.max_beam_size,
        )
    values["return_scores"] = requested.return_scores
    return TranslationOptions(**values)


async def translate_texts(
    texts: list[str],
    fmt: str,
    model: LoadedModel,
    options: TranslationOptions,
    batcher: Batcher,
    timeout: float,
) -> tuple[list[TextResult], int]:
    """Translate texts through the shared batcher; returns results and the sentence count."""
    segmented = [segment(text, fmt) for text in texts]
    limit = model.translator.max_source_tokens
    if limit:  # sentences longer than the encoder takes are cut, not truncated
        for seg in segmented:
            seg.refine(lambda s: model.translator.count_tokens(s) <= limit)
    sentences = [s for seg in segmented for s in seg.sentences]
    results = await batcher.translate(model.translator, sentences, options, timeout)
    out, pos = [], 0
    for seg in segmented:
        mine = results[pos : pos + len(seg.targets)]
        pos += len(seg.targets)
        out.append(_assemble(seg, mine, options))
    return out, len(sentences)


def _assemble(seg: Segments, results: list[Result], options: TranslationOptions) -> TextResult:
    text = seg.rejoin([r.text for r in results])
    score = None
    if options.return_scores:
        scores = [r.score for r in results if r.score is not None]
        score = sum(scores) / len(scores) if scores else 0.0
    alternatives = []
    for k in range(options.num_alternatives):
        # the k-th alternative of each sentence (its best when it has fewer)
        picks = [r.alternatives[k] if k < len(r.alternatives) else r.text for r in results]
        alternatives.append(seg.rejoin(picks))
    return TextResult(text, score, alternatives)
