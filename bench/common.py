"""Helpers shared by bench.run, bench.convert and the per-engine workers: test sentences, length
limits, percentiles, peak RSS, the machine, memory bandwidth and the decoder-step roofline.

Nothing here imports torch, so an engine measured in its own process pays only for its own
libraries."""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import platform
import resource
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from app.engine.search import output_limit
from model.hardware import cpu_info

__all__ = ["output_limit"]


def quality_parser(doc: str, sentences: int) -> argparse.ArgumentParser:
    """The options the quality benches share (bench.inline_tags, bench.wrapped): the bundle, the
    test sentences and references, a seeded sample, printed examples, a JSON report."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--bundle", default="bundles/en-de")
    ap.add_argument("--src", type=Path, default=Path("data/en-de/test.en"))
    ap.add_argument("--ref", type=Path, default=None, help="default: --src with .de")
    ap.add_argument("--sentences", type=int, default=sentences)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--examples", type=int, default=0, help="print this many outputs")
    ap.add_argument("--json", type=Path)
    return ap


def print_row(label: str, row: dict, sources: list[str], outputs: list[str],
              examples: int = 0) -> None:
    """A quality bench's row as one JSON line, then its first `examples` outputs under their
    sources."""
    print(f"{label} {json.dumps(row)}", flush=True)
    for source, output in list(zip(sources, outputs, strict=True))[:examples]:
        print(f"    {source!r}\n -> {output!r}")


def read_lines(path: str | Path, limit: int | None = None) -> list[str]:
    """Non-blank lines of a text file (stripped), the first `limit` of them."""
    lines = [t.strip() for t in Path(path).read_text(encoding="utf-8").splitlines()]
    lines = [t for t in lines if t]
    return lines[:limit] if limit else lines


def read_pairs(
    sources: str | Path, refs: str | Path | None, limit: int | None
) -> tuple[list[str], list[str] | None]:
    """Aligned source/reference lines, keeping the pairs whose source is not blank."""
    src = Path(sources).read_text(encoding="utf-8").splitlines()
    if refs is None:
        return read_lines(sources, limit), None
    ref = Path(refs).read_text(encoding="utf-8").splitlines()
    if len(src) != len(ref):
        raise ValueError(f"{sources} has {len(src)} lines but {refs} has {len(ref)}")
    pairs = [(s.strip(), r.strip()) for s, r in zip(src, ref, strict=True) if s.strip()]
    pairs = pairs[:limit] if limit else pairs
    return [s for s, _ in pairs], [r for _, r in pairs]


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def worker_env(threads: int, engine: str = "") -> dict[str, str]:
    """The environment of an engine's worker process: its libraries' own thread pools sized to
    `threads`, and Transformers quiet. CTranslate2 sizes its pools itself, per worker
    (intra_threads), so for its engines those variables are left out: on an Intel CPU its int8
    and float products run on Intel MKL, where MKL_NUM_THREADS overrides intra_threads, and two
    workers of one thread each then ran two MKL threads each. Measured on 2 cores of an Intel
    Xeon (shipped int8 model, 500 test sentences, two workers): greedy 7,424-7,796 tok/s with
    MKL_NUM_THREADS=2 against 13,710-15,471 without it or with 1."""
    env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error", "TOKENIZERS_PARALLELISM": "false"}
    for name in THREAD_VARIABLES:
        env.pop(name, None)
        if not engine.startswith("ct2-"):
            env[name] = str(threads)
    return env


def write_json(path: Path, data: object) -> None:
    """Results as indented JSON, creating the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), linear interpolation (numpy's default)."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else float("nan")


def peak_rss_mb() -> float:
    """This process's peak resident set size so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def pid_peak_rss_mb(pid: int, field: str = "VmHWM") -> float | None:
    """Another process's peak RSS (VmHWM) in MiB, or another of its /proc status sizes (field:
    "VmRSS" for the current RSS); None where /proc does not tell."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def process_tree(pid: int) -> list[int]:
    """pid and its descendants (the server's worker processes), from /proc's children lists."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            try:
                todo += [int(child) for child in task.read_text().split()]
            except OSError:
                continue
    return found


def tree_peak_rss_mb(pid: int, field: str = "VmHWM") -> tuple[float | None, int]:
    """The sum of the peak RSS (VmHWM, MiB) of pid and its descendants (an upper bound of the
    tree's peak: each process's own peak, wherever it fell), or of another size (field, see
    pid_peak_rss_mb), and how many processes that is."""
    peaks = [pid_peak_rss_mb(p, field) for p in process_tree(pid)]
    known = [p for p in peaks if p is not None]
    return (sum(known) if known else None), len(known)


def machine() -> dict:
    """CPU model, cores, memory and the library versions that matter for the numbers."""
    cpu, flags = cpu_info()
    isa = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_int8") if f in flags]
    info = {
        "cpu": cpu,
        "logical_cpus": os.cpu_count(),
        "isa": isa,
        "python": platform.python_version(),
    }
    versions = {}
    for package in ("onnxruntime", "ctranslate2", "transformers", "torch", "numpy"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[package] = importlib.metadata.version(package)
    info["versions"] = versions
    try:
        import psutil

        info["physical_cores"] = psutil.cpu_count(logical=False)
        info["memory_gib"] = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        pass
    l3 = subprocess.run(["getconf", "LEVEL3_CACHE_SIZE"], capture_output=True, text=True)
    if l3.returncode == 0 and l3.stdout.strip() not in ("", "0"):
        info["l3_cache_bytes"] = int(l3.stdout.strip())
    return info


def copy_bandwidth(mib: int, threads: int, repeat: int = 5) -> float:
    """Memory bandwidth of a numpy copy, in GB/s (bytes read + bytes written, per second), best
    of `repeat`; `threads` threads copy one slice each (numpy releases the GIL for copies)."""
    n = mib * 2**20 // 8
    src = np.ones(n, dtype=np.float64)
    dst = np.empty_like(src)
    bounds = np.linspace(0, n, threads + 1, dtype=np.int64)
    slices = [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    best = float("inf")
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(repeat):
            started = time.perf_counter()
            list(pool.map(lambda s: np.copyto(dst[s], src[s]), slices))
            best = min(best, time.perf_counter() - started)
    return 2 * src.nbytes / best / 1e9


def decoder_step_bytes(arch: dict) -> dict[str, int]:
    """Bytes of weights read by one decoder step at batch 1: every decoder layer's self-attention
    (Q, K, V, O), the cross-attention's Q and O (its K and V of the source are computed once per
    sentence, by the encoder graph), the feed-forward network and three LayerNorms, plus the
    output projection (V x D); the embedding lookup reads one row. int8: matrices one byte per
    weight plus an fp32 scale per output channel; biases and LayerNorms stay fp32."""
    d, f, v, n = arch["d_model"], arch["d_ff"], arch["vocab_size"], arch["n_decoder_layers"]
    matrices = [(d, d)] * 6 + [(d, f), (f, d)]  # (in, out): self Q K V O, cross Q O, FFN
    vectors = 6 * d + f + d + 3 * 2 * d  # biases of the six projections and the FFN, LayerNorms
    layer_weights = sum(i * o for i, o in matrices)
    layer_channels = sum(o for _, o in matrices)
    fp32 = n * 4 * (layer_weights + vectors) + 4 * v * d
    int8 = n * (layer_weights + 4 * layer_channels + 4 * vectors) + v * d + 4 * v
    return {"fp32": fp32, "int8": int8, "parameters": n * (layer_weights + vectors) + v * d}


def roofline(arch: dict, threads: int) -> dict:
    """The decoder-step roofline at batch 1: weight bytes per step against the measured copy
    bandwidth of main memory (arrays far larger than the last-level cache) and of a working set
    the size of the fp32 decoder weights (which stays in cache between steps)."""
    step = decoder_step_bytes(arch)
    dram = copy_bandwidth(512, threads, repeat=3)
    cached = copy_bandwidth(max(1, round(step["fp32"] / 2**21)), threads, repeat=20)
    bounds = {
        f"{prec}_{where}_steps_per_s": bw * 1e9 / step[prec]
        for prec in ("fp32", "int8")
        for where, bw in (("dram", dram), ("cache", cached))
    }
    return {
        "step_bytes": step,
        "dram_copy_gb_s": dram,
        "cache_copy_gb_s": cached,
        "threads": threads,
        **bounds,
    }
