"""Our engine against CTranslate2 on an Argos-shaped model, both int8, as LibreTranslate runs it.

    python -m bench.argos --work /tmp/argos-bench [--threads 2] [--sentences 64] [--rounds 2]

The model is an OpenNMT-py Transformer base as Argos Translate's packages are (d_model 512, 6 + 6
layers, 8 heads, FFN 2048, pre-norm with final norms, sinusoidal positions stored in the file,
a 50,000-token shared vocabulary tied to the output projection), with random weights, built
with CTranslate2's own spec API and quantized by it to int8 (its `model.bin` is what Argos
ships). It is packaged as an Argos package and imported with export.argos (our int8: its
weights dequantized, quantized again by ONNX Runtime's tools, activation scales calibrated).

EOS is kept out of the outputs (a large negative output bias), so every sentence runs to its
length limit in both engines: equal work. Sources are all SOURCE_TOKENS pieces long, so one
limit (10 + 1.5 x source tokens) holds for every sentence, CTranslate2's per-call limit
included. Each engine runs in a process of its own (its peak RSS is its own), alternately,
`--rounds` times: batch-32 greedy and beam-4 throughput (generated tokens per second, sorted
batches of 32), batch-1 p50 latency (greedy, one sentence per call), peak RSS (VmHWM). The
ratios ours / CTranslate2 are printed per round, with the bundle and model.bin sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

D_MODEL, HEADS, LAYERS, D_FF, VOCAB = 512, 8, 6, 2048, 50_000
SOURCE_TOKENS = 20
GAIN = 4.0  # weights larger than an initialisation, so outputs depend on the input


def fill_random(spec, rng: np.random.Generator, vocab: dict[str, int], d_ff: int,
                heads: int, gain: float = GAIN) -> None:
    """Random values for every weight a TransformerSpec leaves unset, shaped by its scope:
    embeddings (V, D), LayerNorms (D,), fused self-attention Q|K|V, cross-attention K|V,
    feed-forward, output projection (V, D); biases on every linear layer."""
    from ctranslate2.specs import model_spec

    def shape(name: str, d: int) -> tuple[int, ...] | None:
        parts = name.split("/")
        leaf, owner = parts[-1], "/".join(parts[:-1])
        if leaf in ("gamma", "beta"):
            return (d,)
        if leaf.startswith("relative_position_"):  # (2 x max distance + 1, head size)
            return (17, d // heads)
        if "embeddings" in owner:
            return (vocab["source" if name.startswith("encoder") else "target"], d)
        if owner.endswith("projection"):
            return (vocab["target"], d) if leaf == "weight" else None
        out_in = {"self_attention/linear_0": (3 * d, d), "self_attention/linear_1": (d, d),
                  "attention/linear_0": (d, d), "attention/linear_1": (2 * d, d),
                  "attention/linear_2": (d, d), "ffn/linear_0": (d_ff, d),
                  "ffn/linear_1": (d, d_ff)}
        for key, (o, i) in out_in.items():
            if owner.endswith(key):
                return (o, i) if leaf == "weight" else (o,) if leaf == "bias" else None
        return None

    d = vocab["d_model"]

    def fn(layer, name, value):
        leaf = name.split("/")[-1]
        if not (value is None or (leaf == "bias" and value == model_spec.OPTIONAL)):
            return
        dims = shape(name, d)
        if dims is None:
            return
        if leaf == "gamma":
            array = 1.0 + 0.2 * rng.standard_normal(dims, dtype=np.float32)
        elif leaf in ("beta", "bias"):
            array = 0.2 * rng.standard_normal(dims, dtype=np.float32)
        else:
            array = rng.standard_normal(dims, dtype=np.float32) * np.float32(gain / np.sqrt(
                dims[-1]))
        setattr(layer, leaf, array)

    model_spec.visit_spec(spec, fn)


def opennmt_positions(n: int, d: int) -> np.ndarray:
    """OpenNMT-py's sinusoidal table (sin on even, cos on odd dimensions), which its
    CTranslate2 converter stores in the model."""
    position = np.arange(n, dtype=np.float32)[:, None]
    inv = np.exp(np.arange(0, d, 2, dtype=np.float32) * -(np.log(10000.0) / d))
    table = np.zeros((n, d), np.float32)
    table[:, 0::2], table[:, 1::2] = np.sin(position * inv), np.cos(position * inv)
    return table


def build(work: Path, sp_model: Path) -> tuple[Path, Path]:
    """The CTranslate2 int8 model and an Argos package directory around it."""
    import sentencepiece as spm
    from ctranslate2.specs import TransformerSpec

    sp = spm.SentencePieceProcessor(model_file=str(sp_model))
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())
              if not sp.is_control(i) and not sp.is_unknown(i)]
    tokens = ["<unk>", "<blank>", "<s>", "</s>"] + pieces
    tokens += [f"\u2581x{i}" for i in range(VOCAB - len(tokens))]  # up to 50,000 entries
    spec = TransformerSpec.from_config(LAYERS, HEADS, pre_norm=True)
    fill_random(spec, np.random.default_rng(0), {"source": VOCAB, "target": VOCAB,
                                                 "d_model": D_MODEL}, D_FF, HEADS)
    spec.decoder.embeddings.weight = spec.encoder.embeddings[0].weight
    spec.decoder.projection.weight = spec.decoder.embeddings.weight
    bias = np.zeros(VOCAB, np.float32)
    bias[tokens.index("</s>")] = -1e4  # outputs run to the length limit
    spec.decoder.projection.bias = bias
    table = opennmt_positions(5000, D_MODEL)
    spec.encoder.position_encodings.encodings = table
    spec.decoder.position_encodings.encodings = table
    spec.register_source_vocabulary(tokens)
    spec.register_target_vocabulary(tokens)
    spec.validate()
    spec.optimize(quantization="int8")
    package = work / "package"
    model = package / "model"
    model.mkdir(parents=True, exist_ok=True)
    spec.save(str(model))
    (package / "sentencepiece.model").write_bytes(sp_model.read_bytes())
    (package / "metadata.json").write_text(json.dumps(
        {"package_version": "0.0", "argos_version": "1.0", "from_code": "en", "to_code": "xx",
         "type": "translate", "code": "bench-argos-shaped"}))
    return model, package


def corpus(n: int = 4000, seed: int = 0) -> list[str]:
    """Sentences of made-up words, to train the package's SentencePiece model on."""
    rng = random.Random(seed)
    syllables = [a + b for a in "bdfgklmnprstvz" for b in "aeiou"]
    words = ["".join(rng.choices(syllables, k=rng.randint(1, 3))) for _ in range(600)]
    return [" ".join(rng.choices(words, k=rng.randint(4, 16))) for _ in range(n)]


