"""Soak test: a fixed request rate for N minutes against a server on loopback (not run in CI).

Starts `python -m app.server` on 127.0.0.1 (a free port) on --models-dir, or drives a running
server given by --url (loopback hosts only). Requests are sent open-loop at --rate per second,
alternating the v1 and LibreTranslate APIs, by at most --workers threads: a request that finds
every worker busy is counted as "dropped" instead of queueing without bound. With
--document-every S, a small document (.txt, .html, .srt, .docx in turn) also goes every S seconds
through the document-jobs API (submit, poll, download, delete), and every --file-every-th one
through LibreTranslate's /translate_file and /download_file instead. Reports errors by kind,
latency percentiles per kind, and the server's RSS and PSS (its worker processes included) and
open file descriptors at start, every minute and at the end, with the RSS growth per hour after
a warm-up. Bounded by --minutes (at most 120) and stops by itself.

    python -m bench.soak --models-dir bundles --minutes 2 --rate 10 --document-every 20
    python -m bench.soak --url http://127.0.0.1:8000 --minutes 10 --rate 5 --json soak.json
"""

from __future__ import annotations

import argparse
import collections
import io
import json
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from bench.common import percentile, pid_peak_rss_mb, process_tree, tree_peak_rss_mb
from bench.service import SENTENCES, start_server, stop_server

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
MAX_MINUTES = 120.0
MAX_RATE = 500.0
JOB_DEADLINE_S = 120.0  # a small document that takes longer than this counts as an error
JOB_POLL_S = 0.25


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


def pss_kib(pid: int) -> int | None:
    """A process's proportional set size (KiB): pages shared between the server's processes
    (the model files they map) counted once in the tree's sum, unlike RSS."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def process_sample(pid: int | None) -> dict[str, float | int | None]:
    """RSS and PSS (MiB) of the server process and its worker and server processes together, the
    server's open file descriptors and those of the whole tree."""
    empty = {"rss_mib": None, "pss_mib": None, "open_fds": None, "tree_fds": None,
             "processes": None}
    if pid is None:
        return empty
    rss, _ = tree_peak_rss_mb(pid, "VmRSS")
    try:
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return empty
    tree = process_tree(pid)
    pss = [k for k in map(pss_kib, tree) if k is not None]
    tree_fds = 0
    for p in tree:
        try:
            tree_fds += len(os.listdir(f"/proc/{p}/fd"))
        except OSError:  # a process that ended since the listing
            continue
    # each process's own RSS, so that growth can be told apart: front process or a worker's
    each = [pid_peak_rss_mb(p, "VmRSS") for p in tree]
    return {"rss_mib": None if rss is None else round(rss, 1),
            "pss_mib": round(sum(pss) / 1024, 1) if pss else None,
            "open_fds": fds, "tree_fds": tree_fds, "processes": len(tree),
            "rss_each_mib": [None if r is None else round(r, 1) for r in each]}


def _docx(paragraphs: list[str]) -> bytes:
    import docx

    document = docx.Document()
    for text in paragraphs:
        document.add_paragraph(text)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def sample_documents(sentences: list[str], k: int) -> list[tuple[str, bytes]]:
    """Small documents of k sentences each, one per format, made in memory."""
    lines = [sentences[i % len(sentences)] for i in range(k)]
    html = "".join(f"<p>{line}</p>" for line in lines)
    srt = "".join(f"{i + 1}\n00:00:{i:02d},000 --> 00:00:{i:02d},900\n{line}\n\n"
                  for i, line in enumerate(lines))
    return [
        ("soak.txt", "\n".join(lines).encode()),
        ("soak.html", f"<!doctype html><html><body>{html}</body></html>".encode()),
        ("soak.srt", srt.encode()),
        ("soak.docx", _docx(lines)),
    ]


