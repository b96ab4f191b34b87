"""Give a bundle's int8 graphs fixed activation scales, measured on sample sentences.

    python -m export.calibrate bundles/en-de --sentences data/en-de/dev.en [--limit 1000]

The int8 graphs of export.variants quantize each matrix product's input with a scale computed
from that input at run time (`DynamicQuantizeLinear`): one scale for the whole matrix, so for
every row of a running batch. A sentence's translation then depends on the sentences decoded
beside it (many test sentences changed between alone and in one batch: BENCHMARKS.md), and,
since the engine's decode workers take sentences as they free up, two identical calls can
differ.

Here the int8 graphs are quantized again from the fp32 ones, the range of each quantized input
is measured by running them over the sentences (the encoder in batches, the decoder step by step
in greedy search, as the engine runs them), and each `DynamicQuantizeLinear` becomes a
`QuantizeLinear` with the scale and zero point of that range (inputs beyond it saturate). A
row's result then depends on that row alone, up to the kernels the engine picks for a batch,
whose float rounding differs slightly (beam 4 still changed a few in a hundred). The quantizer's
MatMulInteger, Cast, Mul and bias Add become one MatMulIntegerToFloat, as ONNX Runtime fuses
them itself only for run-time scales.

Measured on the shipped en-de model (calibrated on dev sentences): the same test-split BLEU as
with run-time scales within a tenth of a point, a decoder step as fast, and no output that
changes between a sentence alone and in a batch (BENCHMARKS.md).

The manifest's int8 entry gets the new checksums and its quantization settings name the
calibration; its verification and scores were measured on the old graphs, so they are dropped:
run `python -m export.verify --record` and `python -m export.evaluate --record` again.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from export.requantize import requantize

BATCH = 16  # sentences per encoder call and per greedy batch


def _exposed(path: Path):
    """The graph at path with each DynamicQuantizeLinear's scale and zero point as outputs;
    returns (serialized graph, [(scale name, zero point name, quantized input name)])."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(path))
    found = []
    for node in model.graph.node:
        if node.op_type == "DynamicQuantizeLinear":
            found.append((node.output[1], node.output[2], node.input[0]))
            model.graph.output.extend([
                helper.make_tensor_value_info(node.output[1], TensorProto.FLOAT, []),
                helper.make_tensor_value_info(node.output[2], TensorProto.UINT8, [])])
    return model.SerializeToString(), found


class _Ranges:
    """The smallest and largest value seen per quantized input (0 always inside, as
    DynamicQuantizeLinear's range has it)."""

    def __init__(self) -> None:
        self.low: dict[str, float] = {}
        self.high: dict[str, float] = {}

    def add(self, found: list[tuple[str, str, str]], values: dict[str, np.ndarray]) -> None:
        for scale_name, zero_name, name in found:
            scale, zero = float(values[scale_name]), float(values[zero_name])
            # DynamicQuantizeLinear's range back from its scale and zero point
            low, high = -zero * scale, (255 - zero) * scale
            self.low[name] = min(self.low.get(name, 0.0), low)
            self.high[name] = max(self.high.get(name, 0.0), high)


def measure(bundle_dir: Path, texts: list[str]) -> dict[str, tuple[float, float]]:
    """The range of every quantized input of the bundle's (dynamic) int8 graphs over texts."""
    import onnxruntime as ort

    from app.engine import Translator
    from app.engine.bundle import ENCODER_NAMES

    translator = Translator.from_dir(bundle_dir, variant="int8", workers=1, fused=False)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    sessions, found = {}, {}
    for graph in ("encoder", "decoder"):
        serialized, found[graph] = _exposed(bundle_dir / f"{graph}.int8.onnx")
        sessions[graph] = ort.InferenceSession(serialized, options,
                                               providers=["CPUExecutionProvider"])
    ranges = _Ranges()
    sources = translator.encode(texts)
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    names = [o.name for o in sessions["encoder"].get_outputs()]
    for start in range(0, len(order), BATCH):
        batch = [sources[i] for i in order[start:start + BATCH]]
        values = dict(zip(names, sessions["encoder"].run(
            names, {ENCODER_NAMES["inputs"][0]: translator.source_array(batch)}), strict=True))
        ranges.add(found["encoder"], values)
        limit = int(max(translator.output_limits(batch, translator.default_options)))
        _greedy(sessions["decoder"], found["decoder"], values, translator, limit, ranges)
    return {name: (ranges.low[name], ranges.high[name]) for name in ranges.low}


def _greedy(session, found, encoded: dict[str, np.ndarray], translator, limit: int,
            ranges: _Ranges) -> None:
    """Greedy search of one batch on the step graph, its quantized inputs' ranges recorded."""
    cross_k, cross_v, mask = encoded["cross_k"], encoded["cross_v"], encoded["src_mask"]
    layers, n = cross_k.shape[0], cross_k.shape[1]
    cache = next(i for i in session.get_inputs() if i.name == "cache_k_0")
    shape = (n, cache.shape[1], limit + 1, cache.shape[3])  # (R, H, M, Dp)
    feeds = {"cross_mask": mask.astype(np.int32), "top_k": np.array([1], np.int64)}
    for i in range(layers):
        feeds[f"cross_k_{i}"], feeds[f"cross_v_{i}"] = cross_k[i], cross_v[i]
        for kind in "kv":
            feeds[f"cache_{kind}_{i}"] = np.zeros(shape, np.float32)
    names = [o.name for o in session.get_outputs()]
    tokens = np.full(n, translator.start_id, np.int64)
    alive = np.ones(n, bool)
    for t in range(limit):
        feeds.update(tokens=tokens, positions=np.full(n, t, np.int64),
                     past_lengths=np.full(n, t, np.int32), total_length=np.array(t + 1, np.int32))
        values = dict(zip(names, session.run(names, feeds), strict=True))
        ranges.add(found, values)
        for i in range(layers):
            for kind in "kv":
                feeds[f"cache_{kind}_{i}"] = values[f"cache_{kind}_{i}_out"]
        tokens = values["top_ids"][:, 0].copy()
        alive &= tokens != translator.eos_id
        if not alive.any():
            return


