"""Our engine against CTranslate2 and Hugging Face Transformers on the same weights, plus the
service end to end, in one run.

    python -m bench.run [--bundle bundles/en-de] [--checkpoint runs/en-de/averaged.pt]
        [--sentences data/en-de/test.en --refs data/en-de/test.de] [--limit 500]
        [--latency-limit 100] [--threads 2] [--json out.json]

Engines: ort-fp32 and ort-int8 (our ONNX Runtime engine, the bundle's variants), ct2-fp32 and
ct2-int8 (CTranslate2), hf-fp32 (Transformers' MarianMTModel.generate). The peers are converted
from the checkpoint by bench.convert into a temporary directory. For each engine, in its own
process (so the peak RSS is the engine's own), on the same sentences and with the same decoding
rules (bench/backends.py):

- offline throughput: generated target tokens per second (EOS included), the first --limit test
  sentences (default 500) in batches of 32, sorted by source length, greedy and beam 4;
- latency: the first --latency-limit sentences (default 100), one at a time, p50/p90/p99;
- peak RSS of the process; BLEU and chrF (sacreBLEU) of the throughput outputs against --refs;
- greedy parity: how many greedy outputs have token ids identical to model.search.greedy_search.

Between the rounds and the service, --paired (default ort-int8 against ct2-int8) times two
engines in alternation, each loaded in a process of its own, one working at a time
(bench.paired): ratios of passes made seconds apart, where the rounds' best-of compares runs
minutes apart on a machine whose speed drifts.

Then the service: `python -m app.server` on 127.0.0.1 (bench.service's start/stop), driven by 1,
8, 32 and 64 concurrent clients, each sending one of the throughput sentences per request (the
same sentences as the engine rounds, so that its share of their rate compares like with like),
bounded by --service-seconds and --service-requests per level: requests/s, p50/p99 latency,
errors. The 32- and 64-client levels also run between two offline passes of the served variant
over the same sentences (a worker process idle while the server works), for a share of the
offline rate from the same minutes.

Finally the roofline at batch 1: weight bytes read per decoder step against measured memory
bandwidth (bench/common.py), next to the decoder steps per second each engine reaches.

All engines get --threads cores. Our engine splits them into decode workers (one running batch
per core on single-thread sessions, app/engine/sessions.py: decode_workers), and CTranslate2 gets
the same layout: as many workers (inter_threads) with the threads shared out among them, and
batches of 32 / workers sentences submitted together; Transformers runs batches of 32 on
torch.set_num_threads(--threads). A single sentence runs on our engine's main sessions (all
the threads), but on one CTranslate2 worker (its share of them): CTranslate2's batch-1 latency
is therefore also timed on one worker with all the threads, and the quicker layout counts.
Ratios are against ct2-int8. A missing peer (package, checkpoint) is skipped with a message.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from app.engine.bundle import decoding_section, read_manifest
from app.engine.tokenizer import as_written
from bench import paired
from bench.backends import MAX_LEN_OFFSET, MAX_LEN_RATIO
from bench.common import (
    machine,
    percentile,
    read_pairs,
    roofline,
    tree_peak_rss_mb,
    worker_env,
    write_json,
)
from bench.paired import PairedResult

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "ct2-int8"
CONCURRENCY = (1, 8, 32, 64)
BEAMS = (1, 4)
WORKER_TIMEOUT_S = 420


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- records


@dataclass
class SearchResult:
    """One engine, one beam size: throughput, batch-1 latency, quality and parity."""

    sentences: int
    tokens: int
    seconds: float
    tokens_per_s: float
    sentences_per_s: float
    passes_s: list[float]
    latency_ms: dict[str, float]  # p50, p90, p99, mean
    batch1_steps_per_s: float | None
    bleu: float | None = None
    chrf: float | None = None
    greedy_identical: int | None = None  # greedy only: outputs with PyTorch's token ids
    latency_layout: str = ""  # a peer's workers x threads for its batch-1 calls, if it has two

    @classmethod
    def from_worker(
        cls, raw: dict, refs: list[str] | None, reference_ids: list[list[int]] | None
    ) -> SearchResult:
        """A worker's raw numbers (bench.backends.measure) scored against the references."""
        import sacrebleu

        lat = [x * 1000 for x in raw["latency_s"]]
        latency_ms = {f"p{q}": percentile(lat, q) for q in (50, 90, 99)}
        latency_ms["mean"] = statistics.fmean(lat) if lat else float("nan")
        result = cls(
            sentences=raw["sentences"],
            tokens=raw["tokens"],
            seconds=raw["seconds"],
            tokens_per_s=raw["tokens_per_s"],
            sentences_per_s=raw["sentences_per_s"],
            passes_s=raw["passes_s"],
            latency_ms=latency_ms,
            batch1_steps_per_s=raw["latency_tokens"] / sum(raw["latency_s"]) if lat else None,
            latency_layout=raw.get("latency_layout", ""),
        )
        if refs is not None:
            result.bleu = sacrebleu.corpus_bleu(raw["hypotheses"], [refs]).score
            result.chrf = sacrebleu.corpus_chrf(raw["hypotheses"], [refs]).score
        if raw.get("tokens_out") is not None and reference_ids is not None:
            pairs = zip(raw["tokens_out"], reference_ids, strict=True)
            result.greedy_identical = sum(a == b for a, b in pairs)
        return result