def texts(sp_model: Path, n: int, seed: int = 0) -> list[str]:
    """n texts of exactly SOURCE_TOKENS SentencePiece pieces each."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(sp_model))
    words = [sp.id_to_piece(i) for i in range(sp.get_piece_size())
             if sp.id_to_piece(i).startswith("\u2581") and len(sp.id_to_piece(i)) > 2
             and not sp.is_control(i)]
    rng, found = random.Random(seed), []
    while len(found) < n:
        text = sp.decode_pieces(rng.choices(words, k=SOURCE_TOKENS)).strip()
        if len(sp.encode(text)) == SOURCE_TOKENS:
            found.append(text)
    return found


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def worker(engine: str, work: Path, threads: int, workers: int = 0) -> dict:
    """One engine's measurements, in this process."""
    sentences = json.loads((work / "texts.json").read_text())
    limit = int(10 + 1.5 * SOURCE_TOKENS)
    if engine == "ours":
        from dataclasses import replace

        from app.engine import Translator

        translator = Translator.from_dir(work / "bundle", variant="int8", intra_threads=threads,
                                         workers=workers)
        base = replace(translator.default_options, length_penalty=1.0)

        def run(batch: list[str], beam: int) -> int:
            out = translator.translate_batch(batch, replace(base, beam_size=beam))
            return sum(len(r.tokens) for r in out)
    else:
        import ctranslate2
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=str(work / "package" / "sentencepiece.model"))
        peer = ctranslate2.Translator(str(work / "package" / "model"), device="cpu",
                                      compute_type="int8", intra_threads=threads)

        def run(batch: list[str], beam: int) -> int:
            out = peer.translate_batch([sp.encode(t, out_type=str) for t in batch],
                                       beam_size=beam, max_batch_size=32,
                                       max_decoding_length=limit, min_decoding_length=0)
            return sum(len(r.hypotheses[0]) for r in out)

    run(sentences[:4], 1)
    run(sentences[:4], 4)
    result = {"engine": engine}
    for beam, name in ((1, "greedy"), (4, "beam4")):
        started = time.perf_counter()
        tokens = sum(run(sentences[i:i + 32], beam) for i in range(0, len(sentences), 32))
        result[f"{name}_tokens_per_s"] = tokens / (time.perf_counter() - started)
        result[f"{name}_tokens"] = tokens
    latencies = []
    for text in sentences[:16]:
        started = time.perf_counter()
        run([text], 1)
        latencies.append(time.perf_counter() - started)
    result["batch1_p50_ms"] = 1000 * statistics.median(latencies)
    result["peak_rss_mb"] = _rss_mb()
    return result


