"""SIGTERM on a real `python -m app.server` process: readiness drops, the listener closes, every
accepted request completes, and the process exits 0."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from bench.common import process_tree
from tests.app.fakes import free_port, spawn_server, wait_ready


def metric(url: str, name: str) -> float:
    for line in httpx.get(f"{url}/metrics", timeout=5).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def test_sigterm_drains_in_flight_requests_and_exits_0(tiny_bundle, tiny_sentences):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = spawn_server(tiny_bundle, port, "--max-batch-size", "1", "--max-wait-ms", "0",
                        "--grace-period", "300", "--max-texts-per-request", "64")
    try:
        wait_ready(url, 180)  # generous: the test machine's cores are shared
        n_clients, texts = 6, [f"{s}." for s in tiny_sentences] * 7  # 56 batches each
        results: list[httpx.Response | Exception] = []

        def client() -> None:
            try:
                results.append(httpx.post(f"{url}/v1/translate", timeout=300, json={
                    "text": texts, "source": "en", "target": "de",
                    "options": {"beam_size": 2}}))
            except Exception as exc:  # noqa: BLE001 - reported below
                results.append(exc)

        threads = [threading.Thread(target=client) for _ in range(n_clients)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 120
        while metric(url, "nmt_http_requests_in_progress") < n_clients + 1:  # + this scrape
            assert time.monotonic() < deadline, "the requests never were in flight together"
            time.sleep(0.01)
        assert metric(url, "nmt_queue_depth") > 0  # work is still queued
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        try:
            refused = httpx.get(f"{url}/health/ready", timeout=2).status_code == 503
        except httpx.TransportError:
            refused = True  # the listener is closed: no new connections
        assert refused
        for t in threads:
            t.join(300)
        assert proc.wait(300) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = proc.stdout.read()
    assert len(results) == n_clients
    assert all(isinstance(r, httpx.Response) and r.status_code == 200 for r in results), results
    assert all(len(r.json()["translations"]) == len(texts) for r in results)
    assert "draining" in output


def children(pid: int) -> set[int]:
    """The process's descendants (its worker processes), from /proc."""
    return set(process_tree(pid)) - {pid}


def gone(pid: int) -> bool:
    """Whether the process has exited (a zombie counts: it no longer runs)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def wait_gone(pids: set[int], timeout: float) -> set[int]:
    """The processes among pids still running after timeout seconds."""
    deadline = time.monotonic() + timeout
    while (left := {p for p in pids if not gone(p)}) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])
def test_the_worker_processes_end_with_the_server(tiny_bundle, tiny_sentences, stop):
    """With two decode workers the server runs them as processes of its own: they translate, and
    they end with the server, whether it shuts down (SIGTERM) or is killed (SIGKILL: each sees
    its pipe close)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = spawn_server(tiny_bundle, port, "--workers", "2")
    try:
        wait_ready(url, 180)
        procs = children(proc.pid)
        assert len(procs) == 2, procs
        r = httpx.post(f"{url}/v1/translate", timeout=60, json={
            "text": tiny_sentences[:4], "source": "en", "target": "de"})
        assert r.status_code == 200 and len(r.json()["translations"]) == 4
        proc.send_signal(getattr(signal, stop))
        code = proc.wait(60)
        assert code == (0 if stop == "SIGTERM" else -signal.SIGKILL)
        assert wait_gone(procs, 30) == set()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_idle_worker_processes_that_die_are_replaced_and_counted(tiny_bundle, tiny_sentences):
    """Worker processes killed while idle cost no request: the next batch starts a decode worker
    again; /metrics shows the decode workers running and how many were started."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = spawn_server(tiny_bundle, port, "--workers", "2")
    try:
        wait_ready(url, 180)
        model = httpx.get(f"{url}/v1/models", timeout=10).json()["models"][0]["name"]
        running, started = (f'nmt_lane_processes{{model="{model}"}}',
                            f'nmt_lane_process_starts_total{{model="{model}"}}')
        assert (metric(url, running), metric(url, started)) == (2, 2)
        procs = children(proc.pid)
        for pid in procs:
            os.kill(pid, signal.SIGKILL)
        assert wait_gone(procs, 30) == set()
        assert metric(url, running) == 0
        for text in tiny_sentences[:3]:
            r = httpx.post(f"{url}/v1/translate", timeout=60,
                           json={"text": text, "source": "en", "target": "de"})
            assert r.status_code == 200 and r.json()["translations"][0]["text"]
        assert metric(url, running) >= 1
        assert metric(url, started) == 2 + metric(url, running)
        assert children(proc.pid).isdisjoint(procs)
    finally:
        proc.kill()
        proc.wait()
