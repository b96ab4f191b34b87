"""The app's runtime state: what the lifespan loads and the routes reach through dependencies."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from app.config import Settings
from app.documents.filestore import FileStore
from app.errors import RateLimited, Unauthorized
from app.http.metrics import Metrics
from app.translation.batcher import Batcher
from app.translation.jobs import JobRunner
from app.translation.registry import Registry
from app.translation.service import TranslationService

if TYPE_CHECKING:
    from app.serving.supervisor import Peers


@dataclass
class AppState:
    settings: Settings
    metrics: Metrics
    registry: Registry | None = None
    batcher: Batcher | None = None
    service: TranslationService | None = None
    ready: bool = False
    draining: bool = False
    load_error: str | None = None
    on_fatal: Callable[[], None] | None = None  # set by the server: stop when loading fails
    limiter: RateLimiter | None = None
    files: FileStore | None = None  # translated files awaiting download
    jobs: JobRunner | None = None  # document jobs (opened in the lifespan)
    loader_task: asyncio.Task | None = field(default=None, repr=False)
    peers: Peers | None = None  # the other server processes, under app.processes

    def set_ready(self, ready: bool) -> None:
        self.ready = ready
        self.metrics.ready.set(1 if ready else 0)
        if self.peers is not None:
            self.peers.set_ready(ready)

    def begin_drain(self) -> None:
        """Readiness goes 503 and new translations are refused; queued work still finishes."""
        self.draining = True
        self.set_ready(False)

    def check_api_key(self, key: str | None) -> None:
        """Constant-time comparison against every configured key; no-op without keys."""
        keys = self.settings.api_keys
        if not keys:
            return
        if not key:
            raise Unauthorized("an API key is required (Authorization: Bearer <key>, "
                               "X-API-Key header, or api_key)", key_given=False)
        given = _digest(key)  # fixed-length digests: the comparison leaks no key length either
        matched = False
        for candidate in keys:
            matched |= hmac.compare_digest(given, _digest(candidate))
        if not matched:
            raise Unauthorized("invalid API key", key_given=True)


def _digest(key: str) -> bytes:
    # surrogatepass: a key from a JSON body may hold a lone surrogate; it must fail, not raise
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


class RateLimiter:
    """A token bucket per API key or client address, refilled at `per_minute`; bounded memory.
    Buckets live in this process (SharedRateLimiter shares them between processes)."""

    def __init__(self, per_minute: float, capacity: float, max_clients: int = 10_000) -> None:
        self.rate = per_minute / 60.0
        self.capacity = capacity
        self.max_clients = max_clients
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def hit(self, client: str) -> None:
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.pop(client, (self.capacity, now))
            tokens = min(self.capacity, tokens + (now - last) * self.rate)
            if tokens < 1:
                self._buckets[client] = (tokens, now)
                wait = (1 - tokens) / self.rate
                raise RateLimited(
                    f"too many requests: the limit is {self.rate * 60:g} per minute",
                    field="rate_limit", limit=self.rate * 60,
                    retry_after=wait,
                )
            self._buckets[client] = (tokens - 1, now)
            while len(self._buckets) > self.max_clients:
                self._buckets.popitem(last=False)


class SharedRateLimiter(RateLimiter):
    """RateLimiter's buckets in one SQLite file, shared by the server processes of one service
    (app.processes): a client's budget holds whichever process serves it. Each hit is one
    short write transaction, on the event loop, only when rate limits are on."""

    def __init__(self, path: Path, per_minute: float, capacity: float,
                 max_clients: int = 10_000) -> None:
        super().__init__(per_minute, capacity, max_clients)
        self._db = sqlite3.connect(path, timeout=5, isolation_level=None,
                                   check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=OFF")  # scratch state, gone with the service
        self._db.execute("CREATE TABLE IF NOT EXISTS buckets (client BLOB PRIMARY KEY, "
                         "tokens REAL NOT NULL, last REAL NOT NULL)")
        self._hits = 0

    def hit(self, client: str) -> None:
        now = time.time()  # one clock for every process
        key = _digest(client)
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute("SELECT tokens, last FROM buckets WHERE client = ?",
                                 (key,)).fetchone()
                tokens, last = row if row is not None else (self.capacity, now)
                tokens = min(self.capacity, tokens + max(0.0, now - last) * self.rate)
                allowed = tokens >= 1
                db.execute("INSERT OR REPLACE INTO buckets VALUES (?, ?, ?)",
                           (key, tokens - 1 if allowed else tokens, now))
                self._hits += 1
                if self._hits % 1000 == 0:  # bounded: the least recently seen go
                    db.execute("DELETE FROM buckets WHERE client NOT IN (SELECT client FROM "
                               "buckets ORDER BY last DESC LIMIT ?)", (self.max_clients,))
            finally:
                db.execute("COMMIT")
        if not allowed:
            raise RateLimited(
                f"too many requests: the limit is {self.rate * 60:g} per minute",
                field="rate_limit", limit=self.rate * 60, retry_after=(1 - tokens) / self.rate,
            )
