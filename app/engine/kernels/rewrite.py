"""Graph rewriting: our kernels put in place of ONNX Runtime's nodes in the decoder graphs (at
load, by app.engine.sessions, when runtime.library() is there). Each swap is node for node and
keeps the graph's results; the tests compare both ways."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from app.engine.kernels import runtime

if TYPE_CHECKING:
    import onnx

DOMAIN, OP, TAIL_OP, WALK_OP = "nmt", "OneQueryAttention", "LogSoftmaxTopK", "BeamWalk"
CROSS_OP, CROSS_SWAPPED = "CrossAttention", "MultiHeadAttention"  # ours, and the one it replaces
SWAPPED = "GroupQueryAttention"  # the com.microsoft op ours stands in for
ATTRIBUTES = {"num_heads", "kv_num_heads", "scale"}  # the GroupQueryAttention attributes ours has
# GroupQueryAttention attributes that a node may carry at these values (what they do is off)
NEUTRAL = {"do_rotary": 0, "rotary_interleaved": 0, "local_window_size": -1, "softcap": 0.0,
           "smooth_softmax": (-1, 0), "k_quant_type": b"NONE", "v_quant_type": b"NONE",
           "qk_output": 0, "sliding_window_cache": 0, "causal": 1, "qk_norm_epsilon": None}
INPUTS = 7  # query, key, value, past key, past value, seqlens_k, total_sequence_length


def swap_attention(model: onnx.ModelProto) -> int:
    """Replace every GroupQueryAttention node of model (Loop bodies included) that ours can
    stand in for with OneQueryAttention; return how many. The caller runs the graph only with
    one new query per row (decoder steps)."""
    from onnx import helper

    def ours(node: onnx.NodeProto) -> bool:  # nothing ours lacks: no extra input, no option on
        if any(node.input[INPUTS:]):
            return False
        for attr in node.attribute:
            if attr.name in ATTRIBUTES:
                continue
            if attr.name not in NEUTRAL:
                return False
            allowed = NEUTRAL[attr.name]
            value = helper.get_attribute_value(attr)
            if allowed is not None and value not in (allowed if isinstance(allowed, tuple)
                                                     else (allowed,)):
                return False
        return True

    def swap(graph: onnx.GraphProto) -> int:
        count = 0
        for node in graph.node:
            if node.op_type == SWAPPED and node.domain == "com.microsoft" and ours(node):
                node.op_type, node.domain = OP, DOMAIN
                for attr in [a for a in node.attribute if a.name not in ATTRIBUTES]:
                    node.attribute.remove(attr)
                count += 1
        return count

    return _swap_everywhere(model, swap)


def swap_cross_attention(model: onnx.ModelProto) -> int:
    """Replace every MultiHeadAttention node of model (Loop bodies included) that reads the
    encoder's keys and values as graph inputs of rank 4, (N, H, S, D), with a query, the two and
    at most a key padding mask, with CrossAttention; return how many."""
    from onnx import helper

    rank4 = {x.name for x in model.graph.input if len(x.type.tensor_type.shape.dim) == 4}

    def ours(node: onnx.NodeProto) -> bool:
        inputs = list(node.input)
        if len(inputs) < 3 or len(inputs) > 5 or (len(inputs) > 3 and inputs[3]):
            return False
        if inputs[1] not in rank4 or inputs[2] not in rank4:
            return False
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        return set(attrs) <= {"num_heads", "scale", "unidirectional"} and not attrs.get(
            "unidirectional", 0)

    def swap(graph: onnx.GraphProto) -> int:
        count = 0
        for node in graph.node:
            if node.op_type == CROSS_SWAPPED and node.domain == "com.microsoft" and ours(node):
                node.op_type, node.domain = CROSS_OP, DOMAIN
                count += 1
        return count

    return _swap_everywhere(model, swap)


def swap_tail(model: onnx.ModelProto) -> int:
    """Replace the step's LogSoftmax and the top-k after it (the nodes that lead from the
    LogSoftmax to the values `top_log_probs` and `top_ids`, used nowhere else) with one
    LogSoftmaxTopK node, in model's graph and the Loop bodies that have them; nodes left feeding
    nothing go too. Return how many were replaced."""
    from onnx import helper

    outputs = ("top_log_probs", "top_ids")

    def users(nodes: list) -> dict[str, list]:
        found: dict[str, list] = {}
        for n in nodes:
            for x in n.input:
                found.setdefault(x, []).append(n)
        return found

    def reads(node: onnx.NodeProto) -> list[str]:  # its inputs and its subgraphs' (outer scope)
        return [*node.input, *(x for attr in node.attribute if attr.g.node
                               for inner in attr.g.node for x in reads(inner))]

    def closure(start: list, step) -> set[int]:
        seen, todo = {}, list(start)
        while todo:
            node = todo.pop()
            if id(node) not in seen:
                seen[id(node)] = node
                todo += step(node)
        return set(seen)

    def swap(graph: onnx.GraphProto) -> bool:
        nodes = list(graph.node)
        made = {out: n for n in nodes for out in n.output}
        used = users(nodes)
        if not all(name in made for name in outputs):
            return False
        above = closure([made[x] for x in outputs],
                        lambda n: [made[x] for x in n.input if x in made])
        softmax = [n for n in nodes if n.op_type == "LogSoftmax" and id(n) in above]
        if len(softmax) != 1:
            return False
        (softmax,) = softmax
        last = made[outputs[0]]  # the TopK that picks the k best: its k is the row's
        if last.op_type != "TopK":
            return False
        below = closure([softmax], lambda n: [u for x in n.output for u in used.get(x, [])])
        region = above & below
        inner = {x for n in nodes if id(n) in region for x in n.output}
        if any(id(u) not in region for x in inner - set(outputs) for u in used.get(x, [])) or any(
                o.name in inner - set(outputs) for o in graph.output):
            return False  # a value of the region is read elsewhere: leave the graph as it is
        tail = helper.make_node(TAIL_OP, [softmax.input[0], last.input[1]], list(outputs),
                                name="nmt/log_softmax_top_k", domain=DOMAIN)
        kept = [tail if n is softmax else n for n in nodes if id(n) not in region or n is softmax]
        while True:  # what fed only the region feeds nothing now
            read = {x for n in kept for x in reads(n)} | {o.name for o in graph.output}
            dead = {id(n) for n in kept if id(n) in above and not read & set(n.output)}
            if not dead:
                break
            kept = [n for n in kept if id(n) not in dead]
        del graph.node[:]
        graph.node.extend(kept)
        return True

    return _swap_everywhere(model, swap)


# the inputs and outputs `add_greedy_advance` gives a step graph (greedy_advance.cc)
ADVANCE_OP = "GreedyAdvance"
ADVANCE_INPUTS = ("greedy_score", "greedy_history", "greedy_limit", "greedy_alive", "greedy_eos")
ADVANCE_OUTPUTS = ("tokens_next", "positions_next", "past_lengths_next", "greedy_score_next",
                   "greedy_history_next", "greedy_alive_next", "greedy_ended")


def add_greedy_advance(model: onnx.ModelProto) -> bool:
    """Give the step graph a GreedyAdvance node after its top-k (greedy_advance.cc): the search
    step's bookkeeping, on arrays that the step decoder binds in place (ADVANCE_INPUTS, and
    ADVANCE_OUTPUTS bound to the memory of the inputs they update). False where the graph lacks
    the values it reads (then it is left as it is)."""
    from onnx import TensorProto, helper

    graph = model.graph
    have = {x.name for x in graph.input}
    made = {out for n in graph.node for out in n.output}
    if not {"tokens", "positions"} <= have or not {"top_log_probs", "top_ids"} <= made or (
            ADVANCE_INPUTS[0] in have):
        return False
    rows, table = ["rows"], ["rows", "width"]
    i64, i32, f32, bool_ = TensorProto.INT64, TensorProto.INT32, TensorProto.FLOAT, TensorProto.BOOL
    # (type, shape) of ADVANCE_INPUTS, then ADVANCE_OUTPUTS
    inputs = [(f32, rows), (i64, table), (i64, rows), (bool_, rows), (i64, [])]
    outputs = [(i64, rows), (i64, rows), (i32, rows), (f32, rows), (i64, table), (bool_, rows),
               (i32, rows)]
    for values, names, types in ((graph.input, ADVANCE_INPUTS, inputs),
                                 (graph.output, ADVANCE_OUTPUTS, outputs)):
        values.extend(helper.make_tensor_value_info(name, elem, shape)
                      for name, (elem, shape) in zip(names, types, strict=True))
    graph.node.append(helper.make_node(
        ADVANCE_OP, ["top_log_probs", "top_ids", "positions", *ADVANCE_INPUTS],
        list(ADVANCE_OUTPUTS), name="nmt/greedy_advance", domain=DOMAIN))
    if not any(o.domain == DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(DOMAIN, 1))
    return True


MATMUL_OP = "Int8MatMul"


def swap_matmul(model: onnx.ModelProto) -> int:
    """Replace each QuantizeLinear -> MatMulIntegerToFloat pair of model (Loop bodies included)
    with one Int8MatMul node where its kernel takes them: the activation quantized with constant
    scalar scale and zero point, constant int8 weights (K, N) with K a multiple of 4 (any N)
    and zero points 0, a constant bias or none (then zeros). A QuantizeLinear left feeding
    nothing goes. Return how many were replaced; 0 on a CPU without AVX-512 VNNI."""
    import numpy as np
    from onnx import helper, numpy_helper

    if not runtime.matmul_supported():
        return 0
    initializers: dict[str, onnx.TensorProto] = {}  # of the graph and its subgraphs, by name

    def collect(graph: onnx.GraphProto) -> None:
        for init in graph.initializer:
            initializers[init.name] = init
        for node in graph.node:
            for attr in node.attribute:
                if attr.g.node:
                    collect(attr.g)

    collect(model.graph)

    @functools.cache
    def constant(name: str) -> np.ndarray | None:  # converted when first asked for
        init = initializers.get(name)
        return None if init is None else numpy_helper.to_array(init)

    def swap(graph: onnx.GraphProto) -> int:
        made = {out: n for n in graph.node for out in n.output}
        count, added = 0, []
        for node in graph.node:
            if node.op_type != "MatMulIntegerToFloat" or node.domain != "com.microsoft":
                continue
            quant = made.get(node.input[0])
            if quant is None or quant.op_type != "QuantizeLinear" or len(quant.input) < 3:
                continue
            names = list(node.input) + [""] * (7 - len(node.input))
            _, w, a_scale, w_scale, a_zero, w_zero, bias = names
            if (quant.input[1], quant.input[2]) != (a_scale, a_zero):
                continue
            got = [constant(x) for x in (w, a_scale, a_zero, w_scale)]
            if any(x is None for x in got):
                continue
            weights, scale, zero, w_scales = got
            k, n = weights.shape if weights.ndim == 2 else (0, 0)
            if (weights.dtype != np.int8 or k % 4 or not n or scale.size != 1
                    or zero.dtype != np.uint8 or zero.size != 1 or w_scales.shape != (n,)):
                continue
            if w_zero and (constant(w_zero) is None or constant(w_zero).any()):
                continue
            if bias and bias not in initializers:
                continue
            if not bias:
                bias = f"{node.name or node.output[0]}/zero_bias"
                added.append(numpy_helper.from_array(np.zeros(n, np.float32), bias))
            new = helper.make_node(MATMUL_OP, [quant.input[0], w, a_scale, a_zero, w_scale,
                                               bias], list(node.output),
                                   name=node.name or node.output[0], domain=DOMAIN)
            node.CopyFrom(new)
            count += 1
        if count:
            graph.initializer.extend(added)
            read = {x for n in graph.node for x in _reads(n)} | {o.name for o in graph.output}
            dead = [n for n in graph.node
                    if n.op_type == "QuantizeLinear" and not read & set(n.output)]
            for n in dead:
                graph.node.remove(n)
        return count

    return _swap_everywhere(model, swap)


def _reads(node: onnx.NodeProto) -> list[str]:
    """A node's inputs and those of its subgraphs' nodes (outer-scope values)."""
    return [*node.input, *(x for attr in node.attribute if attr.g.node
                           for inner in attr.g.node for x in _reads(inner))]


def _swap_everywhere(model: onnx.ModelProto, swap) -> int:
    """swap(graph) -> how many swaps, applied to the subgraphs (Loop bodies) and then to the
    graph of a step graph with float32 caches (the fp16 variant runs on CUDA); our domain is
    declared where anything was swapped. Returns the total."""
    import onnx
    from onnx import helper

    def walk(graph: onnx.GraphProto) -> int:
        count = sum(walk(attr.g) for node in graph.node for attr in node.attribute
                    if attr.g.node)
        return count + swap(graph)

    if any(x.type.tensor_type.elem_type != onnx.TensorProto.FLOAT for x in model.graph.input
           if x.name.startswith("cache_k_")):
        return 0
    count = walk(model.graph)
    if count and not any(o.domain == DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(DOMAIN, 1))
    return count
