"""Two engines measured in alternation, each in a long-lived process of its own, so that every
ratio compares passes made seconds apart.

bench.run measures each engine in a process of its own, one after the other; an engine's whole
measurement takes a minute or more, and on a shared 2-core machine the speed drifts by a
quarter within minutes (session 15: our greedy rate 5,526-7,961 tok/s on the same code within
ten minutes, CTranslate2's 5,998 -> 7,808 between two rounds), so a ratio of two engines timed
minutes apart says as much about the machine as about them. Here both engines are loaded at
once, one process each, and only one works at a time (the other waits on its pipe):

- throughput: `pairs` pairs of passes over the same sentences (batch 32, as bench.run), in the
  order A B, B A, A B, ... (so neither engine always goes first); the ratio of each pair, and
  their median;
- batch-1 latency: the sentences in chunks of CHUNK, each chunk timed on A and then on B (the
  order alternating by chunk), for `latency_rounds` rounds; p50 over all of an engine's calls.
  An engine with a second layout for single sentences (bench.backends.Backend.
  batch1_alternative: CTranslate2 on one worker with all the threads) has its chunks timed in
  both, and the quicker layout's p50 counts, as in bench.run.

    python -m bench.paired SPEC.json     # a worker: commands as JSON lines on stdin
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import percentile, worker_env

ROOT = Path(__file__).resolve().parents[1]
CHUNK = 10  # batch-1 sentences timed on one engine before the other takes its turn
READY_TIMEOUT_S = 300


# ---------------------------------------------------------------- the worker


def serve(spec: dict, commands, replies) -> None:
    """Load the engine, warm it up, say "ready", then answer commands (one JSON object a line)
    until stdin closes: {"pass": beam} -> {"tokens", "seconds"} over all texts;
    {"batch1": beam, "start": i, "stop": j, "layout": "main" | "alt"} -> {"latency_s": [...]}
    for latency_texts[i:j] one at a time."""
    from bench.backends import batch1, generated_tokens, make_backend, timed, warm_up

    texts, latency_texts = spec["texts"], spec["latency_texts"]
    layouts = {"main": make_backend(spec)}
    make_alt = layouts["main"].batch1_alternative()
    if make_alt is not None:
        layouts["alt"] = make_alt()
    for backend in layouts.values():
        warm_up(backend, texts)

    def reply(obj: dict) -> None:
        replies.write(json.dumps(obj) + "\n")
        replies.flush()

    reply({"ready": True, "layouts": sorted(layouts)})
    for line in commands:
        cmd = json.loads(line)
        if "pass" in cmd:
            outputs, seconds = timed(lambda b=cmd["pass"]: layouts["main"].translate(texts, b))
            reply({"tokens": generated_tokens(outputs), "sentences": len(texts),
                   "seconds": seconds})
        else:
            chunk = latency_texts[cmd["start"]:cmd["stop"]]
            reply({"latency_s": batch1(layouts[cmd["layout"]], chunk, cmd["batch1"])["latency_s"]})


class Worker:
    """One engine's worker process, driven over its stdin/stdout."""

    def __init__(self, spec: dict, spec_path: Path, threads: int) -> None:
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        env = worker_env(threads, spec["engine"])
        self.engine = spec["engine"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.paired", str(spec_path)], cwd=ROOT, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.layouts = self._read()["layouts"]

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait(timeout=READY_TIMEOUT_S)
            raise RuntimeError(f"the {self.engine} worker exited ({code}) without an answer")
        return json.loads(line)

    def ask(self, **cmd) -> dict:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# ---------------------------------------------------------------- the comparison


@dataclass
class PairedSearch:
    """One beam size: A's and B's tokens/s pass by pass (pair i is a[i], b[i]), and batch-1
    p50s over all calls (B's in its quicker layout)."""

    a_tokens_per_s: list[float]
    b_tokens_per_s: list[float]
    a_p50_ms: float | None = None
    b_p50_ms: float | None = None
    b_latency_layout: str = "main"

    @property
    def ratios(self) -> list[float]:
        """A's rate over B's, pair by pair (> 1: A faster)."""
        return [a / b for a, b in zip(self.a_tokens_per_s, self.b_tokens_per_s, strict=True)]

    @property
    def median_ratio(self) -> float:
        return statistics.median(self.ratios)

    @property
    def p50_ratio(self) -> float | None:
        """A's batch-1 p50 over B's (< 1: A quicker)."""
        return self.a_p50_ms / self.b_p50_ms if self.a_p50_ms and self.b_p50_ms else None

    def to_json(self) -> dict:
        return {"a_tokens_per_s": self.a_tokens_per_s, "b_tokens_per_s": self.b_tokens_per_s,
                "ratios": self.ratios, "median_ratio": self.median_ratio,
                "a_p50_ms": self.a_p50_ms, "b_p50_ms": self.b_p50_ms,
                "p50_ratio": self.p50_ratio, "b_latency_layout": self.b_latency_layout}


@dataclass
class PairedResult:
    a: str
    b: str
    pairs: int
    latency_rounds: int
    searches: dict[str, PairedSearch] = field(default_factory=dict)  # by beam size
    error: str | None = None

    def to_json(self) -> dict:
        out = {"a": self.a, "b": self.b, "pairs": self.pairs,
               "latency_rounds": self.latency_rounds,
               "searches": {k: v.to_json() for k, v in self.searches.items()}}
        return out if self.error is None else {**out, "error": self.error}


def compare(spec_a: dict, spec_b: dict, beams: list[int], pairs: int, latency_rounds: int,
            tmp: Path, threads: int, log=lambda message: None) -> PairedResult:
    """Engines A and B (bench.backends specs with the same texts) in alternation."""
    result = PairedResult(spec_a["engine"], spec_b["engine"], pairs, latency_rounds)
    workers: list[Worker] = []
    try:
        for spec in (spec_a, spec_b):
            workers.append(Worker(spec, tmp / f"paired-{len(workers)}.json", threads))
        a, b = workers
        for beam in beams:
            # by role, not by engine name: A and B may be the same engine (two bundles)
            rates: dict[str, list[float]] = {"a": [], "b": []}
            for i in range(pairs):
                for role, w in (("a", a), ("b", b)) if i % 2 == 0 else (("b", b), ("a", a)):
                    r = w.ask(**{"pass": beam})
                    rates[role].append(r["tokens"] / r["seconds"])
            search = PairedSearch(rates["a"], rates["b"])
            log(f"  beam {beam}: {a.engine} / {b.engine} per pair "
                + ", ".join(f"{x:.2f}" for x in search.ratios))
            result.searches[str(beam)] = search
            n = len(spec_a["latency_texts"])
            if latency_rounds and n:
                _latency(search, a, b, beam, n, latency_rounds)
    except (RuntimeError, OSError, ValueError, KeyError) as e:
        result.error = str(e)
    finally:
        for w in workers:
            w.close()
    return result


def _latency(search: PairedSearch, a: Worker, b: Worker, beam: int, n: int, rounds: int) -> None:
    """Chunks of CHUNK sentences on A, then on each of B's layouts, alternating the order."""
    calls: dict[tuple[str, str], list[float]] = {}
    turn = 0
    for _ in range(rounds):
        for start in range(0, n, CHUNK):
            timed = [("a", a, "main")] + [("b", b, layout) for layout in b.layouts]
            for role, w, layout in (timed if turn % 2 == 0 else timed[::-1]):
                got = w.ask(batch1=beam, start=start, stop=min(n, start + CHUNK), layout=layout)
                calls.setdefault((role, layout), []).extend(got["latency_s"])
            turn += 1
    search.a_p50_ms = 1000 * percentile(calls[("a", "main")], 50)
    p50s = {layout: 1000 * percentile(calls[("b", layout)], 50) for layout in b.layouts}
    search.b_latency_layout = min(p50s, key=p50s.get)
    search.b_p50_ms = p50s[search.b_latency_layout]


def report(result: PairedResult) -> list[str]:
    """Markdown lines for bench.run's report."""
    title = (f"### {result.a} against {result.b} in alternation ({result.pairs} pairs of "
             f"throughput passes, {result.latency_rounds} round(s) of batch-1 chunks of "
             f"{CHUNK}; each engine in a process of its own, one working at a time)")
    if result.error is not None:
        return ["", title, "", f"Failed: {result.error}"]
    out = ["", title, "",
           "| beam | tok/s ratio per pair (>1: A faster) | median | batch-1 p50 ms A / B "
           "| p50 ratio (<1: A quicker) |",
           "|---:|---|---:|---:|---:|"]
    for beam, s in result.searches.items():
        per_pair = ", ".join(f"{x:.2f}" for x in s.ratios)
        p50 = ("n/a" if s.a_p50_ms is None else
               f"{s.a_p50_ms:.1f} / {s.b_p50_ms:.1f} ({s.b_latency_layout})")
        p50_ratio = "n/a" if s.p50_ratio is None else f"{s.p50_ratio:.2f}x"
        out.append(f"| {beam} | {per_pair} | {s.median_ratio:.2f}x | {p50} | {p50_ratio} |")
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m bench.paired SPEC.json (commands on stdin)", file=sys.stderr)
        return 2
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # whatever the engines' libraries print goes to stderr, not into the replies
    serve(spec, sys.stdin, replies)
    return 0


if __name__ == "__main__":
    sys.exit(main())
