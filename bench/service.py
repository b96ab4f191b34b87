"""Service throughput with dynamic batching on and off.

Starts `python -m app.server` on 127.0.0.1 (a free port) for each mode, drives it with 1, 8, 32
and 64 concurrent clients (each client: one request at a time, one sentence per request), and
reports requests/s, p50/p95 latency, the engine batches the server used and the CPU time of all
the server's processes per request (which, unlike requests/s, holds on a machine shared with
other work). Every run is bounded by --seconds and --max-requests; traffic goes to loopback only.

    python -m bench.service --models-dir bundles            # table on stdout
    python -m bench.service --models-dir /tmp/b --seconds 3 --json bench/results/service.json

"Batching on" is the server with its default batching settings (continuous batching, no wait
for company); "batching off" is the same server with --max-batch-size 1.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path
from typing import IO

import httpx

from bench.common import percentile, write_json

ROOT = Path(__file__).resolve().parents[1]
MODES = {
    "batching on": [],  # the defaults, as the service ships
    "batching off": ["--max-batch-size", "1", "--max-wait-ms", "0"],
}
SENTENCES = [
    "Open the file and save your changes.",
    "The printer is not connected.",
    "Do you want to close the window?",
    "the red car sees a dog",
    "Select the text you want to copy.",
    "A new version of this document is available.",
    "open the file",
    "The password must contain at least eight characters.",
    "a small cat and the old tree",
    "Click here to restart the application.",
    "the big blue house has a green book",
    "The connection to the server was lost.",
]
BATCHES = "nmt_engine_batches_total"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(
    models_dir: str, extra: list[str], threads: int, port: int | None = None,
    launch: tuple[str, ...] = ("-m", "app.server"), output: IO[str] | None = None,
) -> tuple[subprocess.Popen, str]:
    """`python -m app.server` on 127.0.0.1:port (a free one by default), once it is ready.
    Without its translation cache unless `extra` turns it on: the benches send the same
    sentences again and again to measure decoding, which the cache would answer from memory.
    `launch`: Python's arguments that start it (a bench's variant of the server); `output`:
    where its stdout and stderr go (default: this process's)."""
    port = port or free_port()
    cmd = [sys.executable, *launch, "--models-dir", models_dir, "--port", str(port),
           "--threads", str(threads), "--log-level", "warning", "--queue-size", "4096",
           "--cache-size", "0", *extra]
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            stdout=output, stderr=None if output is None else subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/health/ready", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the server did not become ready in 120 s")


