"""One-shot check of ONNX Runtime's CUDA provider: our engine on the GPU against the CPU fp32
engine (identical ids?), fp16 quality against fp32, speed against CTranslate2 on the same
weights, the service under concurrent clients, and GPU memory. Writes cuda_check.json and
cuda_check.md under --out.

    python -m bench.cuda_check --out $OUT --carry /tmp/cuda-carry     # on a GPU machine
    python -m bench.cuda_check --out /tmp/cc --provider cpu           # the CPU fallback

docs/cuda.md says how a session with a lent GPU runs it (bench/cuda_check.sh) and what the
carried folder holds (bench.cuda_prepare makes it). Each part runs in its own try block under its
own time budget (checked between units of work), so a part that fails or runs long leaves the
others' results; progress lines carry the seconds since the start. Without a usable CUDA
provider (or with --provider cpu) every part runs on the CPU in a reduced form, and the JSON and
the table say in their first line that no GPU was used.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.common import percentile, pid_peak_rss_mb, process_tree, read_pairs, write_json
from bench.cuda_prepare import CARRY_FILES, ROOT, SHIPPED_BUNDLE

CUDA = "CUDAExecutionProvider"
BEAMS = (1, 4)
FP16_BLEU_TOLERANCE = 0.3  # issue 51: fp16 BLEU within this of fp32's

STARTED = time.monotonic()


def log(message: str) -> None:
    print(f"[{time.monotonic() - STARTED:7.1f}s] {message}", flush=True)


class OverBudget(RuntimeError):
    """A part ran past its time budget; what it measured so far is kept."""


@dataclass(frozen=True)
class CheckConfig:
    """What one run measures. provider: where our engine runs ("cuda", or "cpu" for the
    fallback); fp16_bundle / ct2_model: None = that engine is skipped (and said so)."""

    provider: str
    bundle: Path
    sources: tuple[str, ...]
    references: tuple[str, ...] | None = None
    fp16_bundle: Path | None = None
    ct2_model: Path | None = None
    batches: tuple[int, ...] = (32, 64, 128)
    latency_sentences: int = 50
    clients: tuple[int, ...] = (32, 128)
    service_seconds: float = 8.0
    part_seconds: float = 60.0
    threads: int = 0
    no_gpu_reason: str = ""

    @property
    def gpu(self) -> bool:
        return self.provider == "cuda"

    @property
    def ct2_types(self) -> tuple[str, ...]:
        return ("float16", "int8_float16") if self.gpu else ("int8",)


# sizes of a run: the GPU's (meant to fit the issue's five minutes of device time with the
# machine's start) and the CPU fallback's
GPU_SIZES = {"sentences": 500, "batches": (32, 64, 128), "latency_sentences": 50,
             "clients": (32, 128), "service_seconds": 8.0, "part_seconds": 60.0}
CPU_SIZES = {"sentences": 24, "batches": (8, 16), "latency_sentences": 4, "clients": (4, 8),
             "service_seconds": 2.0, "part_seconds": 60.0}


# ------------------------------------------------------------------------------ the machine


def cuda_status() -> tuple[bool, str]:
    """(usable, reason): whether this onnxruntime has the CUDA provider and a GPU answers."""
    import onnxruntime as ort

    if CUDA not in ort.get_available_providers():
        return False, (f"onnxruntime {ort.__version__} has no {CUDA} (available: "
                       f"{', '.join(ort.get_available_providers())})")
    if not gpus():
        return False, "nvidia-smi finds no GPU"
    return True, ""


def nvidia_smi(*query: str) -> list[list[str]]:
    """Rows of `nvidia-smi --query-...` as lists of fields; [] where it is missing or fails."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", *query, "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    return [[f.strip() for f in line.split(",")] for line in out.stdout.splitlines() if line]


def gpus() -> list[dict]:
    rows = nvidia_smi("--query-gpu=name,memory.total,memory.used,driver_version")
    return [{"name": r[0], "memory_total_mib": float(r[1]), "memory_used_mib": float(r[2]),
             "driver": r[3]} for r in rows if len(r) == 4]


def gpu_memory_mib(pids: list[int]) -> float | None:
    """GPU memory held by these processes (nvidia-smi's per-process accounting); None without
    one. In a container whose processes nvidia-smi cannot map, the whole GPU's used memory."""
    rows = nvidia_smi("--query-compute-apps=pid,used_memory")
    if not rows and not gpus():
        return None
    mine = [float(r[1]) for r in rows if len(r) == 2 and r[0].isdigit() and int(r[0]) in pids]
    if mine:
        return sum(mine)
    found = gpus()
    return found[0]["memory_used_mib"] if found else None