def make_static(path: Path, ranges: dict[str, tuple[float, float]]) -> None:
    """Rewrite the graph at path: each DynamicQuantizeLinear becomes a QuantizeLinear with the
    uint8 scale and zero point of its input's range, and each matrix product after it (the
    quantizer's MatMulInteger, Cast, Mul by the two scales' product, and the bias Add where
    there is one) one MatMulIntegerToFloat, the node ONNX Runtime fuses them into when the
    scale is computed at run time (with a constant scale it leaves them apart: 166 decoder nodes
    instead of 94)."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(path))
    graph = model.graph
    initializers = {init.name for init in graph.initializer}
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    made = {node.output[0]: node for node in graph.node if node.op_type == "Mul"}
    static, replaced, dropped = {}, {}, set()
    for node in graph.node:
        if node.op_type == "DynamicQuantizeLinear":
            low, high = ranges[node.input[0]]
            scale = np.float32(max(high - low, 1e-8) / 255)
            zero = np.uint8(np.clip(round(-low / scale), 0, 255))
            graph.initializer.extend([numpy_helper.from_array(scale, node.output[1]),
                                      numpy_helper.from_array(zero, node.output[2])])
            static[node.output[0]] = (node.output[1], node.output[2])
            replaced[id(node)] = helper.make_node(
                "QuantizeLinear", [node.input[0], node.output[1], node.output[2]],
                [node.output[0]], name=f"{node.output[0]}_static")
    for node in graph.node:
        if node.op_type != "MatMulInteger" or node.input[0] not in static:
            continue
        a_scale, a_zero = static[node.input[0]]
        (cast,) = readers[node.output[0]]
        (mul,) = readers[cast.output[0]]
        product = made.get(mul.input[1]) or made[mul.input[0]]  # a_scale x b_scale
        b_scale = next(x for x in product.input if x != a_scale)
        inputs = [node.input[0], node.input[1], a_scale, b_scale, a_zero, node.input[3]]
        output, last = mul.output[0], mul
        after = readers.get(output, [])
        if len(after) == 1 and after[0].op_type == "Add":
            bias = next((x for x in after[0].input if x != output), None)
            if bias in initializers:
                inputs.append(bias)
                last = after[0]
                output = last.output[0]
        replaced[id(node)] = helper.make_node(
            "MatMulIntegerToFloat", inputs, [output], name=f"{output}_to_float",
            domain="com.microsoft")
        dropped.update({id(cast), id(mul), id(last)})
        if len(readers[product.output[0]]) == 1:
            dropped.add(id(product))
    nodes = [replaced.get(id(n), n) for n in graph.node if id(n) not in dropped]
    del graph.node[:]
    graph.node.extend(nodes)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    onnx.save(model, str(path))


def calibrate(bundle_dir: Path, sentences: Path, limit: int = 1000,
              per_channel: bool = True) -> dict:
    """Quantize the bundle's int8 graphs again from its fp32 ones, with fixed activation scales
    measured on the first `limit` non-empty lines of `sentences`; returns the new int8 entry."""
    from app.engine.bundle import file_entry, load_bundle
    from export.bundle import save_manifest, share_variant

    texts = [line.strip() for line in sentences.read_text(encoding="utf-8").splitlines()
             if line.strip()][:limit]
    if not texts:
        raise ValueError(f"{sentences}: no sentences to calibrate with")
    requantize(bundle_dir, per_channel)  # dynamic int8 graphs, fresh from the fp32 ones
    ranges = measure(bundle_dir, texts)
    manifest = load_bundle(bundle_dir, "fp32").manifest
    entry = manifest["variants"]["int8"]
    for graph in ("encoder", "decoder"):
        make_static(bundle_dir / entry[graph]["file"], ranges)
        entry[graph] = file_entry(bundle_dir, entry[graph]["file"])
    if "weights" in entry:  # make_static wrote the weights back into the graphs
        share_variant(bundle_dir, entry, "int8")
    entry["quantization"].update(
        method="static activations",
        calibration={"sentences": sentences.name, "count": len(texts), "search": "greedy",
                     "inputs": len(ranges)})
    save_manifest(bundle_dir, manifest)
    return entry


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m export.calibrate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bundle", type=Path)
    p.add_argument("--sentences", type=Path, required=True,
                   help="source-language text, one sentence a line (a dev split)")
    p.add_argument("--limit", type=int, default=1000, help="sentences to use (default 1000)")
    p.add_argument("--no-per-channel", action="store_true", help="one weight scale per tensor")
    args = p.parse_args(argv)
    try:
        entry = calibrate(args.bundle, args.sentences, args.limit, not args.no_per_channel)
    except Exception as exc:  # noqa: BLE001 - a CLI: say what went wrong, exit 1
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{args.bundle}: int8 graphs with fixed activation scales "
          f"({entry['quantization']['calibration']}); run export.verify --record and "
          "export.evaluate --record to measure them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
