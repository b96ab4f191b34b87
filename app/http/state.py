"""The app's runtime state: what the lifespan loads and the routes reach through dependencies."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from app.config import Settings
from app.documents.filestore import FileStore
from app.engine.kernels.runtime import KernelReport
from app.http.access import ApiKeys, RateLimiter
from app.http.metrics import Metrics
from app.serving.peers import Peers
from app.translation.batcher import Batcher
from app.translation.jobs import JobRunner
from app.translation.registry import Registry
from app.translation.service import TranslationService


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
    on_loaded: Callable[[], None] | None = None  # set by the server: once loaded, before serving
    limiter: RateLimiter | None = None  # None: no rate limit (app.http.access)
    files: FileStore | None = None  # translated files awaiting download
    jobs: JobRunner | None = None  # document jobs (opened in the lifespan)
    loader_task: asyncio.Task | None = field(default=None, repr=False)
    peers: Peers | None = None  # the other server processes (app.serving)
    kernels: KernelReport | None = None  # our native kernels in use (app.engine.kernels)
    keys: ApiKeys = field(init=False)  # settings.api_keys; none: every caller may translate

    def __post_init__(self) -> None:
        self.keys = ApiKeys(self.settings.api_keys)

    def set_ready(self, ready: bool) -> None:
        self.ready = ready
        self.metrics.ready.set(1 if ready else 0)
        if self.peers is not None:
            self.peers.set_ready(ready)

    def begin_drain(self) -> None:
        """Readiness goes 503 and new translations are refused; queued work still finishes."""
        self.draining = True
        self.set_ready(False)
