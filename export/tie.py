"""Store a bundle's weights once when its graphs were exported without `share`.

    python -m export.tie bundles/en-de [--variants int8]

A bundle exported before `share` (export.graphs) keeps the tied embedding three times: the
encoder's table, the decoder's scaled table and the output projection's matrix. Re-exporting it
would quantize and calibrate its int8 variant again; here its own graphs are rewritten instead,
their quantization left as it is:

1. each embedding Gather that reads a (V, D) table equal to the output projection's matrix
   (transposed, times 1 or sqrt(D)) reads the projection's columns instead, as a graph written
   with `share` does (export.graphs.gather_columns); the table goes;
2. the variant's weights move into one file both graphs read (export.shared.store_once), and in
   the int8 variant the Gathers read the projection's int8 matrix and its per-entry scales.

The fp32 rewrite is exact (checked bit for bit), so its measurements stay. The int8 embedding
becomes the projection's int8 matrix, so that variant's verification and scores are dropped:
measure them again with `python -m export.verify --record` and `python -m export.evaluate
--record`. Needs the `train` extra (onnx).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from export.graphs import OUTPUT_W
from export.shared import share_int8_embedding

QUANTIZED = ("_quantized", "_scale", "_zero_point")  # ONNX Runtime's quantizer's suffixes


def _projection(decoder: onnx.ModelProto, vocab: int, d_model: int) -> str:
    """The name of the decoder's output projection matrix, (D, V): its float initializer, or
    the base name of the quantizer's `<name>_quantized`."""
    found = set()
    for init in decoder.graph.initializer:
        if tuple(init.dims) == (d_model, vocab):
            found.add(init.name.removesuffix("_quantized"))
    if len(found) != 1:
        raise ValueError(f"expected one ({d_model}, {vocab}) output projection in the decoder, "
                         f"found {sorted(found) or 'none'}")
    return found.pop()


def _rename(model: onnx.ModelProto, names: dict[str, str]) -> None:
    for init in model.graph.initializer:
        init.name = names.get(init.name, init.name)
    for node in model.graph.node:
        node.input[:] = [names.get(x, x) for x in node.input]


def _matrix(decoder: onnx.ModelProto) -> tuple[np.ndarray, np.ndarray | None]:
    """The projection's matrix (D, V) as floats, and its per-entry quantization step (V,)
    where it is int8 (None for a float matrix)."""
    inits = {i.name: i for i in decoder.graph.initializer}
    if OUTPUT_W in inits:
        return numpy_helper.to_array(inits[OUTPUT_W]), None
    q, scale, zero = (inits.get(OUTPUT_W + s) for s in QUANTIZED)
    if q is None or scale is None:
        raise ValueError(f"the decoder has neither {OUTPUT_W} nor its int8 copy and scale")
    if zero is not None and numpy_helper.to_array(zero).any():
        raise ValueError("the output projection is quantized with zero points: not tied here")
    step = np.broadcast_to(numpy_helper.to_array(scale), (q.dims[1],)).astype(np.float32)
    return numpy_helper.to_array(q).astype(np.float32) * step, step  # (D, V), (V,)


def _tie_scale(table: np.ndarray, matrix: np.ndarray, step: np.ndarray | None,
               d_model: int) -> float | None:
    """s where table (V, D) is s x matrix^T: bit for bit for a float matrix, within half a
    quantization step per entry for an int8 one; None when it is neither (not tied)."""
    for s in (1.0, math.sqrt(d_model)):  # an embedding table, unscaled or scaled
        if step is None:
            if np.array_equal(table, matrix.T * np.float32(s)):
                return s
        elif np.all(np.abs(table / np.float32(s) - matrix.T) <= step[:, None] * 0.5001):
            return s
    return None


def _input_rank(model: onnx.ModelProto, name: str) -> int:
    for value in model.graph.input:
        if value.name == name:
            return len(value.type.tensor_type.shape.dim)
    raise ValueError(f"embedding ids {name!r} are not a graph input: their rank is unknown")


