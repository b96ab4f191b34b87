"""Put a reranking language model into a bundle, with its weight chosen on dev.

    python -m export.lm runs/lm.ngram.bin bundles/en-de --tune data/en-de-v3/dev.general \
        --tune data/en-de/dev

The model is one of two kinds. A count-based n-gram model (model/ngram.py) is copied as
`lm.ngram.bin` once it is known to count the bundle's own pieces. A neural one (model/lm.py, a
checkpoint) is written as a graph (node by node, as export.graphs writes the translation
model's):

    ids (B, T) int64: BOS, a hypothesis' tokens, EOS, then padding
 -> log_prob (B,) float32: the log-probability of each row's tokens after BOS

is quantized to int8 (dynamic, as the int8 variant) and checked against PyTorch, then stored as
`lm.int8.onnx` under the manifest's `rerank` entry. The engine ranks a sentence's `candidates`
best hypotheses by their score plus `weight` times the language model's log-probability per
token (docs/engine.md, "Reranking with a language model").

--tune translates each dev set once with the bundle's beam search, keeping `candidates`
hypotheses per sentence, and scores the weights of WEIGHTS on their concatenation (sacreBLEU):
the best one is kept where it gains at least MIN_GAIN BLEU over no reranking, else the entry is
written with weight 0 and the engine does not rerank.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper
from tqdm import tqdm

from app.engine.bundle import file_entry, read_manifest
from app.engine.ngram import MAGIC as NGRAM_MAGIC
from app.engine.ngram import NgramModel
from app.engine.rerank import Reranker, keeps, lm_rows
from export.bundle import save_manifest
from export.graphs import POSITIONS, _Builder, _self_attention
from export.variants import quantize_int8
from model.data import read_corpus
from model.lm import LanguageModel, load_lm
from model.tokenizer import BOS_ID, EOS_ID, PAD_ID

LM_FILE = "lm.int8.onnx"  # a neural language model (model/lm.py)
NGRAM_FILE = "lm.ngram.bin"  # a count-based one (model/ngram.py)
WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0)
MIN_GAIN = 0.3  # BLEU: as for the length penalty (export.evaluate --min-gain)
TOLERANCE = 0.05  # largest difference of a sentence's log-probability per token, int8 vs PyTorch


@torch.no_grad()
def build_lm_graph(model: LanguageModel) -> onnx.ModelProto:
    """The scoring graph of a language model (module docstring)."""
    s = model.shape
    g = _Builder()
    ids = "ids"
    real = g.op("Not", [g.op("Equal", [ids, g.const("pad", np.array(PAD_ID))])])  # (B, T)
    key_mask = g.op("Cast", [real], to=TensorProto.INT32)
    table = g.const("embeddings", model.embeddings.weight.numpy(), True)  # (V, D)
    emb = g.op("Mul", [g.op("Gather", [table, ids]),
                       g.const("emb_scale", np.array(model.embeddings.scale, np.float32))])
    length = g.op("Shape", [ids], start=1, end=2)
    pos = g.op("Slice", [g.const(POSITIONS, model.positional.table.numpy(), True),
                         g.const("zero", np.array([0])), length])
    x = g.op("Add", [emb, pos])  # (B, T, D)
    d = s.d_model
    for i, layer in enumerate(model.layers):
        p = f"layers.{i}"
        qkv_proj, out_proj = _self_attention(layer, s.n_heads, d // s.n_heads)
        qkv = g.linear(x, qkv_proj, f"{p}.self_attn.qkv")
        q, k, v = g.op("Split", [qkv, g.const("thirds", np.array([d, d, d]))], n_out=3, axis=-1)
        attn = g.op("MultiHeadAttention", [q, k, v, "", key_mask], domain="com.microsoft",
                    num_heads=s.n_heads, unidirectional=1)  # the look-ahead mask
        attn = g.linear(attn, out_proj, f"{p}.self_attn.w_o")
        x = g.layer_norm(x, attn, layer.attn_norm, f"{p}.attn_norm")
        x = g.feed_forward(x, layer, p, "relu")
    # position t predicts token t + 1: the log-softmax of positions 0..T-2 at tokens 1..T-1
    projection = g.const("projection", model.embeddings.weight.numpy().T.copy(), True)  # (D, V)
    start, end, axis = (g.const(n, np.array([v])) for n, v in
                        (("from0", 0), ("to_last", -1), ("axis1", 1)))
    states = g.op("Slice", [x, start, end, axis])  # (B, T - 1, D)
    logp = g.op("LogSoftmax", [g.op("MatMul", [states, projection])], axis=-1)  # (B, T-1, V)
    nxt = g.op("Slice", [ids, g.const("from1", np.array([1])), g.const("to_end",
                         np.array([np.iinfo(np.int64).max])), axis])  # (B, T - 1)
    picked = g.op("GatherElements", [logp, g.op("Unsqueeze", [nxt, g.const("axis2",
                                                                          np.array([2]))])],
                  axis=2)  # (B, T - 1, 1)
    picked = g.op("Squeeze", [picked, g.const("axis2b", np.array([2]))])
    keep = g.op("Cast", [g.op("Slice", [real, g.const("from1b", np.array([1])),
                                        g.const("to_endb", np.array([np.iinfo(np.int64).max])),
                                        axis])], to=TensorProto.FLOAT)
    g.nodes.append(helper.make_node("ReduceSum", [g.op("Mul", [picked, keep]),
                                                  g.const("axes", np.array([1]))],
                                    ["log_prob"], keepdims=0))
    shapes = {"ids": (TensorProto.INT64, ["batch", "length"]),
              "log_prob": (TensorProto.FLOAT, ["batch"])}
    return g.model("language_model", {"inputs": ["ids"], "outputs": ["log_prob"]}, shapes)


def check(model: LanguageModel, path: Path, token_lists: list[list[int]]) -> float:
    """The largest difference of log-probability per token between the graph at path and
    PyTorch, over token_lists (scored 8 at a time, padded as the engine pads)."""
    reranker = Reranker(path, 0.0, 2, BOS_ID, EOS_ID, PAD_ID)  # the engine's session
    worst = 0.0
    for i in range(0, len(token_lists), 8):
        chunk = token_lists[i : i + 8]
        got = reranker.per_token(chunk)
        want = model.log_probs(torch.from_numpy(lm_rows(chunk, BOS_ID, EOS_ID, PAD_ID))).numpy()
        per_token = np.array([len(t) + 1 for t in chunk])
        worst = max(worst, float(np.abs(got - want / per_token).max()))
    return worst


def tune(bundle: Path, dev: list[str], candidates: int) -> dict:
    """BLEU of each weight of WEIGHTS on the dev sets' concatenation (module docstring)."""
    import sacrebleu

    from app.engine import Translator
    from app.engine.types import TranslationOptions

    translator = Translator.from_dir(bundle)
    special = translator.bundle.special_tokens
    reranker = Reranker(translator.bundle.language_model_path, 0.0, candidates,
                        special["bos_id"], special["eos_id"], special["pad_id"],
                        special.get("unk_id"))
    d = translator.default_options
    options = TranslationOptions(beam_size=d.beam_size, length_penalty=d.length_penalty,
                                 max_len_offset=d.max_len_offset,
                                 max_len_ratio=d.max_len_ratio,
                                 num_alternatives=candidates - 1, rerank=False)
    one = dataclasses.replace(options, num_alternatives=0)
    pairs = [pair for prefix in dev
             for pair in read_corpus(prefix, translator.source_lang, translator.target_lang)]
    sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
    started = time.monotonic()
    # per sentence: its hypotheses' texts, scores, language model scores and whether each
    # keeps the names the best one copied (the engine ranks those first: rerank.keeps)
    lists = []
    for i in tqdm(range(0, len(sources), 32), desc="tuning", unit="batch"):
        chunk = sources[i : i + 32]
        written = [t for t in chunk if t.strip()]  # a blank line translates to nothing
        found = dict(zip(written, translator.translate_ids(translator.encode(written), options),
                         strict=True)) if written else {}
        for text in chunk:
            hyps = found.get(text)
            if not hyps:
                lists.append(([""], np.zeros(1), np.zeros(1), np.ones(1, dtype=bool)))
                continue
            source = translator.source(text)
            tokens = [h.tokens for h in hyps]
            lists.append(([translator.result([h], one, source).text for h in hyps],
                          np.array([h.normalized for h in hyps]),
                          reranker.per_token(tokens), keeps(tokens, source.names)))
    bleu = {}
    for weight in WEIGHTS:
        picked = [texts[int(np.argmax(np.where(kept, scores + weight * lm, -np.inf)))]
                  for texts, scores, lm, kept in lists]
        bleu[weight] = round(sacrebleu.corpus_bleu(picked, [refs]).score, 2)
    best = max(WEIGHTS, key=lambda w: (bleu[w], -w))
    chosen = best if bleu[best] >= bleu[0.0] + MIN_GAIN else 0.0
    return {"data": dev, "sentences": len(sources), "variant": translator.variant,
            "beam_size": options.beam_size, "bleu": {str(w): b for w, b in bleu.items()},
            "chosen": chosen, "min_gain": MIN_GAIN,
            "minutes": round((time.monotonic() - started) / 60, 1)}


