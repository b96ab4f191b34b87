"""Reliability tests: real uvicorn servers on 127.0.0.1 (tests/app's harness) in front of the real
tiny engine, wrapped in an `EngineDouble` that counts, holds, slows down or fails batches."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx

from app.translation.registry import load_models
from tests.app.fakes import StepBatch

API_KEY = "reliability-test-key"


class EngineDouble:
    """The real engine behind a seam. `gate` cleared holds batches; `delay` slows each one;
    a batch with `fail_marker` in a text raises an error full of internals. Its running batches
    (tests.app.fakes.StepBatch) decode each step's admitted texts to their end with the real
    engine's translate_batch, so every batch passes the seam."""

    def __init__(self, inner: Any, delay: float = 0.0) -> None:
        self.inner = inner
        self.name, self.source_lang, self.target_lang = inner.name, inner.source_lang, \
            inner.target_lang
        self.delay = delay
        self.fail_marker: str | None = None
        self.gate = threading.Event()
        self.gate.set()
        self.entered = 0  # batches that reached translate_batch (held ones included)
        self.batches: list[list[str]] = []
        self.tokenized = 0  # count_tokens calls
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:  # max_source_tokens, variant, warmup, ...
        return getattr(self.inner, name)

    def start_batch(self, options: Any, beside: bool = False) -> StepBatch:
        return StepBatch(self.translate_batch, options)

    def worker_process_counts(self) -> None:
        return None

    def count_tokens(self, text: str) -> int:
        with self._lock:
            self.tokenized += 1
        return self.inner.count_tokens(text)

    def translate_batch(self, texts: list[str], options: Any) -> list[Any]:
        with self._lock:
            self.entered += 1
        if not self.gate.wait(60):
            raise RuntimeError("the test held the engine for too long")
        self.batches.append(list(texts))
        if self.delay:
            time.sleep(self.delay)
        if self.fail_marker and any(self.fail_marker in text for text in texts):
            raise RuntimeError("CUDA error 700 in /opt/secret/encoder.onnx (node Attention_3)")
        return self.inner.translate_batch(texts, options)


def double_loader(doubles: list[EngineDouble], delay: float = 0.0):
    """A create_app loader: the real bundles, each translator wrapped in an EngineDouble."""

    def load(settings):
        models = load_models(settings)
        for model in models:
            model.translator = EngineDouble(model.translator, delay)
            doubles.append(model.translator)
        return models

    return load


def is_live(url: str) -> bool:
    return httpx.get(f"{url}/health/live", timeout=10).status_code == 200


def rss_mib(pid: int | str = "self") -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]
