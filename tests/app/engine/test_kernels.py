"""Our kernels (app.engine.kernels): one-query attention with the same outputs and caches as
ONNX Runtime's GroupQueryAttention, the search tail (log-softmax, top-k) against a reference,
the int8 product against ONNX Runtime's, the swaps into the decoder graphs, and the engine's
translations with them the PyTorch reference's.
Skipped where the library is not built (`python -m app.engine.kernels build`; .ci/run builds
it), except the checks that need no library."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from app.engine import TranslationOptions, Translator, kernels
from app.engine.fused import beam_loop
from model.search import beam_search, greedy_search

needs_library = pytest.mark.skipif(
    kernels.library() is None,
    reason="kernel library not built (python -m app.engine.kernels build)")


def attention_graph(op: str, domain: str, rows: int, heads: int, kv_heads: int, past: int,
                    dim: int, packed: bool, scale: float | None = None) -> bytes:
    """One attention node: (query or packed QKV, key, value, past, seqlens, total) -> output,
    present key, present value."""
    width = (heads + 2 * kv_heads) * dim if packed else heads * dim
    inputs = [helper.make_tensor_value_info("q", TensorProto.FLOAT, [rows, 1, width])]
    if not packed:
        inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, [rows, 1, kv_heads * dim])
                   for n in ("k", "v")]
    inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, [rows, kv_heads, past, dim])
               for n in ("past_k", "past_v")]
    inputs += [helper.make_tensor_value_info("seqlens", TensorProto.INT32, [rows]),
               helper.make_tensor_value_info("total", TensorProto.INT32, [])]
    attrs = {"num_heads": heads, "kv_num_heads": kv_heads}
    if scale is not None:
        attrs["scale"] = scale
    node = helper.make_node(
        op, (["q", "", ""] if packed else ["q", "k", "v"]) + ["past_k", "past_v", "seqlens",
                                                              "total"],
        ["out", "present_k", "present_v"], domain=domain, **attrs)
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
               for n in ("out", "present_k", "present_v")]
    model = helper.make_model(helper.make_graph([node], "attention", inputs, outputs),
                              opset_imports=[helper.make_opsetid("", 17),
                                             helper.make_opsetid(domain, 1)])
    return model.SerializeToString()


def session(graph: bytes, custom: bool):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    if custom:
        options.register_custom_ops_library(str(kernels.library()))
    return ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])


CASES = [  # rows, query heads, key/value heads, buffer length, head size, packed, past lengths
    (5, 4, 4, 12, 64, True, [0, 3, 11, 7, 1]),  # self-attention, rows at different places
    (3, 16, 4, 20, 64, False, [19, 4, 12]),  # cross-attention, 4 beams per sentence
    (2, 2, 2, 9, 24, True, [8, 2]),  # a head size with no fast path
    (1, 4, 4, 300, 32, False, [299]),  # a long source
]


@needs_library
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("scale", [None, 0.3])
def test_same_as_group_query_attention_in_place(case, scale):
    """Past and present bound to the same buffers (as the step decoder binds them): the new
    key/value written at each row's past length, the outputs equal to ONNX Runtime's."""
    rows, heads, kv_heads, length, dim, packed, past = case
    rng = np.random.default_rng(len(past))
    width = (heads + 2 * kv_heads) * dim if packed else heads * dim
    feeds = {"q": rng.standard_normal((rows, 1, width), dtype=np.float32),
             "seqlens": np.array(past, np.int32), "total": np.array(max(past) + 1, np.int32)}
    if not packed:
        feeds["k"] = rng.standard_normal((rows, 1, kv_heads * dim), dtype=np.float32)
        feeds["v"] = rng.standard_normal((rows, 1, kv_heads * dim), dtype=np.float32)
    start = [rng.standard_normal((rows, kv_heads, length, dim), dtype=np.float32)
             for _ in range(2)]
    got = {}
    for name, op, domain, custom in (("theirs", "GroupQueryAttention", "com.microsoft", False),
                                     ("ours", kernels.OP, kernels.DOMAIN, True)):
        sess = session(attention_graph(op, domain, rows, heads, kv_heads, length, dim, packed,
                                       scale), custom)
        caches = [c.copy() for c in start]
        binding = sess.io_binding()
        for key, value in feeds.items():
            binding.bind_cpu_input(key, value)
        for kind, cache in zip("kv", caches, strict=True):
            binding.bind_input(f"past_{kind}", "cpu", 0, np.float32, cache.shape,
                               cache.ctypes.data)
            binding.bind_output(f"present_{kind}", "cpu", 0, np.float32, cache.shape,
                                cache.ctypes.data)
        binding.bind_output("out", "cpu")
        sess.run_with_iobinding(binding)
        got[name] = (binding.copy_outputs_to_cpu()[2], caches)
    np.testing.assert_allclose(got["ours"][0], got["theirs"][0], rtol=1e-5, atol=1e-6)
    for ours, theirs in zip(got["ours"][1], got["theirs"][1], strict=True):
        np.testing.assert_array_equal(ours, theirs)  # the new key/value, in place
    assert not np.array_equal(got["ours"][1][0], start[0])


@needs_library
def test_same_as_group_query_attention_into_a_longer_present():
    """The fused search's loop: past of t positions, present of t + 1, a buffer of its own."""
    rows, heads, dim, length = 2, 4, 64, 6
    rng = np.random.default_rng(3)
    feeds = {"q": rng.standard_normal((rows, 1, 3 * heads * dim), dtype=np.float32),
             "past_k": rng.standard_normal((rows, heads, length, dim), dtype=np.float32),
             "past_v": rng.standard_normal((rows, heads, length, dim), dtype=np.float32),
             "seqlens": np.array([length, length], np.int32),
             "total": np.array(length + 1, np.int32)}
    theirs = session(attention_graph("GroupQueryAttention", "com.microsoft", rows, heads, heads,
                                     length, dim, True), False).run(None, feeds)
    ours = session(attention_graph(kernels.OP, kernels.DOMAIN, rows, heads, heads, length, dim,
                                   True), True).run(None, feeds)
    assert ours[1].shape == theirs[1].shape == (rows, heads, length + 1, dim)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(ours[1], theirs[1])
    np.testing.assert_array_equal(ours[2], theirs[2])