def versions() -> dict:
    found = {}
    for package in ("onnxruntime", "onnxruntime-gpu", "ctranslate2", "sacrebleu", "numpy",
                    "fastapi", "uvicorn", "torch"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found[package] = importlib.metadata.version(package)
    return found


def environment(cfg: CheckConfig, budget: Budget) -> dict:
    import onnxruntime as ort

    from bench.common import machine

    info = {"provider": cfg.provider, "gpu_used": cfg.gpu, "no_gpu_reason": cfg.no_gpu_reason,
            "onnxruntime": ort.__version__, "available_providers": ort.get_available_providers(),
            "gpus": gpus(), "versions": versions(), "machine": machine()}
    if importlib.util.find_spec("ctranslate2") is not None:
        import ctranslate2

        try:
            info["ctranslate2_cuda_devices"] = ctranslate2.get_cuda_device_count()
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            info["ctranslate2_cuda_devices"] = f"{type(exc).__name__}: {exc}"
    return info


# ------------------------------------------------------------------------------ the engines


class Budget:
    """A part's time budget, checked between units of work (a pass over the sentences)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def check(self, what: str) -> None:
        if time.monotonic() > self.end:
            raise OverBudget(f"over the part's {self.seconds:.0f} s budget before {what}")


def ours(cfg: CheckConfig, variant: str, batch: int = 32, provider: str | None = None,
         optimization: str = "all"):
    """Our engine (bench.backends.OrtBackend) on cfg's provider; on CUDA, refused where the
    session fell back to the CPU (ONNX Runtime does that with a warning when the CUDA
    libraries do not load), so no CPU number is taken for a GPU one."""
    from bench.backends import OrtBackend

    provider = provider or cfg.provider
    bundle = cfg.fp16_bundle if variant == "fp16" else cfg.bundle
    backend = OrtBackend(bundle, variant, cfg.threads, batch, provider=provider,
                         optimization=optimization)
    active = backend.translator.sessions.providers
    if provider == "cuda" and active[0] != CUDA:
        raise RuntimeError(f"CUDA was asked for but the session runs on {active}")
    return backend


def ct2(cfg: CheckConfig, compute_type: str):
    from app.engine.bundle import read_manifest
    from bench.backends import Ct2Backend

    max_positions = read_manifest(cfg.bundle)["architecture"]["max_positions"]
    return Ct2Backend(cfg.ct2_model, compute_type, cfg.threads or os.cpu_count() or 1,
                      max_positions, device="cuda" if cfg.gpu else "cpu")


def bleu(hypotheses: list[str], references: tuple[str, ...] | None) -> float | None:
    if references is None or importlib.util.find_spec("sacrebleu") is None:
        return None
    import sacrebleu

    return round(sacrebleu.corpus_bleu(hypotheses, [list(references)]).score, 2)


def agreement(reference: list, got: list) -> float:
    return round(sum(a.tokens == b.tokens for a, b in zip(reference, got, strict=True))
                 / max(1, len(reference)), 4)


def differences(sources, reference: list, got: list, limit: int = 10) -> list[dict]:
    """The first `limit` sentences whose ids differ: where they part and both texts, to explain
    each (a near tie between two tokens flips under another summation order)."""
    found = []
    for i, (a, b) in enumerate(zip(reference, got, strict=True)):
        if a.tokens != b.tokens and len(found) < limit:
            at = next((k for k, (x, y) in enumerate(zip(a.tokens, b.tokens, strict=False))
                       if x != y),
                      min(len(a.tokens), len(b.tokens)))
            found.append({"index": i, "source": sources[i], "position": at,
                          "cpu": a.text, "check": b.text})
    return found


# ------------------------------------------------------------------------------ the parts


def parity(cfg: CheckConfig, budget: Budget) -> dict:
    """Greedy and beam-4 ids of our fp32 (and fp16) engine on cfg's provider against the CPU
    fp32 engine, each loaded on its own, batches of 32 sentences sorted by length in both."""
    sources = list(cfg.sources)
    reference = ours(cfg, "fp32", provider="cpu")
    cpu = {beam: reference.translate(sources, beam) for beam in BEAMS}
    del reference
    gc.collect()
    log(f"parity: CPU fp32 reference done ({len(sources)} sentences)")
    budget.check("fp32 on the checked provider")
    rows, examples = [], {}
    fp32_outputs = {}
    checked = ours(cfg, "fp32")
    # the provider's settings as the session took them (use_tf32 among the CUDA ones: TF32
    # products round inputs to 10-bit mantissas, a cause of ids parting from the CPU's)
    options = checked.translator.sessions.one_thread_encoder.get_provider_options()
    for beam in BEAMS:
        got = fp32_outputs[beam] = checked.translate(sources, beam)
        rows.append({"variant": "fp32", "beam": beam, "sentences": len(sources),
                     "identical_to_cpu_fp32": agreement(cpu[beam], got),
                     "bleu": bleu([o.text for o in got], cfg.references),
                     "cpu_fp32_bleu": bleu([o.text for o in cpu[beam]], cfg.references)})
        examples[f"fp32 beam {beam}"] = differences(sources, cpu[beam], got)
    del checked
    gc.collect()
    log("parity: fp32 done: " + ", ".join(f"beam {r['beam']} {r['identical_to_cpu_fp32']:.2%}"
                                            for r in rows))
    fp16 = None
    if cfg.fp16_bundle is None:
        fp16 = "skipped: no fp16 bundle (--fp16-bundle, or --carry with bundle-fp16/)"
    elif time.monotonic() > budget.end:
        fp16 = f"stopped: over the part's {budget.seconds:.0f} s budget before fp16"
    else:
        half = ours(cfg, "fp16")
        for beam in BEAMS:
            got = half.translate(sources, beam)
            fp32_bleu = next(r["bleu"] for r in rows if r["beam"] == beam)
            score = bleu([o.text for o in got], cfg.references)
            rows.append({"variant": "fp16", "beam": beam, "sentences": len(sources),
                         "identical_to_cpu_fp32": agreement(cpu[beam], got),
                         "identical_to_fp32": agreement(fp32_outputs[beam], got),
                         "bleu": score,
                         "bleu_minus_fp32": None if score is None or fp32_bleu is None
                         else round(score - fp32_bleu, 2),
                         "within_tolerance": None if score is None or fp32_bleu is None
                         else abs(score - fp32_bleu) <= FP16_BLEU_TOLERANCE})
            examples[f"fp16 beam {beam}"] = differences(sources, fp32_outputs[beam], got)
        log("parity: fp16 done")
    return {"rows": rows, "differences": examples, "fp16": fp16, "provider_options": options,
            "bleu_note": None if cfg.references and importlib.util.find_spec("sacrebleu")
            else "no BLEU: sacrebleu or the references are missing"}


# ONNX Runtime's switches for its CUDA attention kernels (read when a session makes its kernels):
# with all of them set, attention runs on the plain (unfused) kernels
FUSED_ATTENTION_OFF = ("ORT_DISABLE_FLASH_ATTENTION", "ORT_DISABLE_MEMORY_EFFICIENT_ATTENTION",
                       "ORT_DISABLE_FUSED_ATTENTION", "ORT_DISABLE_FUSED_CROSS_ATTENTION",
                       "ORT_DISABLE_TRT_FLASH_ATTENTION")
LOCALIZE_SENTENCES = 8
LOCALIZE_SETTINGS = {"as the engine": {}, "no graph optimizations": {"optimization": "disable"},
                     "fused attention off": {"env": FUSED_ATTENTION_OFF}}


@contextlib.contextmanager
def environment_set(names: tuple[str, ...]):
    before = {n: os.environ.get(n) for n in names}
    os.environ.update(dict.fromkeys(names, "1"))
    try:
        yield
    finally:
        for n, value in before.items():
            if value is None:
                os.environ.pop(n, None)
            else:
                os.environ[n] = value


def localize(cfg: CheckConfig, budget: Budget) -> dict:
    """Where the provider's numbers part from the CPU's, outside the engine: the bundle's
    encoder, then two greedy decoder steps, as plain sessions (numpy in and out, no I/O
    binding) on the provider and on the CPU (fp32), under settings that each leave one thing
    out. Both steps take the CPU's encoder output, so a step's difference is the decoder
    graph's own. A setting under which the graphs agree with the CPU while the engine's
    parity fails points at the engine (its I/O binding); one that mends the graphs is tried on
    the engine too (greedy, the first sentences)."""
    from app.engine import Translator

    texts = list(cfg.sources[:LOCALIZE_SENTENCES])
    cpu = Translator.from_dir(cfg.bundle, variant="fp32", provider="cpu")
    src = cpu.source_array(cpu.encode(texts))
    reference = _plain_run(cpu.sessions, "cpu", {}, src, cpu.start_id, None)
    rows = []
    variants = [("fp32", cfg.bundle)] + ([("fp16", cfg.fp16_bundle)] if cfg.fp16_bundle else [])
    for variant, bundle in variants:
        graphs = cpu.sessions if variant == "fp32" else Translator.from_dir(
            bundle, variant=variant, provider="cpu").sessions
        for name, setting in LOCALIZE_SETTINGS.items():
            budget.check(f"{variant} {name}")
            got = _plain_run(graphs, cfg.provider, setting, src, cpu.start_id, reference)
            rows.append({"variant": variant, "setting": name, **got})
            log(f"localize: {variant}, {name}: " + ", ".join(
                f"{k} {v}" for k, v in got.items() if k != "providers"))
    # the harness itself: its CPU steps give the CPU engine's first two greedy tokens
    engine = ours(cfg, "fp32", provider="cpu").translate(texts, 1)
    firsts = [tuple(int(s["top_ids"][i, 0]) for s in reference["steps"]) for i in range(len(texts))]
    found = {"sentences": len(texts), "rows": rows, "harness_matches_cpu_engine": all(
        tuple(o.tokens[:2]) == f[: len(o.tokens[:2])] for o, f in zip(engine, firsts, strict=True))}
    if rows[0]["step_top1_agreement"] != [1.0, 1.0] or rows[0]["encoder_max_diff"] > 0.01:
        budget.check("the node by node comparison")
        found["nodes"] = _node_by_node(cpu.sessions, cfg.provider, src, cpu.start_id, reference)
    mends = [r for r in rows if r["variant"] == "fp32" and r["setting"] != "as the engine"
             and r["step_top1_agreement"] == [1.0, 1.0]]
    if cfg.gpu and mends and rows[0]["step_top1_agreement"] != [1.0, 1.0]:
        found["engine_under"] = _engine_under(cfg, mends[0]["setting"], budget)
    return found


def _plain_run(sessions, provider: str, setting: dict, src, start_id: int,
               reference: dict | None) -> dict:
    """The encoder and two greedy steps of `sessions`' graph files as fresh plain sessions on
    provider under setting; with reference (the CPU fp32 run), how far they are from it."""
    import numpy as np

    from app.engine.sessions import SessionConfig, create_session

    config = SessionConfig(provider=provider, optimization=setting.get("optimization", "all"))
    with environment_set(setting.get("env", ())):
        encoder = create_session(sessions.encoder_path, config)
        decoder = create_session(sessions.decoder_path, config)
    cross_k, cross_v, src_mask = encoder.run(None, {"src_ids": src})
    if reference is not None:  # the decoder steps read the CPU's encoder output
        mine = {"cross_k": cross_k, "cross_v": cross_v}
        cross_k, cross_v = reference["cross_k"], reference["cross_v"]
        src_mask_equal = bool((src_mask == reference["src_mask"]).all())
    dtype = np.float16 if sessions.kv_dtype == np.float16 else np.float32
    feeds = _step_feeds(sessions, cross_k, cross_v, src_mask, dtype)
    tokens = np.full(src.shape[0], start_id, np.int64)
    steps = []
    names = [o.name for o in decoder.get_outputs()]
    for position in range(2):
        feeds.update(_step_at(tokens, position))
        out = dict(zip(names, decoder.run(None, feeds), strict=True))
        steps.append(out)
        for name in names[2:]:  # the caches: this run's own, as the engine keeps them
            feeds[name.removesuffix("_out")] = out[name]
        tokens = out["top_ids"][:, 0].astype(np.int64)
    found = {"providers": decoder.get_providers()}
    if reference is None:
        return {"cross_k": cross_k, "cross_v": cross_v, "src_mask": src_mask, "steps": steps}

    def gap(a, b) -> float:
        return round(float(np.abs(a.astype(np.float32) - b.astype(np.float32)).max()), 5)

    found["encoder_max_diff"] = max(gap(mine[k], reference[k]) for k in mine)
    found["src_mask_equal"] = src_mask_equal
    found["step_top1_agreement"] = [
        round(float((s["top_ids"][:, 0] == r["top_ids"][:, 0]).mean()), 4)
        for s, r in zip(steps, reference["steps"], strict=True)]
    found["step_max_logprob_diff"] = [gap(s["top_log_probs"], r["top_log_probs"])
                                      for s, r in zip(steps, reference["steps"], strict=True)]
    return found


NODE_GAP = 0.02  # relative difference of a node's output that counts as parting from the CPU


def _node_by_node(sessions, provider: str, src, start_id: int, reference: dict) -> dict:
    """Every node output of the fp32 encoder and of the first decoder step (fed the CPU's
    encoder output), unoptimized, on the provider against the CPU: the nodes in graph order
    whose output parts from the CPU's (largest difference over the CPU's largest value above
    NODE_GAP, a shape or a NaN that the CPU lacks), the first ones first."""
    import numpy as np
    import onnx

    from app.engine.sessions import SessionConfig, create_session

    feeds = _step_feeds(sessions, reference["cross_k"], reference["cross_v"],
                        reference["src_mask"], np.float32)
    feeds.update(_step_at(np.full(src.shape[0], start_id, np.int64), 0))
    found = {}
    for graph, inputs in (("encoder", {"src_ids": src}), ("decoder", feeds)):
        model = onnx.load(str(getattr(sessions, f"{graph}_path")))
        nodes = {out: node for node in model.graph.node for out in node.output if out}
        listed = {o.name for o in model.graph.output}
        for name in nodes:  # untyped outputs: ONNX Runtime types them from their nodes
            if name not in listed:
                model.graph.output.add().name = name
        values = []  # the CPU's, the provider's
        for where in ("cpu", provider):
            session = create_session(model.SerializeToString(),
                                     SessionConfig(provider=where, optimization="disable"))
            names = [o.name for o in session.get_outputs()]
            values.append(dict(zip(names, session.run(None, inputs), strict=True)))
        parted = []
        for name, node in nodes.items():
            a, b = values[0][name], values[1][name]
            row = {"node": node.name, "op": node.op_type, "output": name}
            if a.shape != b.shape:
                parted.append({**row, "shapes": [list(a.shape), list(b.shape)]})
                continue
            if a.dtype.kind not in "fc":
                if (a != b).any():
                    parted.append({**row, "unequal": round(float((a != b).mean()), 4)})
                continue
            a, b = a.astype(np.float32), b.astype(np.float32)
            if np.isnan(b).any() and not np.isnan(a).any():
                parted.append({**row, "nan": True})
                continue
            with np.errstate(invalid="ignore"):  # -inf padding on both sides is no gap
                gaps = np.where(a == b, 0.0, np.abs(a - b))
            finite = np.abs(a[np.isfinite(a)])
            gap = float(np.nanmax(gaps)) if a.size else 0.0
            if gap > NODE_GAP * max(float(finite.max()) if finite.size else 0.0, 1e-6):
                parted.append({**row, "gap": round(gap, 5)})
        found[graph] = {"nodes": len(nodes), "parted": len(parted), "first": parted[:12]}
        log(f"localize: node by node, {graph}: {len(parted)} of {len(nodes)} outputs part; "
            f"first: {parted[:3]}")
    return found


def _step_at(tokens, position: int) -> dict:
    """A greedy step's inputs for rows that all stand at `position`, reading `tokens`."""
    import numpy as np

    n = len(tokens)
    return {"tokens": tokens, "positions": np.full(n, position, np.int64),
            "past_lengths": np.full(n, position, np.int32),
            "total_length": np.array(position + 1, np.int32)}


