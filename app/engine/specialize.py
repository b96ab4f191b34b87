"""Cross-attention over each sentence's own source length: a CPU specialization of the step
graph for one beam width, made when a session is created (the bundle's graph stays portable).

The bundle's step graph runs cross-attention as `MultiHeadAttention` over the padded sources
with a key padding mask, so every sentence of a running batch attends over the longest source
in it. A service's batch mixes lengths (sentences join as they arrive), and the padding costs
(bench.cross_attention measures it; BENCHMARKS.md).

`GroupQueryAttention` reads each sentence's keys only up to its own length (`seqlens_k`). Fed
the cross keys/values as its past (bound as its present outputs too, so nothing is copied), the
key/value of each sentence's last source position as the "new" one (written back in place, to
where it already is) and the source length - 1 as `seqlens_k`, it computes the same attention.
The K beams of a sentence are K query heads per key head (num_heads = H x K), which makes the
graph specific to one beam width. Sources are padded at the end (`cross_mask` is 1 on a prefix
of each row), as the encoder graph's inputs are.

The specialized graph has the inputs of the bundle's plus the ones `cross_input_names` lists:
per layer the last source position's key and value of each sentence, (N, 1, H Dh), each
sentence's length - 1 (`cross_seqlens`, (N,) int32) and the buffers' source width
(`cross_total`, () int32). The step decoder fills them from its state when the sources change
(a sentence joins or leaves), not at every step: gathered in the graph, they took a few dozen
small nodes a step, a noticeable share of a small step. Its extra outputs, cross_k_<i>_out and
cross_v_<i>_out, are bound to the cross buffers (in place).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx

MS_DOMAIN = "com.microsoft"
PREFIX = "by_length/"  # names of the nodes and values added here


def cross_output_names(n_layers: int) -> list[str]:
    """The outputs the specialized graph adds, in order."""
    return [f"cross_{kind}_{i}_out" for i in range(n_layers) for kind in ("k", "v")]


def last_input_name(kind: str, layer: int) -> str:
    """The input of a layer's last source key ("k") or value ("v") per sentence."""
    return f"cross_last_{kind}_{layer}"


def cross_input_names(n_layers: int) -> list[str]:
    """The inputs the specialized graph adds, in order."""
    return [last_input_name(kind, i) for i in range(n_layers) for kind in ("k", "v")] + [
        "cross_seqlens", "cross_total"]


def read_graph(path_or_graph: str | Path | onnx.GraphProto) -> onnx.GraphProto:
    """The GraphProto of the ONNX file at a path, with its weights (inside the file, or in the
    bundle's shared weights file), or the GraphProto itself: callers that ask several questions
    of one graph parse it once."""
    import onnx

    if isinstance(path_or_graph, onnx.GraphProto):
        return path_or_graph
    return onnx.load(str(path_or_graph)).graph


def specializable(path: str | Path | onnx.GraphProto) -> bool:
    """Whether the step graph at path (or this parsed graph) can be specialized: float32 cross
    keys/values whose head size is a multiple of 8 (as GroupQueryAttention needs), and
    cross-attention run by MultiHeadAttention nodes (so a graph specialized already is not)."""
    import onnx

    graph = read_graph(path)
    cross = next((x for x in graph.input if x.name == "cross_k_0"), None)
    if cross is None or cross.type.tensor_type.elem_type != onnx.TensorProto.FLOAT:
        return False
    dims = cross.type.tensor_type.shape.dim
    if len(dims) != 4 or not dims[1].dim_value or dims[3].dim_value % 8:
        return False
    return any(n.op_type == "MultiHeadAttention" and n.input[1] == "cross_k_0"
               for n in graph.node)


def by_source_length(path: str | Path, beams: int, external_data: bool = True) -> bytes:
    """The step graph at path with every cross-attention run over each sentence's own source
    length for `beams` rows per sentence, serialized (for onnxruntime.InferenceSession).
    external_data: False keeps weights that lie in a weights file as references to it
    (relative to path's folder)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(path), load_external_data=external_data)
    graph = model.graph
    cross = next(x for x in graph.input if x.name == "cross_k_0")
    dims = cross.type.tensor_type.shape.dim
    heads, head_dim = dims[1].dim_value, dims[3].dim_value
    d = heads * head_dim
    made: set[str] = set()

    def const(name: str, value) -> str:
        if PREFIX + name not in made:
            made.add(PREFIX + name)
            graph.initializer.append(numpy_helper.from_array(np.array(value), PREFIX + name))
        return PREFIX + name

    def node(op: str, inputs: list[str], output: str, **attrs) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=PREFIX + output,
                                      domain=MS_DOMAIN if op == "GroupQueryAttention" else "",
                                      **attrs))
        return output

    nodes: list = []
    n_layers = sum(1 for x in graph.input if x.name.startswith("cross_k_"))
    *_, seqlens, total = names = cross_input_names(n_layers)  # the step decoder fills them
    types = {seqlens: (TensorProto.INT32, ["sentences"]), total: (TensorProto.INT32, [])}
    for name in names:  # the others: last source keys/values
        elem, shape = types.get(name, (TensorProto.FLOAT, ["sentences", 1, d]))
        graph.input.append(helper.make_tensor_value_info(name, elem, shape))
    body = []
    for n in graph.node:
        if not (n.op_type == "MultiHeadAttention" and n.input[1].startswith("cross_k_")):
            body.append(n)
            continue
        i = n.input[1][len("cross_k_"):]
        new = {kind: last_input_name(kind, int(i)) for kind in ("k", "v")}
        query, out = n.input[0], n.output[0]  # (N, K, D)
        if beams > 1:  # (N, K, H, Dh) -> (N, H, K, Dh) -> (N, 1, H K Dh): head h*K + k
            q = node("Reshape", [query, const("nkhd", np.array([0, -1, heads, head_dim]))],
                     f"{PREFIX}q_{i}_nkhd")
            q = node("Transpose", [q], f"{PREFIX}q_{i}_nhkd", perm=[0, 2, 1, 3])
            query = node("Reshape", [q, const("n1x", np.array([0, 1, -1]))], f"{PREFIX}q_{i}")
            out = f"{PREFIX}ctx_{i}"
        scale = [a for a in n.attribute if a.name == "scale"]
        nodes.append(helper.make_node(
            "GroupQueryAttention",
            [query, new["k"], new["v"], f"cross_k_{i}", f"cross_v_{i}", seqlens, total],
            [out, f"cross_k_{i}_out", f"cross_v_{i}_out"], name=f"{PREFIX}attention_{i}",
            domain=MS_DOMAIN, num_heads=heads * beams, kv_num_heads=heads,
            **({"scale": scale[0].f} if scale else {})))
        if beams > 1:  # and back: (N, 1, H K Dh) -> (N, H, K, Dh) -> (N, K, H, Dh) -> (N, K, D)
            c = node("Reshape", [out, const("nhkd", np.array([0, heads, -1, head_dim]))],
                     f"{PREFIX}ctx_{i}_nhkd")
            c = node("Transpose", [c], f"{PREFIX}ctx_{i}_nkhd", perm=[0, 2, 1, 3])
            nodes.append(helper.make_node("Reshape", [c, const("nkd", np.array([0, -1, d]))],
                                          [n.output[0]], name=f"{PREFIX}ctx_{i}_nkd"))
        body.extend(nodes)
        nodes = []
    del graph.node[:]
    graph.node.extend(body)
    for name in cross_output_names(n_layers):
        out = graph.output.add()
        out.CopyFrom(next(x for x in graph.input if x.name == name[: -len("_out")]))
        out.name = name
    return model.SerializeToString()
