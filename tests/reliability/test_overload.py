"""Overload on a real server (127.0.0.1) in front of the tiny engine held at a gate: with the
queue full, each of k extra requests gets an immediate 503 with Retry-After, liveness stays 200
throughout, and every request that was accepted completes once the engine moves again."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from app.http.app import create_app
from tests.app.conftest import real_settings
from tests.app.fakes import running, wait_until
from tests.reliability.conftest import EngineDouble, double_loader, percentile, rss_mib

QUEUE = 8  # sentences
EXTRA = 160  # requests refused while the queue is full
CLIENTS = 2  # threads sending them
P99_LIMIT_S = 0.050  # on an idle machine ...
IDLE_PROBE_P99_S = 0.005  # ... where a /health/live round trip takes under this at p99


def p99_limit(server_url: str) -> tuple[float, float]:
    """50 ms when the machine is idle; on a machine busy with other work (CI neighbours, a
    training job) scaled by how much slower than idle a plain liveness round trip is now."""
    with httpx.Client(base_url=server_url, timeout=10) as c:
        c.get("/health/live")
        probes = []
        for _ in range(100):
            started = time.perf_counter()
            c.get("/health/live")
            probes.append(time.perf_counter() - started)
    baseline = percentile(probes, 99)
    return P99_LIMIT_S * max(1.0, baseline / IDLE_PROBE_P99_S), baseline


def post(client: httpx.Client, i: int) -> httpx.Response:
    if i % 2:
        return client.post("/translate", json={"q": "the dog sees a cat", "source": "en",
                                               "target": "de"})
    return client.post("/v1/translate", json={"text": "the dog sees a cat", "source": "en",
                                              "target": "de"})


@pytest.fixture
def held(tiny_bundle):
    doubles: list[EngineDouble] = []
    settings = real_settings(tiny_bundle, queue_size=QUEUE, max_batch_size=1, max_wait_ms=0,
                             request_timeout=120)
    app = create_app(settings, loader=double_loader(doubles))
    with running(app) as server:
        engine = doubles[0]
        try:
            yield server, engine, app.state.nmt.batcher
        finally:
            engine.gate.set()


def test_full_queue_refuses_at_once_with_retry_after(held):
    server, engine, batcher = held
    rss_before = rss_mib()
    limit, baseline = p99_limit(server.url)
    engine.gate.clear()
    accepted: list[httpx.Response | Exception] = []

    def accepted_request(i: int) -> None:
        try:
            with httpx.Client(base_url=server.url, timeout=120) as c:
                accepted.append(post(c, i))
        except Exception as exc:  # noqa: BLE001 - reported by the assertions below
            accepted.append(exc)

    holders = [threading.Thread(target=accepted_request, args=(0,))]
    holders[0].start()
    wait_until(lambda: engine.entered == 1)  # one batch is in the engine, held
    for i in range(1, QUEUE + 1):
        holders.append(threading.Thread(target=accepted_request, args=(i,)))
        holders[-1].start()
    wait_until(lambda: batcher.depth == QUEUE)  # and the queue is full

    stop = threading.Event()
    live: list[int] = []

    def probe_liveness() -> None:
        with httpx.Client(base_url=server.url, timeout=10) as c:
            for _ in range(5000):  # bounded; ends when the refusals are done
                live.append(c.get("/health/live").status_code)
                if stop.wait(0.01):
                    return

    refused: list[tuple[int, str | None, str | None, float]] = []
    lock = threading.Lock()

    def extra(offset: int) -> None:
        with httpx.Client(base_url=server.url, timeout=10) as c:
            c.get("/health/live")  # connect first: the latency is the server's, not the dial's
            for i in range(offset, EXTRA, CLIENTS):
                started = time.perf_counter()
                r = post(c, i)
                seconds = time.perf_counter() - started
                with lock:
                    refused.append((r.status_code, r.headers.get("retry-after"),
                                    r.json().get("code"), seconds))

    prober = threading.Thread(target=probe_liveness)
    prober.start()
    senders = [threading.Thread(target=extra, args=(k,)) for k in range(CLIENTS)]
    for t in senders:
        t.start()
    for t in senders:
        t.join(120)
    stop.set()
    prober.join(30)
    depth_while_full = batcher.depth

    engine.gate.set()
    for t in holders:
        t.join(120)
    rss_after = rss_mib()
    latencies = [seconds for *_, seconds in refused]
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    print(f"\noverload: {len(refused)} refused, rejection latency p50 {p50 * 1000:.1f} ms, "
          f"p99 {p99 * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms; liveness "
          f"{len(live)} probes; RSS before {rss_before:.0f} MiB, after {rss_after:.0f} MiB; "
          f"p99 limit {limit * 1000:.0f} ms (liveness p99 just before: {baseline * 1000:.1f} ms)")

    assert len(refused) == EXTRA
    assert [status for status, *_ in refused] == [503] * EXTRA
    assert all(code == "overloaded" for _, _, code, _ in refused)
    assert all(ra is not None and int(ra) >= 1 for _, ra, _, _ in refused)
    assert depth_while_full == QUEUE  # nothing refused got in
    assert p99 < limit, f"rejection p99 {p99 * 1000:.1f} ms, limit {limit * 1000:.0f} ms"
    assert live and all(status == 200 for status in live), live
    assert len(accepted) == QUEUE + 1
    assert all(isinstance(r, httpx.Response) and r.status_code == 200 for r in accepted), accepted
    assert engine.entered == QUEUE + 1  # every accepted sentence was translated, one by one
    assert rss_after - rss_before < 200, "memory grew by more than 200 MiB under overload"