def _neural(checkpoint: str | Path, bundle: Path, manifest: dict, dev: list[str]) -> dict:
    """Write a neural language model's int8 graph into bundle (checked against PyTorch);
    returns what the manifest records of it."""
    model, tok, state = load_lm(checkpoint)
    if (bundle / manifest["tokenizer"]["file"]).read_bytes() != tok.state():
        raise SystemExit(f"{checkpoint} reads another tokenizer than {bundle}'s: a language "
                         "model must read the translation model's pieces")
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = Path(tmp) / "lm.fp32.onnx"
        onnx.save(build_lm_graph(model), str(fp32))
        quantize_int8(fp32, bundle / LM_FILE)
    probe = tok.encode_batch(
        Path(f"{dev[0]}.{manifest['target_lang']}").read_text("utf-8").splitlines()[:64]
        if dev else ["Das ist ein Satz.", "Wo ist der Bahnhof?"])
    diff = check(model, bundle / LM_FILE, probe)
    if diff > TOLERANCE:
        raise SystemExit(f"{LM_FILE}: log-probability per token differs from PyTorch's by "
                         f"{diff:.3f} (tolerance {TOLERANCE})")
    return {"kind": "neural", "shape": state["shape"], "step": state["step"],
            "train_minutes": state["train_minutes"], "machines": state["machines"],
            "dev_perplexity": (state["history"] or [{}])[-1].get("dev_perplexity"),
            "int8_max_diff_per_token": round(diff, 4)}


