"""Store every weight of a bundle variant once: one external-data file for both graphs.

An encoder and a decoder graph written with `share` (export.graphs) both read the embedding
from the output projection's matrix (`output_w`, (D, V)) instead of copies of their own, and
the position table is the same initializer in both. Each graph file would still hold its own
copy of what they share, so here both graphs' large initializers move into one file,
`weights.<variant>.bin`, each distinct tensor once (identical tensors point at the same bytes),
at page-aligned offsets.

int8: ONNX Runtime's quantizer gives the projection's MatMul an int8 copy of `output_w`
(`output_w_quantized`, one scale per vocabulary entry) and leaves the float matrix for the
embedding Gathers. Those Gathers are rewritten to read the int8 matrix and multiply by the
entry's scale, so the float matrix goes: the embedding is stored once, in int8, as CTranslate2
stores it.

The graphs stay ordinary ONNX files (the external data is ONNX's own mechanism): ONNX Runtime
and `onnx.load` read them from their directory.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from export.graphs import OUTPUT_W

ALIGN = 4096  # offsets of tensors in the weights file, so they can be memory-mapped
MIN_BYTES = 1024  # smaller initializers stay in the graph


def weights_file(variant: str) -> str:
    return f"weights.{variant}.bin"


def _int8_gathers(model: onnx.ModelProto, quantized: dict[str, TensorProto]) -> int:
    """Gathers of OUTPUT_W (axis 1) -> Gathers of its int8 copy times the entries' scales.
    quantized: the decoder's `output_w_quantized` and `output_w_scale`, added to this graph
    when it lacks them. Returns the number of Gathers rewritten."""
    graph = model.graph
    names = {init.name for init in graph.initializer}
    q_name, s_name = f"{OUTPUT_W}_quantized", f"{OUTPUT_W}_scale"
    nodes, count = [], 0
    for node in graph.node:
        if node.op_type != "Gather" or node.input[0] != OUTPUT_W:
            nodes.append(node)
            continue
        ids, out = node.input[1], node.output[0]
        q = f"{out}_int8"
        cast, scale = f"{out}_float", f"{out}_scale"
        nodes += [
            helper.make_node("Gather", [q_name, ids], [q], axis=1),  # (D, *ids) int8
            helper.make_node("Cast", [q], [cast], to=TensorProto.FLOAT),
            helper.make_node("Gather", [s_name, ids], [scale], axis=0),  # (*ids,)
            helper.make_node("Mul", [cast, scale], [out]),  # (D, *ids), by entry
        ]
        count += 1
    if count:
        for name in (q_name, s_name):
            if name not in names:
                graph.initializer.append(quantized[name])
        del graph.node[:]
        graph.node.extend(nodes)
    still_read = any(OUTPUT_W in n.input for n in graph.node)
    if not still_read:
        kept = [i for i in graph.initializer if i.name != OUTPUT_W]
        del graph.initializer[:]
        graph.initializer.extend(kept)
    return count


def _symmetric(init: TensorProto | None) -> bool:
    return init is None or not numpy_helper.to_array(init).any()


def share_int8_embedding(encoder: onnx.ModelProto, decoder: onnx.ModelProto) -> bool:
    """Point the embedding Gathers of both int8 graphs at the projection's int8 matrix;
    False when the decoder has no such matrix (nothing shared to rewrite)."""
    inits = {i.name: i for i in decoder.graph.initializer}
    q_name, s_name = f"{OUTPUT_W}_quantized", f"{OUTPUT_W}_scale"
    if q_name not in inits or s_name not in inits:
        return False
    if not _symmetric(inits.get(f"{OUTPUT_W}_zero_point")):
        return False  # an asymmetric int8 matrix: leave the float Gathers
    scale = numpy_helper.to_array(inits[s_name])
    if scale.ndim != 1:  # one scale per vocabulary entry (per-channel quantization)
        scale = np.broadcast_to(scale, (inits[q_name].dims[1],)).copy()
        inits[s_name] = numpy_helper.from_array(scale.astype(np.float32), s_name)
    quantized = {q_name: inits[q_name], s_name: inits[s_name]}
    return bool(_int8_gathers(decoder, quantized) + _int8_gathers(encoder, quantized))


def _externalize(models: list[onnx.ModelProto], path: Path) -> None:
    """Move the large initializers of models into the file at path, each distinct one once."""
    offsets: dict[tuple, tuple[int, int]] = {}
    with open(path, "wb") as f:
        for model in models:
            for init in model.graph.initializer:
                if not init.HasField("raw_data") or len(init.raw_data) < MIN_BYTES:
                    continue
                data = init.raw_data
                key = (init.data_type, tuple(init.dims), hashlib.blake2b(data).digest())
                if key not in offsets:
                    start = -(-f.tell() // ALIGN) * ALIGN
                    f.write(b"\0" * (start - f.tell()))
                    f.write(data)
                    offsets[key] = (start, len(data))
                start, length = offsets[key]
                init.ClearField("raw_data")
                del init.external_data[:]
                init.data_location = TensorProto.EXTERNAL
                for k, v in (("location", path.name), ("offset", str(start)),
                             ("length", str(length))):
                    entry = init.external_data.add()
                    entry.key, entry.value = k, v


def _raw(model: onnx.ModelProto) -> None:
    """Initializers as raw bytes (external data already loaded), so identical ones compare."""
    for init in model.graph.initializer:
        if init.data_location == TensorProto.EXTERNAL:
            continue
        if not init.HasField("raw_data"):
            array = numpy_helper.to_array(init)
            init.CopyFrom(numpy_helper.from_array(array, init.name))


def store_once(bundle_dir: Path, encoder: str, decoder: str, variant: str) -> str:
    """Rewrite the variant's graphs (file names in bundle_dir) to keep their weights in one
    external-data file; returns its name. Graphs already written this way are read back with
    their data first, so this may run again after a graph was replaced."""
    from onnx.external_data_helper import convert_model_from_external_data

    models = []
    for name in (encoder, decoder):
        model = onnx.load(str(bundle_dir / name))  # external data, if any, loaded
        convert_model_from_external_data(model)
        _raw(model)
        models.append(model)
    if variant == "int8":
        share_int8_embedding(*models)
    target = bundle_dir / weights_file(variant)
    tmp = target.with_suffix(".tmp")
    _externalize(models, tmp)
    for model in models:  # the location names the final file
        for init in model.graph.initializer:
            for entry in init.external_data:
                if entry.key == "location":
                    entry.value = target.name
    tmp.replace(target)
    for name, model in zip((encoder, decoder), models, strict=True):
        onnx.save(model, str(bundle_dir / name))
    return target.name
