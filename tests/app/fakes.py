"""Test doubles and a real uvicorn server on a free loopback port, for the service tests."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from app.engine.types import Result, TranslationOptions
from app.translation.registry import LoadedModel


class StepBatch:
    """app.engine.types.DecodingBatch for a test double: each step translates, in one call of
    `translate` (the double's translate_batch, which records it as one batch), every text
    admitted since the last step; they all finish in that step. So the batcher drives a double
    step by step, between steps admitting the waiting texts, as it drives the real engine."""

    def __init__(self, translate: Callable[[list[str], TranslationOptions], list[Result]],
                 options: TranslationOptions) -> None:
        self.translate, self.options = translate, options
        self.pending: list[tuple[Any, str]] = []
        self.closed = False

    @property
    def running(self) -> int:
        return len(self.pending)

    def admit(self, keys: list, texts: list[str]) -> None:
        self.pending += zip(keys, texts, strict=True)

    def cancel(self, keys: list) -> None:
        """Nothing to end early: every text finishes at the next step anyway."""

    def step(self) -> list[tuple[Any, Result]]:
        taken, self.pending = self.pending, []
        if not taken:
            return []
        results = self.translate([text for _, text in taken], self.options)
        return [(key, result) for (key, _), result in zip(taken, results, strict=True)]

    def close(self) -> None:
        self.closed = True


class FakeTranslator:
    """The engine's interface: reverses the words of each text and records every batch (each
    step of a running batch: see StepBatch)."""

    def __init__(self, name: str = "en-de", source: str = "en", target: str = "de",
                 delay: float = 0.0) -> None:
        self.name, self.source_lang, self.target_lang = name, source, target
        self.variant = "fp32"
        self.manifest = {"name": name, "variants": {"fp32": {}, "int8": {}},
                         "scores": {"bleu": 12.3, "test_set": "toy"}}
        self.default_options = TranslationOptions()
        self.max_source_tokens: int | None = None
        self.workers = 1
        self.delay = delay
        self.fail_next = 0  # raise on this many coming batches
        self.batches: list[tuple[list[str], TranslationOptions]] = []
        self.entered = 0  # batches that reached the engine (held ones included)
        self.release = threading.Event()
        self.release.set()  # clear to hold batches until set again

    def count_tokens(self, text: str) -> int:
        return len(text.split()) + 1

    def warmup(self) -> None:
        pass

    def start_batch(self, options: TranslationOptions, beside: bool = False) -> StepBatch:
        return StepBatch(self.translate_batch, options)

    def worker_process_counts(self) -> None:
        return None

    def close(self) -> None:
        pass

    def translate_batch(self, texts: list[str], options: TranslationOptions | None = None
                        ) -> list[Result]:
        options = options or self.default_options
        self.entered += 1
        self.release.wait(60)
        self.batches.append((list(texts), options))
        if self.delay:
            time.sleep(self.delay)
        if self.fail_next:
            self.fail_next -= 1
            raise RuntimeError("secret internal detail /opt/model.onnx")
        return [self._one(text, options) for text in texts]

    def _one(self, text: str, options: TranslationOptions) -> Result:
        best = " ".join(reversed(text.split()))
        alternatives = [f"{best} ({k + 1})" for k in range(options.num_alternatives)]
        return Result(
            text=best,
            score=-0.5 if options.return_scores else None,
            alternatives=alternatives,
            alternative_scores=[-1.0] * len(alternatives),
            tokens=list(range(len(text.split()) + 1)),
        )


def fake_model(translator: FakeTranslator | None = None) -> LoadedModel:
    return LoadedModel(translator or FakeTranslator(), Path("/nonexistent"))


def wait_until(condition, timeout: float = 30.0) -> None:
    """Poll until condition() is true (no fixed sleeps: the test machine may be slow)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        time.sleep(0.005)


async def until(condition, timeout: float = 30.0) -> None:
    import asyncio

    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(0.005)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_server(models_dir: Path, port: int, *flags: str) -> subprocess.Popen:
    """`python -m app.server` as a child process on 127.0.0.1:port with one ONNX Runtime thread
    and the extra flags; its output (stderr merged, unbuffered) is readable from proc.stdout."""
    return subprocess.Popen(
        [sys.executable, "-m", "app.server", "--models-dir", str(models_dir), "--port", str(port),
         "--threads", "1", *flags],
        cwd=Path(__file__).resolve().parents[2], stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


class ServerThread:
    """A real uvicorn server for an app, on 127.0.0.1 and a free port, in a thread."""

    def __init__(self, app, grace: float = 5.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                timeout_graceful_shutdown=grace, lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self, timeout: float = 20.0) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(15)

    def wait_ready(self, timeout: float = 60.0) -> None:
        wait_ready(self.url, timeout)


def wait_ready(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health/ready", timeout=2).status_code == 200:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{url} did not become ready in {timeout}s")


@contextlib.contextmanager
def running(app, ready: bool = True) -> Iterator[ServerThread]:
    server = ServerThread(app).start()
    try:
        if ready:
            server.wait_ready()
        yield server
    finally:
        server.stop()
