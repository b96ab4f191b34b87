"""A sentence translated alone runs its whole search in one ONNX Runtime call (app.engine.fused),
with the outputs of the PyTorch reference decoders and of the step-by-step search."""

from __future__ import annotations

import pytest

import app.engine.search as search_module
from app.engine import TranslationOptions, Translator, kernels
from app.engine.sessions import SharedWeights
from model.search import beam_search, greedy_search


@pytest.fixture(scope="module", params=[1, 2], ids=["one-thread", "two-threads"])
def translator(tiny_bundle, request):
    """fp32, fused although its weights are float (which by default step), to compare with
    PyTorch exactly; on two threads the beam search's fused session splits its ops (and
    spins)."""
    return Translator.from_dir(tiny_bundle, variant="fp32", intra_threads=request.param,
                               fused=True)


@pytest.fixture
def no_steps(monkeypatch):
    """Fail any step-by-step search: the calls under test must take the fused path."""
    def refuse(self):
        raise AssertionError("a single sentence ran step by step")

    monkeypatch.setattr(search_module.Search, "step", refuse)


def test_greedy_equals_pytorch(translator, reference, sources, no_steps):
    model, _ = reference
    for source in sources:
        got = translator.translate_ids([source], TranslationOptions(beam_size=1))[0]
        assert [got[0].tokens] == greedy_search(model, [source])


@pytest.mark.parametrize(("beam_size", "length_penalty"), [(2, 1.0), (4, 0.6), (5, 1.0), (3, 0.0)])
def test_beam_equals_pytorch_with_n_best(translator, reference, sources, beam_size,
                                         length_penalty, no_steps):
    model, _ = reference
    options = TranslationOptions(beam_size=beam_size, length_penalty=length_penalty,
                                 num_alternatives=beam_size - 1)
    for source in sources:
        got = translator.translate_ids([source], options)[0]
        ref = beam_search(model, source, beam_size=beam_size, length_penalty=length_penalty,
                          n_best=beam_size)
        assert [h.tokens for h in got] == [h.tokens for h in ref]
        assert [h.normalized for h in got] == pytest.approx([h.normalized for h in ref],
                                                            abs=1e-4)


@pytest.mark.parametrize("offset", [1, 2, 3])
@pytest.mark.parametrize("beam_size", [1, 4])
def test_length_limits_equal_pytorch(translator, reference, sources, offset, beam_size,
                                     no_steps):
    """The loop's trip count is the limit: at the limit a beam's walked candidates finish
    without EOS, and greedy stops."""
    model, _ = reference
    options = TranslationOptions(beam_size=beam_size, max_len_offset=offset, max_len_ratio=0.0,
                                 num_alternatives=beam_size - 1)
    for source in sources:
        got = translator.translate_ids([source], options)[0]
        if beam_size == 1:
            ref = greedy_search(model, [source], max_len_offset=offset, max_len_ratio=0.0)
            assert [got[0].tokens] == ref
        else:
            ref = beam_search(model, source, beam_size=beam_size, n_best=beam_size,
                              max_len_offset=offset, max_len_ratio=0.0)
            assert [h.tokens for h in got] == [h.tokens for h in ref]
        assert all(len(h.tokens) <= offset for h in got)


def test_fused_and_step_by_step_give_the_same_results(tiny_bundle, tiny_sentences):
    """The same n-best lists, scores and texts with the fused search on and off, for fp32 and
    for int8 (whose graphs are the same but for the quantized matrix products)."""
    for variant in ("fp32", "int8"):
        on = Translator.from_dir(tiny_bundle, variant=variant, intra_threads=1, fused=True)
        off = Translator.from_dir(tiny_bundle, variant=variant, intra_threads=1, fused=False)
        assert on.fused is not None and off.fused is None
        for options in (TranslationOptions(beam_size=1, return_scores=True),
                        TranslationOptions(beam_size=4, num_alternatives=3, return_scores=True)):
            for text in tiny_sentences:
                a = on.translate_batch([text], options)[0]
                b = off.translate_batch([text], options)[0]
                assert (a.text, a.tokens, a.alternatives) == (b.text, b.tokens, b.alternatives)
                assert [a.score, *a.alternative_scores] == pytest.approx(
                    [b.score, *b.alternative_scores], abs=1e-5)
        assert set(on.sessions._fused) == {False, True}
        assert not off.sessions._fused


