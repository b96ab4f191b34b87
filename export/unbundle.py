"""Bundle -> PyTorch checkpoint: rebuild the weights from a bundle's fp32 graphs.

python -m export.unbundle bundles/en-de --out runs/en-de-recovered.pt

For going on training a shipped model when its checkpoints are gone (continue with
`python -m model.train --init-from ...`). The exporter keeps parameter names on embeddings,
biases and norms; the linear weights are stored transposed under generated names, so each one is
named after the bias its MatMul output is added to. The rebuilt checkpoint carries the bundle's
tokenizer, recipe, training log and position (step, epoch, minutes); check it with
`python -m export.verify <bundle> --checkpoint <out>` (fp32 must match to float precision).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from app.engine.bundle import BundleError, read_manifest, sha256_file
from export.graphs import OUTPUT_W, PARAM_PREFIX, QKV
from model.checkpoint import save_checkpoint
from model.config import ModelConfig
from model.tokenizer import SplitTokenizer, Tokenizer
from model.transformer import Transformer

PREFIX = PARAM_PREFIX  # the export wrappers hold the Transformer as .model


def graph_weights(path: Path, n_heads: int, head_dim: int) -> dict[str, np.ndarray]:
    """Named parameters of one exported graph (without the PREFIX)."""
    graph = onnx.load(str(path)).graph
    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    found = {n[len(PREFIX) :]: a for n, a in inits.items() if n.startswith(PREFIX)}
    for node in graph.node:
        if node.op_type == "Gather" and node.input[0] == OUTPUT_W and OUTPUT_W in inits:
            # a graph that stores a tied embedding once (export `share`, export.tie) reads it
            # from the output projection's (D, V) matrix
            found.setdefault("embeddings.lut.weight", inits[OUTPUT_W].T)
            continue
        weight = node.input[1] if node.op_type == "MatMul" and len(node.input) == 2 else None
        if weight not in inits or weight.startswith(PREFIX):
            continue
        for add in consumers.get(node.output[0], []):
            bias = next((i for i in add.input if i.endswith(".bias") and i in inits), None)
            if add.op_type == "Add" and bias:
                found[bias[len(PREFIX) : -len(".bias")] + ".weight"] = inits[weight].T
    return _split_fused(found, n_heads, head_dim)


def _split_fused(found: dict[str, np.ndarray], heads: int, head_dim: int) -> dict[str, np.ndarray]:
    """The step graph's fused Q/K/V projections back into the model's w_q, w_k, w_v, and the
    zero dimensions it may add to each self-attention head (cache_head_dim) removed."""

    def unpad(w: np.ndarray, axis: int) -> np.ndarray:
        split = w.shape[:axis] + (heads, w.shape[axis] // heads) + w.shape[axis + 1 :]
        kept = np.take(w.reshape(split), np.arange(head_dim), axis=axis + 1)  # (.., H, Dh, ..)
        return kept.reshape(w.shape[:axis] + (heads * head_dim,) + w.shape[axis + 1 :])

    for name in [n for n in found if f".{QKV}." in n]:
        head, kind = name.split(f".{QKV}.")  # kind: weight or bias
        for part, value in zip(("w_q", "w_k", "w_v"), np.split(found.pop(name), 3), strict=True):
            found[f"{head}.{part}.{kind}"] = unpad(value, 0)
        out = f"{head}.w_o.weight"
        found[out] = unpad(found[out], 1)
    return found


def bundle_tokenizer(bundle: Path, entry: dict[str, Any]) -> Tokenizer | SplitTokenizer:
    """The checkpoint tokenizer of a bundle's files: joint, or split (source, target, vocab)."""
    if "file" in entry:
        return Tokenizer((bundle / entry["file"]).read_bytes())
    source, target = ((bundle / entry[k]["file"]).read_bytes() for k in ("source", "target"))
    vocab = json.loads((bundle / entry["vocab"]["file"]).read_text(encoding="utf-8"))
    return SplitTokenizer(source, target, vocab)


def unbundle(bundle_dir: str | Path, out: str | Path) -> Path:
    """Write a checkpoint holding the bundle's fp32 weights; raises if any parameter is missing."""
    bundle = Path(bundle_dir)
    manifest = read_manifest(bundle, legacy=True)  # older formats too, to re-export them
    fp32 = manifest["variants"].get("fp32")
    if fp32 is None:
        raise ValueError(f"{bundle} has no fp32 variant to rebuild the weights from")
    arch, special = manifest["architecture"], manifest["special_tokens"]
    recipe: dict[str, Any] = manifest.get("training") or {}
    known = {f.name for f in dataclasses.fields(ModelConfig)}  # arch adds head_dim, parameters
    sizes = {k: v for k, v in arch.items() if k in known}
    architecture = recipe.get("model") or recipe  # recipes: under "model", or flat (older)
    config = ModelConfig(**sizes, dropout=architecture.get("dropout", 0.1), **special)
    model = Transformer(config)
    weights: dict[str, np.ndarray] = {}
    for graph in ("encoder", "decoder"):
        weights.update(graph_weights(bundle / fp32[graph]["file"], config.n_heads,
                                     config.head_dim))
    expected = model.state_dict()
    missing = sorted(set(expected) - set(weights))
    if missing:
        raise ValueError(f"{len(missing)} parameters not found in the graphs, e.g. {missing[:3]}")
    state = {}
    for name, tensor in expected.items():
        value = torch.tensor(weights[name])
        if value.shape != tensor.shape:
            raise ValueError(f"{name}: graph has {tuple(value.shape)}, model {tuple(tensor.shape)}")
        state[name] = value.to(tensor.dtype)
    model.load_state_dict(state)
    tokenizer = bundle_tokenizer(bundle, manifest["tokenizer"])
    position = manifest.get("checkpoint") or {}
    kept = ("step", "epoch", "train_minutes", "machines")
    extra = {k: position[k] for k in kept if position.get(k) is not None}
    return save_checkpoint(
        out,
        model,
        tokenizer,
        **extra,
        recipe=recipe,
        history=manifest.get("training_log") or [],
        recovered_from={
            "bundle": str(bundle),
            "decoder_sha256": sha256_file(bundle / fp32["decoder"]["file"]),
            "checkpoint_sha256": position.get("sha256"),
        },
    )


def main(argv: list[str] | None = None) -> int:
    first_line = __doc__.splitlines()[0]
    p = argparse.ArgumentParser(prog="python -m export.unbundle", description=first_line)
    p.add_argument("bundle", help="bundle directory with an fp32 variant")
    p.add_argument("--out", required=True, help="checkpoint file to write")
    args = p.parse_args(argv)
    try:
        path = unbundle(args.bundle, args.out)
    except (BundleError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