def _step_feeds(sessions, cross_k, cross_v, src_mask, dtype) -> dict:
    """A first decoder step's feeds but the tokens and positions: the cross keys/values and
    mask given, empty caches of eight positions."""
    import numpy as np

    n, layers = src_mask.shape[0], cross_k.shape[0]
    _, heads, _, head_dim = sessions.cache_shape
    feeds = {"top_k": np.array([4], np.int64), "cross_mask": src_mask.astype(np.int32)}
    for i in range(layers):
        feeds[f"cross_k_{i}"] = cross_k[i].astype(dtype)
        feeds[f"cross_v_{i}"] = cross_v[i].astype(dtype)
        for kind in ("k", "v"):
            feeds[f"cache_{kind}_{i}"] = np.zeros((n, heads, 8, head_dim), dtype)
    return feeds


def _engine_under(cfg: CheckConfig, setting: str, budget: Budget) -> dict:
    """Greedy parity of our fp32 engine on the provider with `setting` (one that mended the
    plain sessions), on the first 100 sentences."""
    from app.engine import BundleError

    budget.check(f"the engine under {setting}")
    sources = list(cfg.sources[:100])
    reference = ours(cfg, "fp32", provider="cpu").translate(sources, 1)
    chosen = LOCALIZE_SETTINGS[setting]
    with environment_set(chosen.get("env", ())):
        try:
            got = ours(cfg, "fp32", optimization=chosen.get("optimization", "all")
                       ).translate(sources, 1)
        except BundleError as exc:  # its probe sentences still come out wrong
            return {"setting": setting, "refused": str(exc)}
    return {"setting": setting, "sentences": len(sources),
            "identical_to_cpu_fp32": agreement(reference, got),
            "bleu": bleu([o.text for o in got], cfg.references[:100] if cfg.references else None)}