def test_sessions_share_the_large_weights(tiny_bundle, tiny_sentences, monkeypatch):
    """The embedding table is held once for the encoder, the decoder and every session made from
    them; the weights of packing ops (matrix products) are left to each session."""
    import onnx

    import app.engine.sessions as sessions_module

    monkeypatch.setattr(sessions_module, "SHARED_MIN_BYTES", 1024)  # the tiny model's sizes
    t = Translator.from_dir(tiny_bundle, variant="int8", intra_threads=1)
    shared = t.sessions.shared
    encoder, decoder = shared.of(t.bundle.encoder_path), shared.of(t.bundle.decoder_path)
    assert decoder
    held = {id(value) for _, value in encoder}
    assert any(id(value) in held for _, value in decoder), "the tied embedding is held once"
    graph = onnx.load(str(t.bundle.decoder_path)).graph
    packed = {x for n in graph.node if n.op_type in ("MatMul", "MatMulInteger") for x in n.input}
    assert not packed & {name for name, _ in decoder}
    assert SharedWeights().of(t.bundle.decoder_path) is not decoder  # per translator
    # sessions on shared weights translate as sessions with their own copies do
    monkeypatch.setattr(sessions_module, "SHARED_MIN_BYTES", 2**62)
    own = Translator.from_dir(tiny_bundle, variant="int8", intra_threads=1)
    assert not own.sessions.shared.of(t.bundle.decoder_path)
    for beam in (1, 3):
        options = TranslationOptions(beam_size=beam)
        assert ([r.tokens for r in t.translate_batch(tiny_sentences, options)]
                == [r.tokens for r in own.translate_batch(tiny_sentences, options)])


def test_the_many_thread_decoder_is_made_only_when_needed(tiny_bundle, tiny_sentences):
    """With decode workers every step runs on single-thread sessions: the multi-thread decoder
    session appears only when a step of many rows runs outside a decode worker."""
    t = Translator.from_dir(tiny_bundle, variant="fp32", intra_threads=2, workers=2)
    assert not t.sessions._decoders  # no decoder session before a step needs one
    assert t.sessions.decoder.get_session_options().intra_op_num_threads == 1
    t.translate_batch(tiny_sentences, TranslationOptions(beam_size=2))
    assert all(one_thread for _, one_thread, _ in t.sessions._decoders)
    batch = t.start_batch(TranslationOptions(beam_size=1))  # outside a decode worker, many rows
    batch.admit(list(range(12)), (tiny_sentences * 4)[:12])
    while batch.running:
        batch.step()
    assert any(not one_thread for _, one_thread, _ in t.sessions._decoders)


def test_by_default_only_int8_graphs_are_fused(tiny_bundle):
    """Float weights inside a Loop body are packed again at every call (fusable's numbers), so
    by default only graphs with int8 matrix products take the fused search."""
    assert Translator.from_dir(tiny_bundle, variant="int8", intra_threads=1).fused is not None
    assert Translator.from_dir(tiny_bundle, variant="fp32", intra_threads=1).fused is None


def test_the_spinning_beam_session_stops_spinning_after_each_call(tiny_bundle):
    """Its threads spin between the ops of a search, not after it, where they slowed the next
    sentence's encoder (a session of its own)."""
    engine = Translator.from_dir(tiny_bundle, variant="fp32", intra_threads=2, fused=True)

    def entry(beam: bool, key: str) -> str | None:
        options = engine.sessions.fused_for(beam).get_session_options()
        try:
            return options.get_session_config_entry(key)
        except RuntimeError:  # not set
            return None

    assert entry(True, "session.intra_op.allow_spinning") is None  # ONNX Runtime's default: on
    assert entry(True, "session.force_spinning_stop") == "1"
    assert entry(False, "session.intra_op.allow_spinning") == "0"  # greedy: one thread
    if kernels.library() is not None and kernels.matmul_supported():
        # int8 on our products: their columns shared out between two spinning threads
        engine = Translator.from_dir(tiny_bundle, variant="int8", intra_threads=2)
        for beam in (False, True):
            assert entry(beam, "session.intra_op.allow_spinning") is None
            assert engine.sessions.fused_for(beam).get_session_options().intra_op_num_threads == 2


def test_the_multi_thread_encoder_is_made_only_when_a_call_needs_it(tiny_bundle, tiny_sentences):
    """With decode workers, every encoder call runs on the decode workers' one-thread session; the
    session of the configured threads is made at its first use only."""
    t = Translator.from_dir(tiny_bundle, variant="int8", intra_threads=2, workers=2)
    assert not t.sessions._encoders
    t.translate_batch(tiny_sentences[:1] * 3)  # decode workers and the fused search
    t.translate_batch(tiny_sentences[:1])
    assert not t.sessions._encoders
    assert t.sessions.encoder is t.sessions.encoder is not t.sessions.one_thread_encoder
    one = Translator.from_dir(tiny_bundle, variant="int8", intra_threads=1)
    assert one.sessions.encoder is one.sessions.one_thread_encoder  # one thread: one session
