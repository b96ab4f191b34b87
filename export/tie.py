"""Store a bundle's weights once when its graphs were exported without `share`.

    python -m export.tie bundles/en-de [--variants int8]

A bundle exported before `share` (export.graphs) keeps the tied embedding three times: the
encoder's table, the decoder's scaled table and the output projection's matrix. Re-exporting it
would quantize and calibrate its int8 variant again; here its own graphs are rewritten instead,
their quantization left as it is. The embedding Gathers whose (V, D) table is the projection's
matrix (transposed, times 1 or sqrt(D); for int8, within half a quantization step of its int8
matrix) are rewritten, and their tables go:

- fp32: they read the projection's columns, as a graph written with `share` does
  (export.graphs.gather_columns). Bit for bit the same results, so its measurements stay.
- int8: they read the projection's int8 matrix and its scale per entry (the quantization the
  variant already has: the embedding is that matrix, as in graphs that export.shared rewrites),
  stored once more transposed, (V, D), and shared by both graphs: a token's row is then one
  contiguous read, where a Gather of the (D, V) matrix's columns reads D bytes apart per token,
  measured slower (docs/memory.md). Its results change a little, so the variant's verification
  and scores are dropped: measure them again with `python -m export.verify --record` and
  `python -m export.evaluate --record`.

Then the variant's weights move into one file both graphs read (export.shared.store_once), each
distinct tensor once. Needs the `train` extra (onnx).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from export.graphs import OUTPUT_W

QUANTIZED = ("_quantized", "_scale", "_zero_point")  # ONNX Runtime's quantizer's suffixes
# the int8 variant's token embedding, (V, D): the projection's int8 matrix transposed; and its
# scale per entry, (V, 1)
EMBEDDING_INT8, EMBEDDING_SCALE = "embedding_int8", "embedding_int8_scale"


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


def _tied_gathers(model: onnx.ModelProto, matrix: np.ndarray, step: np.ndarray | None,
                  d_model: int) -> list[tuple[onnx.NodeProto, np.ndarray, float]]:
    """(Gather, its (V, D) table, s) for each Gather of model whose table is s x the
    projection's matrix, transposed (_tie_scale)."""
    inits = {i.name: i for i in model.graph.initializer}
    found = []
    for node in model.graph.node:
        table = inits.get(node.input[0]) if node.op_type == "Gather" else None
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if table is None or axis != 0 or tuple(table.dims) != (matrix.shape[1], d_model):
            continue
        array = numpy_helper.to_array(table)
        s = _tie_scale(array, matrix, step, d_model)
        if s is not None:
            found.append((node, array, s))
    return found


def _times(model: onnx.ModelProto, x: str, s: float, out: str) -> list[onnx.NodeProto]:
    """out = x * s (a Mul; none when s is 1 and x is out)."""
    if s == 1.0:
        return []
    factor = f"{out}_embedding_factor"
    model.graph.initializer.append(numpy_helper.from_array(np.array(s, np.float32), factor))
    return [helper.make_node("Mul", [x, factor], [out])]


def _columns_reader(model: onnx.ModelProto, node: onnx.NodeProto, s: float):
    """The float Gather's result read from the columns of OUTPUT_W, (D, V)."""
    ids, out = node.input[1], node.output[0]
    columns, rows = f"{out}_columns", out if s == 1.0 else f"{out}_rows"
    rank = _input_rank(model, ids)
    return [helper.make_node("Gather", [OUTPUT_W, ids], [columns], axis=1),  # (D, *ids)
            helper.make_node("Transpose", [columns], [rows],
                             perm=[*range(1, rank + 1), 0]),  # (*ids, D)
            *_times(model, rows, s, out)]


def _int8_reader(model: onnx.ModelProto, node: onnx.NodeProto, s: float):
    """The float Gather's result read from EMBEDDING_INT8's rows times their scales."""
    ids, out = node.input[1], node.output[0]
    q, cast, scale = f"{out}_int8", f"{out}_float", f"{out}_scale"
    rows = out if s == 1.0 else f"{out}_rows"
    return [helper.make_node("Gather", [EMBEDDING_INT8, ids], [q]),  # (*ids, D) int8
            helper.make_node("Cast", [q], [cast], to=TensorProto.FLOAT),
            helper.make_node("Gather", [EMBEDDING_SCALE, ids], [scale]),  # (*ids, 1)
            helper.make_node("Mul", [cast, scale], [rows]),  # (*ids, D)
            *_times(model, rows, s, out)]


def _rewrite(model: onnx.ModelProto, readers: dict[int, list[onnx.NodeProto]]) -> None:
    """Replace the nodes keyed by id with their readers; drop initializers no longer read."""
    graph = model.graph
    nodes = [new for node in graph.node for new in readers.get(id(node), [node])]
    del graph.node[:]
    graph.node.extend(nodes)
    read = {x for n in graph.node for x in n.input}
    kept = [i for i in graph.initializer if i.name in read]
    del graph.initializer[:]
    graph.initializer.extend(kept)


def tie_embeddings(encoder: onnx.ModelProto, decoder: onnx.ModelProto, vocab: int,
                   d_model: int) -> int:
    """Rewrite both graphs of a variant so their embedding Gathers, where their tables are the
    decoder's output projection's matrix, read it (float: the columns of OUTPUT_W; int8: its
    int8 matrix transposed, EMBEDDING_INT8, which both graphs share, so a row is one contiguous
    read); returns the number of Gathers rewritten (0: nothing tied to the projection)."""
    name = _projection(decoder, vocab, d_model)
    if name != OUTPUT_W:
        _rename(decoder, {name + s: OUTPUT_W + s for s in ("", *QUANTIZED)})
    matrix, step = _matrix(decoder)
    tied = {id(m): _tied_gathers(m, matrix, step, d_model) for m in (encoder, decoder)}
    found = [t for ts in tied.values() for t in ts]
    if not found:
        return 0
    extra: list[TensorProto] = []
    if step is None:
        extra = [next(i for i in decoder.graph.initializer if i.name == OUTPUT_W)]
    else:  # the projection's int8 matrix and scales, by rows: (V, D) and (V, 1)
        q = next(i for i in decoder.graph.initializer if i.name == f"{OUTPUT_W}_quantized")
        rows = np.ascontiguousarray(numpy_helper.to_array(q).T)
        extra = [numpy_helper.from_array(rows, EMBEDDING_INT8),
                 numpy_helper.from_array(step[:, None], EMBEDDING_SCALE)]
    reader = _columns_reader if step is None else _int8_reader
    for model in (encoder, decoder):
        if tied[id(model)]:
            names = {i.name for i in model.graph.initializer}
            model.graph.initializer.extend(i for i in extra if i.name not in names)
            _rewrite(model, {id(node): reader(model, node, s)
                             for node, _, s in tied[id(model)]})
    return len(found)


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
            print(f"{variant}: {count} embedding Gathers rewritten; weights "
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