def _tie_gathers(model: onnx.ModelProto, matrix: np.ndarray, step: np.ndarray | None,
                 d_model: int) -> int:
    """Gathers of tables tied to the projection -> gathers of its columns (then transposed and
    scaled as the table was); the tables go. Returns how many were rewritten."""
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    vocab = matrix.shape[1]
    nodes, dropped = [], set()
    for node in graph.node:
        table = inits.get(node.input[0]) if node.op_type == "Gather" else None
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        s = None
        if table is not None and axis == 0 and tuple(table.dims) == (vocab, d_model):
            s = _tie_scale(numpy_helper.to_array(table), matrix, step, d_model)
        if s is None:
            nodes.append(node)
            continue
        ids, out = node.input[1], node.output[0]
        rank = _input_rank(model, ids)
        columns = f"{out}_columns"
        rows = out if s == 1.0 else f"{out}_rows"
        nodes += [helper.make_node("Gather", [OUTPUT_W, ids], [columns], axis=1),  # (D, *ids)
                  helper.make_node("Transpose", [columns], [rows],
                                   perm=[*range(1, rank + 1), 0])]  # (*ids, D)
        if s != 1.0:
            scale = f"{out}_embedding_scale"
            graph.initializer.append(numpy_helper.from_array(np.array(s, np.float32), scale))
            nodes.append(helper.make_node("Mul", [rows, scale], [out]))
        dropped.add(table.name)
    if dropped:
        del graph.node[:]
        graph.node.extend(nodes)
        still_read = {x for n in graph.node for x in n.input}
        kept = [i for i in graph.initializer if i.name not in dropped or i.name in still_read]
        del graph.initializer[:]
        graph.initializer.extend(kept)
    return len(dropped)


def tie_embeddings(encoder: onnx.ModelProto, decoder: onnx.ModelProto, vocab: int,
                   d_model: int) -> int:
    """Rewrite both graphs of a variant so their embedding Gathers read the decoder's output
    projection (named OUTPUT_W, as export.graphs names it); returns the number of Gathers
    rewritten (0: nothing tied to the projection)."""
    name = _projection(decoder, vocab, d_model)
    if name != OUTPUT_W:
        _rename(decoder, {name + s: OUTPUT_W + s for s in ("", *QUANTIZED)})
    matrix, step = _matrix(decoder)
    count = _tie_gathers(decoder, matrix, step, d_model)
    encoder_count = _tie_gathers(encoder, matrix, step, d_model)
    names = {i.name for i in encoder.graph.initializer}
    if encoder_count and step is None and OUTPUT_W not in names:  # the float matrix, a copy
        encoder.graph.initializer.append(
            next(i for i in decoder.graph.initializer if i.name == OUTPUT_W))
    if step is not None:  # int8: the Gathers read the int8 matrix and its per-entry scales
        share_int8_embedding(encoder, decoder)
    return count + encoder_count


def tie_variant(bundle_dir: Path, manifest: dict, variant: str) -> int:
    """Tie and store once one variant of the bundle in place; updates manifest's entry (the
    caller saves it). Returns the number of Gathers rewritten."""
    from export.bundle import share_variant

    entry = manifest["variants"][variant]
    if "weights" in entry:
        raise ValueError(f"variant {variant} already stores its weights once "
                         f"({entry['weights']['file']})")
    arch = manifest["architecture"]
    if arch.get("tied_output") is False or arch.get("source_vocab_size"):
        raise ValueError("the model's embeddings are not tied to its output projection")
    paths = [bundle_dir / entry[g]["file"] for g in ("encoder", "decoder")]
    encoder, decoder = (onnx.load(str(p)) for p in paths)
    count = tie_embeddings(encoder, decoder, arch["vocab_size"], arch["d_model"])
    if not count:
        raise ValueError(f"no embedding Gather of variant {variant} reads a table tied to the "
                         "output projection")
    for model, path in zip((encoder, decoder), paths, strict=True):
        onnx.checker.check_model(model)
        onnx.save(model, str(path))
    share_variant(bundle_dir, entry, variant)
    return count


def main(argv: list[str] | None = None) -> int:
    from app.engine.bundle import load_bundle
    from export.bundle import save_manifest
    from export.requantize import forget_measurements

    p = argparse.ArgumentParser(prog="python -m export.tie", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bundle", type=Path)
    p.add_argument("--variants", default="int8", help="comma list (default: int8)")
    args = p.parse_args(argv)
    try:
        variants = args.variants.split(",")
        if set(variants) - {"fp32", "int8"}:
            raise ValueError(f"only fp32 and int8 variants are rewritten, not {variants}")
        for variant in variants:  # checksums hold before the rewrite
            manifest = load_bundle(args.bundle, variant).manifest
        for variant in variants:
            count = tie_variant(args.bundle, manifest, variant)
            if variant == "int8":  # fp32 is rewritten exactly; int8's numbers change
                manifest["variants"][variant].pop("verification", None)
                forget_measurements(manifest, variant)
            print(f"{variant}: {count} embedding Gathers read the output projection; weights "
                  f"in {manifest['variants'][variant]['weights']['file']}")
        save_manifest(args.bundle, manifest)
        for variant in variants:
            load_bundle(args.bundle, variant)  # the reader's own checks
    except Exception as exc:  # noqa: BLE001 - a CLI: say what went wrong, exit 1
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