@dataclass
class EngineResult:
    """One engine's run in its own process: its searches by beam size, or why it failed."""

    engine: str
    searches: dict[str, SearchResult] = field(default_factory=dict)  # by beam size, "1", "4"
    peak_rss_mb: float | None = None
    load_s: float | None = None
    error: str | None = None

    @property
    def greedy(self) -> SearchResult:
        return self.searches["1"]

    @property
    def beam4(self) -> SearchResult:
        return self.searches["4"]

    def to_json(self) -> dict:
        if self.error is not None:
            return {"engine": self.engine, "error": self.error}
        return {k: v for k, v in asdict(self).items() if k != "error"}


@dataclass
class ServiceLevel:
    """The server under `clients` concurrent clients (bench.service.drive)."""

    clients: int
    requests: int
    errors: int
    failures: dict[str, int]  # errors by status code or exception name
    seconds: float
    requests_per_s: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    # the engine's offline rate (sentences/s, the service's variant and beam) from passes run
    # just before and after this level (bench.paired.Worker), where measured
    offline_per_s: float | None = None


@dataclass
class ServiceResult:
    variant: str | None = None
    threads: int | None = None
    peak_rss_mb: float | None = None  # summed over the server and its worker processes
    processes: int | None = None
    levels: list[ServiceLevel] = field(default_factory=list)
    decoding: dict = field(default_factory=dict)
    skipped: str | None = None  # or why it did not run
    error: str | None = None

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class RunSettings:
    bundle: str
    checkpoint: str | None
    sentences_file: str
    sentences: int
    latency_sentences: int
    threads: int
    beams: list[int]
    throughput_passes: int
    batch_size: int
    max_len: str
    service_seconds: float
    architecture: dict
    rounds: int = 1  # alternating runs of every engine (best_of)


@dataclass
class BenchRun:
    machine: dict
    settings: RunSettings
    engines: list[EngineResult]
    skipped: dict[str, str]  # engine -> why it did not run
    service: ServiceResult | None
    roofline: dict
    elapsed_s: float = 0.0
    paired: PairedResult | None = None  # two engines in alternation (bench.paired)
    memory: dict | None = None  # bench.service_memory: ours, and LibreTranslate's beside it

    def ok(self) -> dict[str, EngineResult]:
        return {r.engine: r for r in self.engines if r.error is None}

    def to_json(self) -> dict:
        return {
            "machine": self.machine,
            "settings": asdict(self.settings),
            "engines": [r.to_json() for r in self.engines],
            "skipped": self.skipped,
            "service": self.service.to_json() if self.service else None,
            "roofline": self.roofline,
            "paired": self.paired.to_json() if self.paired else None,
            "memory": self.memory,
            "elapsed_s": self.elapsed_s,
        }


# ---------------------------------------------------------------- inputs


def cpu_busy(seconds: float = 1.0) -> float:
    """Share of all CPUs in use by anything over `seconds` (from /proc/stat), in percent."""

    def sample() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        return sum(fields) - idle, sum(fields)

    try:
        busy0, total0 = sample()
        time.sleep(seconds)
        busy1, total1 = sample()
    except OSError:
        return 0.0
    return 100 * (busy1 - busy0) / max(1, total1 - total0)


def resolve_bundle(args, tmp: Path) -> Path:
    if args.bundle is not None:
        return args.bundle
    default = ROOT / "bundles" / "en-de"
    if (default / "manifest.json").exists():
        return default
    if args.checkpoint is None:
        raise SystemExit("no bundle: pass --bundle, or --checkpoint to export one")
    from export.bundle import write_bundle  # needs torch

    log(f"exporting {args.checkpoint} to a temporary bundle ...")
    return write_bundle(args.checkpoint, tmp / "bundle", variants=("fp32", "int8"))


