"""Who may call the service, and how often: API keys and rate limits, in one place.

Every route that translates runs them through app.http.checks (ready, then the key, then the
rate limit); document jobs also use a key's digest as the owner of the jobs it made."""

from __future__ import annotations

import hashlib
import hmac
import sqlite3
import threading
import time
from collections import OrderedDict
from pathlib import Path

from starlette.requests import Request

from app.config import Settings
from app.errors import RateLimited, Unauthorized


def header_api_key(request: Request) -> str | None:
    """The key of `Authorization: Bearer <key>` or of `X-API-Key`."""
    auth = request.headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    return request.headers.get("x-api-key")


def client_id(request: Request, api_key: str | None) -> str:
    """The rate limit's bucket: the (checked) key, else the client's address."""
    if api_key:
        return f"key:{api_key}"
    return f"ip:{request.client.host if request.client else 'unknown'}"


class ApiKeys:
    """The configured keys (none: the service is open)."""

    def __init__(self, keys: list[str] | None = None) -> None:
        self.keys = list(keys or [])

    def __bool__(self) -> bool:
        return bool(self.keys)

    def check(self, key: str | None) -> None:
        """Constant-time comparison against every configured key; no-op without keys."""
        keys = self.keys
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

    def owner(self, key: str | None) -> str:
        """Whose document jobs the caller sees: its checked key's digest when keys are set, else
        everyone's ("")."""
        if not self.keys:
            return ""
        self.check(key)
        return _digest(key or "").hex()


def _digest(key: str) -> bytes:
    # surrogatepass: a key from a JSON body may hold a lone surrogate; it must fail, not raise
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def rate_limiter(settings: Settings, shared: Path | None = None) -> RateLimiter | None:
    """The service's rate limiter: none without `rate_limit`; its buckets in `shared` (a SQLite
    file) when several server processes serve one service."""
    if not settings.rate_limit:
        return None
    if shared is not None:
        return SharedRateLimiter(shared, settings.rate_limit, settings.rate_limit_capacity)
    return RateLimiter(settings.rate_limit, settings.rate_limit_capacity)


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
    (app.serving): a client's budget holds whichever process serves it. Each hit is one
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