def speed(make: Callable[[int], object], cfg: CheckConfig, budget: Budget, name: str) -> dict:
    """Throughput of one engine at each batch size (all sentences, sorted by length, greedy and
    beam 4, after a warm-up) and its batch-1 latency (the first latency_sentences, one call
    each); the most GPU memory (or peak RSS on the CPU) the process held after a batch size's
    passes. Past the budget it stops between batch sizes and keeps what it measured."""
    sources = list(cfg.sources)
    found = {"throughput": [], "latency": {}, "memory_mib": None,
             "memory_kind": "gpu" if cfg.gpu else "peak_rss"}
    try:
        for i, batch in enumerate(cfg.batches):
            budget.check(f"{name} batch {batch}")
            backend = make(batch)
            _passes(backend, sources, batch, name, found["throughput"], cfg.references)
            held = gpu_memory_mib([os.getpid()]) if cfg.gpu else pid_peak_rss_mb(os.getpid())
            found["memory_mib"] = max(held or 0, found["memory_mib"] or 0) or None
            if i == 0:
                budget.check(f"{name} batch-1 latency")
                found["latency"] = _latency(backend, sources[: cfg.latency_sentences])
            del backend
            gc.collect()
            log(f"speed: {name} batch {batch}: " + ", ".join(
                f"beam {r['beam']} {r['tokens_per_s']} tok/s"
                for r in found["throughput"][-len(BEAMS):]))
    except OverBudget as exc:
        found["stopped"] = str(exc)
        log(f"speed: {name}: {exc}")
    return found