def resolve_checkpoint(args, manifest: dict) -> Path | None:
    if args.checkpoint is not None:
        return args.checkpoint
    default = ROOT / "runs" / manifest["name"] / "averaged.pt"
    return default if default.exists() else None


def check_same_weights(checkpoint: Path, bundle: Path, manifest: dict) -> None:
    """Refuse a checkpoint whose weights are not the bundle's: the peers would be converted
    from another model, and every ratio would compare two models instead of two engines. The
    fp32 encoder graph's weights are compared with the checkpoint's, value for value."""
    import numpy as np

    from export.unbundle import graph_weights
    from model.checkpoint import read_checkpoint

    fp32 = manifest["variants"].get("fp32")
    if fp32 is None:
        return  # nothing to compare with (an int8-only bundle)
    arch = manifest["architecture"]
    graph = graph_weights(bundle / fp32["encoder"]["file"], arch["n_heads"], arch["head_dim"])
    state = read_checkpoint(checkpoint)["model"]
    shared = [name for name in graph if name in state]
    differ = [n for n in shared if not np.array_equal(graph[n], state[n].float().numpy())]
    if not shared or differ:
        raise SystemExit(
            f"{checkpoint} does not hold the weights of {bundle} "
            f"({len(differ)} of {len(shared)} encoder tensors differ): the peers would run "
            f"another model. Rebuild it from the bundle: python -m export.unbundle {bundle} "
            f"--out {checkpoint}"
        )


def peers_available(checkpoint: Path | None) -> dict[str, str]:
    """Engine -> why it is skipped, for the peers that cannot run here."""
    peers = ("torch", "transformers", "ctranslate2")
    missing = {m for m in peers if not importlib.util.find_spec(m)}
    skip = {}
    for engine, needs in (
        ("ct2-fp32", ("torch", "transformers", "ctranslate2")),
        ("ct2-int8", ("torch", "transformers", "ctranslate2")),
        ("hf-fp32", ("torch", "transformers")),
    ):
        lacking = [m for m in needs if m in missing]
        if lacking:
            skip[engine] = (
                f"{', '.join(lacking)} not installed (pip install torch==2.13.0 "
                "&& pip install -e '.[train,bench]')"
            )
        elif checkpoint is None:
            skip[engine] = "no checkpoint to convert (pass --checkpoint)"
    return skip


def pytorch_reference(checkpoint: Path, texts: list[str], threads: int) -> list[list[int]]:
    """model.search.greedy_search on the texts (batches of 32, sorted by source length)."""
    import torch

    from bench.convert import greedy_reference
    from model.checkpoint import load_model

    torch.set_num_threads(threads)
    model, tokenizer, _ = load_model(checkpoint)
    sources = [ids[: model.config.max_positions - 1] for ids in tokenizer.encode_batch(texts)]
    return greedy_reference(model, sources)


# ---------------------------------------------------------------- engines