@needs_library
def test_bad_input_is_an_error_not_a_crash():
    feeds = {"q": np.zeros((1, 1, 3 * 64), np.float32),
             "past_k": np.zeros((1, 1, 4, 64), np.float32),
             "past_v": np.zeros((1, 1, 4, 64), np.float32),
             "seqlens": np.array([12], np.int32), "total": np.array(10, np.int32)}
    sess = session(attention_graph(kernels.OP, kernels.DOMAIN, 1, 1, 1, 4, 64, True), True)
    with pytest.raises(Exception, match="seqlens_k out of range"):  # a past beyond the present
        sess.run(None, feeds)
    feeds["seqlens"] = np.array([2], np.int32)
    assert sess.run(None, feeds)[0].shape == (1, 1, 64)  # and the session still runs


def test_swap_attention_reaches_loop_bodies(tiny_bundle):
    decoder = tiny_bundle / "decoder.fp32.onnx"
    model = onnx.load_from_string(beam_loop(decoder))
    before = sum(1 for _ in _nodes(model.graph, "GroupQueryAttention"))
    assert before > 0
    assert kernels.swap_attention(model) == before
    assert not list(_nodes(model.graph, "GroupQueryAttention"))
    assert len(list(_nodes(model.graph, kernels.OP))) == before
    assert any(o.domain == kernels.DOMAIN for o in model.opset_import)


def cross_graph(op: str, domain: str, heads: int) -> bytes:
    """One cross-attention node: (query (N, Lq, H D), key, value (N, H, S, D), mask (N, S))."""
    f = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("q", f, ["N", "L", "W"]),
              helper.make_tensor_value_info("k", f, ["N", heads, "S", "D"]),
              helper.make_tensor_value_info("v", f, ["N", heads, "S", "D"]),
              helper.make_tensor_value_info("mask", TensorProto.INT32, ["N", "S"])]
    node = helper.make_node(op, ["q", "k", "v", "", "mask"], ["out"], domain=domain,
                            num_heads=heads, unidirectional=0)
    model = helper.make_model(
        helper.make_graph([node], "cross", inputs, [helper.make_tensor_value_info("out", f, None)]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)])
    return model.SerializeToString()


@needs_library
@pytest.mark.parametrize(("n", "lq", "heads", "dim"), [(1, 1, 4, 64), (1, 4, 4, 64),
                                                      (5, 1, 2, 32), (3, 2, 3, 24)])
