"""Replicas behind HAProxy on loopback: throughput with 1, 2 and 3 `nmt serve` processes.

Starts N replicas (`python -m app.server`, one ONNX Runtime thread each) on 127.0.0.1 and one
HAProxy in front of them with active health checks on /health/ready, then drives the balancer
with closed-loop clients (each one request at a time) for --seconds per N and prints requests/s,
latency and HAProxy's retry counters. One replica without the balancer is measured too, to show
what the extra hop costs. Needs the `haproxy` binary (Debian: apt-get install haproxy). Traffic
goes to loopback only and every run is bounded by --seconds and --max-requests.

    python -m bench.replicas                                # bundles/, 1-3 replicas, 16 clients
    python -m bench.replicas --replicas 1,2 --clients 8 --seconds 10 --json out.json

Each replica is one Python process: its event loop, tokenization and JSON take CPU beside ONNX
Runtime's thread, so replicas only scale while cores are free. On a 2-core machine the third
replica has no core of its own and the balancer and the load generator share them as well.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench.common import write_json
from bench.service import ROOT, cpu_seconds, drive, free_port, start_server, stop_server

# HAProxy in front of the replicas. Health checks decide where new requests go: /health/ready
# turns 503 as soon as a replica gets SIGTERM, and its listener closes about 0.1 s later, which
# is sooner than any check interval. So a request can still meet a draining replica (503) or a
# closed port (connection refused); `retry-on` resends it to another replica (`redispatch 1`).
# That is safe because a translation has no side effect: sending it twice gives the same answer.
# `observe layer4` marks a replica down on the first refused connection, before its check does.
HAPROXY_CONFIG = """\
global
    maxconn 1024
    stats socket {socket} mode 600 level admin
    log stderr format raw local0 info

defaults
    mode http
    log global
    option httplog
    option dontlog-normal   # log only errors, retries and redispatches
    timeout connect 2s
    timeout client 60s
    # longer than NMT_REQUEST_TIMEOUT (30 s): the service answers 504 itself first
    timeout server 40s
    timeout queue 10s
    timeout http-keep-alive 10s
    retries 3
    option redispatch 1
    retry-on conn-failure empty-response 503
    option http-buffer-request

frontend translate
    bind 127.0.0.1:{port}
    # the client's address, for the service's per-address rate limit (uvicorn trusts
    # X-Forwarded-For from 127.0.0.1); a client's own header is dropped first
    http-request del-header X-Forwarded-For
    option forwardfor
    default_backend replicas

backend replicas
    balance leastconn
    option httpchk
    http-check send meth GET uri /health/ready
    http-check expect status 200
    default-server check inter 1s fastinter 250ms downinter 500ms fall 2 rise 2
    default-server observe layer4 error-limit 1 on-error mark-down
{servers}
"""


def haproxy_binary() -> str | None:
    """HAProxy on PATH or in the sbin directories (a normal user's PATH may lack them)."""
    return shutil.which("haproxy") or shutil.which("haproxy", path="/usr/local/sbin:/usr/sbin")


def haproxy_config(port: int, replica_ports: list[int], stats_socket: Path) -> str:
    servers = "\n".join(f"    server r{i} 127.0.0.1:{p}" for i, p in enumerate(replica_ports, 1))
    return HAPROXY_CONFIG.format(port=port, socket=stats_socket, servers=servers)


class Balancer:
    """A foreground HAProxy process on 127.0.0.1:port with a stats socket in `workdir`."""

    def __init__(self, replica_ports: list[int], workdir: Path) -> None:
        binary = haproxy_binary()
        if binary is None:
            raise FileNotFoundError("haproxy is not installed (Debian: apt-get install haproxy)")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.socket = workdir / "haproxy.sock"
        self.config = workdir / "haproxy.cfg"
        self.config.write_text(haproxy_config(self.port, replica_ports, self.socket))
        self.log = workdir / "haproxy.log"
        subprocess.run([binary, "-c", "-q", "-f", str(self.config)], check=True, timeout=30)
        with self.log.open("w") as out:
            self.proc = subprocess.Popen([binary, "-db", "-f", str(self.config)], stdout=out,
                                         stderr=subprocess.STDOUT)

    def command(self, line: str) -> str:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(str(self.socket))
            s.sendall(line.encode() + b"\n")
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def servers(self) -> dict[str, dict[str, str]]:
        """HAProxy's counters per replica (`show stat`): status, stot, wretr, wredis, ..."""
        rows = csv.DictReader(self.command("show stat").lstrip("# ").splitlines())
        return {r["svname"]: r for r in rows
                if r["pxname"] == "replicas" and r["svname"] not in ("FRONTEND", "BACKEND")}

    def wait(self, predicate, what: str, timeout: float = 60.0) -> dict[str, dict[str, str]]:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"haproxy exited: {self.log.read_text()[-2000:]}")
            with contextlib.suppress(OSError):
                servers = self.servers()
                if predicate(servers):
                    return servers
            if time.monotonic() > deadline:
                raise TimeoutError(f"haproxy: {what} not within {timeout}s")
            time.sleep(0.05)

    def wait_all_up(self, timeout: float = 60.0) -> None:
        self.wait(lambda s: all(r["status"] == "UP" for r in s.values()), "all replicas UP",
                  timeout)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def cluster(
    models_dir: str, n: int, extra: tuple[str, ...] = ()
) -> Iterator[tuple[Balancer, list[subprocess.Popen]]]:
    """N ready replicas on fixed free ports behind a Balancer whose checks all pass; stops all."""
    ports = [free_port() for _ in range(n)]
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="nmt-haproxy-") as tmp:
        balancer = None
        try:
            for port in ports:
                procs.append(start_server(models_dir, ["--log-level", "warning", *extra], 1,
                                          port)[0])
            balancer = Balancer(ports, Path(tmp))
            balancer.wait_all_up()
            yield balancer, procs
        finally:
            if balancer is not None:
                balancer.stop()
            for proc in procs:
                if proc.poll() is None:
                    stop_server(proc)