def _ngram(path: str | Path, bundle: Path, manifest: dict) -> dict:
    """Copy an n-gram file (model/ngram.py) into bundle; returns what it records of its
    making."""
    info = NgramModel(path).info
    if info.get("tokenizer_sha256") != manifest["tokenizer"]["sha256"]:
        raise SystemExit(f"{path} counted the pieces of another tokenizer than {bundle}'s: a "
                         "language model must read the translation model's pieces")
    shutil.copyfile(path, bundle / NGRAM_FILE)
    return {k: v for k, v in info.items() if k != "tokenizer_sha256"}


def export_lm(lm: str | Path, bundle: str | Path, dev: list[str],
              candidates: int | None = None, weight: float | None = None) -> dict:
    """Write the language model (a neural checkpoint, or an n-gram file) into bundle and
    its `rerank` entry into the manifest; returns the entry."""
    bundle = Path(bundle)
    manifest = read_manifest(bundle)
    if "file" not in manifest["tokenizer"]:
        raise SystemExit(f"{bundle} has a source and a target tokenizer: a language model reads "
                         "the pieces of a joint one (the bundles this project trains)")
    candidates = candidates or int(manifest["decoding"]["beam_size"])
    with open(lm, "rb") as f:
        ngram = f.read(len(NGRAM_MAGIC)) == NGRAM_MAGIC
    info = _ngram(lm, bundle, manifest) if ngram else _neural(lm, bundle, manifest, dev)
    name, other = (NGRAM_FILE, LM_FILE) if ngram else (LM_FILE, NGRAM_FILE)
    (bundle / other).unlink(missing_ok=True)  # the previous entry's model
    entry = {"language_model": file_entry(bundle, name), "candidates": candidates,
             "weight": 0.0 if weight is None else weight, "model": info}
    manifest["rerank"] = entry
    save_manifest(bundle, manifest)
    if dev and weight is None:
        entry["tuning"] = tune(bundle, dev, candidates)
        entry["weight"] = entry["tuning"]["chosen"]
        save_manifest(bundle, manifest)
    return entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m export.lm", description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("lm", help="a language model: a checkpoint (python -m model.lm) or an "
                        "n-gram file (python -m model.ngram)")
    parser.add_argument("bundle", help="the bundle whose n-best lists it reranks")
    parser.add_argument("--tune", action="append", default=[], metavar="PREFIX",
                        help="a dev set (PREFIX.<src>, PREFIX.<tgt>) to choose the weight on")
    parser.add_argument("--weight", type=float, help="the weight, instead of --tune")
    parser.add_argument("--candidates", type=int,
                        help="hypotheses reranked per sentence (default: the beam size)")
    args = parser.parse_args(argv)
    entry = export_lm(args.lm, args.bundle, args.tune, args.candidates, args.weight)
    print(f"{args.bundle}: {entry['language_model']['file']}, weight {entry['weight']}, "
          f"{entry['candidates']} candidates")
    for weight, bleu in entry.get("tuning", {}).get("bleu", {}).items():
        print(f"  weight {weight}: BLEU {bleu}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