def test_cross_attention_equals_onnxruntimes(n, lq, heads, dim):
    """CrossAttention against ONNX Runtime's MultiHeadAttention: masks of prefixes (sources
    padded at the end, one of them not padded) and one with holes."""
    rng = np.random.default_rng(n * 100 + dim)
    S = 11
    feeds = {"q": rng.standard_normal((n, lq, heads * dim)).astype(np.float32),
             "k": rng.standard_normal((n, heads, S, dim)).astype(np.float32),
             "v": rng.standard_normal((n, heads, S, dim)).astype(np.float32)}
    lengths = rng.integers(1, S + 1, n)
    lengths[0] = S
    mask = (np.arange(S)[None, :] < lengths[:, None]).astype(np.int32)
    if n > 2:
        mask[2] = [1, 0, 1, 1, 0, 0, 1, 0, 0, 1, 0]  # not a prefix: the slow path
    feeds["mask"] = mask
    ours = session(cross_graph(kernels.CROSS_OP, kernels.DOMAIN, heads), True).run(None, feeds)[0]
    theirs = session(cross_graph("MultiHeadAttention", "com.microsoft", heads), False).run(
        None, feeds)[0]
    np.testing.assert_allclose(ours, theirs, atol=2e-6, rtol=1e-5)


@needs_library
def test_cross_attention_without_any_source_gives_zeros():
    sess = session(cross_graph(kernels.CROSS_OP, kernels.DOMAIN, 2), True)
    feeds = {"q": np.ones((2, 1, 8), np.float32), "k": np.ones((2, 2, 3, 4), np.float32),
             "v": np.ones((2, 2, 3, 4), np.float32), "mask": np.array([[1, 1, 0], [0, 0, 0]],
                                                                       np.int32)}
    out = sess.run(None, feeds)[0]
    assert (out[0] == 1).all() and (out[1] == 0).all()
    feeds["mask"] = np.ones((2, 4), np.int32)  # a mask of another width: an error, not a crash
    with pytest.raises(Exception, match="key_padding_mask"):
        sess.run(None, feeds)


def test_swap_cross_attention_reaches_loop_bodies_and_step_graphs(tiny_bundle):
    decoder = tiny_bundle / "decoder.fp32.onnx"
    for model in (onnx.load(decoder), onnx.load_from_string(beam_loop(decoder))):
        before = len(list(_nodes(model.graph, "MultiHeadAttention")))
        assert before > 0
        assert kernels.swap_cross_attention(model) == before
        assert len(list(_nodes(model.graph, kernels.CROSS_OP))) == before
        assert any(o.domain == kernels.DOMAIN for o in model.opset_import)


def _nodes(graph, op):
    for node in graph.node:
        if node.op_type == op:
            yield node
        for attr in node.attribute:
            if attr.g.node:
                yield from _nodes(attr.g, op)


def test_missing_headers_name_the_package(tmp_path, monkeypatch):
    monkeypatch.setattr(kernels.builder, "HEADER_DIRS", ())
    monkeypatch.setattr(kernels.builder, "cache_dir", lambda: tmp_path / "none fetched")
    monkeypatch.delenv("NMT_ORT_INCLUDE", raising=False)
    with pytest.raises(FileNotFoundError, match="libonnxruntime-dev"):
        kernels.find_headers(tmp_path)


@pytest.mark.parametrize("kernel", [True, False], ids=["our-kernel", "onnxruntime-kernels"])
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "steps"])
def test_translations_equal_pytorch_with_either_attention(tiny_bundle, reference, sources, fused,
                                                          kernel, monkeypatch):
    """fp32, greedy and beam search, in the fused search and in steps: the PyTorch reference
    decoders' outputs with our kernels (attention, search tail) in every decoder session and
    with ONNX Runtime's."""
    if kernel and kernels.library() is None:
        pytest.skip("kernel library not built (python -m app.engine.kernels build)")
    if not kernel:
        monkeypatch.setattr(kernels.runtime, "library", lambda: None)
    model, _ = reference
    translator = Translator.from_dir(tiny_bundle, variant="fp32", intra_threads=1, fused=fused)
    for source in sources[:12]:
        greedy = translator.translate_ids([source], TranslationOptions(beam_size=1))[0]
        assert [greedy[0].tokens] == greedy_search(model, [source])
        options = TranslationOptions(beam_size=4, length_penalty=1.0)
        beam = translator.translate_ids([source], options)[0]
        assert beam[0].tokens == beam_search(model, source, beam_size=4)[0].tokens
    batch = translator.translate_ids(sources, TranslationOptions(beam_size=1))
    assert [h[0].tokens for h in batch] == greedy_search(model, sources)