def measure(url: str, pids: dict[str, list[int]], args: argparse.Namespace) -> dict:
    """Requests/s and latency through `url`, and the CPU seconds each group of processes used."""
    asyncio.run(drive(url, args.clients, 1.0, 200, args.target))  # warm up connections
    before = {pid: cpu_seconds(pid) or 0.0 for group in pids.values() for pid in group}
    row = asyncio.run(drive(url, args.clients, args.seconds, args.max_requests, args.target))
    row["cpu_s"] = {name: [round((cpu_seconds(pid) or 0.0) - before[pid], 1) for pid in group]
                    for name, group in pids.items()}
    served = row["requests"] + row["errors"]
    row["replica_cpu_ms_per_request"] = (
        round(sum(row["cpu_s"]["replicas"]) * 1000 / served, 1) if served else None)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models-dir", default=str(ROOT / "bundles"))
    parser.add_argument("--target", default="de", help="target language of the pair")
    parser.add_argument("--replicas", default="1,2,3")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=15.0, help="per setup")
    parser.add_argument("--max-requests", type=int, default=20000, help="per setup")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)

    load = os.getloadavg()[0]
    rows = []
    proc, url = start_server(args.models_dir, ["--log-level", "warning"], 1)
    try:
        row = measure(url, {"replicas": [proc.pid], "client": [os.getpid()]}, args)
        rows.append({"setup": "1 replica, no balancer", **row})
    finally:
        stop_server(proc)
    for n in (int(x) for x in args.replicas.split(",")):
        with cluster(args.models_dir, n) as (balancer, procs):
            row = measure(balancer.url, {"replicas": [p.pid for p in procs],
                                         "haproxy": [balancer.proc.pid],
                                         "client": [os.getpid()]}, args)
            servers = balancer.servers().values()
            row["retries"] = sum(int(s["wretr"] or 0) + int(s["wredis"] or 0) for s in servers)
            rows.append({"setup": f"{n} replica{'s' if n > 1 else ''} behind HAProxy", **row})
        print(f"{rows[-1]['setup']}: {rows[-1]['requests_per_s']} req/s", flush=True)

    if args.json:
        write_json(args.json, {"cpus": os.cpu_count(), "load_average_before": load, "rows": rows})
    print(f"\n{args.clients} closed-loop clients, {args.seconds:g} s per setup, one sentence per "
          f"request; {os.cpu_count()} CPUs, load average {load:.1f} before the run")
    print("\n| setup | req/s | p50 ms | p95 ms | errors | CPU s: replicas | HAProxy | client "
          "| replica CPU ms/request |")
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|")
    for r in rows:
        cpu = r["cpu_s"]
        print(f"| {r['setup']} | {r['requests_per_s']} | {r['p50_ms']} | {r['p95_ms']} | "
              f"{r['errors']} | {' + '.join(map(str, cpu['replicas']))} | "
              f"{cpu.get('haproxy', ['-'])[0]} | {cpu['client'][0]} | "
              f"{r['replica_cpu_ms_per_request']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