def _passes(backend, sources: list[str], batch: int, name: str, rows: list[dict],
            references: tuple[str, ...] | None = None) -> None:
    """One timed pass over all sentences per search, after a warm-up; each row keeps the pass's
    BLEU, so an engine that runs fast but translates wrongly shows."""
    from bench.backends import generated_tokens, timed, warm_up

    warm_up(backend, sources)
    for beam in BEAMS:
        outputs, seconds = timed(lambda b=beam: backend.translate(sources, b))
        tokens = generated_tokens(outputs)
        rows.append({"engine": name, "batch": batch, "beam": beam, "sentences": len(sources),
                     "tokens": tokens, "seconds": round(seconds, 3),
                     "tokens_per_s": round(tokens / seconds, 1),
                     "sentences_per_s": round(len(sources) / seconds, 1),
                     "bleu": bleu([o.text for o in outputs], references)})


def _latency(backend, sources: list[str]) -> dict:
    """Per-search p50/p95 of one-sentence calls, in ms."""
    from bench.backends import batch1

    found = {}
    for beam in BEAMS:
        ms = [s * 1000 for s in batch1(backend, sources, beam)["latency_s"]]
        found[str(beam)] = {"sentences": len(ms), "p50_ms": round(percentile(ms, 50), 2),
                            "p95_ms": round(percentile(ms, 95), 2)}
    return found


def engine_speed(cfg: CheckConfig, budget: Budget) -> dict:
    """Our engine's speed: fp32, and fp16 where there is an fp16 bundle."""
    found = {"ort-fp32": speed(lambda b: ours(cfg, "fp32", b), cfg, budget, "ort-fp32")}
    if cfg.fp16_bundle is not None:
        found["ort-fp16"] = speed(lambda b: ours(cfg, "fp16", b), cfg, budget, "ort-fp16")
    return found


PROFILE_BATCH = 32
PROFILE_TOP = 12  # (op type, provider) rows kept per pass


def profile(cfg: CheckConfig, budget: Budget) -> dict:
    """Where our engine's time goes on the provider: for fp32 (and fp16 where there is a
    bundle), one greedy and one beam-4 pass over the sentences at batch 32 with ONNX Runtime's
    profiler on: the pass's wall time against the time inside the sessions' runs (the rest is
    the host's: the search, the bindings, Python), and the node time summed per op type and
    provider, the copies between host and device (Memcpy nodes) among them. The profiler adds
    its own cost, so these passes are slower than the speed part's."""
    found = {}
    for variant in ("fp32", "fp16"):
        if variant == "fp16" and cfg.fp16_bundle is None:
            continue
        budget.check(f"the {variant} profile")
        found[variant] = _profiled_passes(cfg, variant)
        log(f"profile: {variant}: " + ", ".join(
            f"beam {r['beam']} {r['inside_runs_share']:.0%} of {r['seconds']} s inside runs"
            for r in found[variant]["passes"]))
    return found


@contextlib.contextmanager
def _profiled_sessions(provider: str, folder: str, made: list, inside: list[float]):
    """Sessions on `provider` made meanwhile profile into `folder`, add the seconds spent in
    their runs to inside[0], and are listed in `made`."""
    import app.engine.sessions as sessions_module

    original = sessions_module._inference_session

    def profiled(graph, options, providers, disabled):
        if providers[0] != sessions_module.PROVIDERS[provider]:
            return original(graph, options, providers, disabled)
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(folder, f"session{len(made)}")
        session = original(graph, options, providers, disabled)
        for name in ("run", "run_with_iobinding"):
            def timed(*args, _run=getattr(session, name), **kwargs):
                started = time.perf_counter()
                try:
                    return _run(*args, **kwargs)
                finally:
                    inside[0] += time.perf_counter() - started
            setattr(session, name, timed)
        made.append(session)
        return session

    sessions_module._inference_session = profiled
    try:
        yield
    finally:
        sessions_module._inference_session = original