@needs_library
@pytest.mark.parametrize("variant", ["fp32", "int8"])
def test_the_beam_walk_op_finds_the_graphs_hypotheses(tiny_bundle, sources, variant,
                                                      monkeypatch):
    """The fused beam search with its search step in one BeamWalk node and with the ONNX nodes
    it stands in for: the same n-best lists, scores to the bit, for several beam sizes, length
    penalties and limits (searches that stop early, and ones cut by the length limit)."""
    import app.engine.sessions as sessions_module

    loop = sessions_module.beam_loop
    found = {}
    for walk_op in (True, False):
        monkeypatch.setattr(sessions_module, "beam_loop",
                            lambda path, walk_op=walk_op, **_: loop(path, walk_op=walk_op))
        t = Translator.from_dir(tiny_bundle, variant=variant, intra_threads=1, fused=True)
        found[walk_op] = [
            [(h.tokens, h.score) for h in t.translate_ids([source], options)[0]]
            for options in (TranslationOptions(beam_size=k, length_penalty=lp,
                                               num_alternatives=k - 1, max_len_ratio=ratio)
                            for k, lp, ratio in ((2, 0.6, 1.5), (4, 1.0, 1.5), (5, 1.3, 0.3),
                                                 (3, 0.0, 0.5)))
            for source in sources[:10]
        ]
    assert found[True] == found[False]
    assert any(len(hyps) > 1 for hyps in found[True])


@needs_library
def test_the_beam_walk_op_refuses_a_beam_wider_than_its_candidates():
    import onnxruntime as ort

    f, i, d, b = TensorProto.FLOAT, TensorProto.INT64, TensorProto.DOUBLE, TensorProto.BOOL
    names = ["lp", "ids", "scores", "best", "n", "t1", "max_steps", "eos", "k", "penalty"]
    types = [f, i, f, d, i, i, i, i, i, d]
    out_types = [b, i, f, i, d, i, i, f, i, b, i]
    outs = [f"o{j}" for j in range(len(out_types))]
    node = helper.make_node(kernels.WALK_OP, names, outs, domain=kernels.DOMAIN)
    graph = helper.make_graph(
        [node], "walk",
        [helper.make_tensor_value_info(n, t, None) for n, t in zip(names, types, strict=True)],
        [helper.make_tensor_value_info(o, t, None) for o, t in zip(outs, out_types, strict=True)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(kernels.DOMAIN, 1)])
    options = ort.SessionOptions()
    options.register_custom_ops_library(str(kernels.library()))
    sess = ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])
    feeds = {"lp": np.zeros((1, 2), np.float32), "ids": np.array([[5, 3]]),
             "scores": np.zeros(1, np.float32), "best": np.full(3, -np.inf),
             "n": np.array(0), "t1": np.array(1), "max_steps": np.array(9), "eos": np.array(2),
             "k": np.array([3]), "penalty": np.array(1.0)}
    with pytest.raises(Exception, match="beam_size must be in"):
        sess.run(None, feeds)
    feeds["k"], feeds["best"] = np.array([2]), np.full(2, -np.inf)
    more, tokens = sess.run(["o0", "o1"], feeds)
    assert more and tokens.tolist() == [3, 5]  # candidates of equal score in ascending id


def test_a_library_for_a_newer_runtime_or_turned_off_is_not_used(tmp_path, monkeypatch):
    lib = tmp_path / "libnmt_kernels.so"
    lib.write_bytes(b"\x7fELF")  # library() only looks: nothing is loaded here
    monkeypatch.setenv("NMT_KERNELS_LIB", str(lib))
    try:
        for note, used in (("", False), ("999", False), ("1", True)):  # no note, too new, ok
            if note:
                (tmp_path / "libnmt_kernels.so.api").write_text(note)
            kernels.library.cache_clear()
            assert (kernels.library() == lib) is used, note
        monkeypatch.setenv("NMT_KERNELS", "off")
        kernels.library.cache_clear()
        assert kernels.library() is None
    finally:
        monkeypatch.undo()
        kernels.library.cache_clear()


