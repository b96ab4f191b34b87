"""Shutdown under load. tests/app/test_shutdown.py sends SIGTERM to a loaded `python -m app.server`
and checks that every accepted request completes and the process exits 0; here:

* the drain itself, deterministically: with work in flight, the drain that SIGTERM starts turns
  readiness 503 (liveness stays 200), refuses new work with 503 + Retry-After, and lets every
  accepted request finish;
* SIGTERM on a server process under load from both APIs: readiness never answers 200 again, every
  accepted request completes, and the process exits 0 within its grace period.
"""

from __future__ import annotations

import signal
import threading
import time

import httpx

from app.http.app import create_app
from tests.app.conftest import real_settings
from tests.app.fakes import free_port, running, spawn_server, wait_ready, wait_until
from tests.reliability.conftest import EngineDouble, double_loader

GRACE_S = 60.0


def test_drain_turns_readiness_503_and_finishes_accepted_work(tiny_bundle):
    doubles: list[EngineDouble] = []
    app = create_app(real_settings(tiny_bundle, max_batch_size=1),
                     loader=double_loader(doubles))
    state = app.state.nmt
    with running(app) as server, httpx.Client(base_url=server.url, timeout=60) as c:
        engine = doubles[0]
        engine.gate.clear()
        answers: list[httpx.Response] = []

        def accepted(i: int) -> None:
            with httpx.Client(base_url=server.url, timeout=60) as own:
                answers.append(own.post("/v1/translate" if i % 2 else "/translate",
                                        json={"text" if i % 2 else "q": "the dog sees a cat",
                                              "source": "en", "target": "de"}))

        threads = [threading.Thread(target=accepted, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        wait_until(lambda: engine.entered == 1 and state.batcher.depth == 2)
        state.begin_drain()  # what serve_main's SIGTERM handler does first
        ready = c.get("/health/ready")
        assert (ready.status_code, ready.json()["status"]) == (503, "draining")
        assert c.get("/health/live").status_code == 200
        refused = c.post("/v1/translate", json={"text": "a dog", "source": "en", "target": "de"})
        assert refused.status_code == 503 and int(refused.headers["retry-after"]) >= 1
        assert c.post("/translate", json={"q": "a dog", "source": "en",
                                          "target": "de"}).status_code == 503
        engine.gate.set()
        for t in threads:
            t.join(60)
        assert [r.status_code for r in answers] == [200, 200, 200]
        assert c.get("/health/ready").status_code == 503  # still draining


def test_sigterm_under_load_exits_0_within_the_grace_period(tiny_bundle, tiny_sentences):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = spawn_server(tiny_bundle, port, "--max-batch-size", "1", "--max-wait-ms", "0",
                        "--grace-period", str(GRACE_S))
    results: list[httpx.Response | Exception] = []
    probes: list[tuple[float, int | str]] = []  # (sent at, status or "refused")
    stop = threading.Event()
    try:
        wait_ready(url, 180)
        texts = [f"{s}." for s in tiny_sentences] * 3  # a batch each: work stays queued

        def client(i: int) -> None:
            body = ({"text": texts, "options": {"beam_size": 2}} if i % 2
                    else {"q": texts})
            path = "/v1/translate" if i % 2 else "/translate"
            try:
                results.append(httpx.post(f"{url}{path}", timeout=GRACE_S + 60,
                                          json={**body, "source": "en", "target": "de"}))
            except Exception as exc:  # noqa: BLE001 - reported below
                results.append(exc)

        def probe() -> None:
            for _ in range(20_000):  # bounded; ends when the process is gone
                sent = time.monotonic()
                try:
                    status: int | str = httpx.get(f"{url}/health/ready", timeout=5).status_code
                except httpx.TransportError:
                    status = "refused"
                probes.append((sent, status))
                if stop.wait(0.01):
                    return

        clients = [threading.Thread(target=client, args=(i,)) for i in range(4)]
        for t in clients:
            t.start()
        deadline = time.monotonic() + 120
        # Every request's sentences in the batcher (queued, in the engine or done): SIGTERM after
        # that drains accepted work; before it, a request still being read would rightly get 503.
        while not admitted(url, 4 * len(texts)):
            assert time.monotonic() < deadline, "the requests never were admitted together"
            time.sleep(0.01)
        prober = threading.Thread(target=probe)
        prober.start()
        time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()  # probes sent from now on must never see "ready"
        code = proc.wait(GRACE_S + 60)
        exited = time.monotonic()
        stop.set()
        prober.join(30)
        for t in clients:
            t.join(60)
    finally:
        stop.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = proc.stdout.read()
    after = [status for sent, status in probes if sent > signalled]
    print(f"\nshutdown: exit {code} after {exited - signalled:.2f}s (grace {GRACE_S:g}s); "
          f"readiness after SIGTERM: {sorted(set(map(str, after)))}")
    assert code == 0, output[-3000:]
    assert exited - signalled < GRACE_S
    assert after and 200 not in after, after  # 503 while draining, then the listener is closed
    assert len(results) == 4
    assert all(isinstance(r, httpx.Response) and r.status_code == 200 for r in results), results
    assert all(len(r.json().get("translations", r.json().get("translatedText")))
               == len(tiny_sentences) * 3 for r in results)
    assert "draining" in output


def admitted(url: str, sentences: int) -> bool:
    """True once the batcher has taken ``sentences``: queued + translated + one in the engine."""
    text = httpx.get(f"{url}/metrics", timeout=5).text
    seen = 0.0
    for line in text.splitlines():
        if line.startswith(("nmt_queue_depth ", "nmt_sentences_total")):
            seen += float(line.split()[-1])
    return seen + 1 >= sentences  # --max-batch-size 1: at most one sentence in the engine
