"""Weights held once: what is shared between a bundle's sessions, and the weights file mapped
instead of copied (app.engine.sessions: SharedWeights, ExternalWeights)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from app.engine.sessions import (
    ExternalWeights,
    SessionConfig,
    SharedWeights,
    create_session,
    packing_inputs,
)

D, V = 256, 512  # (D, V) int8 = 128 KiB: over SHARED_MIN_BYTES


def _graph(rng: np.random.Generator) -> onnx.ModelProto:
    """logits = x @ (out * scale) and an embedding Gather of the same int8 matrix (as the
    output projection and the tied embedding of an imported int8 bundle), plus a matrix only a
    packing op reads and a float table only a Gather reads."""
    out = numpy_helper.from_array(rng.integers(-127, 128, (D, V), dtype=np.int8), "out")
    only_packed = numpy_helper.from_array(rng.integers(-127, 128, (D, D), dtype=np.int8),
                                          "only_packed")
    table = numpy_helper.from_array(rng.standard_normal((V, 64)).astype(np.float32), "table")
    nodes = [
        helper.make_node("MatMulInteger", ["x", "only_packed"], ["h"]),
        helper.make_node("Cast", ["h"], ["hf"], to=TensorProto.FLOAT),
        helper.make_node("Gather", ["out", "ids"], ["emb"], axis=1),  # (D, N) int8
        helper.make_node("MatMulInteger", ["x", "out"], ["y"]),
        helper.make_node("Gather", ["table", "ids"], ["rows"]),
    ]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.INT8, ["N", D]),
         helper.make_tensor_value_info("ids", TensorProto.INT64, ["T"])],
        [helper.make_tensor_value_info("hf", TensorProto.FLOAT, ["N", D]),
         helper.make_tensor_value_info("emb", TensorProto.INT8, [D, "T"]),
         helper.make_tensor_value_info("y", TensorProto.INT32, ["N", V]),
         helper.make_tensor_value_info("rows", TensorProto.FLOAT, ["T", 64])],
        [out, only_packed, table])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_weight_another_op_reads_too_is_shared(tmp_path):
    """Only weights that packing ops alone read stay each session's own (the session frees its
    copy once packed); the output projection, which the embedding Gather reads too, is shared,
    as are float tables."""
    model = _graph(np.random.default_rng(0))
    assert packing_inputs(model.graph) >= {"only_packed"}
    assert "out" not in packing_inputs(model.graph)
    onnx.save(model, str(tmp_path / "g.onnx"))
    shared = dict(SharedWeights().of(tmp_path / "g.onnx"))
    assert set(shared) == {"out", "table"}


def test_the_weights_file_is_mapped_and_referred_to_and_outputs_stay_the_same(tmp_path):
    """A graph whose weights lie in a weights file (as imported bundles store them): shared
    weights are views of the file (memory-mapped, not copies), a graph held in memory is handed
    to ONNX Runtime with references into the file for the weights whose bytes match it (a
    changed one keeps its bytes), and the session answers exactly as one of the file."""
    rng = np.random.default_rng(1)
    model = _graph(rng)
    path = tmp_path / "g.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="weights.bin",
                    size_threshold=1024)
    external = ExternalWeights(path)
    assert set(external.places) == {"out", "only_packed", "table"}

    sharing = SharedWeights(external)
    shared = sharing.of(path)
    arrays = {name: value.numpy() for name, value in shared}
    assert set(arrays) == {"out", "table"}
    assert all(isinstance(a, np.memmap) for a, _ in sharing._arrays.values())

    in_memory = onnx.load(str(path))  # weights loaded
    changed = next(i for i in in_memory.graph.initializer if i.name == "table")
    changed_values = numpy_helper.to_array(changed) + 1
    changed.CopyFrom(numpy_helper.from_array(changed_values, "table"))
    copy = onnx.ModelProto()
    copy.CopyFrom(in_memory)
    assert external.refer(copy) == 2  # out, only_packed; table's bytes differ
    kinds = {i.name: i.data_location for i in copy.graph.initializer}
    assert kinds == {"out": TensorProto.EXTERNAL, "only_packed": TensorProto.EXTERNAL,
                     "table": TensorProto.DEFAULT}

    feeds = {"x": rng.integers(-127, 128, (3, D), dtype=np.int8),
             "ids": np.array([0, 5, V - 1], np.int64)}
    config = SessionConfig(intra_op_threads=1)
    mine = create_session(in_memory, config, [(n, v) for n, v in shared if n != "table"],
                          external=external)
    theirs = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for got, want in zip(mine.run(None, feeds), theirs.run(None, feeds), strict=True):
        if got.dtype == np.float32 and got.shape == (3, 64):  # the changed table's rows
            np.testing.assert_array_equal(got, changed_values[feeds["ids"]])
        else:
            np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(arrays["out"], numpy_helper.to_array(
        next(i for i in onnx.load(str(path)).graph.initializer if i.name == "out")))