def tail_graph() -> bytes:
    """One LogSoftmaxTopK node: (logits (R, V), k (1,)) -> top_log_probs, top_ids."""
    node = helper.make_node(kernels.TAIL_OP, ["logits", "k"], ["top_log_probs", "top_ids"],
                            domain=kernels.DOMAIN)
    graph = helper.make_graph(
        [node], "tail",
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["R", "V"]),
         helper.make_tensor_value_info("k", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("top_log_probs", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("top_ids", TensorProto.INT64, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid(kernels.DOMAIN, 1)]
                             ).SerializeToString()


@needs_library
@pytest.mark.parametrize("rows, vocab, k", [(1, 8000, 1), (16, 8000, 8), (5, 37, 3),
                                            (3, 100, 100), (2, 7, 2)])
def test_log_softmax_top_k_matches_a_reference(rows, vocab, k):
    """The k best logits of each row, best first and the lower id first among equals, with
    their log-softmax values (float64 reference), at vocabularies that fill whole vectors and
    ones that do not."""
    rng = np.random.default_rng(rows * vocab + k)
    logits = (rng.standard_normal((rows, vocab)) * 4).astype(np.float32)
    logits[:, vocab // 2] = logits[:, vocab // 3] = logits.max(axis=1) + 1  # a tie at the top
    values, ids = session(tail_graph(), True).run(
        None, {"logits": logits, "k": np.array([k], np.int64)})
    want = np.argsort(-logits, axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(ids, want)
    x = logits.astype(np.float64)
    log_softmax = x - x.max(axis=1, keepdims=True)
    log_softmax -= np.log(np.exp(log_softmax).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(values, np.take_along_axis(log_softmax, want, axis=1),
                               rtol=0, atol=5e-6)  # a few float32 steps at values near -20


@needs_library
def test_a_bad_k_is_an_error_not_a_crash():
    sess = session(tail_graph(), True)
    logits = np.zeros((2, 5), np.float32)
    for k in (0, 6):
        with pytest.raises(Exception, match=r"k must be in \[1, V\]"):
            sess.run(None, {"logits": logits, "k": np.array([k], np.int64)})
    assert sess.run(None, {"logits": logits, "k": np.array([5], np.int64)})[1].shape == (2, 5)


def test_swap_tail_replaces_log_softmax_and_top_k(tiny_bundle):
    """The step graph and both fused loops: the LogSoftmax and the two-stage top-k after it
    become one node that makes top_log_probs and top_ids; the beam loop keeps its own TopKs
    (the search over the candidates) and nothing is left that feeds nothing."""
    from app.engine.fused import greedy_loop

    decoder = tiny_bundle / "decoder.fp32.onnx"
    for model in (onnx.load(decoder), onnx.load_from_string(greedy_loop(decoder)),
                  onnx.load_from_string(beam_loop(decoder))):
        top_ks = len(list(_nodes(model.graph, "TopK")))
        assert kernels.swap_tail(model) == 1
        assert not list(_nodes(model.graph, "LogSoftmax"))
        (tail,) = _nodes(model.graph, kernels.TAIL_OP)
        assert list(tail.output) == ["top_log_probs", "top_ids"]
        assert top_ks - len(list(_nodes(model.graph, "TopK"))) == 3  # the two-stage top-k's
        assert kernels.swap_tail(model) == 0  # nothing left to swap
    onnx.checker.check_model(model)  # the beam loop: every input still made somewhere


def test_a_library_older_than_its_sources_is_not_used(tmp_path, monkeypatch):
    lib = tmp_path / "libnmt_kernels.so"
    lib.write_bytes(b"\x7fELF")
    (tmp_path / "libnmt_kernels.so.api").write_text("1")
    monkeypatch.setenv("NMT_KERNELS_LIB", str(lib))
    try:
        kernels.library.cache_clear()
        assert kernels.library() == lib
        os.utime(lib, (0, 0))  # built before the sources were last changed
        kernels.library.cache_clear()
        assert kernels.library() is None
    finally:
        monkeypatch.undo()
        kernels.library.cache_clear()


def int8_products_graph(rows_shape: list, seed: int = 0, width: int = 64,
                        hidden: int = 128) -> onnx.ModelProto:
    """x -> four QuantizeLinear -> MatMulIntegerToFloat pairs, as export.calibrate writes them:
    (K width, N hidden) with a bias, (hidden, width) without, (width, 100) with a bias (N not a
    multiple of 64 nor of 16: the last block's columns in part), and (width, 64) with nonzero
    weight zero points, which our kernel does not take. Weights int8 in 7 bits, per-column
    scales, zero points 0 but the last's."""
    from onnx import numpy_helper

    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def const(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def product(i, x, k, n, bias, w_zero=0):
        scale = const(f"s{i}", np.float32(rng.uniform(0.02, 0.08)))
        zero = const(f"z{i}", np.uint8(rng.integers(100, 150)))
        nodes.append(helper.make_node("QuantizeLinear", [x, scale, zero], [f"q{i}"]))
        inputs = [f"q{i}", const(f"w{i}", rng.integers(-64, 64, (k, n)).astype(np.int8)), scale,
                  const(f"ws{i}", rng.uniform(1e-3, 4e-3, n).astype(np.float32)), zero,
                  const(f"wz{i}", np.full(n, w_zero, np.int8))]
        if bias:
            inputs.append(const(f"b{i}", rng.normal(0, 0.2, n).astype(np.float32)))
        nodes.append(helper.make_node("MatMulIntegerToFloat", inputs, [f"y{i}"],
                                      domain="com.microsoft"))
        return f"y{i}"

    first = product(0, "x", width, hidden, bias=True)
    nodes.append(helper.make_node("Relu", [first], ["h"]))
    out = product(1, "h", hidden, width, bias=False)
    ragged = product(2, "x", width, 100, bias=True)
    other = product(3, "x", width, 64, bias=True, w_zero=3)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [*rows_shape, width])
    graph = helper.make_graph(
        nodes, "products", [x],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
         for n in (out, ragged, other)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.microsoft", 1)])


@pytest.mark.skipif(kernels.library() is None or not kernels.matmul_supported(),
                    reason="kernel library not built, or this CPU has no AVX-512 VNNI")
@pytest.mark.parametrize("rows", [1, 3, 6, 7, 13, 16, 40])  # VNNI below 8 rows, AMX above
@pytest.mark.parametrize("three_d", [False, True], ids=["2d", "3d"])
def test_int8_matmul_gives_onnxruntimes_outputs_to_the_bit(rows, three_d):
    """The swapped graph (Int8MatMul nodes) gives the same bits as QuantizeLinear +
    MatMulIntegerToFloat on ONNX Runtime's kernels, clamped activations included, on either of
    the kernel's paths (AVX-512 VNNI; AMX from 8 rows on where the CPU has it)."""
    shape = [rows, 1] if three_d else [rows]
    model = int8_products_graph(shape)
    x = np.random.default_rng(rows).normal(0, 2.0, (*shape, 64)).astype(np.float32)
    x.flat[::7] *= 40  # beyond the quantization range: clamped to 0 or 255
    want = session(model.SerializeToString(), custom=False).run(None, {"x": x})
    assert kernels.swap_matmul(model) == 3
    ops = [n.op_type for n in model.graph.node]
    assert ops.count(kernels.MATMUL_OP) == 3 and ops.count("QuantizeLinear") == 1
    got = session(model.SerializeToString(), custom=True).run(None, {"x": x})
    for a, b in zip(want, got, strict=True):
        assert a.shape == b.shape and np.array_equal(a, b)


@pytest.mark.skipif(kernels.library() is None or not kernels.matmul_supported(),
                    reason="kernel library not built, or this CPU has no AVX-512 VNNI")
@pytest.mark.parametrize("rows", [1, 4])
@pytest.mark.parametrize("hidden", [1024, 1000])
def test_int8_matmul_shared_out_between_threads_gives_the_same_bits(rows, hidden):
    """Products of 128 KiB of weights and more, of few rows, have their columns shared out
    between the session's threads (a last block in part included): the same bits as ONNX
    Runtime's on one thread."""
    import onnxruntime as ort

    model = int8_products_graph([rows], width=256, hidden=hidden)  # about 256 KiB each way
    x = np.random.default_rng(rows).normal(0, 2.0, (rows, 256)).astype(np.float32)
    want = session(model.SerializeToString(), custom=False).run(None, {"x": x})
    assert kernels.swap_matmul(model) == 3
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.register_custom_ops_library(str(kernels.library()))
    got = ort.InferenceSession(model.SerializeToString(), options,
                               providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for a, b in zip(want, got, strict=True):
        assert a.shape == b.shape and np.array_equal(a, b)


@pytest.mark.skipif(not kernels.matmul_supported(), reason="this CPU has no AVX-512 VNNI")
def test_int8_weights_are_shared_only_where_our_product_reads_them():
    """Int8 weights that feed ONNX Runtime's weight-packing products are each session's own (it
    packs them); where our product reads them (it packs once per process) they are shared,
    held once for every session."""
    from onnx import numpy_helper

    from app.engine.sessions import SHARED_MIN_BYTES, SharedWeights

    model = int8_products_graph([1], width=256, hidden=1024)
    int8 = {i.name for i in model.graph.initializer if i.data_type == TensorProto.INT8
            and numpy_helper.to_array(i).nbytes >= SHARED_MIN_BYTES}  # smaller ones never are
    shared = SharedWeights()
    assert not int8 & {name for name, _ in shared.of_graph(model.graph)}
    assert kernels.swap_matmul(model) == 3
    first, again = shared.of_graph(model.graph), shared.of_graph(model.graph)
    swapped = {n.input[1] for n in model.graph.node if n.op_type == kernels.MATMUL_OP} & int8
    assert swapped and swapped <= {name for name, _ in first}
    assert not (int8 - swapped) & {name for name, _ in first}  # the one left to ONNX Runtime
    held = {id(value) for _, value in first}
    assert all(id(value) in held for _, value in again)  # one copy for every session


def test_swap_matmul_needs_avx512_vnni(monkeypatch):
    model = int8_products_graph([2])
    monkeypatch.setattr(kernels.runtime, "cpu_flags", lambda: {"avx2", "fma", "avx512f"})
    assert kernels.swap_matmul(model) == 0
    assert [n.op_type for n in model.graph.node].count("MatMulIntegerToFloat") == 4


def test_amx_only_where_the_cpu_has_it(monkeypatch):
    """The batched step graphs take our product only where its AMX path runs: never on a CPU
    without AMX flags (asked again after the cache is cleared)."""
    monkeypatch.setattr(kernels.runtime, "cpu_flags", lambda: {"avx2", "fma", "avx512f", "avx512bw",
                                                       "avx512_vnni"})
    kernels.amx_supported.cache_clear()
    try:
        assert not kernels.amx_supported()
    finally:
        kernels.amx_supported.cache_clear()


def advance_graph() -> bytes:
    """One GreedyAdvance node over graph inputs, its outputs graph outputs (not bound: the
    kernel copies each input it updates to its output first)."""
    names = ["top_log_probs", "top_ids", "positions", *kernels.ADVANCE_INPUTS]
    types = [(TensorProto.FLOAT, ["R", "k"]), (TensorProto.INT64, ["R", "k"]),
             (TensorProto.INT64, ["R"]), (TensorProto.FLOAT, ["R"]),
             (TensorProto.INT64, ["R", "W"]), (TensorProto.INT64, ["R"]),
             (TensorProto.BOOL, ["R"]), (TensorProto.INT64, [])]
    node = helper.make_node(kernels.ADVANCE_OP, names, list(kernels.ADVANCE_OUTPUTS),
                            domain=kernels.DOMAIN)
    graph = helper.make_graph(
        [node], "advance",
        [helper.make_tensor_value_info(n, e, s) for n, (e, s) in zip(names, types, strict=True)],
        [helper.make_tensor_value_info(n, e, None) for n, e in zip(
            kernels.ADVANCE_OUTPUTS, [TensorProto.INT64, TensorProto.INT64, TensorProto.INT32,
                                      TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL,
                                      TensorProto.INT32], strict=True)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid(kernels.DOMAIN, 1)]
                             ).SerializeToString()


def advance_inputs(eos: int = 2) -> dict:
    """Six rows: one goes on, one ends at EOS, one at its limit, one finished already, one at
    its first step ending at EOS, one taking EOS's neighbour."""
    return {
        "top_log_probs": np.array([[-0.5, -1], [-0.25, -2], [-1.5, -3], [-9, -9], [-0.125, -4],
                                   [-2, -5]], np.float32),
        "top_ids": np.array([[7, 3], [eos, 4], [5, 6], [eos, 1], [eos, 9], [eos + 1, 2]]),
        "positions": np.array([3, 4, 5, 0, 0, 1]),
        "greedy_score": np.array([-1, -2, -3, -4, 0, -1], np.float32),
        "greedy_history": np.arange(6 * 8).reshape(6, 8),
        "greedy_limit": np.array([8, 8, 6, 8, 8, 8]),
        "greedy_alive": np.array([True, True, True, False, True, True]),
        "greedy_eos": np.array(eos),
    }


@needs_library
def test_greedy_advance_updates_the_rows_as_the_python_search_does():
    """Each running row takes its best token: its score gains the token's log-prob (float32),
    its history gets the token at its position, and it goes one position on, or finishes (at
    EOS, or at its limit) with its length and position 0; a finished row stays as it was."""
    feeds = advance_inputs()
    out = dict(zip(kernels.ADVANCE_OUTPUTS, session(advance_graph(), True).run(None, feeds),
                   strict=True))
    np.testing.assert_array_equal(out["tokens_next"], [7, 2, 5, 2, 2, 3])
    np.testing.assert_array_equal(out["positions_next"], [4, 0, 0, 0, 0, 2])
    np.testing.assert_array_equal(out["past_lengths_next"], [4, 0, 0, 0, 0, 2])
    assert out["past_lengths_next"].dtype == np.int32
    np.testing.assert_array_equal(out["greedy_alive_next"],
                                  [True, False, False, False, False, True])
    np.testing.assert_array_equal(out["greedy_ended"], [0, 5, 6, 0, 1, 0])
    want_score = feeds["greedy_score"] + np.where(feeds["greedy_alive"],
                                                  feeds["top_log_probs"][:, 0], 0)
    np.testing.assert_array_equal(out["greedy_score_next"], want_score.astype(np.float32))
    history = feeds["greedy_history"].copy()
    for row, at in ((0, 3), (1, 4), (2, 5), (4, 0), (5, 1)):
        history[row, at] = feeds["top_ids"][row, 0]
    np.testing.assert_array_equal(out["greedy_history_next"], history)


@needs_library
def test_greedy_advance_refuses_a_row_past_its_limit_or_history():
    sess = session(advance_graph(), True)
    for change in ({"positions": np.array([3, 4, 6, 0, 0, 1])},  # row 2 at its limit already
                   {"greedy_history": np.zeros((6, 4), np.int64)}):  # row 1 beyond its width
        with pytest.raises(Exception, match="past its limit or its history"):
            sess.run(None, {**advance_inputs(), **change})
    with pytest.raises(Exception, match=r"history is not \(R, W\)"):
        sess.run(None, {**advance_inputs(), "greedy_history": np.zeros((5, 8), np.int64)})
    assert sess.run(None, advance_inputs())[0].shape == (6,)  # and the session still runs


@needs_library
@pytest.mark.parametrize("variant", ["fp32", "int8"])
def test_greedy_search_gives_the_same_with_its_bookkeeping_in_the_graph(tiny_bundle, variant,
                                                                        tiny_sentences):
    """Offline and in a running batch that sentences join step by step: the tokens and scores
    of greedy search with GreedyAdvance in the step graph are those of the Python bookkeeping,
    to the bit."""
    options = TranslationOptions(beam_size=1, return_scores=True)
    texts = [*tiny_sentences, " ".join(tiny_sentences[:3]), "old", "the car"]
    got = {}
    for advance in (True, False):
        t = Translator.from_dir(tiny_bundle, variant=variant, intra_threads=1, fused=False)
        assert t.sessions.greedy_advance
        t.sessions.greedy_advance = advance
        offline = t.translate_batch(texts, options)
        batch, done = t.start_batch(options), {}
        batch.admit([0, 1], texts[:2])
        for i, text in enumerate(texts[2:], start=2):
            done.update(batch.step())
            batch.admit([i], [text])
        while batch.running:
            done.update(batch.step())
        got[advance] = [(r.tokens, r.score) for r in [*offline, *(done[i] for i in
                                                                  range(len(texts)))]]
    assert got[True] == got[False]
