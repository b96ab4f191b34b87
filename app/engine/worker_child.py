"""The life of one worker process (app.engine.worker_processes starts it): load the bundle, then
run one running batch at a time, step after step, as the parent's pipe says. Apart from the
parent's side so that the engine's translator can use worker processes without an import circle:
this module needs the translator, the parent's side does not."""

from __future__ import annotations

import json
import os
import signal
from dataclasses import replace
from multiprocessing.connection import Connection

from app.engine.bundle import load_bundle
from app.engine.sessions import SessionConfig
from app.engine.translator import Translator
from app.engine.worker_processes import WorkerSpec


def serve(conn, spec: WorkerSpec) -> None:  # pragma: no cover - runs in the child process
    """A worker process's life: load, warm up, say ready, then run batches until told to close or
    the pipe closes. Messages in: ("start", n, options), ("admit", n, keys, texts),
    ("cancel", n, keys), ("drop", n), ("close",); the admits that wait when a step ends join
    the batch together (one encoder call). Messages out: ("ready", pid), then per step of batch
    n ("done", n, [(key, Result)]), or ("error", n, text) when batch n failed (it is then
    dropped). A step that finished nothing while the batch is full sends nothing: the parent
    could admit no one."""
    config = replace(spec.config, intra_op_threads=1, inter_op_threads=1, workers=1, fused=False)
    bundle = load_bundle(spec.path, spec.variant, verify_checksums=False)
    translator = Translator(bundle, config, spec.max_batch_size)
    translator.warmup()
    batch, number = None, None
    keys: list = []  # admitted since the last step: encoded together, before the next step
    texts: list[str] = []

    def admit_waiting() -> None:
        nonlocal batch, number
        if keys:
            try:
                batch.admit(keys, texts)
            except Exception as exc:
                conn.send(("error", number, f"{type(exc).__name__}: {exc}"))
                batch = number = None
            keys.clear()
            texts.clear()

    try:
        conn.send(("ready", os.getpid()))
        while True:
            if (batch is None or not (batch.running or keys)) or conn.poll():
                message = conn.recv()
                kind = message[0]
                if kind == "admit" and message[1] == number:
                    keys += message[2]
                    texts += message[3]
                    continue
                if kind == "drop" and message[1] == number:
                    batch = number = None
                    keys.clear()
                    texts.clear()
                    continue
                admit_waiting()
                if kind == "cancel" and message[1] == number and batch is not None:
                    batch.cancel(message[2])
                    continue
                if kind == "close":
                    return
                if kind == "start":
                    batch, number = translator.start_batch(message[2]), message[1]
                continue  # (a message for a batch given up on is dropped)
            admit_waiting()
            if batch is None:
                continue
            try:
                done = batch.step()
            except Exception as exc:
                conn.send(("error", number, f"{type(exc).__name__}: {exc}"))
                batch = number = None
                continue
            if done or batch.running < spec.max_batch_size:  # a full batch's empty step: no news
                conn.send(("done", number, done))
    except (EOFError, OSError):  # the parent has gone
        return


def main(argv: list[str]) -> None:  # pragma: no cover - the worker process
    # Ctrl-C in a terminal reaches the whole process group: the server ends its decode workers
    # itself
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    fd, spec = int(argv[0]), json.loads(argv[1])
    spec["config"] = SessionConfig(**spec["config"])
    serve(Connection(fd), WorkerSpec(**spec))
