"""Interactive latency while a large document job runs (the batcher's priorities at work).

Starts `python -m app.server` on 127.0.0.1 (a free port), sends one-sentence /v1/translate
requests at a steady modest rate, first with the server otherwise idle, then while a document
job of --segments lines (a .txt, one sentence a line) runs through /v1/documents. Prints the
interactive p50/p95 of both phases and their ratio, and the job's progress rate. Bounded: the
idle phase lasts --idle-seconds, the job phase at most --max-seconds (then the job is cancelled
and its progress rate reported); traffic goes to loopback only.

    python -m bench.documents --models-dir bundles --variant int8            # 10,000 segments
    python -m bench.documents --segments 2000 --max-seconds 60 --json /tmp/documents.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import percentile, read_lines, write_json
from bench.service import SENTENCES, start_server, stop_server


def document(segments: int, sentences: list[str]) -> bytes:
    """`segments` lines cycling through the sentences, each made distinct by its number."""
    pool = itertools.cycle(sentences)
    return "\n".join(f"{next(pool)} ({i})" for i in range(segments)).encode()


async def interactive(client: httpx.AsyncClient, url: str, rate: float,
                      until: asyncio.Event, sentences: list[str]) -> list[float]:
    """Open loop: a request every 1/rate s, whether or not the previous one is back; returns
    the latencies (s) of the requests that succeeded."""
    latencies: list[float] = []
    failures = 0

    async def one(text: str) -> None:
        nonlocal failures
        started = time.perf_counter()
        r = await client.post(f"{url}/v1/translate", timeout=60,
                              json={"text": text, "source": "en", "target": "de"})
        if r.status_code == 200:
            latencies.append(time.perf_counter() - started)
        else:
            failures += 1

    tasks, pool, start = [], itertools.cycle(sentences), time.monotonic()
    for k in itertools.count():
        if until.is_set():
            break
        tasks.append(asyncio.create_task(one(next(pool))))
        delay = start + (k + 1) / rate - time.monotonic()
        if delay > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(until.wait(), delay)
    await asyncio.gather(*tasks, return_exceptions=True)
    if failures:
        print(f"  ({failures} interactive requests failed)", file=sys.stderr)
    return latencies


async def run(url: str, args: argparse.Namespace) -> dict:
    async with httpx.AsyncClient() as client:
        await client.post(f"{url}/v1/translate", timeout=60,  # a first request, unmeasured
                          json={"text": SENTENCES[0], "source": "en", "target": "de"})
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(args.idle_seconds, stop.set)
        idle = await interactive(client, url, args.rate, stop, SENTENCES)

        data = document(args.segments, args.sentences)
        r = await client.post(f"{url}/v1/documents", timeout=120,
                              data={"source": "en", "target": "de"},
                              files={"file": ("bench.txt", data)})
        r.raise_for_status()
        job_url = f"{url}{r.headers['location']}"
        stop = asyncio.Event()
        live = asyncio.create_task(interactive(client, url, args.rate, stop, SENTENCES))
        started, job = time.monotonic(), r.json()
        while job["state"] in ("queued", "running"):
            if time.monotonic() - started > args.max_seconds:
                job = (await client.delete(job_url)).json()  # cancelled: report its rate
                break
            await asyncio.sleep(1.0)
            job = (await client.get(job_url)).json()
        seconds = time.monotonic() - started
        stop.set()
        during = await live
    progress = job["progress"]
    return {
        "segments": args.segments,
        "job_state": job["state"],
        "sentences_done": progress["done"],
        "sentences_total": progress["total"],
        "job_seconds": round(seconds, 1),
        "job_sentences_per_s": round(progress["done"] / seconds, 1),
        "rate_per_s": args.rate,
        "document_batch_size": args.document_batch_size,
        "idle": summary(idle),
        "during_job": summary(during),
        "p50_ratio": round(percentile(during, 50) / percentile(idle, 50), 2),
        "p95_ratio": round(percentile(during, 95) / percentile(idle, 95), 2),
    }


def summary(latencies: list[float]) -> dict:
    return {"requests": len(latencies),
            "p50_ms": round(percentile(latencies, 50) * 1000, 1),
            "p95_ms": round(percentile(latencies, 95) * 1000, 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.documents", description=__doc__.split(
        "\n\n")[0])
    p.add_argument("--models-dir", default="bundles")
    p.add_argument("--variant", default="int8")
    p.add_argument("--threads", type=int, default=2, help="ONNX Runtime threads of the server")
    p.add_argument("--document-batch-size", type=int, default=1,
                   help="the server's cap on a batch of document sentences")
    p.add_argument("--segments", type=int, default=10_000, help="lines of the document")
    p.add_argument("--sentences", help="a text file whose lines make up the document "
                   "(default: the interactive sentences)")
    p.add_argument("--rate", type=float, default=2.0, help="interactive requests per second")
    p.add_argument("--idle-seconds", type=float, default=30.0)
    p.add_argument("--max-seconds", type=float, default=600.0,
                   help="cancel the job after this long and report its progress rate")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args(argv)
    args.sentences = read_lines(args.sentences) if args.sentences else SENTENCES
    with tempfile.TemporaryDirectory(prefix="nmt-bench-jobs-") as jobs_dir:
        proc, url = start_server(args.models_dir, [
            "--variant", args.variant, "--jobs-dir", jobs_dir, "--max-file-segments",
            str(max(args.segments, 20_000)), "--max-file-chars", "5000000",
            "--max-file-bytes", "50000000",
            "--document-batch-size", str(args.document_batch_size)], args.threads)
        try:
            result = asyncio.run(run(url, args))
        finally:
            stop_server(proc)
    idle, during = result["idle"], result["during_job"]
    print(f"document job: {result['segments']} segments, {result['job_state']} after "
          f"{result['job_seconds']} s, {result['sentences_done']}/{result['sentences_total']} "
          f"sentences ({result['job_sentences_per_s']}/s)")
    print(f"interactive at {args.rate:g}/s    requests   p50 ms   p95 ms")
    for name, row in (("idle", idle), ("during the job", during)):
        print(f"  {name:<24}{row['requests']:>8} {row['p50_ms']:>8} {row['p95_ms']:>8}")
    print(f"  ratio (during / idle)          {result['p50_ratio']:>8} {result['p95_ratio']:>8}")
    if args.json:
        write_json(Path(args.json), result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