def _sizes(work: Path) -> dict:
    from app.engine.bundle import variant_bytes

    bundle = json.loads((work / "bundle" / "manifest.json").read_text())
    ours = variant_bytes(work / "bundle", bundle["variants"]["int8"])
    theirs = (work / "package" / "model" / "model.bin").stat().st_size
    return {"ours_int8_bytes": ours, "ct2_int8_model_bin_bytes": theirs,
            "ratio": ours / theirs}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--sentences", type=int, default=64)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--worker", choices=["ours", "ct2"], help=argparse.SUPPRESS)
    p.add_argument("--workers", type=int, default=0,
                   help="our engine's decode workers (0: its default for the threads)")
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.work, args.threads, args.workers)))
        return 0
    args.work.mkdir(parents=True, exist_ok=True)
    if not (args.work / "bundle" / "manifest.json").is_file():
        from model.tokenizer import train_tokenizer

        sp_model = train_tokenizer(corpus(), args.work / "sp.model", vocab_size=400)
        sentences = texts(sp_model, args.sentences)
        (args.work / "texts.json").write_text(json.dumps(sentences))
        (args.work / "calibration.txt").write_text("\n".join(sentences[:32]) + "\n")
        _, package = build(args.work, sp_model)
        from export.argos import import_package

        import_package(package, args.work / "bundle", sentences=args.work / "calibration.txt")
    sizes = _sizes(args.work)
    print(json.dumps({"sizes": sizes}))
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    for round_ in range(args.rounds):
        found = {}
        for engine in ("ours", "ct2") if round_ % 2 == 0 else ("ct2", "ours"):
            done = subprocess.run([sys.executable, "-m", "bench.argos", "--work", str(args.work),
                                   "--threads", str(args.threads), "--worker", engine,
                                   "--workers", str(args.workers)],
                                  capture_output=True, text=True, env=env, check=True)
            found[engine] = json.loads(done.stdout.strip().splitlines()[-1])
        ours, ct2 = found["ours"], found["ct2"]
        ratios = {k: round(ours[k] / ct2[k], 3) for k in ours if k != "engine"}
        print(json.dumps({"round": round_ + 1, "ours": ours, "ct2": ct2,
                          "ratios_ours_over_ct2": ratios}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
