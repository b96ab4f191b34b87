"""create_app(settings): lifespan (load + warm bundles, start the batcher), routes, errors.

Nothing heavy happens at import or in create_app: the models load in the lifespan, in a thread,
so /health/live answers at once and /health/ready turns 200 when every bundle is warm.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.staticfiles import StaticFiles

from app.config import Settings
from app.documents.filestore import FileStore
from app.engine import heap
from app.engine.kernels import runtime as kernels
from app.http.access import rate_limiter
from app.http.direct import DirectRoutes
from app.http.errors import install_handlers
from app.http.metrics import Metrics, MetricsMiddleware
from app.http.middleware import BodySizeLimit
from app.http.routes import documents, health, libretranslate, metrics, models, translate, web
from app.http.state import AppState
from app.serving.peers import Peers
from app.text.langid import LanguageDetector
from app.translation.batcher import Batcher, BatcherConfig
from app.translation.jobs import JobRunner, JobStore
from app.translation.registry import LoadedModel, Registry, load_models
from app.translation.service import TranslationService

log = logging.getLogger("app.http.app")

Loader = Callable[[Settings], list[LoadedModel]]

DESCRIPTION = """
Self-hosted machine translation: a Transformer served by ONNX Runtime with dynamic batching.

* **v1**: `POST /v1/translate` (texts, options, scores, alternatives), `GET /v1/models`,
  document jobs: `POST /v1/documents`, `GET /v1/documents/{id}` (progress), `.../result`.
* **LibreTranslate**: `POST /translate`, `POST /detect`, `GET /languages`,
  `GET /frontend/settings`, `POST /translate_file` (documents), for existing clients.
* **Operations**: `/health/live`, `/health/ready`, `/metrics`.

Errors are JSON: `{"error": "...", "code": "...", "field": "...", "limit": ...}`.
When API keys are configured, send one as `Authorization: Bearer <key>` or `X-API-Key`
(LibreTranslate: the `api_key` field).
"""


async def _load(app_state: AppState, loader: Loader) -> None:
    """Load the models and start serving them. One of several server processes loads in its
    turn (app.serving.peers.Peers.take_turn): loading holds transient copies of the graphs, and
    the processes' peaks would otherwise add up."""
    turn = None if app_state.peers is None else await asyncio.to_thread(app_state.peers.take_turn)
    try:
        await _load_models(app_state, loader)
    finally:
        if turn is not None:
            turn.close()


async def _load_models(app_state: AppState, loader: Loader) -> None:
    settings = app_state.settings
    started = time.perf_counter()
    try:
        loaded = await asyncio.to_thread(loader, settings)
    except Exception as exc:  # a bad bundle: live but never ready, and the server stops
        log.error("loading the models from %s failed: %s", settings.models_dir, exc)
        app_state.load_error = str(exc)
        if app_state.on_fatal is not None:
            app_state.on_fatal()
        return
    app_state.registry = Registry(loaded)
    app_state.metrics.worker_processes.source = lambda: [
        (model.name, *counts) for model in app_state.registry or []
        if (counts := model.translator.worker_process_counts()) is not None]
    detector = await asyncio.to_thread(_detector, app_state.registry.languages)
    batcher = Batcher(
        BatcherConfig.from_settings(settings),
        on_batch=app_state.metrics.observe_batch,
        on_queue=app_state.metrics.queue_depth.set,
        on_cache=app_state.metrics.observe_cache,
        workers=app_state.registry.workers,  # one batcher worker per decode worker
        spill=app_state.peers,  # one of several processes: spare decode workers while another idles
    )
    batcher.start()
    app_state.batcher = batcher
    app_state.service = TranslationService(
        app_state.registry, batcher, settings,
        on_rejected=lambda exc: app_state.metrics.rejected.labels(exc.code).inc(),
        detector=detector,
    )
    gc.collect()
    if app_state.on_loaded is not None:
        app_state.on_loaded()
    if app_state.jobs is not None and not app_state.draining:
        app_state.jobs.start(app_state.service)  # resumes the unfinished document jobs
    heap.trim()  # what loading parsed and rewrote and let go (app.engine.heap)
    app_state.set_ready(not app_state.draining)
    log.info("ready: %d model(s) in %.2fs", len(app_state.registry),
             time.perf_counter() - started)


def _detector(languages: list[str]) -> LanguageDetector | None:
    """A language detector over every served language, the ones models only write included (so
    text already in the target language is told apart: TranslationService.detect_source); None,
    logged, when the detector does not know one of them (source "auto" is then the only source
    language, if there is one)."""
    if len(languages) < 2:
        return None
    try:
        return LanguageDetector(languages)
    except ValueError as exc:
        log.warning("source 'auto' and /detect cannot tell the sources apart: %s", exc)
        return None


