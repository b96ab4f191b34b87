"""A single sentence decoded in one ONNX Runtime call: the step graph inside an ONNX `Loop`.

A sentence translated alone spends a share of its time between decoder steps: the search's
numpy and Python work, the session call, the I/O binding of a new state: a sizeable share of a
short sentence's time (BENCHMARKS.md). Here the whole
search runs inside ONNX Runtime: the bundle's step graph becomes the body of a `Loop` whose
loop-carried values are the last tokens, the running scores and the key/value cache, and whose
scan outputs record what each step chose. Python then only rebuilds the hypotheses from those
records (`FusedDecoder`). The rules are the search's (app/engine/search.py, model/search.py), to
the bit:

- greedy: the arg-max of each step (the step graph's top-1, lowest id on ties), until EOS or the
  length limit (the loop's trip count); the score is the float32 sum of the chosen log-probs.
- beam: each row's 2K candidates are put in ascending id order and flattened row by row (row =
  beam rank), so `TopK` over the summed float32 scores (ties to the lower position) orders them
  by score, ties by (rank * V + id), as the search's lexsort does. The walk up to the K-th
  non-EOS candidate, the finished hypotheses (normalized in float64 as Python does), the stop
  test against the best live hypothesis and the length limit are graph ops; the K continuing
  hypotheses take rows 0..K-1 in walk order (their rank), and the cache rows follow them by a
  `Gather`. The first step runs one row (the K start rows would be copies), which the
  `Gather` then expands.

The cache starts empty and grows by one position a step (GroupQueryAttention's present output,
copying the past), so the reorder copies only the positions in use; a loop step costs less
than a step through the step path's session call, with no fixed cost per call.

The graphs are made for one bundle when a session is created; the bundle's files are unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from app.engine.kernels.rewrite import DOMAIN, WALK_OP  # the library's domain, beam_walk.cc's op
from app.engine.search import Hypothesis, ranked
from app.engine.specialize import read_graph

if TYPE_CHECKING:
    import onnx
    import onnxruntime as ort

PREFIX = "fused/"  # names of the values added here
# int8 matrix products: quantize_dynamic's, and export.calibrate's (fixed activation scales)
INT8_PRODUCTS = {"MatMulInteger", "MatMulIntegerToFloat"}


def fusable(path: str | Path | onnx.GraphProto) -> bool:
    """Whether the fused search pays for the step graph at path (or this parsed graph): where its
    matrix products take
    int8 weights (INT8_PRODUCTS). Inside a Loop body ONNX Runtime does not pre-pack the weights
    that the body reads from the outer graph, so each call packs them: cheap for int8 weights
    (and less memory than packing them once), too slow for float weights, which stay with the
    step path (measured on the shipped decoder; BENCHMARKS.md)."""
    return any(n.op_type in INT8_PRODUCTS for n in read_graph(path).node)


def greedy_loop(path: str | Path, external_data: bool = True) -> bytes:
    """The step graph at path as a greedy search over one sentence, serialized.

    Inputs: max_steps () int64 (the length limit, EOS included), eos () int64, start (1,)
    int64 (the decoder's first token), the step graph's cross_k_<i>, cross_v_<i> (1, H, S, Dh)
    and cross_mask (1, S) int32. Outputs: tokens (T, 1) int64 and log_probs (T, 1) float32, one
    row per step (EOS last when the search ended by it). external_data: False keeps weights
    that lie in a weights file as references to it (relative to path's folder)."""
    return _loop(path, beam=False, external_data=external_data)


def beam_loop(path: str | Path, walk_op: bool = False, external_data: bool = True) -> bytes:
    """The step graph at path as a beam search over one sentence, serialized.

    Inputs: max_steps () and eos () int64, start (1,) int64 and start_scores (1,) float32 (the
    first step runs one row, unexpanded), beam_size (1,) int64 (K), top_k (1,) int64
    (candidates per row, min(2K, V)), length_penalty () float64, and the cross keys/values and
    mask as in `greedy_loop`. Outputs per step (T rows): tokens, scores (float32) and parents
    (the rows they extend) of the m best candidates in walk order, finished (m,) bool (those
    that became finished hypotheses), and chosen (K,) int64: the candidates that the K rows of
    the next step took, in order. walk_op: the search step after the step graph is one node of
    our kernel library (`nmt.BeamWalk`, app/engine/kernels/beam_walk.cc) instead of forty-odd
    ONNX nodes (the same rules and arithmetic; the session must register the library)."""
    return _loop(path, beam=True, walk_op=walk_op, external_data=external_data)


class _Nodes:
    """Nodes and constants of the graphs made here (the loop body, then the outer graph), named
    under PREFIX."""

    def __init__(self) -> None:
        self.nodes: list = []
        self.consts: list = []

    def const(self, name: str, value) -> str:
        from onnx import numpy_helper

        self.consts.append(numpy_helper.from_array(np.array(value), PREFIX + name))
        return PREFIX + name

    def op(self, op_type: str, inputs: list[str], *outputs: str, **attrs) -> str:
        """Append a node; its outputs are PREFIX + each name; returns the first."""
        from onnx import helper

        names = [PREFIX + o for o in outputs]
        self.nodes.append(helper.make_node(op_type, inputs, names, name=names[0], **attrs))
        return names[0]


def _value(name: str, elem: int, shape: list):
    from onnx import helper

    return helper.make_tensor_value_info(name, elem, shape)


def _loop(path: str | Path, beam: bool, walk_op: bool = False,
          external_data: bool = True) -> bytes:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(path), load_external_data=external_data)
    graph = model.graph
    inputs = {x.name: x for x in graph.input}
    outputs = {x.name: x for x in graph.output}
    carried = [x.name for x in graph.input if x.name.startswith("cache_")]
    cache = inputs["cache_k_0"].type.tensor_type.shape.dim
    heads, head_dim = cache[1].dim_value, cache[3].dim_value
    kv_type = inputs["cache_k_0"].type.tensor_type.elem_type
    b = _Nodes()
    op, const = b.op, b.const

    it, cond = PREFIX + "iter", PREFIX + "cond"
    body_inputs = [_value(it, TensorProto.INT64, []), _value(cond, TensorProto.BOOL, []),
                   _value("tokens", TensorProto.INT64, ["rows"])]
    if beam:
        body_inputs += [_value(PREFIX + "scores", TensorProto.FLOAT, ["rows"]),
                        _value(PREFIX + "best_finished", TensorProto.DOUBLE, ["K"]),
                        _value(PREFIX + "n_finished", TensorProto.INT64, [])]
    body_inputs += [_copy(inputs[name]) for name in carried]

    # the step graph's per-step inputs, from the iteration number (every row is at step t)
    positions = op("Expand", [it, op("Shape", ["tokens"], "rows")], "positions")
    b.nodes.append(helper.make_node("Identity", [positions], ["positions"], name=PREFIX + "pos"))
    b.nodes.append(helper.make_node("Cast", [positions], ["past_lengths"], name=PREFIX + "past",
                                    to=TensorProto.INT32))
    t1 = op("Add", [it, const("one", np.int64(1))], "t1")  # tokens generated after this step
    b.nodes.append(helper.make_node("Cast", [t1], ["total_length"], name=PREFIX + "total",
                                    to=TensorProto.INT32))
    b.nodes.extend(graph.node)  # -> top_log_probs, top_ids (rows, k); cache_*_out

    if beam:
        body_outputs, record = (_beam_walk if walk_op else _beam_tail)(b, carried, outputs, t1)
        loop_state = ["start", "start_scores", PREFIX + "no_finished", PREFIX + "zero_count"]
        scans = ["tokens", "scores", "parents", "finished", "chosen"]
        extra_inputs = [_value("start", TensorProto.INT64, [1]),
                        _value("start_scores", TensorProto.FLOAT, [1]),
                        _value("beam_size", TensorProto.INT64, [1]),
                        _value("top_k", TensorProto.INT64, [1]),
                        _value("length_penalty", TensorProto.DOUBLE, [])]
    else:
        top_k = const("top_k", np.array([1], np.int64))  # the greedy graph's own k
        for node in b.nodes:
            node.input[:] = [top_k if x == "top_k" else x for x in node.input]
        one = const("shape1", np.array([1], np.int64))
        token = op("Reshape", ["top_ids", one], "token")
        log_prob = op("Reshape", ["top_log_probs", one], "log_prob")
        token0 = op("Reshape", [token, const("scalar", np.zeros(0, np.int64))], "token0")
        more = op("Not", [op("Equal", [token0, "eos"], "is_eos")], "more")
        record = [op("Identity", [token], "out_token"), log_prob]
        body_outputs = [_value(more, TensorProto.BOOL, []),
                        _value(token, TensorProto.INT64, [1])]
        body_outputs += [_renamed(outputs[name + "_out"], name + "_out") for name in carried]
        body_outputs += [_value(record[0], TensorProto.INT64, [1]),
                         _value(record[1], TensorProto.FLOAT, [1])]
        loop_state, scans = ["start"], ["tokens", "log_probs"]
        extra_inputs = [_value("start", TensorProto.INT64, [1])]

    body_graph = helper.make_graph(b.nodes, "step", body_inputs, body_outputs)
    # the outer graph: an empty cache (each step's attention appends its position), the loop
    b.nodes = []
    n_rows = op("Shape", ["start"], "n_rows")
    shape = op("Concat", [n_rows, const("heads_0_dim", np.array([heads, 0, head_dim], np.int64))],
               "cache_shape", axis=0)
    zero = numpy_helper.from_array(np.zeros(1, helper.tensor_dtype_to_np_dtype(kv_type)))
    empty = op("ConstantOfShape", [shape], "empty_cache", value=zero)
    if beam:  # no finished hypothesis yet: K x -inf, and a count of 0
        op("Expand", [const("minus_inf", -np.inf), "beam_size"], "no_finished")
        const("zero_count", np.int64(0))
    b.nodes.append(helper.make_node(
        "Loop", ["max_steps", const("true", True), *loop_state, *[empty] * len(carried)],
        [*[PREFIX + "final_" + x for x in loop_state], *[PREFIX + c + "_final" for c in carried],
         *scans],
        body=body_graph, name=PREFIX + "loop"))
    graph_inputs = [_value("max_steps", TensorProto.INT64, []),
                    _value("eos", TensorProto.INT64, []), *extra_inputs]
    graph_inputs += [x for x in graph.input if x.name.startswith("cross_")]
    graph_outputs = [_value(name, _elem(rec, body_outputs), ["T", *_dims(rec, body_outputs)])
                     for name, rec in zip(scans, record, strict=True)]
    loop_graph = helper.make_graph(b.nodes, "fused_search", graph_inputs, graph_outputs,
                                   [*graph.initializer, *b.consts])
    opsets = list(model.opset_import)
    if walk_op:
        opsets.append(helper.make_opsetid(DOMAIN, 1))
    fused = helper.make_model(loop_graph, opset_imports=opsets, ir_version=model.ir_version)
    return fused.SerializeToString()


def _beam_tail(b: _Nodes, carried: list[str], outputs: dict, t1: str):
    """The beam search's step after the step graph: the candidate walk, the finished
    hypotheses, the stop test and the new rows (see the module's docstring). Returns the body's
    outputs and the names of the values recorded per step."""
    from onnx import TensorProto

    op, const, P = b.op, b.const, PREFIX
    f32, f64, i64 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64
    k1 = "beam_size"  # (1,); the rows are 1 at the first step (unexpanded), then K
    scalar = const("scalar", np.zeros(0, np.int64))
    k = op("Reshape", [k1, scalar], "k_scalar")
    m = op("Reshape", ["top_k", scalar], "m")
    # each row's candidates in ascending id order (ids are distinct within a row), rows in rank
    # order: flat position order is then the tie-break order rank * V + id
    neg_ids = op("Neg", [op("Cast", ["top_ids"], "ids_f", to=f32)], "neg_ids")
    op("TopK", [neg_ids, "top_k"], "by_id_values", "by_id", axis=1)
    by_id = P + "by_id"
    ids = op("GatherElements", ["top_ids", by_id], "ids_sorted", axis=1)
    lps = op("GatherElements", ["top_log_probs", by_id], "lps_sorted", axis=1)
    scores = op("Unsqueeze", [P + "scores", const("axis1", np.array([1], np.int64))], "scores_col")
    flat = const("flat", np.array([-1], np.int64))
    candidates = op("Reshape", [op("Add", [scores, lps], "candidates"), flat], "flat_scores")
    # the m best, by score, ties to the lower position (TopK's rule)
    best_scores = op("TopK", [candidates, "top_k"], "best_scores", "best", axis=0)
    best = P + "best"
    tokens = op("Gather", [op("Reshape", [ids, flat], "flat_ids"), best], "cand_tokens")
    parents = op("Div", [best, m], "cand_parents")
    is_eos = op("Equal", [tokens, "eos"], "cand_eos")
    others = op("Cast", [op("Not", [is_eos], "cand_other")], "cand_other_i", to=i64)
    before = op("CumSum", [others, const("axis0", np.int64(0))], "others_before", exclusive=1)
    walked = op("Less", [before, k], "walked")  # up to the K-th non-EOS candidate
    ends = op("Or", [is_eos, op("GreaterOrEqual", [t1, "max_steps"], "last_step")], "ends")
    finished = op("And", [walked, ends], "cand_finished")
    extend = op("And", [walked, op("Not", [ends], "goes_on")], "cand_extend")
    # finished hypotheses: score / length ** length_penalty, in float64 as Python computes it
    score64 = op("Cast", [best_scores], "scores64", to=f64)
    minus_inf = const("minus_inf64", np.float64(-np.inf))
    length = op("Pow", [op("Cast", [t1], "t1_f", to=f64), "length_penalty"], "length_pow")
    normalized = op("Where", [finished, op("Div", [score64, length], "normalized"), minus_inf],
                    "finished_normalized")
    all_finished = op("Concat", [P + "best_finished", normalized], "all_finished", axis=0)
    best_finished = op("TopK", [all_finished, k1], "best_finished_out", "best_finished_at",
                       axis=0)
    n_new = op("ReduceSum", [op("Cast", [finished], "finished_i", to=i64)], "n_new", keepdims=0)
    n_finished = op("Add", [P + "n_finished", n_new], "n_finished_out")
    # go on while a hypothesis extends, unless K have finished and the K-th best of them ranks
    # at least as high as the best live one would if it ended at the next step
    live = op("ReduceMax", [op("Where", [extend, score64, minus_inf], "live_scores")],
              "best_live", keepdims=0)
    t2 = op("Cast", [op("Add", [t1, const("one2", np.int64(1))], "t2")], "t2_f", to=f64)
    bound = op("Div", [live, op("Pow", [t2, "length_penalty"], "t2_pow")], "live_bound")
    kth = op("Gather", [best_finished, op("Sub", [k, const("one3", np.int64(1))], "k_1")],
             "kth_finished")
    stop = op("And", [op("GreaterOrEqual", [n_finished, k], "enough"),
                      op("GreaterOrEqual", [kth, bound], "kth_ahead")], "stop")
    n_extend = op("ReduceMax", [op("Cast", [extend], "extend_i", to=TensorProto.INT32)],
                  "n_extend", keepdims=0)
    more = op("And", [op("Greater", [n_extend, const("zero_i", np.int32(0))], "any_extend"),
                      op("Not", [stop], "no_stop")], "more")
    # the K continuing rows: the extending candidates in walk order (then the others, which
    # fill the rows only when the search stops here)
    at = op("Cast", [op("Range", [const("zero64", np.int64(0)), m, const("one4", np.int64(1))],
                        "positions_m")], "positions_f", to=f32)
    later = op("Add", [at, op("Cast", [m], "m_f", to=f32)], "later")
    order = op("Where", [extend, at, later], "row_order")
    op("TopK", [order, k1], "chosen_values", "chosen", axis=0, largest=0)
    chosen = P + "chosen"
    new_parents = op("Gather", [parents, chosen], "new_parents")
    new_tokens = op("Gather", [tokens, chosen], "new_tokens")
    new_scores = op("Gather", [best_scores, chosen], "new_scores")
    moved = [op("Gather", [name + "_out", new_parents], name + "_moved", axis=0)
             for name in carried]
    body_outputs = [_value(more, TensorProto.BOOL, []),
                    _value(new_tokens, i64, ["K"]),
                    _value(new_scores, f32, ["K"]),
                    _value(best_finished, f64, ["K"]),
                    _value(n_finished, i64, [])]
    body_outputs += [_renamed(outputs[name + "_out"], out)
                     for name, out in zip(carried, moved, strict=True)]
    record = [op("Identity", [x], "out_" + x[len(P):])
              for x in (tokens, best_scores, parents, finished, chosen)]
    body_outputs += [_value(record[0], i64, ["m"]), _value(record[1], f32, ["m"]),
                     _value(record[2], i64, ["m"]), _value(record[3], TensorProto.BOOL, ["m"]),
                     _value(record[4], i64, ["K"])]
    return body_outputs, record


def _beam_walk(b: _Nodes, carried: list[str], outputs: dict, t1: str):
    """As `_beam_tail`, the search step in one `nmt.BeamWalk` node."""
    from onnx import TensorProto, helper

    P, i64 = PREFIX, TensorProto.INT64
    names = ["more", "new_tokens", "new_scores", "new_parents", "best_finished_out",
             "n_finished_out", "cand_tokens", "best_scores", "cand_parents", "cand_finished",
             "chosen"]
    b.nodes.append(helper.make_node(
        WALK_OP, ["top_log_probs", "top_ids", P + "scores", P + "best_finished",
                  P + "n_finished", t1, "max_steps", "eos", "beam_size", "length_penalty"],
        [P + x for x in names], name=P + "walk", domain=DOMAIN))
    more, tokens, scores, parents, best_finished, n_finished = (P + x for x in names[:6])
    moved = [b.op("Gather", [name + "_out", parents], name + "_moved", axis=0)
             for name in carried]
    body_outputs = [_value(more, TensorProto.BOOL, []),
                    _value(tokens, i64, ["K"]),
                    _value(scores, TensorProto.FLOAT, ["K"]),
                    _value(best_finished, TensorProto.DOUBLE, ["K"]),
                    _value(n_finished, i64, [])]
    body_outputs += [_renamed(outputs[name + "_out"], out)
                     for name, out in zip(carried, moved, strict=True)]
    record = [b.op("Identity", [P + x], "out_" + x) for x in names[6:]]
    body_outputs += [_value(record[0], i64, ["m"]), _value(record[1], TensorProto.FLOAT, ["m"]),
                     _value(record[2], i64, ["m"]), _value(record[3], TensorProto.BOOL, ["m"]),
                     _value(record[4], i64, ["K"])]
    return body_outputs, record


def _copy(info):
    import onnx

    out = onnx.ValueInfoProto()
    out.CopyFrom(info)
    return out


def _renamed(info, name: str):
    out = _copy(info)
    out.name = name
    return out


def _elem(name: str, infos) -> int:
    return next(i.type.tensor_type.elem_type for i in infos if i.name == name)


def _dims(name: str, infos) -> list:
    info = next(i for i in infos if i.name == name)
    return [d.dim_value or d.dim_param for d in info.type.tensor_type.shape.dim]


class FusedDecoder:
    """Runs the fused searches: session_for(beam) gives the session of `greedy_loop` (beam
    False) or `beam_loop` (True)."""

    def __init__(self, session_for: Callable[[bool], ort.InferenceSession], n_layers: int,
                 start_id: int, eos_id: int, vocab_size: int) -> None:
        self.session_for, self.n_layers = session_for, n_layers
        self.start_id, self.eos_id, self.vocab_size = start_id, eos_id, vocab_size

    def _feeds(self, cross_k: np.ndarray, cross_v: np.ndarray, src_mask: np.ndarray,
               limit: int) -> dict[str, np.ndarray]:
        feeds = {"max_steps": np.array(limit, np.int64), "eos": np.array(self.eos_id, np.int64),
                 "start": np.array([self.start_id], np.int64),
                 "cross_mask": src_mask.astype(np.int32)}
        for i in range(self.n_layers):
            feeds[f"cross_k_{i}"] = cross_k[i]
            feeds[f"cross_v_{i}"] = cross_v[i]
        return feeds

    def search(self, cross_k: np.ndarray, cross_v: np.ndarray, src_mask: np.ndarray, limit: int,
               beam_size: int, length_penalty: float, n_best: int) -> list[Hypothesis]:
        """One sentence's encoder output (cross_k/cross_v (L, 1, H, S, Dh), src_mask (1, S))
        and its length limit (EOS included) -> its n_best hypotheses, best first."""
        feeds = self._feeds(cross_k, cross_v, src_mask, limit)
        if beam_size == 1:
            tokens, log_probs = self.session_for(False).run(["tokens", "log_probs"], feeds)
            tokens = tokens[:, 0].tolist()
            score = float(np.cumsum(log_probs[:, 0], dtype=np.float32)[-1])  # in order, float32
            n_tokens = len(tokens) - (tokens[-1] == self.eos_id)
            return ranked([(tokens[:n_tokens], score, len(tokens))], length_penalty, n_best)
        k = beam_size
        feeds["start_scores"] = np.zeros(1, np.float32)
        feeds["beam_size"] = np.array([k], np.int64)
        feeds["top_k"] = np.array([min(2 * k, self.vocab_size)], np.int64)
        feeds["length_penalty"] = np.array(length_penalty, np.float64)
        found = self.session_for(True).run(
            ["tokens", "scores", "parents", "finished", "chosen"], feeds)
        tokens, scores, parents, finished, chosen = (x.tolist() for x in found)
        eos, rows, done = self.eos_id, [[]], []  # one row at first, K after the first step
        for t, (tok, score, parent, fin, kept) in enumerate(
                zip(tokens, scores, parents, finished, chosen, strict=True)):
            for j in range(len(tok)):
                if fin[j]:
                    done.append((rows[parent[j]] + ([tok[j]] if tok[j] != eos else []),
                                 score[j], t + 1))
            rows = [rows[parent[j]] + [tok[j]] for j in kept]
        return ranked(done, length_penalty, n_best)
