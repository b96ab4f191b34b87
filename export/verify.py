"""Parity check: a bundle's ONNX graphs against the PyTorch checkpoint they came from.

python -m export.verify <bundle> --checkpoint ckpt.pt [--sentences file] [--record]

Per variant, on real sentences:
- log-probs: the reference greedy output is fed token by token through the ONNX decoder (with its
  cache) and through PyTorch; the largest absolute log-prob difference must be within --tolerance
  for fp32; top1_agreement is the share of those steps where both pick the same next token;
- greedy: the engine's greedy output (app.engine) against model.search.greedy_search; fp32 must be
  identical on every sentence, other variants report the agreement rate (--min-agreement to gate);
- beam: the engine's beam search (beam 4, 2-best) against model.search.beam_search on the first
  sentences (reported; the tests enforce identity on the tiny model);
- speed: generated tokens per second of batched greedy decoding.
A CUDA-only variant (fp16) is checked on the CPU provider when CUDA is absent: agreement only.
Exits 1 when a check fails. --record writes the numbers into manifest.json and MODEL_CARD.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import torch

from app.engine.bundle import BundleError, load_bundle, read_manifest
from app.engine.sessions import PROVIDERS, SessionConfig
from app.engine.step import DecodeState
from app.engine.translator import Translator
from app.engine.types import TranslationOptions
from export.bundle import save_manifest
from model.checkpoint import load_model
from model.search import beam_search, greedy_search
from model.transformer import Transformer

FP32_TOLERANCE = 1e-3  # max |log-prob difference|, ONNX fp32 vs PyTorch fp32
BEAM_SENTENCES = 8
DEFAULT_SENTENCES = [
    "Open the file.",
    "Save changes to the document before closing?",
    "The package could not be installed because of unmet dependencies.",
    "Do you want to continue?",
    "Cannot connect to the server.",
    "Select the printer you want to use.",
    "The operation was cancelled by the user.",
    "Insert a new row above the selected cell.",
    "Error: the disk is full.",
    "Please enter your password.",
    "Show hidden files",
    "Download updates automatically",
    "This setting applies to all users of the computer.",
    "The file %s already exists. Do you want to replace it?",
    "Close",
    "Keyboard layout",
]


@dataclass
class Report:
    variants: dict[str, dict[str, Any]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    def summary(self) -> str:
        lines = [f"{v}: {json.dumps(r)}" for v, r in self.variants.items()]
        lines += [f"FAIL {f}" for f in self.failures] or ["parity check passed"]
        return "\n".join(lines)


def read_sentences(path: str | Path | None, limit: int = 200) -> list[str]:
    if path is None:
        return list(DEFAULT_SENTENCES)
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip()][:limit]


@torch.no_grad()
def reference_log_probs(model: Transformer, source: list[int], target: list[int]) -> np.ndarray:
    """PyTorch log-probs (T, V) at every step of [BOS] + target, teacher forced."""
    c = model.config
    src = torch.tensor([source + [c.eos_id]])  # (1, S)
    memory, src_mask = model.encode(src)
    tokens = torch.tensor([[c.start_id] + target])  # (1, T)
    positions = torch.arange(tokens.size(1))[None]  # (1, T)
    logits, _ = model.decode_step(tokens, positions, model.cross_kv(memory), src_mask)
    return torch.log_softmax(logits[0].float(), dim=-1).numpy()  # (T, V)


def onnx_log_probs(translator: Translator, source: list[int], target: list[int]) -> np.ndarray:
    """ONNX log-probs (T, V) at every step of [BOS] + target, one token at a time via the cache
    (the step graph's top-k with k = V, put back in vocabulary order)."""
    s = translator.sessions
    vocab = int(translator.bundle.architecture["vocab_size"])
    src = np.array([source + [translator.eos_id]], dtype=np.int64)  # (1, S)
    state = DecodeState.start(*s.encode(src), rows_per_sentence=1, max_len=len(target) + 1,
                              head_dim=s.cache_head_dim)
    rows = []
    for step, token in enumerate([translator.start_id] + target):
        at = np.array([step])
        top, ids = s.step(state, np.array([token]), at, at.astype(np.int32), vocab)  # (1, V)
        row = np.empty(vocab, dtype=np.float32)
        row[ids[0]] = top[0]
        rows.append(row)
    return np.stack(rows)  # (T, V)


def _check_variant(
    translator: Translator,
    model: Transformer,
    sources: list[list[int]],
    ref_greedy: list[list[int]],
    ref_beam: list[list[list[int]]],
) -> dict[str, Any]:
    max_diff, agree, steps = 0.0, 0, 0
    for source, target in zip(sources, ref_greedy, strict=True):
        ref = reference_log_probs(model, source, target)
        got = onnx_log_probs(translator, source, target)
        max_diff = max(max_diff, float(np.abs(ref - got).max()))
        agree += int((got.argmax(axis=1) == ref.argmax(axis=1)).sum())
        steps += len(got)
    started = time.perf_counter()
    greedy = translator.translate_ids(sources, TranslationOptions(beam_size=1))
    elapsed = time.perf_counter() - started
    generated = sum(len(h[0].tokens) + 1 for h in greedy)
    same = [h[0].tokens == r for h, r in zip(greedy, ref_greedy, strict=True)]
    beam = translator.translate_ids(
        sources[: len(ref_beam)], TranslationOptions(beam_size=4, num_alternatives=1)
    )
    beam_same = [[h.tokens for h in b] == r for b, r in zip(beam, ref_beam, strict=True)]
    return {
        "sentences": len(sources),
        "max_abs_logprob_diff": float(f"{max_diff:.3g}"),
        "top1_agreement": round(agree / steps, 4),
        "greedy_agreement": round(sum(same) / len(same), 4),
        "beam_agreement": round(sum(beam_same) / len(beam_same), 4),
        "tokens_per_s": round(generated / elapsed, 1),
    }


def verify_bundle(
    bundle_dir: str | Path,
    checkpoint: str | Path,
    sentences_file: str | Path | None = None,
    tolerance: float = FP32_TOLERANCE,
    min_agreement: float = 0.0,
    record: bool = False,
    threads: int = 0,
) -> Report:
    """Check every variant of the bundle that can run here; see the module docstring.
    threads > 0 sets both ONNX Runtime's intra-op threads and PyTorch's (restored after)."""
    saved = torch.get_num_threads()
    if threads > 0:
        torch.set_num_threads(threads)
    try:
        report, manifest = _verify(
            bundle_dir, checkpoint, sentences_file, tolerance, min_agreement, threads
        )
    finally:
        torch.set_num_threads(saved)
    if record and report.variants:
        for variant, result in report.variants.items():
            manifest["variants"][variant]["verification"] = result
        save_manifest(bundle_dir, manifest)
    return report


def _verify(bundle_dir, checkpoint, sentences_file, tolerance, min_agreement, threads):
    model, tokenizer, _ = load_model(checkpoint)
    manifest = read_manifest(bundle_dir)
    report = Report()
    files = load_bundle(bundle_dir).tokenizer_files.values()
    if {path.name: path.read_bytes() for path in files} != tokenizer.bundle_files():
        report.failures.append(f"{bundle_dir}: its tokenizer files are not the checkpoint's")
        return report, manifest
    limit = model.config.max_positions - 1
    sources = [ids[:limit] for ids in tokenizer.encode_batch(read_sentences(sentences_file))]
    ref_greedy = [
        out for i in range(0, len(sources), 32) for out in greedy_search(model, sources[i : i + 32])
    ]
    ref_beam = [
        [h.tokens for h in beam_search(model, s, beam_size=4, n_best=2)]
        for s in sources[:BEAM_SENTENCES]
    ]
    for variant, entry in manifest["variants"].items():
        has_cuda = PROVIDERS["cuda"] in ort.get_available_providers()
        provider = "cpu" if "cpu" in entry["providers"] or not has_cuda else "cuda"
        translator = Translator(
            load_bundle(bundle_dir, variant), SessionConfig(provider, intra_op_threads=threads)
        )
        result = _check_variant(translator, model, sources, ref_greedy, ref_beam)
        result["provider"] = provider
        if provider not in entry["providers"]:
            result["note"] = f"checked on {provider} (its providers are not available here)"
        if variant == "fp32":
            result["tolerance"] = tolerance
            if result["max_abs_logprob_diff"] > tolerance:
                report.failures.append(
                    f"fp32 log-probs differ by {result['max_abs_logprob_diff']} > {tolerance}"
                )
            if result["greedy_agreement"] < 1.0:
                report.failures.append(
                    f"fp32 greedy outputs differ from PyTorch's on "
                    f"{1 - result['greedy_agreement']:.1%} of the sentences"
                )
        elif result["greedy_agreement"] < min_agreement:
            report.failures.append(
                f"{variant} greedy agreement {result['greedy_agreement']} < {min_agreement}"
            )
        result["passed"] = not any(f.startswith(variant) for f in report.failures)
        report.variants[variant] = result
    return report, manifest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m export.verify", description=__doc__.splitlines()[0])
    p.add_argument("bundle", help="bundle directory")
    p.add_argument(
        "--checkpoint", required=True, help="the checkpoint the bundle was exported from"
    )
    p.add_argument("--sentences", help="source sentences, one per line (default: built-in set)")
    p.add_argument("--tolerance", type=float, default=FP32_TOLERANCE, help="fp32 max log-prob diff")
    p.add_argument(
        "--min-agreement", type=float, default=0.0, help="least greedy agreement for int8/fp16"
    )
    p.add_argument("--record", action="store_true", help="write the numbers into manifest.json")
    p.add_argument("--threads", type=int, default=0, help="ONNX Runtime and PyTorch threads")
    args = p.parse_args(argv)
    try:
        report = verify_bundle(
            args.bundle,
            args.checkpoint,
            args.sentences,
            args.tolerance,
            args.min_agreement,
            args.record,
            args.threads,
        )
    except (BundleError, OSError) as exc:  # not a bundle, no such checkpoint or sentence file
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(report.summary())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
