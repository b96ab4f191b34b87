"""The engine's public face: decoding options in, one result per input text out, and the one
seam between the service and an engine: `Engine` (with the `DecodingBatch` it starts), which the
ONNX Runtime Translator and every test double implement. The batcher and the registry call
nothing else on an engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from app.engine.bundle import DEFAULT_DECODING


@dataclass(frozen=True)
class TranslationOptions:
    """Decoding settings for one call of `translate_batch`.

    beam_size 1 is greedy search. The output may hold at most max_len_offset + max_len_ratio *
    (source tokens) tokens, EOS included, capped by the model's position table. num_alternatives
    asks for that many extra hypotheses (needs beam_size > num_alternatives)."""

    beam_size: int = 1
    length_penalty: float = 1.0
    max_len_offset: int = DEFAULT_DECODING["max_len_offset"]
    max_len_ratio: float = DEFAULT_DECODING["max_len_ratio"]
    num_alternatives: int = 0
    return_scores: bool = False
    # rank the beam's best hypotheses again with the bundle's language model, where it has one
    # (app.engine.rerank; beam search only)
    rerank: bool = True

    def __post_init__(self) -> None:
        if self.beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {self.beam_size}")
        if self.num_alternatives < 0:
            raise ValueError(f"num_alternatives must be >= 0, got {self.num_alternatives}")
        if self.num_alternatives and self.num_alternatives >= self.beam_size:
            raise ValueError("num_alternatives must be smaller than beam_size")


@dataclass(frozen=True)
class Result:
    """One translated text: the best translation, its score (sum of log-probs divided by
    length ** length_penalty) and alternatives, best first."""

    text: str
    score: float | None = None
    alternatives: list[str] = field(default_factory=list)
    alternative_scores: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)


@runtime_checkable
class DecodingBatch(Protocol):
    """A running batch (continuous batching): `admit` adds texts under the caller's keys at any
    step boundary, `step` advances every running sentence by one decoder step and returns the
    (key, Result) pairs that finished, `running` counts the sentences not yet returned. The
    caller closes it when done (a worker process's batch gives the process back)."""

    @property
    def running(self) -> int: ...

    def admit(self, keys: list, texts: list[str]) -> None: ...

    def step(self) -> list[tuple[Any, Result]]: ...

    def cancel(self, keys: list) -> None:
        """The sentences under these keys (their requests gone) end at the next step, with
        what they have then; their results still come back from `step`."""

    def close(self) -> None: ...


@runtime_checkable
class Engine(Protocol):
    """What the service needs of a translation engine: one loaded model of one language pair.

    `default_options` are the model's own decoding defaults (the only source of them);
    `max_source_tokens` is the longest input the encoder takes (None: no limit), and
    `count_tokens` measures a text in the same units; `manifest` is the bundle's manifest as
    shown by the API (variants, scores); `workers` is how many decode workers (running batches
    side by side) the engine is made for: the batcher runs that many."""

    name: str
    source_lang: str
    target_lang: str
    variant: str
    manifest: dict[str, Any]
    default_options: TranslationOptions
    max_source_tokens: int | None
    workers: int

    def count_tokens(self, text: str) -> int: ...

    def translate_batch(
        self, texts: list[str], options: TranslationOptions | None = None
    ) -> list[Result]: ...

    def warmup(self) -> None: ...

    def start_batch(self, options: TranslationOptions, beside: bool = False) -> DecodingBatch:
        """An empty running batch for these options. beside: it runs beside other running
        batches (one per decode worker), on the engine's single-thread sessions or in a worker
        process of its own."""
        ...

    def worker_process_counts(self) -> tuple[int, int] | None:
        """(alive, started) of the engine's worker processes; None when it runs none."""
        ...

    def close(self) -> None:
        """Ends what the engine started (its worker processes)."""
        ...