def run_worker(spec: dict, tmp: Path, threads: int) -> dict:
    """One engine in its own process: bench.backends.measure's raw result, or {"error": ...}."""
    spec_path, out_path = tmp / f"{spec['engine']}.spec.json", tmp / f"{spec['engine']}.out.json"
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    env = worker_env(threads, spec["engine"])
    cmd = [sys.executable, "-m", "bench.backends", str(spec_path), str(out_path)]
    try:
        proc = subprocess.run(
            cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=WORKER_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return {"engine": spec["engine"], "error": f"timed out after {WORKER_TIMEOUT_S} s"}
    if proc.returncode != 0 or not out_path.exists():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        return {"engine": spec["engine"], "error": f"exit {proc.returncode}: " + " | ".join(tail)}
    return json.loads(out_path.read_text(encoding="utf-8"))


# ---------------------------------------------------------------- service


ADJACENT_LEVELS = (32, 64)  # service levels timed between two offline passes
OFFLINE_PASS_SENTENCES = 400  # at least this many sentences in each of those passes


def run_service(bundle: Path, manifest: dict, texts: list[str], args,
                offline: paired.Worker) -> ServiceResult:
    """The server at each concurrency level; offline: a worker of the served variant on the
    same sentences, whose passes at the service's beam just before and after each of
    ADJACENT_LEVELS give that level's share of the offline rate from runs seconds apart (the
    server and the worker never run at once)."""
    from bench.service import drive, start_server, stop_server

    variant = args.service_variant or manifest["default_variant"]
    extra = ["--variant", variant, "--request-timeout", "60"]
    proc, url = start_server(str(bundle), extra, args.threads)
    rows = []
    beam = int(decoding_section(manifest)["beam_size"])
    last_offline = None  # the latest offline pass, sentences/s

    def offline_pass() -> float:
        got = offline.ask(**{"pass": beam})
        return got["sentences"] / got["seconds"]

    try:
        asyncio.run(drive(url, 4, 2.0, 40, manifest["target_lang"], texts))  # warm up
        for clients in CONCURRENCY:
            adjacent = clients in ADJACENT_LEVELS
            if adjacent and last_offline is None:
                last_offline = offline_pass()
            row = asyncio.run(
                drive(
                    url,
                    clients,
                    args.service_seconds,
                    args.service_requests,
                    manifest["target_lang"],
                    texts,
                )
            )
            if adjacent:
                after = offline_pass()
                row["offline_per_s"] = (last_offline + after) / 2
                last_offline = after
            else:
                last_offline = None
            rows.append(ServiceLevel(**row))
            log(
                f"  service c={clients:<3} {row['requests_per_s']:7.1f} req/s  "
                f"p50 {row['p50_ms']:.0f} ms  p99 {row['p99_ms']:.0f} ms  errors {row['errors']}"
            )
        peak, processes = tree_peak_rss_mb(proc.pid)
    finally:
        stop_server(proc)
    return ServiceResult(variant=variant, threads=args.threads, peak_rss_mb=peak,
                         processes=processes, levels=rows,
                         decoding=decoding_section(manifest))


# ---------------------------------------------------------------- report


def fmt(x: float | None, digits: int = 0) -> str:
    return "n/a" if x is None or x != x else f"{x:,.{digits}f}"


def ratio(x: float | None, base: float | None) -> str:
    return "n/a" if not x or not base else f"{x / base:.2f}x"


def _p(search: SearchResult | None, key: str) -> float | None:
    return None if search is None else search.latency_ms[key]


def report(run: BenchRun) -> str:
    ok = run.ok()
    base = ok.get(BASELINE)
    s = run.settings
    out = [
        f"### Engines ({s.sentences} sentences for throughput, batch 32, length-sorted; "
        f"{s.latency_sentences} for latency, batch 1; {s.threads} threads; "
        f"{s.rounds} alternating round(s) per engine, the best counts)",
        "",
        "| engine | greedy tok/s | beam 4 tok/s | greedy latency p50 / p90 / p99 ms "
        "| beam 4 latency p50 / p90 / p99 ms | peak RSS MiB "
        f"| vs {BASELINE}: greedy tok/s, beam 4 tok/s (>1 faster); greedy p50, beam 4 p50 "
        "(<1 faster) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in ok.items():
        g, b = r.greedy, r.beam4
        lat = " / ".join(fmt(g.latency_ms[q], 1) for q in ("p50", "p90", "p99"))
        blat = " / ".join(fmt(b.latency_ms[q], 1) for q in ("p50", "p90", "p99"))
        ratios = ", ".join([
            ratio(g.tokens_per_s, base.greedy.tokens_per_s if base else None),
            ratio(b.tokens_per_s, base.beam4.tokens_per_s if base else None),
            ratio(g.latency_ms["p50"], _p(base.greedy if base else None, "p50")),
            ratio(b.latency_ms["p50"], _p(base.beam4 if base else None, "p50")),
        ])
        out.append(
            f"| {name} | {fmt(g.tokens_per_s)} | {fmt(b.tokens_per_s)} | {lat} "
            f"| {blat} | {fmt(r.peak_rss_mb)} | {ratios} |"
        )
    for r in run.engines:
        if r.error is not None:
            out.append(f"| {r.engine} | failed: {r.error[:120]} | | | | | |")
    for engine, why in run.skipped.items():
        out.append(f"| {engine} | skipped: {why} | | | | | |")
    layouts = [f"{name} greedy on {r.greedy.latency_layout}, beam 4 on {r.beam4.latency_layout}"
               for name, r in ok.items() if r.greedy.latency_layout]
    if layouts:
        out += ["", "Batch-1 latency in the quicker of the peer's two layouts (lanes, or one "
                "worker with all the threads): " + "; ".join(layouts) + "."]

    if run.paired is not None:
        out += paired.report(run.paired)
    out += [
        "",
        "### Quality and parity (same outputs as the throughput rows)",
        "",
        "| engine | BLEU greedy | BLEU beam 4 | chrF greedy | chrF beam 4 "
        "| greedy ids = PyTorch greedy_search |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in ok.items():
        g, b = r.greedy, r.beam4
        same = g.greedy_identical
        parity = "n/a" if same is None else f"{same}/{g.sentences}"
        out.append(
            f"| {name} | {fmt(g.bleu, 2)} | {fmt(b.bleu, 2)} "
            f"| {fmt(g.chrf, 2)} | {fmt(b.chrf, 2)} | {parity} |"
        )
    offline = None  # the served variant's offline rate at the service's beam, this run
    if run.service is not None and run.service.variant:
        engine = ok.get(f"ort-{run.service.variant}")
        beam = str(run.service.decoding.get("beam_size"))
        if engine is not None and beam in engine.searches:
            offline = engine.searches[beam].sentences_per_s
    out += service_text(run.service, s.service_seconds, offline)
    out += memory_text(run.memory)
    out += ["", roofline_text(run.roofline, ok)]
    return "\n".join(out)


def service_text(svc: ServiceResult | None, seconds: float,
                 offline: float | None = None) -> list[str]:
    """The service table; offline: the engine's offline sentences/s at the same variant and
    beam in this run, for the service's share of it."""
    if svc is None:
        return []
    if svc.skipped or svc.error:
        return ["", f"Service: {svc.error or svc.skipped}"]
    out = [
        "",
        f"### Service end to end (app.server, variant {svc.variant}, "
        f"{svc.threads} threads, beam {svc.decoding.get('beam_size')}, one throughput "
        f"sentence per request, {seconds:g} s per level; server peak RSS "
        f"{fmt(svc.peak_rss_mb)} MiB, the sum over its {svc.processes} process(es): the "
        f"server, or the supervisor and its server processes, and any worker processes)",
        "",
        "| clients | requests/s | share of the offline rate (the engine rounds' best, on the "
        "throughput sentences; beside it: the service's own sentences offline, the mean of "
        "passes just before and after the level) | p50 ms | p99 ms | errors "
        "| requests |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in svc.levels:
        share = (f"{100 * row.requests_per_s / offline:.0f} % of {offline:.1f}"
                 if offline and row.requests_per_s else "n/a")
        if row.offline_per_s and row.requests_per_s:
            share += (f"; {100 * row.requests_per_s / row.offline_per_s:.0f} % of "
                      f"{row.offline_per_s:.1f} beside it")
        out.append(
            f"| {row.clients} | {fmt(row.requests_per_s, 1)} | {share} | {fmt(row.p50_ms, 1)} "
            f"| {fmt(row.p99_ms, 1)} | {row.errors} | {row.requests} |"
        )
    return out


def memory_text(memory: dict | None) -> list[str]:
    """The whole service's memory peaks (all its processes), beside LibreTranslate's."""
    if memory is None:
        return []
    if memory.get("error"):
        return ["", f"Memory: {memory['error']}"]
    sides = [("nmt serve", memory["ours"])]
    if memory.get("libretranslate"):
        sides.append(("LibreTranslate", memory["libretranslate"]))
    out = ["", "### Memory of the whole service (bench.service_memory: the process tree's "
           "summed RSS and PSS, sampled every 0.2 s; start-up until a first translation came "
           "back, then serving 8 clients)", "",
           "| service | processes | start-up peak RSS / PSS MiB | serving peak RSS / PSS MiB "
           "| requests/s |", "|---|---:|---:|---:|---:|"]
    for name, m in sides:
        out.append(f"| {name} | {m['processes']} | {m['starting_peak_rss_mib']} / "
                   f"{m['starting_peak_pss_mib']} | {m['serving_peak_rss_mib']} / "
                   f"{m['serving_peak_pss_mib']} | {fmt(m['requests_per_s'], 1)} |")
    if memory.get("ratios_ours_over_lt"):
        r = memory["ratios_ours_over_lt"]
        out += ["", f"Ours peak PSS over LibreTranslate's peak RSS: {r['peak_pss_over_lt_rss']} "
                f"(over its PSS: {r['peak_pss_over_lt_pss']}); requests/s ratio "
                f"{r['requests_per_s']}."]
    elif memory.get("skipped"):
        out += ["", f"LibreTranslate: {memory['skipped']}."]
    return out


def roofline_text(roof: dict, ok: dict[str, EngineResult]) -> str:
    step = roof["step_bytes"]
    lines = [
        f"### Roofline at batch 1 (decoder step; {roof['threads']} copy threads)",
        "",
        f"Weights read per decoder step (decoder layers + output projection): "
        f"fp32 {step['fp32'] / 2**20:.1f} MiB, int8 {step['int8'] / 2**20:.1f} MiB "
        f"({step['parameters'] / 1e6:.2f} M parameters). Measured numpy copy bandwidth: "
        f"{roof['dram_copy_gb_s']:.1f} GB/s from main memory (512 MiB arrays), "
        f"{roof['cache_copy_gb_s']:.1f} GB/s on a cache-sized working set.",
        "",
        "| precision | bound at main-memory bandwidth, steps/s "
        "| bound at cache bandwidth, steps/s |",
        "|---|---:|---:|",
    ]
    for prec in ("fp32", "int8"):
        lines.append(
            f"| {prec} | {fmt(roof[f'{prec}_dram_steps_per_s'])} "
            f"| {fmt(roof[f'{prec}_cache_steps_per_s'])} |"
        )
    lines += [
        "",
        "| engine | decoder steps/s reached (greedy, batch 1, incl. encoder) "
        "| share of main-memory bound |",
        "|---|---:|---:|",
    ]
    for name, r in ok.items():
        reached = r.greedy.batch1_steps_per_s
        bound = roof["int8_dram_steps_per_s" if "int8" in name else "fp32_dram_steps_per_s"]
        share = f"{100 * reached / bound:.1f}%" if reached else "n/a"
        lines.append(f"| {name} | {fmt(reached)} | {share} |")
    return "\n".join(lines)


# ---------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bundle", type=Path, help="bundle directory (default: bundles/en-de)")
    p.add_argument(
        "--checkpoint",
        type=Path,
        help="checkpoint of the bundle, for the peers and the PyTorch reference "
        "(default: runs/<bundle name>/averaged.pt)",
    )
    p.add_argument("--sentences", type=Path, default=ROOT / "data/en-de/test.en")
    p.add_argument("--refs", type=Path, default=ROOT / "data/en-de/test.de")
    p.add_argument("--limit", type=int, default=500, help="throughput sentences (default 500)")
    p.add_argument(
        "--latency-limit",
        type=int,
        default=100,
        help="latency sentences, the first of the throughput set (default 100)",
    )
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--repeat", type=int, default=2, help="throughput passes, the fastest counts (default 2)"
    )
    p.add_argument(
        "--rounds", type=int, default=1,
        help="run every engine this many times, alternating; per engine the fastest round's "
        "throughput and the lowest p50 count (default 1)"
    )
    p.add_argument(
        "--engines", default=",".join(("ort-fp32", "ort-int8", "ct2-fp32", "ct2-int8", "hf-fp32"))
    )
    p.add_argument(
        "--paired", default=f"ort-int8,{BASELINE}",
        help="A,B: then time these two engines in alternation, each in a process of its own, "
        "for ratios of passes made seconds apart (bench.paired; default ort-int8,%(default)s "
        "is the pair the goals name); 'none' to skip"
    )
    p.add_argument("--pairs", type=int, default=6,
                   help="pairs of throughput passes in the paired comparison (default 6)")
    p.add_argument("--latency-rounds", type=int, default=2,
                   help="rounds of batch-1 sentences in the paired comparison (default 2)")
    p.add_argument("--service-seconds", type=float, default=10.0, help="per concurrency level")
    p.add_argument("--service-requests", type=int, default=2000, help="per concurrency level")
    p.add_argument("--service-variant", help="variant the server runs (default: the bundle's)")
    p.add_argument("--no-service", action="store_true")
    p.add_argument("--memory-seconds", type=float, default=20.0,
                   help="the service's memory under 8 clients, beside LibreTranslate's where it "
                   "is found (bench.service_memory); 0 to skip")
    p.add_argument("--libretranslate", default="auto", metavar="PATH",
                   help="LibreTranslate's executable for the memory section (default: on PATH)")
    p.add_argument("--json", type=Path, help="also write all results here")
    return p.parse_args(argv)


def runnable(wanted: list[str], manifest: dict, checkpoint: Path | None
             ) -> tuple[list[str], dict[str, str]]:
    """The engines that can run here, and why each of the others cannot."""
    skipped = {e: why for e, why in peers_available(checkpoint).items() if e in wanted}
    for e in wanted:
        if e.startswith("ort-") and e.split("-", 1)[1] not in manifest["variants"]:
            skipped[e] = f"the bundle has no {e.split('-', 1)[1]} variant"
    for engine, why in skipped.items():
        log(f"skipping {engine}: {why}")
    return [e for e in wanted if e not in skipped], skipped


def engine_spec(engine: str, spec: dict, peer_dirs: dict[str, Path]) -> dict:
    """The worker spec of one engine: the common spec, its name and its peer model."""
    spec = {**spec, "engine": engine}
    if engine.startswith("ct2-"):
        spec["model_dir"] = str(peer_dirs[engine])
    elif engine.startswith("hf-"):
        spec["model_dir"] = str(peer_dirs["hf"])
    return spec


def run_engine(engine: str, spec: dict, peer_dirs: dict[str, Path], tmp: Path, threads: int,
               refs: list[str] | None, reference: list[list[int]] | None) -> EngineResult:
    spec = engine_spec(engine, spec, peer_dirs)
    t0 = time.perf_counter()
    raw = run_worker(spec, tmp, threads)
    if "error" in raw:
        log(f"  {engine} failed: {raw['error']}")
        return EngineResult(engine, error=raw["error"])
    result = EngineResult(
        engine,
        searches={beam: SearchResult.from_worker(search, refs, reference)
                  for beam, search in raw["searches"].items()},
        peak_rss_mb=raw.get("peak_rss_mb"),
        load_s=raw.get("load_s"),
    )
    log(f"  {engine}: greedy {result.greedy.tokens_per_s:.0f} tok/s, beam 4 "
        f"{result.beam4.tokens_per_s:.0f} tok/s, {time.perf_counter() - t0:.0f} s")
    return result


def best_of(runs: list[EngineResult]) -> EngineResult:
    """One engine's rounds as one result: per beam size the round with the highest throughput
    and, for latency, the one with the lowest p50; the highest peak RSS (the worst case)."""
    ok = [r for r in runs if r.error is None]
    if len(ok) < 2:
        return ok[0] if ok else runs[0]
    searches = {}
    for beam in ok[0].searches:
        fastest = max((r.searches[beam] for r in ok), key=lambda s: s.tokens_per_s)
        quickest = min((r.searches[beam] for r in ok), key=lambda s: s.latency_ms["p50"])
        searches[beam] = dataclasses.replace(
            fastest, latency_ms=quickest.latency_ms,
            batch1_steps_per_s=quickest.batch1_steps_per_s,
            latency_layout=quickest.latency_layout,
            passes_s=[p for r in ok for p in r.searches[beam].passes_s],
        )
    rss = [r.peak_rss_mb for r in ok if r.peak_rss_mb is not None]
    return EngineResult(ok[0].engine, searches=searches, peak_rss_mb=max(rss, default=None),
                        load_s=ok[0].load_s)


def service_result(bundle: Path, manifest: dict, texts: list[str], args, spec: dict,
                   tmp: Path) -> ServiceResult:
    """The service benchmark, with a worker of the served variant for the offline passes
    beside the busiest levels (spec: the engines' common worker spec)."""
    log("service ...")
    if importlib.util.find_spec("httpx") is None:
        return ServiceResult(skipped="httpx not installed (pip install -e '.[dev]')")
    variant = args.service_variant or manifest["default_variant"]
    # the service's own sentences offline (batches of 32, length-sorted), repeated for a pass of
    # a few seconds: the requests cycle through them, and a share against the rate of other
    # sentences would weigh their lengths as much as the service
    offline_texts = texts * max(1, -(-OFFLINE_PASS_SENTENCES // max(1, len(texts))))
    worker = None
    try:
        worker = paired.Worker(engine_spec(f"ort-{variant}", {**spec, "texts": offline_texts},
                                           {}),
                               tmp / "service-offline.json", args.threads)
        return run_service(bundle, manifest, texts, args, worker)
    except Exception as exc:  # noqa: BLE001 - reported in the table, run goes on
        return ServiceResult(error=f"service benchmark failed: {exc}")
    finally:
        if worker is not None:
            worker.close()


def memory_result(bundle: Path, args, ct2_model: Path | None, tmp: Path) -> dict:
    from bench.service_memory import beside_libretranslate, find_libretranslate

    executable = find_libretranslate(args.libretranslate)
    log("memory of the service" + (f" beside {executable} ..." if executable else " ..."))
    try:
        return beside_libretranslate(bundle, executable, args.memory_seconds, 8, tmp, ct2_model)
    except Exception as exc:  # noqa: BLE001 - reported in the table, run goes on
        return {"error": f"memory benchmark failed: {exc}"}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    busy_before = cpu_busy()
    if busy_before > 25:
        log(f"the machine is busy ({busy_before:.0f}% CPU in use): timings will be disturbed")
    refs_path = args.refs if args.refs and args.refs.exists() else None
    if refs_path is None:
        log(f"no references at {args.refs}: BLEU/chrF are skipped")
    texts, refs = read_pairs(args.sentences, refs_path, args.limit)
    latency_texts = texts[: args.latency_limit]

    with tempfile.TemporaryDirectory(prefix="nmt-bench-") as tmp_name:
        tmp = Path(tmp_name)
        bundle = resolve_bundle(args, tmp)
        manifest = read_manifest(bundle)
        if manifest.get("capitalize_lowercase"):
            # the engine's own input step, done here for every engine and the PyTorch
            # reference alike: the same sentences in, the same work measured
            texts = [as_written(t)[0] for t in texts]
            latency_texts = texts[: args.latency_limit]
        arch = manifest["architecture"]
        checkpoint = resolve_checkpoint(args, manifest)
        wanted = [e.strip() for e in args.engines.split(",") if e.strip()]
        engines, skipped = runnable(wanted, manifest, checkpoint)

        peer_dirs: dict[str, Path] = {}
        reference = None
        if checkpoint is not None and importlib.util.find_spec("torch"):
            check_same_weights(checkpoint, bundle, manifest)
            if any(e.startswith(("ct2-", "hf-")) for e in engines):
                from bench.convert import convert

                log(f"converting {checkpoint} for the peers ...")
                peer_dirs = convert(checkpoint, tmp / "peers")
            log("PyTorch reference greedy outputs ...")
            reference = pytorch_reference(checkpoint, texts, args.threads)
        else:
            log("no checkpoint or no torch: greedy parity against PyTorch is not reported")

        log("memory bandwidth and roofline ...")
        roof = roofline(arch, args.threads)
        spec = {"threads": args.threads, "texts": texts, "latency_texts": latency_texts,
                "beams": list(BEAMS), "repeat": args.repeat,
                "max_positions": arch["max_positions"], "bundle": str(bundle)}
        rounds: dict[str, list[EngineResult]] = {engine: [] for engine in engines}
        for n in range(args.rounds):  # engines alternate, so a slow spell hits each alike
            for engine in engines:
                log(f"{engine} ({n + 1}/{args.rounds}) ...")
                rounds[engine].append(run_engine(engine, spec, peer_dirs, tmp, args.threads,
                                                 refs, reference))
        results = [best_of(runs) for runs in rounds.values()]
        pair = [e.strip() for e in args.paired.split(",")] if args.paired != "none" else []
        paired_result = None
        if len(pair) == 2 and all(e in engines for e in pair) and args.pairs > 0:
            log(f"{pair[0]} and {pair[1]} in alternation ...")
            specs = [engine_spec(e, spec, peer_dirs) for e in pair]
            paired_result = paired.compare(*specs, list(BEAMS), args.pairs, args.latency_rounds,
                                           tmp, args.threads, log)
        elif pair:
            log(f"no paired comparison: {args.paired} are not two engines that ran")
        service = None if args.no_service else service_result(bundle, manifest, texts, args,
                                                               spec, tmp)
        memory = None
        if not args.no_service and args.memory_seconds > 0:
            memory = memory_result(bundle, args, peer_dirs.get("ct2-int8"), tmp)

    settings = RunSettings(
        bundle=str(bundle),
        checkpoint=str(checkpoint) if checkpoint else None,
        sentences_file=str(args.sentences),
        sentences=len(texts),
        latency_sentences=len(latency_texts),
        threads=args.threads,
        beams=list(BEAMS),
        throughput_passes=args.repeat,
        rounds=args.rounds,
        batch_size=32,
        max_len=f"{MAX_LEN_OFFSET} + {MAX_LEN_RATIO} x source",
        service_seconds=args.service_seconds,
        architecture=arch,
    )
    run = BenchRun({**machine(), "cpu_busy_percent_before": busy_before}, settings, results,
                   skipped, service, roof, elapsed_s=time.perf_counter() - started,
                   paired=paired_result, memory=memory)
    m = run.machine
    print(f"## Benchmark: {m['cpu']}, {m['logical_cpus']} logical CPUs; bundle {bundle}\n")
    print(report(run))
    print(f"\nTotal time {run.elapsed_s / 60:.1f} min.")
    if args.json:
        write_json(args.json, run.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
