"""What the translation cache (app.translation.cache) does for traffic that repeats itself: the
same server with and without it, driven alike.

    python -m bench.cache [--models-dir bundles] [--concurrency 1,8,32] [--seconds 5]

Two servers (`python -m app.server`, its defaults; one with --cache-size 0) run side by side on
loopback and are driven in turn at each level by bench.service's clients, each client sending
one-sentence requests drawn in turn from bench.service's twelve sentences: a user interface's
strings translated again and again, the case the cache is for (traffic that never repeats gains
nothing, and pays a dictionary lookup per sentence). Reported per level and server: requests/s,
p50/p95 latency, engine batches, the server's CPU time per request; then the cache's ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

from bench.common import write_json
from bench.service import (
    ROOT,
    SENTENCES,
    drive,
    engine_batches,
    print_level,
    start_server,
    stop_server,
    tree_cpu_seconds,
)

SERVERS = {"no cache": [], "cache": ["--cache-size", "10000"]}


def settled_batches(url: str) -> float:
    """engine_batches once it stops changing: a running batch is counted when it ends, which
    can be after its last request was answered."""
    count = engine_batches(url)
    while True:
        time.sleep(0.3)
        now = engine_batches(url)
        if now == count:
            return count
        count = now


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models-dir", default=str(ROOT / "bundles"))
    parser.add_argument("--target", default="de")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--seconds", type=float, default=5.0, help="per level and server")
    parser.add_argument("--max-requests", type=int, default=20000, help="per level and server")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    servers, rows = {}, []
    try:
        for name, extra in SERVERS.items():
            servers[name] = start_server(args.models_dir, extra, args.threads)
            # warm up: one client sends each sentence once (the cached server's cache filled)
            asyncio.run(drive(servers[name][1], 1, 30.0, len(SENTENCES), args.target))
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            for name, (proc, url) in servers.items():
                batches, cpu = settled_batches(url), tree_cpu_seconds(proc.pid)
                row = asyncio.run(drive(url, concurrency, args.seconds, args.max_requests,
                                        args.target))
                cpu_after = tree_cpu_seconds(proc.pid)
                row.update(server=name, concurrency=concurrency,
                           engine_batches=int(settled_batches(url) - batches),
                           server_cpu_ms_per_request=round((cpu_after - cpu) * 1000
                                                           / row["requests"], 2)
                           if cpu is not None and cpu_after is not None and row["requests"]
                           else None)
                rows.append(row)
                print_level(f"{name:8}", row)
    finally:
        for proc, _ in servers.values():
            stop_server(proc)
    print("\n| clients | req/s no cache | req/s cache | ratio | p50 ms no cache / cache |")
    print("|---:|---:|---:|---:|---:|")
    for concurrency in sorted({r["concurrency"] for r in rows}):
        off, on = (next(r for r in rows if r["server"] == name and r["concurrency"] == concurrency)
                   for name in SERVERS)
        ratio = on["requests_per_s"] / off["requests_per_s"] if off["requests_per_s"] else None
        print(f"| {concurrency} | {off['requests_per_s']:.1f} | {on['requests_per_s']:.1f} | "
              f"{ratio:.2f}x | {off['p50_ms']} / {on['p50_ms']} |" if ratio else
              f"| {concurrency} | {off['requests_per_s']} | {on['requests_per_s']} | - | |")
    if args.json:
        write_json(args.json, {"rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
