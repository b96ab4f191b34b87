"""Hostile and abandoned uploads starve no one: on the shipped server layout (a supervisor and
two server processes, `--processes 2`), each hostile upload to /translate_file is followed at
once by live /translate requests on new connections, and every live request must answer within
LIVE_LIMIT seconds; no response anywhere is a 5xx. A server process that stops answering gets
no new connections until it answers again."""

from __future__ import annotations

import os
import re
import signal
import socket
import threading
import time

import httpx
import pytest

from app.serving.supervisor import HEARTBEAT, STALE_AFTER
from bench.service import stop_server
from tests.app import hostile
from tests.app.fakes import free_port, spawn_server, wait_ready
from tests.app.test_processes import server_processes, sockets

LIVE_LIMIT = 5.0  # seconds a live request may take right after a hostile upload
ABANDON_AFTER = 1.0  # seconds an uploading client waits before it leaves


def raw_upload(port: int, name: str, data: bytes, wait: float) -> int | None:
    """POST /translate_file on a new connection; the status if an answer comes within `wait`
    seconds, else None: the client closes the connection and leaves (abandons the upload)."""
    request = httpx.Request("POST", f"http://127.0.0.1:{port}/translate_file",
                            data={"source": "en", "target": "de"}, files={"file": (name, data)})
    head = f"POST /translate_file HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in request.headers.items() if k.lower() != "host")
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.sendall(head.encode() + b"\r\n" + request.read())
        client.settimeout(wait)
        try:
            first = client.recv(64)
        except TimeoutError:
            return None
    match = re.match(rb"HTTP/1.1 (\d{3})", first)
    return int(match.group(1)) if match else None


def live(url: str) -> tuple[float, int]:
    """One /translate on a new connection: (seconds, status; 0 when no answer came)."""
    started = time.monotonic()
    try:
        with httpx.Client() as client:
            r = client.post(f"{url}/translate", timeout=LIVE_LIMIT * 2, json={
                "q": "the house is small.", "source": "en", "target": "de"})
        return time.monotonic() - started, r.status_code
    except httpx.HTTPError:
        return time.monotonic() - started, 0


LIVE_BURST = 8  # live requests at once after each upload


def live_burst(url: str) -> list[tuple[float, int]]:
    """LIVE_BURST live requests at once, each on a new connection. The supervisor hands each
    to the process with the fewest open connections, so a process that holds a few connections
    it never closes (a frozen one) still gets some of them, unless it is known not to answer."""
    answers: list[tuple[float, int]] = []
    threads = [threading.Thread(target=lambda: answers.append(live(url)))
               for _ in range(LIVE_BURST)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers


# (file name, its bytes, seconds its client waits for an answer before it leaves): the .docx
# clients wait until the server is well into segmenting the paragraph (a client that leaves
# while the file is still being read never got that far, before or after the fix)
HOSTILE = [
    ("runs.docx", lambda: hostile.docx_of_runs(100_000, bold=False), 6.0),
    ("bold-runs.docx", lambda: hostile.docx_of_runs(100_000), 6.0),
    ("laughs.xliff", hostile.entity_expansion_xliff, ABANDON_AFTER),
    ("cues.srt", lambda: hostile.srt_of_cues(100_000), ABANDON_AFTER),
    ("lines.txt", lambda: hostile.txt_of_lines(50_000), ABANDON_AFTER),
    ("paragraph.txt", lambda: hostile.one_paragraph(40_000), ABANDON_AFTER),
    ("truncated.docx", hostile.truncated_zip, ABANDON_AFTER),
]


@pytest.fixture(scope="module")
def two(tiny_bundle, tmp_path_factory):
    """The shipped layout: a supervisor and two server processes on the tiny bundle."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    files = tmp_path_factory.mktemp("files")
    proc = spawn_server(tiny_bundle, port, "--processes", "2", "--files-dir", str(files),
                        "--grace-period", "2")
    try:
        wait_ready(url, 180)
        yield proc, port, url
    finally:
        stop_server(proc)


def five_xx(url: str) -> float:
    """5xx answers counted by every process (readiness probes before ready left out)."""
    metrics = httpx.get(f"{url}/metrics", timeout=LIVE_LIMIT).text
    counts = re.findall(r'^nmt_http_requests_total\{([^}]*status="5\d\d"[^}]*)\} (\S+)',
                        metrics, re.M)
    return sum(float(n) for labels, n in counts if 'route="/health/ready"' not in labels)


@pytest.mark.slow
def test_live_requests_stay_fast_after_each_hostile_upload(two):
    _, port, url = two
    statuses: list[tuple[str, int | None]] = []
    slow: list[tuple[str, float, int]] = []
    for name, build, patience in HOSTILE:
        statuses.append((name, raw_upload(port, name, build(), patience)))
        slow += [(name, round(s, 2), code) for s, code in live_burst(url)
                 if s > LIVE_LIMIT or code != 200]
    assert not slow, f"live requests after hostile uploads: {slow}; uploads: {statuses}"
    assert all(code is None or code < 500 for _, code in statuses), statuses
    assert five_xx(url) == 0


@pytest.mark.slow
def test_a_process_that_stops_answering_gets_no_new_connections(two):
    proc, _, url = two
    frozen, other = server_processes(proc.pid)
    os.kill(frozen, signal.SIGSTOP)  # its event loop answers nothing from now on
    try:
        time.sleep(STALE_AFTER + 3 * HEARTBEAT)
        before = sockets(frozen)
        answers = [live(url) for _ in range(4)]  # each on a new connection
        assert all(code == 200 and s < LIVE_LIMIT for s, code in answers), answers
        assert sockets(frozen) == before  # none was handed to it
    finally:
        os.kill(frozen, signal.SIGCONT)
    # it beats again: it takes its share of new connections again
    time.sleep(3 * HEARTBEAT)
    before = sockets(frozen)
    clients = [httpx.Client() for _ in range(2)]  # two keep-alive connections, held open
    try:
        for client in clients:
            r = client.post(f"{url}/translate", timeout=LIVE_LIMIT, json={
                "q": "a house.", "source": "en", "target": "de"})
            assert r.status_code == 200
        assert sockets(frozen) - before == 1
    finally:
        for client in clients:
            client.close()
