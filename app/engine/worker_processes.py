"""Worker processes: decode workers in processes of their own, for the service's running batches.

In the server, the event loop (HTTP, JSON, language detection) and the decode workers are threads
of one process, so they take turns at Python's GIL: a decode worker that comes back from ONNX
Runtime waits while the event loop runs Python, and its core idles meanwhile. A busy event loop
slowed decode workers run as threads much more than the same workers run as processes
(BENCHMARKS.md).

A worker process (app.engine.worker_child) loads the bundle itself, on single-thread sessions, and
runs one running batch (app.engine.translator.RunningBatch) step after step, without waiting for the
parent: it takes new sentences from its pipe between steps and sends back, after every step, the
results that finished (nothing when none did and the batch is full). In the parent, a `ProcessBatch`
is what `Translator.start_batch` gives the batcher in place of a RunningBatch (same `admit`,
`step`, `running`), and a `WorkerProcesses` pool hands each decode worker a worker process of
its own.
Each batch has a number, and messages of an earlier batch (one the parent gave up on) are
dropped on both sides. A worker process that dies fails its batch's sentences (EngineFailure in
the batcher) and is started again for the next batch; one whose parent dies sees its pipe close
and exits.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import logging
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from multiprocessing import Pipe
from typing import Any

from app.engine.sessions import SessionConfig
from app.engine.types import Result, TranslationOptions

log = logging.getLogger("app.engine.worker_processes")

READY_TIMEOUT = 120.0  # seconds a new worker process may take to load its bundle
# seconds a running batch may go without a step's message before its worker process is taken for
# wedged and killed (a step of a full batch takes milliseconds; a decode worker's thread could not
# be undone)
STEP_TIMEOUT = 120.0
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker process loads: a bundle directory, its variant, the session settings (made
    single-thread, one decode worker, by the process) and the most sentences it runs at once."""

    path: str
    variant: str
    config: SessionConfig
    max_batch_size: int


class WorkerProcessError(RuntimeError):
    """A worker process failed a batch, or is gone."""


