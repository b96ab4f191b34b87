"""Several server processes behind one port (`--processes 2`, app.serving.supervisor), on real
`python -m app.server` processes with the tiny bundle: connections spread evenly, metrics, rate
limits, readiness and document jobs hold across the processes, a dead process is replaced, and
SIGTERM drains them all."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import httpx
import pytest

from app.config import Settings
from app.serving.peers import RATE_LIMIT_DB
from app.serving.supervisor import prepare_databases, process_count, share
from bench.common import process_tree
from tests.app.fakes import free_port, spawn_server, wait_ready, wait_until
from tests.app.test_jobs import submit, wait_for


def server_processes(supervisor: int) -> list[int]:
    """The supervisor's server processes: its children (forked from it, they start no helper
    process of multiprocessing's)."""
    found = []
    for pid in process_tree(supervisor):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        if f"PPid:\t{supervisor}\n" in status:
            found.append(pid)
    return sorted(found)


def sockets(pid: int) -> int:
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            count += os.readlink(fd).startswith("socket:")
        except OSError:
            continue
    return count


def metric_sum(url: str, prefix: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(prefix))


@pytest.fixture()
def two(tiny_bundle, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = spawn_server(tiny_bundle, port, "--processes", "2", "--rate-limit", "40",
                        "--files-dir", str(tmp_path / "files"), "--grace-period", "60")
    try:
        wait_ready(url, 180)
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except Exception:
                proc.kill()
                proc.wait()


def translate(client: httpx.Client, url: str, text: str = "the house is small.") -> httpx.Response:
    return client.post(f"{url}/v1/translate", json={"text": text, "source": "en", "target": "de"},
                       timeout=60)


def test_connections_spread_evenly_and_metrics_add_up(two):
    proc, url = two
    children = server_processes(proc.pid)
    assert len(children) == 2
    # the readiness probes' connections gone: both processes hold the same sockets
    wait_until(lambda: sockets(children[0]) == sockets(children[1]), 30)
    before = [sockets(pid) for pid in children]
    clients = [httpx.Client() for _ in range(8)]  # eight keep-alive connections
    try:
        assert all(translate(c, url).status_code == 200 for c in clients)
        assert [sockets(pid) - b for pid, b in zip(children, before, strict=True)] == [4, 4]
        served = metric_sum(url, 'nmt_http_requests_total{method="POST",route="/v1/translate"')
        assert served == 8  # both processes' requests, from whichever answered the scrape
        assert metric_sum(url, "nmt_ready ") == 1
    finally:
        for c in clients:
            c.close()


def test_one_rate_limit_across_the_processes(tiny_bundle, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = spawn_server(tiny_bundle, port, "--processes", "2", "--rate-limit", "3",
                        "--files-dir", str(tmp_path))
    try:
        wait_ready(url, 180)
        codes = []
        for _ in range(6):  # a fresh connection each: they alternate between the processes
            with httpx.Client() as client:
                codes.append(translate(client, url).status_code)
        assert codes == [200, 200, 200, 429, 429, 429]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0


def test_jobs_queued_through_either_process_are_done(two, tiny_sentences):
    _, url = two
    ids = []
    for i in range(4):  # fresh connections: both processes take uploads
        # a glossary: the process that runs the job reads it from the shared store
        r = submit(url, f"doc{i}.txt", "\n\n".join(tiny_sentences[i:i + 3]).encode(),
                   glossary=json.dumps({"the": "derdiedas"}))
        assert r.status_code == 202, r.text
        ids.append(r.json()["id"])
    for job_id in ids:
        done = wait_for(url, job_id, timeout=120)
        assert done["state"] == "done"
        assert "derdiedas" in httpx.get(url + done["result"], timeout=10).text.lower()


def test_a_dead_process_is_replaced_and_the_service_keeps_serving(two):
    proc, url = two
    victim, survivor = server_processes(proc.pid)
    os.kill(victim, signal.SIGKILL)
    with httpx.Client() as client:  # the survivor answers meanwhile
        assert translate(client, url).status_code == 200
    wait_until(lambda: len(server_processes(proc.pid)) == 2
               and victim not in server_processes(proc.pid), 60)
    assert survivor in server_processes(proc.pid)
    wait_ready(url, 180)
    replacement = [p for p in server_processes(proc.pid) if p != survivor][0]
    before = sockets(replacement)
    clients = [httpx.Client() for _ in range(4)]
    try:  # the new process takes its share of the new connections
        assert all(translate(c, url).status_code == 200 for c in clients)
        assert sockets(replacement) - before >= 1
    finally:
        for c in clients:
            c.close()


def test_sigterm_drains_every_process_and_exits_0(two, tiny_sentences):
    proc, url = two
    children = server_processes(proc.pid)
    body = json.dumps({"text": [f"{s}." for s in tiny_sentences] * 6, "source": "en",
                       "target": "de", "options": {"beam_size": 2}}).encode()
    clients = [httpx.Client() for _ in range(4)]
    results: list[int] = []
    signalled = threading.Event()

    def held_body():
        # the tiny model answers in well under a second: each request's body is held back until
        # the signal has gone, so all four are in flight then, however fast the machine
        yield body[:8]
        signalled.wait(60)
        yield body[8:]

    def run(client: httpx.Client) -> None:
        r = client.post(f"{url}/v1/translate", timeout=120, content=held_body(),
                        headers={"Content-Type": "application/json"})
        results.append(r.status_code)

    threads = [threading.Thread(target=run, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    # the four, and the /metrics request that reads the gauge
    wait_until(lambda: metric_sum(url, "nmt_http_requests_in_progress ") >= 5, 60)
    proc.send_signal(signal.SIGTERM)
    signalled.set()
    for t in threads:
        t.join(120)
    assert proc.wait(60) == 0
    assert results == [200] * 4
    assert not any(Path(f"/proc/{pid}").exists() for pid in children)
    for c in clients:
        c.close()


def test_a_process_that_cannot_start_stops_the_service(tmp_path):
    port = free_port()
    proc = spawn_server(tmp_path / "no-models", port, "--processes", "2")
    try:
        assert proc.wait(120) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "before it was ready" in proc.stdout.read()


def test_each_process_gets_its_share_of_the_settings():
    settings = Settings(processes=2, threads=4, max_batch_size=32, max_batch_tokens=8191,
                        queue_size=1024, workers=0)
    part = share(settings, 2)
    # its own decode worker and a spare one (of the same size as every decode worker: half the batch
    # and budget)
    assert (part.processes, part.workers, part.worker_processes, part.threads) == (1, 2, False, 2)
    assert (part.max_batch_size, part.max_batch_tokens, part.queue_size) == (32, 8191, 512)
    more = share(settings.model_copy(update={"workers": 4}), 2)  # two of its own, two spare
    assert (more.workers, more.threads) == (4, 1)
    # 0: one per decode worker, as app.engine.sessions.decode_workers counts them
    assert process_count(Settings(processes=0)) == min(len(os.sched_getaffinity(0)), 2)
    assert process_count(Settings(processes=0, threads=4, max_batch_size=64)) == 4
    assert process_count(Settings(processes=0, threads=1)) == 1
    assert process_count(Settings(processes=0, threads=4, max_batch_size=16)) == 1
    assert process_count(Settings(processes=0, provider="cuda")) == 1
    assert process_count(Settings(processes=3)) == 3


def test_the_shared_databases_are_in_wal_before_the_processes_start(tmp_path):
    """Two processes switching one new SQLite file to WAL at once fail one of them ("database
    is locked"): the supervisor switches them first."""
    import sqlite3

    settings = Settings(jobs_dir=tmp_path / "jobs")
    prepare_databases(settings, tmp_path)
    for path in (tmp_path / RATE_LIMIT_DB, tmp_path / "jobs" / "jobs.db"):
        mode = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0]
        assert mode == "wal", path
    prepare_databases(Settings(jobs_dir=Path("/proc/no/such/dir")), tmp_path)  # no raise


def test_new_connections_go_only_to_processes_whose_heartbeat_is_fresh():
    """app.serving.supervisor.candidates: a process whose loop has not beaten for STALE_AFTER
    seconds is offered no connection; where none beats, every live one is (as before heartbeats)."""
    import time

    from app.serving.supervisor import STALE_AFTER, _Child, candidates

    class Alive:
        def is_alive(self) -> bool:
            return True

    children = [_Child(i) for i in range(3)]
    for child in children:
        child.process = Alive()
    children[0].sent = 5  # the most loaded, but the only one beating besides 2
    closed = [0, 0, 0]
    now = time.monotonic()
    beats = [now, now - STALE_AFTER - 1, now - 0.1]
    assert [c.index for c in candidates(children, closed, beats)] == [2, 0]
    beats[1] = now  # it beats again: the least loaded comes first again
    assert [c.index for c in candidates(children, closed, beats)] == [1, 2, 0]
    stale = [now - STALE_AFTER - 1] * 3  # none beats: all, least loaded first
    assert [c.index for c in candidates(children, closed, stale)] == [1, 2, 0]
    # a replacement not ready yet (1) is passed over while a ready one answers
    assert [c.index for c in candidates(children, closed, beats, [1, 0, 1])] == [2, 0]
    # none ready (the service starting): every answering one, as without readiness
    assert [c.index for c in candidates(children, closed, beats, [0, 0, 0])] == [1, 2, 0]


def _listening_inode(port: int) -> str:
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1].endswith(f":{port:04X}") and fields[3] == "0A":  # 0A: LISTEN
            return fields[9]
    raise AssertionError(f"nothing listens on {port}")


def _kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(field)


def test_server_processes_are_forked_sharing_pages_but_not_the_port(two):
    """Forked from the supervisor once it imported the web stack: each server process shares
    those pages with it, and holds neither the listening socket nor another's channel."""
    proc, url = two
    children = server_processes(proc.pid)
    listener = f"socket:[{_listening_inode(int(url.rsplit(':', 1)[1]))}]"
    for pid in children:
        links = set()
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                links.add(os.readlink(fd))
            except OSError:
                continue
        assert listener not in links
        assert _kib(pid, "Shared_Dirty") > 20 * 1024  # pages still the supervisor's
    with httpx.Client() as client:
        assert translate(client, url).status_code == 200


def test_server_processes_load_their_models_in_turn(tmp_path):
    """Peers.take_turn: a second process (here a second open file) waits until the first one
    has loaded and let its turn go, so their load peaks never add up."""
    from app.serving.peers import Peers

    peers = Peers(0, 2, tmp_path, tmp_path, None, None, None)
    first = peers.take_turn()
    second_got_it = threading.Event()

    def second() -> None:
        peers.take_turn().close()
        second_got_it.set()

    waiter = threading.Thread(target=second, daemon=True)
    waiter.start()
    assert not second_got_it.wait(0.5)
    first.close()
    assert second_got_it.wait(10)
    waiter.join(10)
