"""What a document job's second reading of its file costs, and what handing it the upload's
read saves.

`POST /v1/documents` reads the whole document to check it before answering 202 (a refusal
comes before any job exists). A job that the same server process runs at once translates what
that read found; one that waits behind another, or runs in another server process or after a
restart, reads its file again. This bench starts `python -m app.server` (one server process,
loopback only) twice: as it ships ("hand-off") and with the hand-off turned off ("read
again": every job reads its file again, as before). Each document is sent to both, one after
the other, and its job polled until done; it prints the POST's seconds (the upload's check),
the seconds from 202 to the job's sentences being known (its reading, and segmenting the
sentences), to done, and the ratio of the job times (read again / hand-off). The two results
must be the same bytes.

    python -m bench.job_reads --book-pages 200                 # a generated 200-page PDF
    python -m bench.job_reads manual.pdf report.docx --json /tmp/job_reads.json
"""

from __future__ import annotations

import argparse
import io
import random
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import write_json
from bench.service import start_server, stop_server

# the server with each job's `read` (the upload's document) dropped: every job reads its file
READ_AGAIN = (
    "-c",
    "import sys\n"
    "from app.translation import jobs\n"
    "submit = jobs.JobRunner.submit\n"
    "async def read_again(self, *args, read=None, pages=0, **kwargs):\n"
    "    return await submit(self, *args, **kwargs)\n"
    "jobs.JobRunner.submit = read_again\n"
    "from app.server import serve_main\n"
    "sys.exit(serve_main())\n",
)
VARIANTS = {"hand-off": ("-m", "app.server"), "read again": READ_AGAIN}
WORDS = [
    "the", "file", "window", "open", "save", "close", "manager", "settings", "user", "system",
    "program", "data", "page", "document", "text", "line", "change", "value", "version",
    "server", "client", "request", "answer", "result", "select", "press", "button", "menu",
    "option", "folder", "name", "list", "table", "report", "read", "write",
]


def book(pages: int, seed: int = 1) -> bytes:
    """A PDF of `pages` pages, each a heading and six paragraphs of made-up English sentences
    (reportlab's platypus lays them out as a book would)."""
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import PageBreak, Paragraph, SimpleDocTemplate

    rng = random.Random(seed)
    styles = getSampleStyleSheet()

    def sentence() -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 16))).capitalize() + "."

    story: list = []
    for page in range(pages):
        story.append(Paragraph(f"Chapter {page + 1}", styles["Heading2"]))
        story += [Paragraph(" ".join(sentence() for _ in range(rng.randint(2, 5))),
                            styles["BodyText"]) for _ in range(6)]
        story.append(PageBreak())
    out = io.BytesIO()
    SimpleDocTemplate(out, pagesize=A4).build(story)
    return out.getvalue()


def run_job(url: str, name: str, data: bytes, timeout: float) -> dict:
    """One document through /v1/documents: the phases' seconds and the result."""
    started = time.perf_counter()
    r = httpx.post(f"{url}/v1/documents", data={"source": "en", "target": "de"},
                   files={"file": (name, data)}, timeout=timeout)
    accepted = time.perf_counter()
    if r.status_code != 202:
        raise RuntimeError(f"{name}: {r.status_code} {r.text}")
    job_url = f"{url}/v1/documents/{r.json()['id']}"
    known = None
    while True:
        job = httpx.get(job_url, timeout=10).json()
        now = time.perf_counter()
        if known is None and job["progress"]["total"]:
            known = now
        if job["state"] not in ("queued", "running"):
            break
        if now - accepted > timeout:
            raise RuntimeError(f"{name}: the job took longer than {timeout} s: {job}")
        time.sleep(0.05)
    result = httpx.get(url + job["result"], timeout=60).content if job["result"] else b""
    return {"state": job["state"], "sentences": job["progress"]["total"],
            "pages": job["progress"]["pages"], "post_s": round(accepted - started, 3),
            "sentences_known_s": round((known or now) - accepted, 3),
            "job_s": round(now - accepted, 3), "result": result}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.job_reads",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="*", type=Path, help="documents to send (any format)")
    p.add_argument("--book-pages", type=int, default=0,
                   help="also send a generated PDF of this many pages")
    p.add_argument("--models-dir", default="bundles")
    p.add_argument("--variant", default="int8")
    p.add_argument("--threads", type=int, default=2, help="ONNX Runtime threads of the server")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds a job may take")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)
    docs = [(path.name, path.read_bytes()) for path in args.files]
    if args.book_pages:
        docs.append((f"book-{args.book_pages}.pdf", book(args.book_pages)))
    if not docs:
        p.error("give files, --book-pages or both")
    servers = {}
    scratch = tempfile.TemporaryDirectory(prefix="job_reads_")  # the servers' jobs and files
    try:
        for k, (variant, launch) in enumerate(VARIANTS.items()):
            extra = ["--processes", "1", "--variant", args.variant, "--jobs-dir",
                     f"{scratch.name}/jobs{k}", "--files-dir", f"{scratch.name}/files{k}"]
            servers[variant] = start_server(args.models_dir, extra, args.threads, launch=launch)
        rows = []
        for k, (name, data) in enumerate(docs):
            order = list(VARIANTS) if k % 2 == 0 else list(reversed(VARIANTS))  # drift evens out
            runs = {variant: run_job(servers[variant][1], name, data, args.timeout)
                    for variant in order}
            handed, again = runs["hand-off"], runs["read again"]
            row = {"file": name, "bytes": len(data), "same_result": handed.pop("result") ==
                   again.pop("result"), "hand-off": handed, "read again": again,
                   "job_ratio": round(again["job_s"] / handed["job_s"], 3),
                   "saved_s": round(again["job_s"] - handed["job_s"], 3)}
            rows.append(row)
            print(f"{name} ({len(data):,} bytes, {handed['pages']} pages, "
                  f"{handed['sentences']} sentences): same result: "
                  f"{'yes' if row['same_result'] else 'NO'}")
            for variant in VARIANTS:
                r = row[variant]
                print(f"  {variant:>10}: POST {r['post_s']:7.2f} s, sentences known "
                      f"{r['sentences_known_s']:7.2f} s, done {r['job_s']:8.2f} s ({r['state']})")
            print(f"  job time read again / hand-off: {row['job_ratio']:.3f} "
                  f"({row['saved_s']:+.2f} s)", flush=True)
    finally:
        for proc, _ in servers.values():
            stop_server(proc)
        scratch.cleanup()
    if args.json:
        write_json(args.json, {"threads": args.threads, "variant": args.variant,
                               "documents": rows})
    return 0 if all(row["same_result"] and row["hand-off"]["state"] == "done"
                    for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
