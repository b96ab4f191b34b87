"""Soak test: a fixed request rate for N minutes against a server on loopback (not run in CI).

Starts `python -m app.server` on 127.0.0.1 (a free port) on --models-dir, or drives a running
server given by --url (loopback hosts only). Requests are sent open-loop at --rate per second,
alternating the v1 and LibreTranslate APIs, by at most --workers threads: a request that finds
every worker busy is counted as "dropped" instead of queueing without bound. Reports errors,
latency percentiles, and the server's RSS (its worker processes included) and open file
descriptors at start, every minute and at the end. Bounded by --minutes (at most 120) and
stops by itself.

    python -m bench.soak --models-dir bundles --minutes 2 --rate 10
    python -m bench.soak --url http://127.0.0.1:8000 --minutes 10 --rate 5 --json soak.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from bench.common import percentile, tree_peak_rss_mb
from bench.service import SENTENCES, start_server, stop_server

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
MAX_MINUTES = 120.0
MAX_RATE = 500.0


def loopback_url(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme != "http" or not (host in LOOPBACK or host.startswith("127.")):
        raise SystemExit(f"--url must be http:// on a loopback host (127.0.0.1, ::1), not {url!r}")
    return url.rstrip("/")


def listening_pid(port: int) -> int | None:
    """The process listening on a local TCP port, from /proc/net/tcp* and /proc/*/fd (Linux)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # LISTEN
                inodes.add(f"socket:[{fields[9]}]")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # gone, or not ours to read
            continue
        if any(_link(f"/proc/{pid}/fd/{fd}") in inodes for fd in fds):
            return int(pid)
    return None


def _link(path: str) -> str | None:
    """Where a /proc fd link points; None when the fd closed since the listing (a busy server
    opens and closes connections meanwhile: one such fd must not hide the listening one)."""
    try:
        return os.readlink(path)
    except OSError:
        return None


def process_sample(pid: int | None) -> dict[str, float | int | None]:
    """RSS (MiB) of the server process and its worker processes together, and the server's open
    file descriptors."""
    if pid is None:
        return {"rss_mib": None, "open_fds": None}
    rss, _ = tree_peak_rss_mb(pid, "VmRSS")
    try:
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return {"rss_mib": None, "open_fds": None}
    return {"rss_mib": None if rss is None else round(rss, 1), "open_fds": fds}


class Soak:
    def __init__(self, url: str, rate: float, seconds: float, workers: int, pair: tuple[str, str]
                 ) -> None:
        self.url, self.rate, self.seconds = url, rate, seconds
        self.pair = {"source": pair[0], "target": pair[1]}
        self.workers = workers
        self.latencies: list[float] = []
        self.outcomes: collections.Counter[str] = collections.Counter()
        self.in_flight = 0
        self.lock = threading.Lock()
        self.local = threading.local()

    def client(self) -> httpx.Client:
        if not hasattr(self.local, "client"):
            self.local.client = httpx.Client(base_url=self.url, timeout=60)
        return self.local.client

    def one(self, i: int) -> None:
        text = SENTENCES[i % len(SENTENCES)]
        started = time.perf_counter()
        try:
            if i % 2:
                r = self.client().post("/translate", json={"q": text, **self.pair})
            else:
                r = self.client().post("/v1/translate", json={"text": text, **self.pair})
            outcome = str(r.status_code)
        except httpx.HTTPError as exc:
            outcome = type(exc).__name__
        seconds = time.perf_counter() - started
        with self.lock:
            self.in_flight -= 1
            self.outcomes[outcome] += 1
            if outcome == "200":
                self.latencies.append(seconds)

    def run(self, on_sample, every: float = 60.0) -> None:
        """Send the requests; call on_sample(seconds since start) every `every` seconds."""
        total = int(self.seconds * self.rate)
        start = time.monotonic()
        next_sample = start + every
        with ThreadPoolExecutor(self.workers, thread_name_prefix="soak") as pool:
            for i in range(total):
                due = start + i / self.rate
                while (now := time.monotonic()) < due:
                    time.sleep(min(due - now, 0.05))
                if now >= next_sample:
                    on_sample(round(now - start))
                    next_sample += every
                with self.lock:
                    if self.in_flight >= self.workers:
                        self.outcomes["dropped"] += 1
                        continue
                    self.in_flight += 1
                pool.submit(self.one, i)


def trend(samples: list[dict], warmup_s: float = 60.0) -> dict[str, float | int | None]:
    """RSS growth (least-squares slope, MiB per hour) after the warm-up, and the open file
    descriptors at the end of the warm-up and at the end, with their maximum."""
    steady = [s for s in samples if s["t_s"] >= warmup_s and s["rss_mib"] is not None]
    if len(steady) < 2:
        return {"rss_growth_mib_per_hour": None, "fds_after_warmup": None, "fds_end": None,
                "fds_max": None}
    ts = [s["t_s"] / 3600 for s in steady]
    rss = [s["rss_mib"] for s in steady]
    mean_t, mean_r = sum(ts) / len(ts), sum(rss) / len(rss)
    slope = sum((t - mean_t) * (r - mean_r) for t, r in zip(ts, rss, strict=True)) / max(
        1e-12, sum((t - mean_t) ** 2 for t in ts))
    return {"rss_growth_mib_per_hour": round(slope, 2),
            "rss_mib_after_warmup": rss[0], "rss_mib_end": rss[-1],
            "fds_after_warmup": steady[0]["open_fds"], "fds_end": steady[-1]["open_fds"],
            "fds_max": max(s["open_fds"] for s in steady)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--models-dir", default=None, help="start a server on these bundles")
    where.add_argument("--url", help="a running server on loopback, e.g. http://127.0.0.1:8000")
    parser.add_argument("--pid", type=int, help="the --url server's pid (default: looked up)")
    parser.add_argument("--minutes", type=float, default=2.0, help=f"at most {MAX_MINUTES:g}")
    parser.add_argument("--rate", type=float, default=10.0, help="requests per second")
    parser.add_argument("--workers", type=int, default=16, help="concurrent requests at most")
    parser.add_argument("--source", default="auto", help="source language")
    parser.add_argument("--target", default="de", help="target language")
    parser.add_argument("--threads", type=int, default=1, help="ONNX Runtime threads (started)")
    parser.add_argument("--sample-every", type=float, default=60.0,
                        help="seconds between RSS / fd samples")
    parser.add_argument("--warmup", type=float, default=60.0,
                        help="seconds left out of the RSS growth (allocator and arena warm-up)")
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    if not 0 < args.minutes <= MAX_MINUTES or not 0 < args.rate <= MAX_RATE:
        parser.error(f"--minutes must be in (0, {MAX_MINUTES:g}], --rate in (0, {MAX_RATE:g}]")

    proc = None
    if args.url:
        url = loopback_url(args.url)
        pid = args.pid or listening_pid(urlsplit(url).port or 80)
    else:
        models_dir = args.models_dir or str(Path(__file__).resolve().parents[1] / "bundles")
        proc, url = start_server(models_dir, [], args.threads)
        pid = proc.pid
    report: dict[str, object] = {"url": url, "pid": pid, "minutes": args.minutes,
                                 "rate": args.rate, "workers": args.workers}
    samples = [{"t_s": 0, **process_sample(pid)}]
    print(f"soak: {url} (pid {pid}), {args.rate:g} req/s for {args.minutes:g} min; "
          f"start {samples[0]}", flush=True)
    soak = Soak(url, args.rate, args.minutes * 60, max(1, args.workers),
                (args.source, args.target))

    def on_sample(t: int) -> None:
        samples.append({"t_s": t, **process_sample(pid)})
        with soak.lock:
            done = dict(soak.outcomes)
        print(f"  {t:>5d}s {samples[-1]} outcomes {done}", flush=True)

    started = time.monotonic()
    try:
        soak.run(on_sample, args.sample_every)
        elapsed = time.monotonic() - started
        samples.append({"t_s": round(elapsed), **process_sample(pid)})
    finally:
        if proc is not None:
            stop_server(proc)
            report["server_exit_code"] = proc.returncode
    ok = soak.outcomes.get("200", 0)
    sent = sum(soak.outcomes.values())
    report.update({
        "sent": sent,
        "ok": ok,
        "errors": {k: v for k, v in soak.outcomes.items() if k != "200"},
        "latency_ms": {f"p{q}": round(percentile(soak.latencies, q) * 1000, 1)
                       if soak.latencies else None for q in (50, 90, 99)}
        | {"max": round(max(soak.latencies, default=0) * 1000, 1)},
        "achieved_rate": round(sent / max(1e-9, elapsed), 2),
        "trend": trend(samples, args.warmup),
        "samples": samples,
    })
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if ok == sent else 1


if __name__ == "__main__":
    sys.exit(main())