class Soak:
    def __init__(self, url: str, rate: float, seconds: float, workers: int, pair: tuple[str, str]
                 ) -> None:
        self.url, self.rate, self.seconds = url, rate, seconds
        self.pair = {"source": pair[0], "target": pair[1]}
        self.workers = workers
        self.documents = sample_documents(SENTENCES, 6)
        self.latencies: dict[str, list[float]] = collections.defaultdict(list)
        # (kind, outcome): kind is "live", "job" or "file"; outcome "ok" or what went wrong
        self.outcomes: collections.Counter[tuple[str, str]] = collections.Counter()
        self.in_flight = 0
        self.documents_in_flight = 0
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
            outcome = "ok" if r.status_code == 200 else f"HTTP {r.status_code}"
        except httpx.HTTPError as exc:
            outcome = type(exc).__name__
        with self.lock:
            self.in_flight -= 1
        self.record("live", outcome, time.perf_counter() - started)

    def record(self, kind: str, outcome: str, seconds: float) -> None:
        with self.lock:
            self.outcomes[kind, outcome] += 1
            if outcome == "ok":
                self.latencies[kind].append(seconds)

    def document(self, k: int, via_file: bool) -> None:
        """Document k (formats in turn) through a job, or through /translate_file when via_file:
        the whole round trip is one outcome, the first step that failed naming it."""
        filename, content = self.documents[k % len(self.documents)]
        kind = "file" if via_file else "job"
        started = time.perf_counter()
        try:
            outcome = (self.file_round_trip if via_file else self.job_round_trip)(filename, content)
        except (httpx.HTTPError, ValueError, KeyError) as exc:  # ValueError: a body not JSON
            outcome = type(exc).__name__
        finally:
            with self.lock:
                self.documents_in_flight -= 1
        self.record(kind, outcome, time.perf_counter() - started)

    def job_round_trip(self, filename: str, content: bytes) -> str:
        client = self.client()
        r = client.post("/v1/documents", data=self.pair, files={"file": (filename, content)})
        if r.status_code != 202:
            return f"submit HTTP {r.status_code}"
        job = r.json()
        where = r.headers["location"]
        deadline = time.monotonic() + JOB_DEADLINE_S
        while job["state"] not in ("done", "failed", "cancelled"):
            if time.monotonic() > deadline:
                client.delete(where)
                return "not done in time"
            time.sleep(JOB_POLL_S)
            r = client.get(where)
            if r.status_code != 200:
                return f"poll HTTP {r.status_code}"
            job = r.json()
        if job["state"] != "done":
            client.delete(where)
            return f"job {job['state']}"
        r = client.get(job["result"])
        if r.status_code != 200 or not r.content:
            return f"result HTTP {r.status_code}" if r.status_code != 200 else "empty result"
        r = client.delete(where)
        return "ok" if r.status_code == 204 else f"delete HTTP {r.status_code}"

    def file_round_trip(self, filename: str, content: bytes) -> str:
        client = self.client()
        r = client.post("/translate_file", data=self.pair, files={"file": (filename, content)})
        if r.status_code != 200:
            return f"translate_file HTTP {r.status_code}"
        r = client.get(r.json()["translatedFileUrl"])
        if r.status_code != 200 or not r.content:
            return f"download HTTP {r.status_code}" if r.status_code != 200 else "empty download"
        return "ok"

    def run(self, on_sample, every: float = 60.0, document_every: float | None = None,
            file_every: int = 4) -> None:
        """Send the requests (and a document every `document_every` seconds, every
        `file_every`-th of them through /translate_file); call on_sample(seconds since start)
        every `every` seconds."""
        total = int(self.seconds * self.rate)
        start = time.monotonic()
        next_sample = start + every
        next_document, k = start + (document_every or 0), 0
        documents = ThreadPoolExecutor(2, thread_name_prefix="soak-doc")
        with documents, ThreadPoolExecutor(self.workers, thread_name_prefix="soak") as pool:
            for i in range(total):
                due = start + i / self.rate
                while (now := time.monotonic()) < due:
                    time.sleep(min(due - now, 0.05))
                if now >= next_sample:
                    on_sample(round(now - start))
                    next_sample += every
                if document_every and now >= next_document:
                    next_document += document_every
                    via_file = bool(file_every) and k % file_every == file_every - 1
                    with self.lock:
                        busy = self.documents_in_flight >= 2
                        self.documents_in_flight += not busy
                    if busy:  # both document threads still on earlier ones: do not pile up
                        self.record("file" if via_file else "job", "dropped", 0.0)
                    else:
                        documents.submit(self.document, k, via_file)
                    k += 1
                with self.lock:
                    if self.in_flight >= self.workers:
                        self.outcomes["live", "dropped"] += 1
                        continue
                    self.in_flight += 1
                pool.submit(self.one, i)


def slope_per_hour(ts_s: list[float], values: list[float]) -> float:
    """Least-squares slope of values over time (seconds), per hour."""
    ts = [t / 3600 for t in ts_s]
    mean_t, mean_v = sum(ts) / len(ts), sum(values) / len(values)
    return sum((t - mean_t) * (v - mean_v) for t, v in zip(ts, values, strict=True)) / max(
        1e-12, sum((t - mean_t) ** 2 for t in ts))


