"""The step graph specialized for a beam width (cross-attention over each sentence's own source
length) computes what the bundle's graph computes, and the engine picks it where it pays."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from app.engine import TranslationOptions, Translator
from app.engine.bundle import load_bundle
from app.engine.sessions import Seq2SeqSessions, SessionConfig
from app.engine.specialize import (
    by_source_length,
    cross_input_names,
    cross_output_names,
    specializable,
)
from app.engine.step import DecodeState, StepDecoder

JOIN_EVERY = 3  # steps between two sentences joining a running batch (translations)
LENGTHS = [9, 2, 5, 1]  # source tokens per sentence, EOS included: mostly padding beside the 9


@pytest.fixture(scope="module", params=["fp32", "int8"])
def sessions(tiny_bundle, request):
    bundle = load_bundle(tiny_bundle, request.param)
    a = bundle.architecture
    s = Seq2SeqSessions(bundle.encoder_path, bundle.decoder_path,
                        SessionConfig(intra_op_threads=1), int(a["n_decoder_layers"]))
    return s, bundle


def sources(bundle, lengths: list[int]) -> np.ndarray:
    """(N, max length) ids: tokens of the toy vocabulary, EOS last, padding after."""
    special = bundle.special_tokens
    rng = np.random.default_rng(0)
    ids = np.full((len(lengths), max(lengths)), special["pad_id"], np.int64)
    for i, n in enumerate(lengths):
        ids[i, : n - 1] = rng.integers(5, int(bundle.architecture["vocab_size"]), n - 1)
        ids[i, n - 1] = special["eos_id"]
    return ids


@pytest.mark.parametrize("beams", [1, 3])
def test_the_specialized_step_equals_the_bundles_graph(sessions, beams):
    """Three steps of every row, on sentences of different source lengths: the same top
    log-probs and ids from both graphs, and the cross buffers unchanged (written in place with
    the values they hold)."""
    s, bundle = sessions
    assert s.by_length and specializable(s.decoder_path)
    cross_k, cross_v, mask = s.encode(sources(bundle, LENGTHS))
    a = bundle.architecture
    results = {}
    for graph in (0, beams):  # the bundle's graph, then the specialized one
        state = DecodeState.start(cross_k.copy(), cross_v.copy(), mask, beams, 8,
                                  s.cache_head_dim)
        cross_before = [b.copy() for b in (*state.cross_k, *state.cross_v)]
        step = StepDecoder(lambda _, small, g=graph: s.decoder_for(g, small),
                           int(a["n_decoder_layers"]))
        rows = state.rows
        rng = np.random.default_rng(1)
        got = []
        for t in range(3):
            tokens = rng.integers(3, int(a["vocab_size"]), rows)
            past = np.full(rows, t, np.int64)
            log_probs, ids = step.step(state, tokens, past, past, 4)
            got.append((log_probs.copy(), ids.copy()))
        assert state.bound.by_length == (graph > 0)
        for buf, old in zip((*state.cross_k, *state.cross_v), cross_before, strict=True):
            np.testing.assert_array_equal(buf, old)
        results[graph] = got
    for (lp_0, ids_0), (lp_1, ids_1) in zip(results[0], results[beams], strict=True):
        np.testing.assert_allclose(lp_1, lp_0, atol=1e-5)
        np.testing.assert_array_equal(ids_1, ids_0)


def test_the_specialized_graph_adds_the_cross_outputs_and_is_not_specialized_twice(sessions,
                                                                                   tmp_path):
    s, bundle = sessions
    n_layers = int(bundle.architecture["n_decoder_layers"])
    path = tmp_path / "decoder.onnx"
    path.write_bytes(by_source_length(s.decoder_path, 2))
    graph = onnx.load(str(path)).graph
    base = onnx.load(str(s.decoder_path)).graph
    assert [o.name for o in graph.output] == [o.name for o in base.output] + cross_output_names(
        n_layers)
    assert [i.name for i in graph.input] == [i.name for i in base.input] + cross_input_names(
        n_layers)
    heads = {a.i for n in graph.node if n.op_type == "GroupQueryAttention"
             and n.input[3].startswith("cross_k_") for a in n.attribute if a.name == "num_heads"}
    assert heads == {2 * int(bundle.architecture["n_heads"])}
    assert not specializable(path)


def translations(translator: Translator, texts: list[str], beams: int,
                 joining: int = 0) -> list:
    """Texts as a service's running batch takes them: in this order, in one batch; the first
    len(texts) - joining at once, then one more every JOIN_EVERY steps (joining the running
    batch in the slots of finished sentences, or after the running ones)."""
    batch = translator.start_batch(TranslationOptions(beam_size=beams, num_alternatives=beams - 1))
    first = len(texts) - joining
    batch.admit(list(range(first)), texts[:first])
    done, later, steps = {}, list(range(first, len(texts))), 0
    while batch.running or later:
        done.update(batch.step())
        steps += 1
        if later and steps % JOIN_EVERY == 0:
            i = later.pop(0)
            batch.admit([i], [texts[i]])
    return [done[i] for i in range(len(texts))]


@pytest.mark.parametrize("joining", [0, 4])
@pytest.mark.parametrize("beams", [1, 3])
def test_the_engine_translates_the_same_with_and_without_it(tiny_bundle, tiny_sentences, beams,
                                                           joining):
    """One long sentence beside short ones (mostly padding): the specialized graph runs, and the
    n-best lists equal those of the bundle's graph, also when sentences join the running batch
    step by step (the last source keys/values and lengths follow them); sentences of one length
    run beam search on the bundle's graph, greedy on the specialized one."""
    long = " ".join(tiny_sentences[:3])
    mixed = [long, "the car", "a house", "the red car", "old", "a car", "the old house"]
    got = {}
    for by_length in (False, True):
        t = Translator.from_dir(tiny_bundle, variant="fp32", intra_threads=1,
                                cross_by_length=by_length)
        got[by_length] = translations(t, mixed, beams, joining)
        # the sessions made (one thread: no one-thread copies): the bundle's graph's only
        # where it runs (a beam search switches to it once the long source's rows finish)
        advance = beams == 1 and t.sessions.greedy_advance  # greedy: GreedyAdvance at its end
        made = list(t.sessions._decoders)
        if by_length:
            assert made[0] == (beams, False, advance)
            assert made[1:] in ([], [(0, False, False)])
        else:
            assert made == [(0, False, False)]
    for new, old in zip(got[True], got[False], strict=True):
        assert (new.tokens, new.alternatives) == (old.tokens, old.alternatives)
        scores = [[x for x in (r.score, *r.alternative_scores) if x is not None]
                  for r in (new, old)]
        np.testing.assert_allclose(*scores, atol=1e-5)

    t = Translator.from_dir(tiny_bundle, variant="fp32", intra_threads=1)
    steps, session_for, ran = t.sessions.step.__self__, t.sessions.decoder_for, []

    def spy(beams: int, small: bool = False, advance: bool = False):
        session = session_for(beams, small, advance)
        ran.append("bundle's" if session is t.sessions._decoders.get((0, False, False))
                   else "specialized")
        return session

    steps.session_for = spy
    translations(t, ["the car", "a car", "the house"], beams)
    assert set(ran) == ({"specialized"} if beams == 1 else {"bundle's"})
    # a beam search makes the specialized session up front (before its cache takes memory)
    assert list(t.sessions._decoders) == (
        [(1, False, t.sessions.greedy_advance)] if beams == 1
        else [(beams, False, False), (0, False, False)])