def _profiled_passes(cfg: CheckConfig, variant: str) -> dict:
    import json
    import tempfile
    from collections import defaultdict

    from bench.backends import timed, warm_up

    sources, made, passes, inside = list(cfg.sources), [], [], [0.0]
    # the decoder sessions are made at their first use: profiled from the warm-up on
    with (tempfile.TemporaryDirectory() as folder,
          _profiled_sessions(cfg.provider, folder, made, inside)):
        backend = ours(cfg, variant, PROFILE_BATCH)
        warm_up(backend, sources[:PROFILE_BATCH])
        for beam in BEAMS:
            inside[0] = 0.0
            _, seconds = timed(lambda b=beam: backend.translate(sources, b))
            passes.append({"beam": beam, "seconds": round(seconds, 3),
                           "inside_runs_s": round(inside[0], 3),
                           "inside_runs_share": round(inside[0] / seconds, 4)})
        nodes: dict[tuple[str, str], float] = defaultdict(float)
        for session in made:
            with open(session.end_profiling(), encoding="utf-8") as f:
                for event in json.load(f):
                    if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
                        key = (event["args"].get("op_name", "?"), event["args"].get("provider",
                                                                                        "?"))
                        nodes[key] += event["dur"] / 1e6
    total = sum(nodes.values()) or 1.0
    rows = [{"op": op, "provider": provider, "seconds": round(t, 3), "share": round(t / total, 4)}
            for (op, provider), t in sorted(nodes.items(), key=lambda kv: -kv[1])]
    copies = sum(r["seconds"] for r in rows if r["op"].startswith("Memcpy"))
    return {"batch": PROFILE_BATCH, "passes": passes, "sessions": len(made),
            "node_seconds": round(total, 3), "copies_seconds": round(copies, 3),
            "by_op": rows[:PROFILE_TOP]}


def ctranslate2_speed(cfg: CheckConfig, budget: Budget) -> dict:
    """CTranslate2 on the same weights (a model from --prepare) on the same device: float16 and
    int8_float16 on the GPU, int8 on the CPU fallback."""
    if importlib.util.find_spec("ctranslate2") is None:
        return {"skipped": "ctranslate2 is not installed"}
    if cfg.ct2_model is None:
        return {"skipped": "no CTranslate2 model (--ct2-model, or --carry with ct2-model/)"}
    found = {}
    for compute_type in cfg.ct2_types:
        name = f"ct2-{compute_type}"
        try:
            found[name] = speed(lambda b, c=compute_type: _ct2_batch(cfg, c, b), cfg, budget, name)
        except Exception as exc:  # noqa: BLE001 - one compute type failing leaves the other
            found[name] = {"error": f"{type(exc).__name__}: {exc}"}
            log(f"speed: {name} failed: {exc}")
    return found


def _ct2_batch(cfg: CheckConfig, compute_type: str, batch: int):
    backend = ct2(cfg, compute_type)
    backend.batch_size = batch
    return backend


def service(cfg: CheckConfig, budget: Budget) -> dict:
    """`python -m app.server` on cfg's provider (the fp32 variant), driven by bench.service's
    clients, each with one one-sentence request in flight, at each client count."""
    import asyncio

    from app.engine.bundle import read_manifest
    from bench.service import drive, engine_batches, start_server, stop_server

    target = read_manifest(cfg.bundle)["target_lang"]
    extra = ["--provider", cfg.provider, "--variant", "fp32",
             "--max-batch-size", str(max(cfg.batches))]
    proc, url = start_server(str(cfg.bundle), extra, cfg.threads)
    texts = list(cfg.sources[:200])
    rows, stopped = [], None
    try:
        asyncio.run(drive(url, 4, 1.0, 50, target, texts))  # warm up
        for clients in cfg.clients:
            if time.monotonic() > budget.end:
                stopped = f"over the part's {budget.seconds:.0f} s budget before {clients} clients"
                break
            before = engine_batches(url)
            row = asyncio.run(drive(url, clients, cfg.service_seconds, 20000, target, texts))
            batches = engine_batches(url) - before
            row["sentences_per_batch"] = round(row["requests"] / batches, 2) if batches else None
            rows.append(row)
            log(f"service: {clients} clients: {row['requests_per_s']} req/s, "
                f"p50 {row['p50_ms']} ms, p95 {row['p95_ms']} ms, errors {row['errors']}")
        pids = process_tree(proc.pid)
        # host memory too: the Kubernetes cuda overlay's memory limit is checked against it
        rss = sum(pid_peak_rss_mb(p) or 0 for p in pids)
        memory = gpu_memory_mib(pids) if cfg.gpu else rss
    finally:
        stop_server(proc)
    return {"rows": rows, "memory_mib": memory, "memory_kind": "gpu" if cfg.gpu else "peak_rss",
            "host_peak_rss_mib": rss, "stopped": stopped}


PARTS: dict[str, Callable[[CheckConfig, Budget], dict]] = {
    "environment": environment,
    "parity": parity,
    "localize": localize,
    "speed": engine_speed,
    "profile": profile,
    "ctranslate2": ctranslate2_speed,
    "service": service,
}


def run_part(name: str, cfg: CheckConfig) -> dict:
    """One part in its own try block: its result, or the error that stopped it."""
    log(f"{name}: start (budget {cfg.part_seconds:.0f} s)")
    started = time.monotonic()
    try:
        result = {"ok": True, **PARTS[name](cfg, Budget(cfg.part_seconds))}
    except Exception as exc:  # noqa: BLE001 - one part failing leaves the others' results
        traceback.print_exc()
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    result["seconds"] = round(time.monotonic() - started, 1)
    log(f"{name}: {'done' if result['ok'] else 'FAILED: ' + result['error']} "
        f"in {result['seconds']} s")
    return result


