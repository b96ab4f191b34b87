"""Prometheus metrics on a per-app registry, and the ASGI middleware that counts requests.

Under several server processes (app.serving.supervisor) every process writes its values to files in
the supervisor's directory (prometheus-client's multiprocess mode, which app.serving.supervisor
turns on
in each server process before its metrics are made) and a scrape of any process reads them all:
counters and histograms add up, gauges are summed or taken per their meaning.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.engine.kernels.runtime import KERNELS, KernelReport
from app.translation.batcher import BatchStats

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
BATCH_TOKEN_BUCKETS = (16, 64, 256, 1024, 2048, 4096, 8192, 16384, 65536)


class WorkerProcessCollector:
    """The worker processes of each model, read at every scrape from `source`: a callable
    giving (model, running, started) per model that has worker processes."""

    def __init__(self) -> None:
        self.source: Callable[[], Iterable[tuple[str, int, int]]] = list

    def collect(self):
        running = GaugeMetricFamily(
            "nmt_lane_processes", "Decode worker processes running, by model.", labels=["model"])
        started = CounterMetricFamily(
            "nmt_lane_process_starts", "Decode worker processes started, by model: at warm-up, "
            "and again after one died (more than the decode workers: some died).", labels=["model"])
        for model, alive, count in self.source():
            running.add_metric([model], alive)
            started.add_metric([model], count)
        yield running
        yield started


class KernelCollector:
    """Which of our native kernels (app.engine.kernels) this server runs: 1 per active kernel, 0
    per other one, from the report made when the app was (every server process makes the same
    one: it asks the files and the CPU, not the process)."""

    def __init__(self) -> None:
        self.report: KernelReport | None = None

    def collect(self):
        active = GaugeMetricFamily(
            "nmt_kernel_active", "1 for each of our native kernels the engine runs, 0 for one "
            "it does not (not built, turned off, or this CPU lacks what it needs).",
            labels=["kernel"])
        if self.report is not None:
            for name in KERNELS:
                active.add_metric([name], 1 if name in self.report.active else 0)
        yield active


class Metrics:
    """All of the service's metrics; one instance (and registry) per app."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, multiprocess: bool = False) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.multiprocess = multiprocess
        self.requests = Counter(
            "nmt_http_requests", "HTTP requests by route, method and status.",
            ["route", "method", "status"], registry=r,
        )
        self.latency = Histogram(
            "nmt_http_request_duration_seconds", "HTTP request latency by route.",
            ["route"], buckets=LATENCY_BUCKETS, registry=r,
        )
        self.in_progress = Gauge(
            "nmt_http_requests_in_progress", "HTTP requests being served.", registry=r,
            multiprocess_mode="livesum",
        )
        self.queue_depth = Gauge(
            "nmt_queue_depth", "Sentences waiting in the batcher queue.", registry=r,
            multiprocess_mode="livesum",
        )
        self.batches = Counter(
            "nmt_engine_batches", "Engine batches by model and outcome.", ["model", "outcome"],
            registry=r,
        )
        self.batch_size = Histogram(
            "nmt_batch_size", "Sentences per engine batch.", buckets=BATCH_SIZE_BUCKETS,
            registry=r,
        )
        self.batch_tokens = Histogram(
            "nmt_batch_tokens", "Padded source tokens per engine batch.",
            buckets=BATCH_TOKEN_BUCKETS, registry=r,
        )
        self.batch_seconds = Histogram(
            "nmt_batch_duration_seconds", "Engine time per batch.", buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "nmt_tokens", "Tokens through the engine, by kind (source, output).", ["kind"],
            registry=r,
        )
        self.tokens_per_second = Gauge(
            "nmt_tokens_per_second", "Output tokens per second of the last engine batch.",
            registry=r, multiprocess_mode="mostrecent",
        )
        self.sentences = Counter(
            "nmt_sentences", "Sentences translated.", ["model"], registry=r
        )
        self.cache = Counter(
            "nmt_cache_sentences", "Sentences looked up in the translation cache, by outcome: "
            "hit (answered without decoding: cached, or sent twice in one request) or miss "
            "(decoded).", ["outcome"], registry=r,
        )
        self.rejected = Counter(
            "nmt_rejected_requests", "Requests refused before translation, by reason.",
            ["reason"], registry=r,
        )
        self.ready = Gauge("nmt_ready", "1 when the service is ready to translate (every "
                           "server process is).", registry=r, multiprocess_mode="livemin")
        self.worker_processes = WorkerProcessCollector()
        r.register(self.worker_processes)
        self.kernels = KernelCollector()
        r.register(self.kernels)

    def observe_batch(self, stats: BatchStats) -> None:
        self.batches.labels(stats.model, "ok" if stats.ok else "error").inc()
        self.batch_size.observe(stats.size)
        self.batch_tokens.observe(stats.tokens)
        self.batch_seconds.observe(stats.seconds)
        if stats.ok:
            self.sentences.labels(stats.model).inc(stats.size)
            self.tokens.labels("source").inc(stats.source_tokens)
            self.tokens.labels("output").inc(stats.output_tokens)
            if stats.seconds > 0:
                self.tokens_per_second.set(stats.output_tokens / stats.seconds)

    def observe_cache(self, hits: int, misses: int) -> None:
        self.cache.labels("hit").inc(hits)
        self.cache.labels("miss").inc(misses)

    def render(self) -> bytes:
        if not self.multiprocess:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        registry.register(self.worker_processes)
        registry.register(self.kernels)
        return generate_latest(registry)


class MetricsMiddleware:
    """Counts every HTTP request by its route template (not its raw path) and final status."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        started = time.perf_counter()

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        self.metrics.in_progress.inc()
        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            self.metrics.in_progress.dec()
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            self.metrics.requests.labels(route, scope["method"], str(status)).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - started)