def stop_server(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process (Linux /proc), threads included."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float | None:
    """cpu_seconds summed over the server and its processes (server processes, decode workers)."""
    from bench.common import process_tree

    times = [cpu_seconds(p) for p in process_tree(pid)]
    return sum(t for t in times if t is not None) if times[0] is not None else None


def engine_batches(url: str) -> float:
    total = 0.0
    for line in httpx.get(f"{url}/metrics", timeout=5).text.splitlines():
        if line.startswith(BATCHES + "{") and 'outcome="ok"' in line:
            total += float(line.split()[-1])
    return total


class _Connection:
    """One keep-alive HTTP/1.1 connection of a load-generating client: a few bytes of Python per
    request, so that the load generator, on the same cores as the server, takes as little of
    them as it can (an httpx client took about 2 ms of CPU per request here, an eighth of what
    the server spends on one)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, request: bytes) -> int:
        """Send a complete request, read the whole response; its status. A connection that the
        server closed while idle is opened again and the request sent once more."""
        if self.writer is not None:  # kept alive since the last request
            try:
                return await self._exchange(request)
            except (asyncio.IncompleteReadError, ConnectionError):
                self.close()
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        return await self._exchange(request)

    async def _exchange(self, request: bytes) -> int:
        self.writer.write(request)
        head = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(head[0].split(" ", 2)[1])
        headers = {k.strip().lower(): v.strip()
                   for k, _, v in (line.partition(":") for line in head[1:] if line)}
        if "content-length" in headers:
            await self.reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            while size := int((await self.reader.readline()).split(b";")[0], 16):
                await self.reader.readexactly(size + 2)
            await self.reader.readline()  # the blank line after the last chunk
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


def translate_request(host: str, port: int, text: str, target: str) -> bytes:
    body = json.dumps({"text": text, "source": "auto", "target": target}).encode()
    return (f"POST /v1/translate HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode() + body


async def drive(
    url: str,
    concurrency: int,
    seconds: float,
    max_requests: int,
    target: str,
    texts: list[str] = SENTENCES,
    stop: threading.Event | None = None,
) -> dict:
    """`concurrency` clients, each on its own keep-alive connection sending one request (one of
    `texts`) after the other, until the time or the request budget runs out, or `stop` is set.
    A transport error counts as an error, like a non-200; `failures` counts them by status code
    or exception name."""
    latencies: list[float] = []
    failures: collections.Counter[str] = collections.Counter()
    sent = 0
    stop_at = time.monotonic() + seconds
    address = urllib.parse.urlsplit(url)
    host, port = address.hostname, address.port or 80
    requests = [translate_request(host, port, text, target) for text in texts]

    async def one_client(k: int) -> None:
        nonlocal sent
        i, connection = k, _Connection(host, port)
        while time.monotonic() < stop_at and sent < max_requests and not (stop and stop.is_set()):
            sent += 1
            request = requests[i % len(requests)]
            i += concurrency
            started = time.perf_counter()
            try:
                status = await asyncio.wait_for(connection.post(request), 60)
                failure = None if status == 200 else str(status)
            except (TimeoutError, OSError, asyncio.IncompleteReadError,
                    asyncio.LimitOverrunError, ValueError) as exc:
                connection.close()
                failure = type(exc).__name__
            if failure is None:
                latencies.append(time.perf_counter() - started)
            else:
                failures[failure] += 1
        connection.close()

    started = time.perf_counter()
    await asyncio.gather(*(one_client(k) for k in range(concurrency)))
    elapsed = time.perf_counter() - started
    ms = [x * 1000 for x in latencies]
    return {
        "clients": concurrency,
        "requests": len(latencies),
        "errors": sum(failures.values()),
        "failures": dict(failures),
        "seconds": round(elapsed, 3),
        "requests_per_s": round(len(latencies) / elapsed, 1),
        **{f"p{q}_ms": round(percentile(ms, q), 1) for q in (50, 95, 99)},
    }


def print_level(label: str, row: dict) -> None:
    """One level's line: requests/s, latency, engine batches, server CPU, errors."""
    per_batch = f" ({row['sentences_per_batch']}/batch)" if "sentences_per_batch" in row else ""
    print(f"{label} c={row['concurrency']:<3} {row['requests_per_s']:8.1f} req/s  "
          f"p50 {row['p50_ms']} ms  p95 {row['p95_ms']} ms  "
          f"batches {row['engine_batches']}{per_batch}  "
          f"server CPU {row['server_cpu_ms_per_request']} ms/req  "
          f"errors {row['errors']}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models-dir", default=str(ROOT / "bundles"))
    parser.add_argument("--target", default="de", help="target language of the pair")
    parser.add_argument("--concurrency", default="1,8,32,64")
    parser.add_argument("--seconds", type=float, default=5.0, help="per concurrency level")
    parser.add_argument("--max-requests", type=int, default=3000, help="per concurrency level")
    parser.add_argument("--threads", type=int, default=0, help="ONNX Runtime intra-op threads")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",")]

    # both servers run side by side and the modes alternate per level, so that a change in the
    # machine's load during the run hits both modes alike (only the driven one is busy)
    servers = {}
    try:
        for mode, extra in MODES.items():
            servers[mode] = start_server(args.models_dir, extra, args.threads)
            asyncio.run(drive(servers[mode][1], 4, 1.0, 50, args.target))  # warm up
        results = []
        for concurrency in levels:
            for mode, (proc, url) in servers.items():
                before, cpu_before = engine_batches(url), tree_cpu_seconds(proc.pid)
                row = asyncio.run(
                    drive(url, concurrency, args.seconds, args.max_requests, args.target)
                )
                batches = engine_batches(url) - before
                cpu_after = tree_cpu_seconds(proc.pid)
                cpu = cpu_after - cpu_before if cpu_after is not None else None
                row.update(mode=mode, concurrency=concurrency, engine_batches=int(batches),
                           sentences_per_batch=round(row["requests"] / batches, 2)
                           if batches else None,
                           server_cpu_ms_per_request=round(cpu * 1000 / row["requests"], 1)
                           if cpu is not None and row["requests"] else None)
                results.append(row)
                print_level(f"{mode:13}", row)
    finally:
        for proc, _ in servers.values():
            stop_server(proc)

    print("\n| clients | req/s on | req/s off | speed-up | p95 ms on / off "
          "| server CPU ms/req on / off |")
    print("|---:|---:|---:|---:|---:|---:|")
    for concurrency in levels:
        on = next(r for r in results if r["mode"] == "batching on"
                  and r["concurrency"] == concurrency)
        off = next(r for r in results if r["mode"] == "batching off"
                   and r["concurrency"] == concurrency)
        speedup = on["requests_per_s"] / off["requests_per_s"] if off["requests_per_s"] else 0
        print(f"| {concurrency} | {on['requests_per_s']} | {off['requests_per_s']} | "
              f"{speedup:.2f}x | {on['p95_ms']} / {off['p95_ms']} | "
              f"{on['server_cpu_ms_per_request']} / {off['server_cpu_ms_per_request']} |")
    if args.json:
        write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