def check(cfg: CheckConfig, parts: tuple[str, ...] = tuple(PARTS)) -> dict:
    report = {"gpu_used": cfg.gpu,
              "headline": headline(cfg),
              "config": {k: (str(v) if isinstance(v, Path) else v)
                         for k, v in asdict(cfg).items() if k not in ("sources", "references")},
              "sentences": len(cfg.sources)}
    report["parts"] = {name: run_part(name, cfg) for name in parts}
    return report


def headline(cfg: CheckConfig) -> str:
    if cfg.gpu:
        return "CUDA execution provider on a GPU"
    return ("NO GPU WAS USED: CPU fallback, reduced sizes; these numbers say nothing about CUDA ("
            + (cfg.no_gpu_reason or "--provider cpu") + ")")


# ------------------------------------------------------------------------------ the report


def _f(x, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def markdown(report: dict) -> str:
    parts = report["parts"]
    env = parts.get("environment", {})
    gpu = ", ".join(f"{g['name']} ({g['memory_total_mib']:.0f} MiB, driver {g['driver']})"
                    for g in env.get("gpus", [])) or "none"
    lines = [f"# CUDA check: {report['headline']}", "",
             f"GPU: {gpu}. onnxruntime {env.get('onnxruntime', '?')}; "
             f"{report['sentences']} test sentences.", ""]
    for name, part in parts.items():
        if not part["ok"]:
            lines += [f"**{name} failed** after {part['seconds']} s: `{part['error']}`", ""]
    par = parts.get("parity", {})
    if par.get("rows"):
        lines += ["| variant | search | identical ids to CPU fp32 | identical to fp32 here "
                  "| BLEU | BLEU - fp32 |", "|---|---|---:|---:|---:|---:|"]
        for r in par["rows"]:
            lines.append(f"| {r['variant']} | {'greedy' if r['beam'] == 1 else 'beam 4'} "
                         f"| {r['identical_to_cpu_fp32']:.2%} "
                         f"| {_pct(r.get('identical_to_fp32'))} | {_f(r['bleu'], 2)} "
                         f"| {_f(r.get('bleu_minus_fp32'), 2)} |")
        lines += [""] + ([f"fp16: {par['fp16']}", ""] if par.get("fp16") else [])
    loc = parts.get("localize", {})
    if loc.get("rows"):
        lines += [f"Plain sessions against the CPU's fp32 ({loc['sentences']} sentences; the "
                  "steps read the CPU's encoder output):", "",
                  "| graphs | setting | encoder max diff | steps 1, 2: top-1 as the CPU "
                  "| steps 1, 2: max log-prob diff |", "|---|---|---:|---:|---:|"]
        for r in loc["rows"]:
            lines.append(f"| {r['variant']} | {r['setting']} | {r['encoder_max_diff']} "
                         f"| {', '.join(_pct(a) for a in r['step_top1_agreement'])} "
                         f"| {', '.join(str(d) for d in r['step_max_logprob_diff'])} |")
        lines += [""] + ([f"The engine under that setting: {loc['engine_under']}", ""]
                         if loc.get("engine_under") else [])
    engines = {**{k: v for k, v in parts.get("speed", {}).items() if isinstance(v, dict)},
               **{k: v for k, v in parts.get("ctranslate2", {}).items() if isinstance(v, dict)}}
    if any("throughput" in v for v in engines.values()):
        memory = ("GPU MiB held by the process" if report["gpu_used"]
                  else "peak RSS MiB of the process so far")
        lines += [f"| engine | batch | greedy tok/s | beam 4 tok/s | greedy / beam 4 BLEU "
                  f"| {memory} |", "|---|---:|---:|---:|---:|---:|"]
        for name, e in engines.items():
            if "error" in e:
                lines.append(f"| {name} | - | failed: {e['error'][:80]} | | | |")
                continue
            for batch in sorted({r["batch"] for r in e["throughput"]}):
                rows = {r["beam"]: r for r in e["throughput"] if r["batch"] == batch}
                tps = {b: r["tokens_per_s"] for b, r in rows.items()}
                scores = " / ".join(_f(rows[b].get("bleu"), 2) if b in rows else "-"
                                    for b in (1, 4))
                lines.append(f"| {name} | {batch} | {_f(tps.get(1))} | {_f(tps.get(4))} "
                             f"| {scores} | {_f(e['memory_mib'], 0)} |")
        lines += ["", "| engine | batch-1 greedy p50 / p95 ms | batch-1 beam 4 p50 / p95 ms |",
                  "|---|---:|---:|"]
        for name, e in engines.items():
            lat = e.get("latency", {})
            cells = [f"{_f(lat[b]['p50_ms'], 2)} / {_f(lat[b]['p95_ms'], 2)}" if b in lat else "-"
                     for b in ("1", "4")]
            lines.append(f"| {name} | {cells[0]} | {cells[1]} |")
        lines.append("")
    prof = {k: v for k, v in parts.get("profile", {}).items() if isinstance(v, dict)}
    for variant, pr in prof.items():
        passes = "; ".join(f"{'greedy' if r['beam'] == 1 else 'beam 4'} {r['seconds']} s, "
                           f"{r['inside_runs_share']:.0%} inside the sessions' runs"
                           for r in pr["passes"])
        lines += [f"Profile, ours {variant}, batch {pr['batch']} ({passes}); node time "
                  f"{pr['node_seconds']} s, of which copies between host and device "
                  f"{pr['copies_seconds']} s:", "", "| op | provider | seconds | share |",
                  "|---|---|---:|---:|"]
        lines += [f"| {r['op']} | {r['provider']} | {r['seconds']} | {r['share']:.1%} |"
                  for r in pr["by_op"]]
        lines.append("")
    for name, e in engines.items():
        if e.get("stopped"):
            lines += [f"{name} stopped early: {e['stopped']}", ""]
    skipped = parts.get("ctranslate2", {}).get("skipped")
    if skipped:
        lines += [f"CTranslate2: {skipped}", ""]
    svc = parts.get("service", {})
    if svc.get("rows"):
        lines += ["| service clients | req/s | p50 ms | p95 ms | sentences per engine batch "
                  "| errors |",
                  "|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['clients']} | {r['requests_per_s']} | {r['p50_ms']} | {r['p95_ms']} "
                  f"| {_f(r['sentences_per_batch'], 2)} | {r['errors']} |" for r in svc["rows"]]
        gpu_memory = (f"GPU memory {_f(svc['memory_mib'], 0)} MiB, "
                      if svc["memory_kind"] == "gpu" else "")
        lines += ["", f"Service: {gpu_memory}peak RSS of its processes "
                  f"{_f(svc['host_peak_rss_mib'], 0)} MiB."
                  + (f" Stopped early: {svc['stopped']}." if svc.get("stopped") else ""), ""]
    return "\n".join(lines) + "\n"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.2%}"