def trend(samples: list[dict], warmup_s: float = 600.0) -> dict[str, float | int | None]:
    """RSS and PSS growth after the warm-up (least-squares slope, MiB per hour, and last minus
    first over the hours between them), and the open file descriptors at the end of the warm-up
    and at the end, with their maximum."""
    steady = [s for s in samples if s["t_s"] >= warmup_s and s["rss_mib"] is not None]
    if len(steady) < 2:
        return {"rss_growth_mib_per_hour": None, "fds_after_warmup": None, "fds_end": None,
                "fds_max": None}
    ts = [s["t_s"] for s in steady]
    hours = max(1e-12, (ts[-1] - ts[0]) / 3600)
    out: dict[str, float | int | None] = {"warmup_s": warmup_s, "steady_samples": len(steady)}
    for size in ("rss_mib", "pss_mib"):
        values = [s.get(size) for s in steady]
        if any(v is None for v in values):
            continue
        name = size.removesuffix("_mib")
        out[f"{name}_growth_mib_per_hour"] = round(slope_per_hour(ts, values), 2)
        out[f"{name}_first_to_last_mib_per_hour"] = round((values[-1] - values[0]) / hours, 2)
        out[f"{name}_mib_after_warmup"], out[f"{name}_mib_end"] = values[0], values[-1]
        out[f"{name}_mib_max"] = max(values)
    for field, name in (("open_fds", "fds"), ("tree_fds", "tree_fds")):
        values = [s.get(field) for s in steady]
        if any(v is None for v in values):
            continue
        out[f"{name}_after_warmup"], out[f"{name}_end"] = values[0], values[-1]
        out[f"{name}_max"] = max(values)
    return out


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
    parser.add_argument("--warmup", type=float, default=600.0,
                        help="seconds left out of the RSS growth (allocator and arena warm-up)")
    parser.add_argument("--document-every", type=float, default=0.0,
                        help="seconds between small documents (0: live requests only)")
    parser.add_argument("--file-every", type=int, default=4,
                        help="every n-th document goes through /translate_file (0: none)")
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    if not 0 < args.minutes <= MAX_MINUTES or not 0 < args.rate <= MAX_RATE:
        parser.error(f"--minutes must be in (0, {MAX_MINUTES:g}], --rate in (0, {MAX_RATE:g}]")

    if args.document_every < 0 or args.file_every < 0:
        parser.error("--document-every and --file-every must not be negative")

    proc = None
    # a started server keeps its uploads and results in a directory of its own, removed after
    files_dir = tempfile.TemporaryDirectory(prefix="soak-files-")
    if args.url:
        url = loopback_url(args.url)
        pid = args.pid or listening_pid(urlsplit(url).port or 80)
    else:
        models_dir = args.models_dir or str(Path(__file__).resolve().parents[1] / "bundles")
        proc, url = start_server(models_dir, ["--files-dir", files_dir.name], args.threads)
        pid = proc.pid
    report: dict[str, object] = {"url": url, "pid": pid, "minutes": args.minutes,
                                 "rate": args.rate, "workers": args.workers,
                                 "document_every_s": args.document_every,
                                 "file_every": args.file_every}
    samples = [{"t_s": 0, **process_sample(pid)}]
    print(f"soak: {url} (pid {pid}), {args.rate:g} req/s for {args.minutes:g} min; "
          f"start {samples[0]}", flush=True)
    soak = Soak(url, args.rate, args.minutes * 60, max(1, args.workers),
                (args.source, args.target))

    def on_sample(t: int) -> None:
        samples.append({"t_s": t, **process_sample(pid)})
        with soak.lock:
            done = {f"{kind} {outcome}": n for (kind, outcome), n in soak.outcomes.items()}
        print(f"  {t:>5d}s {samples[-1]} {done}", flush=True)

    started = time.monotonic()
    try:
        soak.run(on_sample, args.sample_every, args.document_every, args.file_every)
        elapsed = time.monotonic() - started
        samples.append({"t_s": round(elapsed), **process_sample(pid)})
    finally:
        if proc is not None:
            stop_server(proc)
            report["server_exit_code"] = proc.returncode
        files_dir.cleanup()
    report.update(summary(soak, elapsed))
    report.update({"trend": trend(samples, args.warmup), "samples": samples})
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if not report["errors"] else 1


def summary(soak: Soak, elapsed: float) -> dict[str, object]:
    """Counts, errors by kind and latency percentiles by kind (live request, document job round
    trip, /translate_file round trip)."""
    kinds = sorted({kind for kind, _ in soak.outcomes})
    sent = {kind: sum(n for (k, _), n in soak.outcomes.items() if k == kind) for kind in kinds}
    latency = {}
    for kind in kinds:
        seconds = soak.latencies.get(kind, [])
        latency[kind] = {f"p{q}": round(percentile(seconds, q) * 1000, 1) if seconds else None
                         for q in (50, 90, 99)} | {"max": round(max(seconds, default=0) * 1000, 1)}
    return {
        "sent": sent,
        "ok": {kind: soak.outcomes.get((kind, "ok"), 0) for kind in kinds},
        "errors": {f"{kind}: {outcome}": n for (kind, outcome), n in sorted(soak.outcomes.items())
                   if outcome != "ok"},
        "latency_ms": latency,
        "achieved_live_rate": round(sent.get("live", 0) / max(1e-9, elapsed), 2),
    }


if __name__ == "__main__":
    sys.exit(main())
