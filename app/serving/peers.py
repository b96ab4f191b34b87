"""What the server processes of one service share (app.serving.supervisor starts them): each
one's readiness, its open connections and its running sentences, in shared memory, and a
directory for the shared metrics, rate limits and document jobs. Kept apart from the supervisor
so the layers below the entry point (the app's state, the batcher's spill) can hold a `Peers`
without importing the code that starts processes."""

from __future__ import annotations

import fcntl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

RATE_LIMIT_DB = "rate_limits.sqlite"
LOADING_LOCK = "loading.lock"


@dataclass
class Peers:
    """What a server process knows of the others: its place, the shared directories, and three
    arrays in shared memory (each slot written by one process only)."""

    index: int
    count: int
    shared_dir: Path
    metrics_dir: Path  # prometheus-client's multiprocess files
    ready_flags: Any  # multiprocessing RawArray of bytes: 1 once that process is ready
    closed: Any  # RawArray of int64: connections that process has closed
    load: Any  # RawArray of int32: sentences in that process's running batches
    beats: Any = None  # RawArray of doubles: time.monotonic() of that loop's last heartbeat

    def set_ready(self, ready: bool) -> None:
        self.ready_flags[self.index] = 1 if ready else 0

    def ready_count(self) -> int:
        return sum(1 for flag in self.ready_flags if flag)

    @property
    def all_ready(self) -> bool:
        return self.ready_count() == self.count

    def beat(self) -> None:
        """From this process's event loop, every HEARTBEAT seconds (app.server; the interval is
        app.serving.supervisor's)."""
        if self.beats is not None:
            self.beats[self.index] = time.monotonic()

    def report(self, running: int) -> None:
        """app.translation.batcher.Spill: this process's running sentences, at every decoder
        step."""
        self.load[self.index] = running

    def allowed(self) -> bool:
        """app.translation.batcher.Spill: this process's spare decode workers may work while another
        process idles
        (its core is free)."""
        return any(self.load[i] == 0 for i in range(self.count) if i != self.index)

    def take_turn(self) -> IO[bytes]:
        """Wait until no other server process is loading its models (blocks): the open lock
        file, which holds the turn until it is closed (or this process ends)."""
        lock = open(self.shared_dir / LOADING_LOCK, "ab")  # noqa: SIM115 (the caller closes it)
        fcntl.flock(lock, fcntl.LOCK_EX)
        return lock

    @property
    def runs_jobs(self) -> bool:
        return self.index == 0

    @property
    def rate_limit_db(self) -> Path:
        return self.shared_dir / RATE_LIMIT_DB