def _check_files(files: FileStore) -> bool:
    """Whether translated files can be kept; logged when not (/translate_file is then off, as
    with NMT_FILES_TRANSLATION=false, rather than failing after the translation)."""
    try:
        files.check()
        return True
    except OSError as exc:
        log.warning("/translate_file is off: cannot write to %s: %s", files.root, exc)
        return False


def _open_jobs(settings: Settings) -> JobStore | None:
    """The document jobs' store; None, logged, where its directory cannot be written (the
    service translates text all the same, /v1/documents answers 503)."""
    try:
        return JobStore(settings.jobs_path, settings.jobs_expiry)
    except (OSError, sqlite3.Error) as exc:
        log.warning("document jobs are off: cannot open %s: %s", settings.jobs_path, exc)
        return None


HEAP_TRIM_EVERY = 60.0  # seconds


async def _trim_heap_now_and_then() -> None:
    """Hand the C heap's free pages back to the system every HEAP_TRIM_EVERY seconds
    (app.engine.heap): the memory a load peak's larger batches took would otherwise stay
    resident for good. In a thread: the event loop never waits for it."""
    while True:
        await asyncio.sleep(HEAP_TRIM_EVERY)
        await asyncio.to_thread(heap.trim)


async def _drain(app_state: AppState) -> None:
    """Let queued work finish within the grace period, then stop the batcher."""
    app_state.begin_drain()
    if app_state.loader_task is not None and not app_state.loader_task.done():
        app_state.loader_task.cancel()
    if app_state.jobs is not None:  # the running job stops after its chunk, kept for later
        await app_state.jobs.stop(app_state.settings.grace_period)
    batcher = app_state.batcher
    if batcher is None:
        return
    deadline = time.monotonic() + app_state.settings.grace_period
    while not batcher.idle and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await asyncio.to_thread(batcher.close)
    for model in app_state.registry or []:  # worker processes end with the batcher
        await asyncio.to_thread(model.translator.close)


def create_app(settings: Settings | None = None, loader: Loader | None = None,
               peers: Peers | None = None) -> FastAPI:
    """The service as an ASGI app. `loader` replaces bundle loading (tests use fakes); `peers`:
    one of several server processes (app.serving.supervisor)."""
    settings = settings or Settings()
    app_state = AppState(settings=settings, metrics=Metrics(multiprocess=peers is not None),
                         files=FileStore(settings.files_dir, settings.files_expiry), peers=peers)
    app_state.limiter = rate_limiter(settings, None if peers is None else peers.rate_limit_db)
    app_state.kernels = app_state.metrics.kernels.report = kernels.report(settings.provider)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if settings.files_translation and not await asyncio.to_thread(_check_files,
                                                                      app_state.files):
            app_state.files = None
        store = await asyncio.to_thread(_open_jobs, settings)
        if store is not None:
            app_state.jobs = JobRunner(
                store, settings.max_pending_jobs,
                runs=peers is None or peers.runs_jobs,  # one process runs them, all queue
                poll=None if peers is None else 1.0)  # others' jobs come through the store
        app_state.loader_task = asyncio.create_task(_load(app_state, loader or load_models))
        trimmer = asyncio.create_task(_trim_heap_now_and_then())
        yield
        trimmer.cancel()
        await _drain(app_state)
        if store is not None:
            store.close()

    app = FastAPI(
        title="nmt-service",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # served by app.http.routes.web from the vendored Swagger UI
        redoc_url=None,
    )
    app.state.nmt = app_state
    install_handlers(app)
    for module in (translate, documents, models, libretranslate, health, metrics, web):
        app.include_router(module.router)
    app.mount("/static", StaticFiles(directory=web.WEB_DIR), name="static")
    # the last added is the outermost: metrics see every answer, the 413 included; the hot
    # translation routes are answered innermost (app.http.direct)
    direct = {"/v1/translate": translate.direct, "/translate": libretranslate.direct}
    app.add_middleware(DirectRoutes, handlers=direct, routes={
        route.path: route for module in (translate, libretranslate)
        for route in module.router.routes if route.path in direct and "POST" in route.methods})
    upload = settings.max_upload_bytes
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes,
                       per_path={"/translate_file": upload, "/v1/documents": upload})
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type", "X-API-Key"],
        )
    app.add_middleware(MetricsMiddleware, metrics=app_state.metrics)
    return app
