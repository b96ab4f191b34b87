"""Dynamic batching on the real engine: N concurrent clients are served in fewer than N engine
batches, and each gets exactly the translation it gets when it is alone."""

from __future__ import annotations

import threading

import httpx

from app.main import create_app
from tests.app.conftest import real_settings
from tests.app.fakes import running
from tests.conftest import toy_pairs

BATCHES = 'nmt_engine_batches_total{model="en-de",outcome="ok"}'


def engine_batches(client: httpx.Client) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(BATCHES + " "):
            return float(line.split()[1])
    return 0.0


def translate(client: httpx.Client, text: str) -> str:
    r = client.post("/v1/translate", json={"text": text, "source": "en", "target": "de"})
    assert r.status_code == 200, r.text
    return r.json()["translations"][0]["text"]


def test_concurrent_requests_share_batches_and_keep_their_own_results(tiny_bundle):
    n = 16
    sentences = list(dict.fromkeys(src for src, _ in toy_pairs(200, seed=7)))[:n]
    app = create_app(real_settings(tiny_bundle, max_wait_ms=100, max_batch_size=32))
    with running(app) as srv, httpx.Client(base_url=srv.url, timeout=30) as client:
        alone = [translate(client, s) for s in sentences]  # one request at a time
        before = engine_batches(client)
        assert before == n  # alone: one batch per request

        barrier = threading.Barrier(n)
        together: list[str | None] = [None] * n

        def worker(i: int) -> None:
            with httpx.Client(base_url=srv.url, timeout=30) as own:
                barrier.wait()
                together[i] = translate(own, sentences[i])

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        used = engine_batches(client) - before
    assert together == alone
    assert 1 <= used < n, f"{n} concurrent requests took {used} engine batches"
    assert any(text for text in alone)
