"""Several server processes behind one port (`processes` > 1): one per core, each whole.

One process (its event loop, HTTP and JSON beside two decode workers) served fewer requests
than two independent processes with one decode worker each (BENCHMARKS.md): a second process's
event loop costs less than the hand-off between one loop and decode workers elsewhere. This
module makes that one service:

* the **supervisor** (the process `nmt serve` started) binds the port, starts the server
  processes, accepts each connection and hands it (SCM_RIGHTS over a Unix socket pair) to the
  process with the fewest open connections: 32 keep-alive clients end up 16 and 16, where
  processes accepting from one shared socket split them 14/28 or 35/7. It restarts a process
  that dies once it had been ready; one that fails to start stops the service (exit 1). On
  SIGTERM or SIGINT it stops accepting and lets every process drain (exit 0 once all did).
* each **server process** is the ordinary app on its share of the settings (its decode worker,
  threads, queue), serving the connections it is handed, plus one spare decode worker per other
  process: the spare decode workers take live work only when the process's own decode worker is
  full and another process idles (app.translation.batcher's spill, fed by `Peers.load`), so one
  request of many sentences on an idle service still decodes on every core.
* each server process's event loop writes the time into shared memory every HEARTBEAT
  seconds; one that has not for STALE_AFTER seconds (its loop is blocked: a stuck request, a
  thread that holds the GIL, a stopped process) is handed no new connection until it beats
  again, unless none beats (then the least loaded one still takes it, as before).
* what the processes share (`Peers`): readiness (the service is ready once every process is),
  the Prometheus metrics (prometheus-client's multiprocess mode, in a directory of the
  supervisor's), the rate limits (app.http.access.SharedRateLimiter, one SQLite file there) and the
  document jobs (one SQLite store; the first process runs them, the others queue and answer).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
import multiprocessing
import os
import selectors
import shutil
import signal
import socket
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from app.config import Settings
from app.engine import heap
from app.serving.peers import RATE_LIMIT_DB, Peers

log = logging.getLogger("app.serving.supervisor")

# the server processes' heartbeat: how often each event loop writes the time, and how old
# the last beat may be before the supervisor stops handing that process new connections (a
# loop that is only busy beats within a fraction of a second)
HEARTBEAT = 0.25
STALE_AFTER = 2.0

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def process_count(settings: Settings) -> int:
    """`processes`, or with 0 one per decode worker one process would run by default
    (app.engine.sessions.decode_workers): one per core (`threads` when set), at most
    max_batch_size / 16; 1 on CUDA."""
    from app.engine.sessions import SessionConfig, decode_workers  # no ONNX Runtime yet

    if settings.processes:
        return settings.processes
    config = SessionConfig(provider=settings.provider, intra_op_threads=settings.threads)
    return decode_workers(config, settings.max_batch_size)


def _cores(settings: Settings) -> int:
    return settings.threads or len(os.sched_getaffinity(0))


def share(settings: Settings, count: int) -> Settings:
    """One process's settings. Its decode workers: its own share of them (one by default) and, as
    many times over as there are processes, spare ones that take its live work only when its own
    are full (app.translation.batcher's spill): under an even load each process decodes on its own
    decode workers,
    and one request of many sentences on an idle service still runs on every core. So a
    process may hold the whole batch size and token budget; the queue is shared out."""
    own = max(1, settings.workers // count) if settings.workers else 1
    return settings.model_copy(update={
        "processes": 1,
        "workers": own * count,
        # threads: a spare decode worker idles unless another process does
        "worker_processes": False,
        "threads": max(1, _cores(settings) // count // own),
        "queue_size": math.ceil(settings.queue_size / count),
    })


# ------------------------------------------------------------------ the supervisor


class _Child:
    def __init__(self, index: int) -> None:
        self.index = index
        self.process: multiprocessing.process.BaseProcess | None = None
        self.channel: socket.socket | None = None
        self.sent = 0  # connections handed over (the supervisor's count)
        self.was_ready = False
        self.answering = True  # its heartbeat is fresh (the supervisor logs the changes)


def bind(settings: Settings) -> socket.socket:
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    sock = socket.create_server((settings.host, settings.port), family=family, backlog=2048,
                                reuse_port=False)
    sock.setblocking(False)
    return sock


class ServerProcess(Protocol):
    """What one server process runs (app.server.run_server): given by the entry point, so this
    module never imports the layers above it. The processes are forked from the supervisor
    (after `supervise`'s prepare, before any model or thread of ours), so they share the pages
    of what it imported and loaded."""

    def __call__(self, settings: Settings, *, peers: Peers, channel: socket.socket) -> int: ...


def supervise(settings: Settings, count: int, serve: ServerProcess,
              prepare: Callable[[], object] | None = None) -> int:
    """Run `count` server processes (each `serve`) behind one listening socket until
    SIGTERM/SIGINT; 0 after a graceful stop, 1 when a process could not start (its log says
    why). prepare: run here before the processes are forked from this one (imports, tables
    every process reads and none writes), so that its pages are held once for all."""
    try:
        listener = bind(settings)
    except OSError as exc:
        log.error("cannot listen on %s:%s: %s", settings.host, settings.port, exc)
        return 1
    port = listener.getsockname()[1]
    shared_dir = Path(tempfile.mkdtemp(prefix="nmt-processes-"))
    metrics_dir = shared_dir / "metrics"  # prometheus-client reads every *.db file there
    metrics_dir.mkdir()
    prepare_databases(settings, shared_dir)
    if prepare is not None:
        prepare()
    gc.collect()
    heap.trim()
    gc.freeze()  # the server processes' collections leave the shared objects' pages alone
    context = multiprocessing.get_context("fork")
    ready_flags = context.RawArray("b", count)
    closed = context.RawArray("q", count)
    load = context.RawArray("i", count)
    beats = context.RawArray("d", count)
    child_settings = share(settings, count).model_dump()
    children = [_Child(i) for i in range(count)]
    stopping = False

    def on_signal(sig: int, _frame: object) -> None:
        nonlocal stopping
        if not stopping:
            log.info("signal %s: stopping; the server processes drain (grace period %gs)", sig,
                     settings.grace_period)
        stopping = True

    def start(child: _Child) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # what the forked process must not keep open: the port, the other processes' channels
        supervisor_only = [listener, selector, ours,
                           *(c.channel for c in children if c.channel is not None)]
        ours.setblocking(False)  # a process that stops reading never stalls the supervisor
        ready_flags[child.index] = 0
        closed[child.index] = 0
        load[child.index] = 0
        beats[child.index] = 0.0
        child.sent = 0
        child.answering = True
        peers = Peers(child.index, count, shared_dir, metrics_dir, ready_flags, closed, load,
                      beats)
        child.process = context.Process(target=_serve_child,
                                        args=(serve, child_settings, peers, theirs,
                                              supervisor_only),
                                        name=f"nmt-server-{child.index}")
        child.process.start()
        theirs.close()
        child.channel = ours

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    selector = selectors.DefaultSelector()
    failed = False
    try:
        for child in children:
            start(child)
        selector.register(listener, selectors.EVENT_READ)
        log.info("serving on http://%s:%d with %d server processes", settings.host, port, count)
        while not stopping:
            if selector.select(timeout=0.2):
                _hand_over(listener, children, closed, beats, ready_flags)
            for child in children:
                assert child.process is not None
                if ready_flags[child.index]:
                    child.was_ready = True
                _note_answering(child, beats)
                if child.process.is_alive():
                    continue
                code = child.process.exitcode
                _forget(child, metrics_dir)
                if not child.was_ready:
                    log.error("server process %d exited with %s before it was ready; stopping",
                              child.index, code)
                    failed = stopping = True
                    break
                log.error("server process %d exited with %s; starting it again", child.index,
                          code)
                child.was_ready = False
                start(child)
    finally:
        selector.close()
        listener.close()
        for child in children:
            if child.process is not None and child.process.is_alive():
                os.kill(child.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + settings.grace_period + 10
        for child in children:
            if child.process is None:
                continue
            child.process.join(max(0.0, deadline - time.monotonic()))
            if child.process.is_alive():
                log.warning("server process %d did not stop in time; killed", child.index)
                child.process.kill()
                child.process.join()
                failed = True
            elif child.process.exitcode not in (0, None):
                failed = True
            if child.channel is not None:
                child.channel.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        shutil.rmtree(shared_dir, ignore_errors=True)
    return 1 if failed else 0


def _fresh(child: _Child, beats: Any, now: float) -> bool:
    return now - beats[child.index] <= STALE_AFTER


def _note_answering(child: _Child, beats: Any) -> None:
    """Log when a started process stops beating, and when it beats again."""
    if not beats[child.index]:
        return  # not started yet: its loop has not beaten once
    fresh = _fresh(child, beats, time.monotonic())
    if fresh != child.answering:
        child.answering = fresh
        if fresh:
            log.warning("server process %d answers again; it takes new connections",
                        child.index)
        else:
            log.warning("server process %d has not answered for %gs (its event loop is "
                        "blocked); new connections go to the others", child.index, STALE_AFTER)


def candidates(children: list[_Child], closed: Any, beats: Any,
               ready: Any = None) -> list[_Child]:
    """The live processes in the order they are offered a new connection: those whose heartbeat
    is fresh, fewest open connections first; where none is fresh, every live one. With ready
    (the processes' readiness flags), a process that is not ready yet (a replacement still
    loading its models) is offered one only where no answering process is ready: it would
    answer 503 where another can serve."""
    live = [c for c in children if c.process is not None and c.process.is_alive()]
    now = time.monotonic()
    answering = [c for c in live if _fresh(c, beats, now)] or live
    if ready is not None:
        answering = [c for c in answering if ready[c.index]] or answering
    return sorted(answering, key=lambda c: c.sent - closed[c.index])


def _hand_over(listener: socket.socket, children: list[_Child], closed: Any,
               beats: Any, ready: Any = None) -> None:
    """Accept what is waiting; each connection goes to the answering process with the fewest
    open ones."""
    while True:
        try:
            conn, _ = listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:  # out of file descriptors, say: the next pass tries again
            log.warning("accept failed: %s", exc)
            return
        with conn:
            for child in candidates(children, closed, beats, ready):
                try:
                    socket.send_fds(child.channel, [b"c"], [conn.fileno()])
                except OSError:  # its channel is full or it is going away: the next one
                    continue
                child.sent += 1
                break
            else:
                log.warning("no server process took a connection; it was closed")


def prepare_databases(settings: Settings, shared_dir: Path) -> None:
    """The SQLite files the server processes share, switched to WAL before they start: two
    processes switching a new file at once fail one of them with "database is locked" (it
    happened in tests here; SQLite's busy wait does not cover the switch). Where a file cannot
    be made, the process that opens it says so."""
    for path in (shared_dir / RATE_LIMIT_DB, settings.jobs_path / "jobs.db"):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.closing(sqlite3.connect(path, timeout=5)) as db:
                db.execute("PRAGMA journal_mode=WAL").fetchall()
        except (OSError, sqlite3.Error) as exc:
            log.debug("cannot prepare %s: %s", path, exc)


def _forget(child: _Child, metrics_dir: Path) -> None:
    """A process that ended: its live gauges leave the metrics, its channel closes."""
    if child.channel is not None:
        child.channel.close()
        child.channel = None
    if child.process is not None and child.process.pid is not None:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(child.process.pid, str(metrics_dir))


# ------------------------------------------------------------------ a server process


def _serve_child(serve: ServerProcess, settings_data: dict[str, Any], peers: Peers,
                 channel: socket.socket, supervisor_only: list[Any]) -> None:
    from prometheus_client import values

    for signum in (signal.SIGTERM, signal.SIGINT):  # the supervisor's, until the server's own
        signal.signal(signum, signal.SIG_DFL)
    for inherited in supervisor_only:
        inherited.close()

    os.environ[MULTIPROC_ENV] = str(peers.metrics_dir)
    values.ValueClass = values.get_value_class()  # metrics made from here on write the files

    settings = Settings(**settings_data)
    raise SystemExit(serve(settings, peers=peers, channel=channel))