# ------------------------------------------------------------------------------ command line


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="where cuda_check.json and cuda_check.md go")
    ap.add_argument("--provider", choices=["auto", "cuda", "cpu"], default="auto",
                    help="auto: cuda where onnxruntime has it and a GPU answers, else cpu")
    ap.add_argument("--bundle", type=Path, help="the fp32 bundle (default: --carry's bundle/ "
                    "where there is one, else bundles/en-de)")
    ap.add_argument("--carry", type=Path, help="the carried folder (--prepare): its test "
                    "sentences, bundle-fp16/ and ct2-model/ are used where present")
    ap.add_argument("--src", type=Path, default=ROOT / "data" / "en-de" / "test.en")
    ap.add_argument("--ref", type=Path, help="default: --src with .de")
    ap.add_argument("--fp16-bundle", type=Path)
    ap.add_argument("--ct2-model", type=Path)
    ap.add_argument("--sentences", type=int, help="default: 500 on a GPU, 24 on the CPU")
    ap.add_argument("--batches", help="comma list; default 32,64,128 on a GPU, 8,16 on the CPU")
    ap.add_argument("--latency-sentences", type=int)
    ap.add_argument("--clients", help="comma list; default 32,128 on a GPU, 4,8 on the CPU")
    ap.add_argument("--service-seconds", type=float)
    ap.add_argument("--part-seconds", type=float, help="each part's time budget")
    ap.add_argument("--threads", type=int, default=0, help="ONNX Runtime intra-op threads")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma list of {list(PARTS)}")
    return ap.parse_args(argv)


def bundle_from(args: argparse.Namespace) -> Path:
    if args.bundle is not None:
        return args.bundle
    carried = args.carry / CARRY_FILES["bundle"] if args.carry is not None else None
    return carried if carried is not None and carried.is_dir() else SHIPPED_BUNDLE


def config_from_args(args: argparse.Namespace) -> CheckConfig:
    carry = args.carry
    src, ref = args.src, args.ref
    if carry is not None and (carry / CARRY_FILES["sources"]).is_file():
        src, ref = carry / CARRY_FILES["sources"], carry / CARRY_FILES["references"]
    ref = ref or src.with_suffix(".de")

    def carried(given: Path | None, key: str) -> Path | None:
        if given is not None or carry is None:
            return given
        return carry / CARRY_FILES[key] if (carry / CARRY_FILES[key]).is_dir() else None

    provider, reason = args.provider, ""
    if provider == "auto":
        usable, reason = cuda_status()
        provider = "cuda" if usable else "cpu"
    elif provider == "cpu":
        reason = "--provider cpu"
    sizes = GPU_SIZES if provider == "cuda" else CPU_SIZES

    def pick(value, key):
        return sizes[key] if value is None else value

    def ints(text: str | None, key: str) -> tuple[int, ...]:
        return sizes[key] if text is None else tuple(int(x) for x in text.split(","))

    sources, references = read_pairs(src, ref if ref.is_file() else None,
                                     pick(args.sentences, "sentences"))
    return CheckConfig(
        provider=provider, bundle=bundle_from(args), sources=tuple(sources),
        references=tuple(references) if references else None,
        fp16_bundle=carried(args.fp16_bundle, "fp16"), ct2_model=carried(args.ct2_model, "ct2"),
        batches=ints(args.batches, "batches"),
        latency_sentences=pick(args.latency_sentences, "latency_sentences"),
        clients=ints(args.clients, "clients"),
        service_seconds=pick(args.service_seconds, "service_seconds"),
        part_seconds=pick(args.part_seconds, "part_seconds"), threads=args.threads,
        no_gpu_reason=reason)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.out is None:
        print("--out is needed", file=sys.stderr)
        return 2
    try:
        cfg = config_from_args(args)
    except FileNotFoundError as e:  # no test split here: the corpus is built, not in git
        print(f"cuda_check: {e.filename} not found; give --src (sentences, one per line), "
              "--carry (a prepared folder) or build the corpus (docs/corpus.md)", file=sys.stderr)
        return 2
    log(headline(cfg))
    report = check(cfg, tuple(p for p in args.parts.split(",") if p))
    write_json(args.out / "cuda_check.json", report)
    table = markdown(report)
    (args.out / "cuda_check.md").write_text(table, encoding="utf-8")
    print(table, flush=True)
    return 0 if all(p["ok"] for p in report["parts"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