class _WorkerProcess:
    """One worker process (a fresh interpreter running `main`: nothing of the parent is imported
    or forked) and the parent's end of its pipe (a socket pair). Made, it loads its bundle;
    `wait_ready` waits for that (so several worker processes load side by side)."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.path = spec.path
        self.conn, theirs = Pipe()  # a socket pair: both ends read and write
        spec_json = json.dumps(dataclasses.asdict(spec))  # the config with it
        env = dict(os.environ)  # the child imports app from where this process did
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_ROOT, env.get("PYTHONPATH")]))
        self.process = subprocess.Popen(
            [sys.executable, "-c", "import sys; from app.engine.worker_child import main; "
             "main(sys.argv[1:])", str(theirs.fileno()), spec_json],
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=env,
        )
        theirs.close()

    def wait_ready(self) -> _WorkerProcess:
        """This worker process once it has loaded its bundle; WorkerProcessError (and the process
        ended) if it failed to, or took over READY_TIMEOUT."""
        if not self.conn.poll(READY_TIMEOUT):
            self.close()
            raise WorkerProcessError(
                f"a worker process did not load {self.path} in {READY_TIMEOUT:g} s")
        try:
            kind, _ = self.conn.recv()
        except (EOFError, OSError) as exc:
            self.close()
            raise WorkerProcessError(f"a worker process failed to load {self.path}: exited with "
                            f"{self.process.wait()}") from exc
        if kind != "ready":
            self.close()
            raise WorkerProcessError(f"a worker process sent {kind!r} before it was ready")
        return self

    @property
    def exitcode(self) -> int | None:
        return self.process.poll()

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self, timeout: float = 5.0) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.conn.send(("close",))
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.conn.close()


class ProcessBatch:
    """A running batch in a worker process, as the batcher drives a RunningBatch: `admit` sends
    texts under the caller's keys, `step` returns the (key, Result) pairs that the worker process's
    next step finished (waiting for it). `close` gives the worker process back (and drops what still
    runs)."""

    def __init__(self, pool: WorkerProcesses, proc: _WorkerProcess, number: int,
                 options: TranslationOptions) -> None:
        self.pool, self.proc, self.number = pool, proc, number
        self.running = 0
        self._send(("start", number, options))

    def admit(self, keys: list, texts: list[str]) -> None:
        if keys:
            self._send(("admit", self.number, list(keys), list(texts)))
            self.running += len(keys)

    def cancel(self, keys: list) -> None:
        if keys:
            self._send(("cancel", self.number, list(keys)))

    def step(self) -> list[tuple[Any, Result]]:
        if not self.running:
            return []
        while True:
            try:
                if not self.proc.conn.poll(STEP_TIMEOUT):
                    self.running = 0
                    self.proc.process.kill()  # replaced at the pool's next batch
                    raise WorkerProcessError(
                        f"the worker process sent nothing for {STEP_TIMEOUT:g} s; killed")
                kind, number, payload = self.proc.conn.recv()
            except (EOFError, OSError) as exc:
                self.running = 0
                raise WorkerProcessError(
                    f"the worker process exited ({self.proc.exitcode})") from exc
            if number != self.number:
                continue  # a message of an earlier batch on this worker process
            if kind == "error":
                self.running = 0
                raise WorkerProcessError(payload)
            self.running -= len(payload)
            return payload

    def close(self) -> None:
        if self.proc is None:
            return
        if self.running:
            with contextlib.suppress(WorkerProcessError):
                self._send(("drop", self.number))
        self.pool._give_back(self.proc)
        self.proc = None

    def _send(self, message: tuple) -> None:
        try:
            self.proc.conn.send(message)
        except (OSError, ValueError) as exc:
            self.running = 0
            raise WorkerProcessError(
                f"the worker process exited ({self.proc.exitcode})") from exc


class WorkerProcesses:
    """A pool of worker processes for one translator: `batch(options)` takes a free worker process
    (starting one when none is free, or when the free one has died) for a ProcessBatch; the batch's
    `close` gives it back. `start(n)` starts n worker processes ahead (the server's warm-up);
    `close` ends them all."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self._free: list[_WorkerProcess] = []
        self._all: list[_WorkerProcess] = []
        self._lock = threading.Lock()
        self._numbers = itertools.count()
        self._closed = False
        self.started = 0  # worker processes started so far (warm-up, and again after one died)

    def start(self, count: int) -> None:
        with self._lock:
            missing = count - len(self._all)
        procs = [_WorkerProcess(self.spec) for _ in range(max(0, missing))]  # loading side by side
        try:
            for proc in procs:
                proc.wait_ready()
        except WorkerProcessError:
            for proc in procs:
                proc.close(timeout=0)
            raise
        with self._lock:
            self._all += procs
            self._free += procs
            self.started += len(procs)

    def batch(self, options: TranslationOptions) -> ProcessBatch:
        with self._lock:
            if self._closed:
                raise WorkerProcessError("the worker processes are closed")
            proc = self._free.pop() if self._free else None
        if proc is not None and not proc.alive:
            log.warning("a worker process had exited (%s); starting another",
                        proc.exitcode)
            self._forget(proc)
            proc = None
        if proc is None:
            proc = _WorkerProcess(self.spec).wait_ready()
            with self._lock:
                self._all.append(proc)
                self.started += 1
        return ProcessBatch(self, proc, next(self._numbers), options)

    def _give_back(self, proc: _WorkerProcess) -> None:
        with self._lock:
            if not self._closed:
                self._free.append(proc)
                return
        proc.close()

    def _forget(self, proc: _WorkerProcess) -> None:
        with self._lock:
            if proc in self._all:
                self._all.remove(proc)
        proc.close(timeout=0)

    @property
    def pids(self) -> list[int]:
        with self._lock:
            return [proc.process.pid for proc in self._all]

    @property
    def alive(self) -> int:
        """How many of the worker processes are running (one that died counts until replaced)."""
        with self._lock:
            return sum(proc.alive for proc in self._all)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            procs, self._all, self._free = self._all, [], []
        for proc in procs:
            proc.close()
