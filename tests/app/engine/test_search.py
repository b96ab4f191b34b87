"""The search rules on a scripted decoder: EOS, limits, shrinking batches, tie-breaking."""

from __future__ import annotations

import numpy as np
import pytest

import app.engine.search as search_module
from app.engine.search import Search, output_limit

BOS, EOS, V = 1, 2, 6


@pytest.fixture(autouse=True, params=["vectorized", "sentence by sentence"])
def walk(request, monkeypatch):
    """Every test runs with both beam walks (numpy over all sentences; Python for a few)."""
    few = 0 if request.param == "vectorized" else 10**6
    monkeypatch.setattr(search_module, "FEW_SENTENCES", few)
    return request.param


class ScriptedState:
    """A cache stand-in: per row, its sentence (the id carried in cross_k) and the tokens
    written at each position, moved by append/copy_rows/keep exactly as the search asks (so
    misplaced rows show up)."""

    def __init__(self, max_len: int = 4) -> None:
        self.sentence = np.zeros(0, int)
        self.cache = np.full((0, max_len), -1)

    @property
    def rows(self) -> int:
        return len(self.sentence)

    @property
    def sentences(self) -> int:
        return len(self.sentence)  # not needed by the scripted step

    def append(self, cross_k, cross_v, src_mask, rows_per_sentence, max_len):
        ids = np.repeat(cross_k[0].astype(int), rows_per_sentence)
        self.sentence = np.concatenate([self.sentence, ids])
        self.cache = np.concatenate([self.cache, np.full((len(ids), self.cache.shape[1]), -1)])

    def put(self, slots, cross_k, cross_v, src_mask, rows_per_sentence):
        rows = (slots[:, None] * rows_per_sentence + np.arange(rows_per_sentence)).ravel()
        self.sentence[rows] = np.repeat(cross_k[0].astype(int), rows_per_sentence)
        self.cache[rows] = -2  # stale: a row must write a position before it reads it
        self.put_rows = getattr(self, "put_rows", 0) + len(rows)

    def copy_rows(self, src, dst, used):
        for s, d, n in zip(src, dst, used, strict=True):
            self.cache[d, :n] = self.cache[s, :n]

    @property
    def max_len(self) -> int:
        return self.cache.shape[1]

    def ensure_positions(self, max_len, most=None):
        assert most is None or most >= max_len  # the most any running row can reach
        self.grown = getattr(self, "grown", 0) + (max_len > self.cache.shape[1])
        extra = max(0, max_len - self.cache.shape[1])
        self.cache = np.pad(self.cache, ((0, 0), (0, extra)), constant_values=-1)

    def keep(self, rows, sentences, used):
        self.sentence, self.cache = self.sentence[rows], self.cache[rows]

    def fit_sources(self, width, share=0.75):
        pass  # no cross keys/values here


def search(step, ids, limits, beam_size=1, **kwargs):
    """A Search over ScriptedState with the sentences `ids` admitted under their own ids."""
    s = Search(step, ScriptedState(), BOS, EOS, V, beam_size=beam_size, **kwargs)
    s.admit(list(ids), np.array(limits), np.array([ids]), np.array([ids]), np.zeros((len(ids), 1)))
    return s


def run(step, limits, beam_size=1, **kwargs):
    found = search(step, range(len(limits)), limits, beam_size, **kwargs).run()
    hyps = [found[i] for i in range(len(limits))]
    return [h[0] for h in hyps] if beam_size == 1 else hyps


def scripted(table):
    """A step whose next-token log-probs depend only on (sentence, step): table maps
    (sentence, step) -> {token: prob}, the rest of the mass spread over the other tokens. Each
    live row's cache must hold the tokens fed to it so far. Records the rows of every call."""
    calls = []

    def step(state, tokens, positions, past_lengths, k):
        calls.append(state.rows)
        state.cache[np.arange(state.rows), past_lengths] = tokens  # written in place
        assert (positions == past_lengths).all()
        probs = np.full((state.rows, V), 1e-3, dtype=np.float64)
        for r, sent in enumerate(state.sentence):  # each row at its own step
            for token, p in table.get((int(sent), int(past_lengths[r])), {3: 0.9}).items():
                probs[r, token] = p
        probs /= probs.sum(axis=1, keepdims=True)
        log_probs = np.log(probs).astype(np.float32)
        ids = np.argsort(-log_probs, axis=1, kind="stable")[:, :k]  # lower id first on ties
        return np.take_along_axis(log_probs, ids, axis=1), ids

    return step, calls


def test_greedy_stops_rows_at_eos_and_limit_and_shrinks_the_batch():
    table = {(0, 1): {EOS: 0.9}, (1, 3): {EOS: 0.9}}  # row 2 never ends: its limit stops it
    step, calls = scripted(table)
    s = search(step, [0, 1, 2], [10, 10, 5])
    found = s.run()
    hyps = [found[i][0] for i in range(3)]
    assert [h.tokens for h in hyps] == [[3], [3, 3, 3], [3] * 5]
    # row 0 finishes after step 1 and is compacted away (1 of 3 rows >= a quarter); row 1 after
    # step 3 (1 of 2)
    assert calls == [3, 3, 2, 2, 1]
    # the last finished row stays (nothing is compacted once none runs), and a sentence that
    # joins then takes its slot in place
    assert s.state.rows == 1 and s.running == 0
    s.admit([7], np.array([2]), np.array([[5]]), np.array([[5]]), np.zeros((1, 1)))
    assert s.state.rows == 1 and s.state.put_rows == 1
    assert [h.tokens for h in s.run()[7]] == [[3, 3]]
    # scores: log-probs summed, EOS included; normalized by the length including EOS
    assert hyps[0].normalized == pytest.approx(hyps[0].score / 2)
    assert hyps[2].normalized == pytest.approx(hyps[2].score / 5)


def test_greedy_ties_take_the_lowest_id():
    step, _ = scripted({(0, 0): {4: 0.4, 5: 0.4}, (0, 1): {EOS: 0.9}})
    assert run(step, [5])[0].tokens == [4]


def test_beam_finishes_eos_candidates_and_ranks_by_normalized_score():
    # step 0: EOS is the best candidate (finished, empty), then tokens 3 and 4 extend;
    # step 1: both end with EOS. [3] scores log(.3 * .95) = -1.25 over 2 tokens: -0.63 per token,
    # better than [] with log(.5) = -0.69 over 1 token; without normalization [] wins.
    table = {(0, 0): {EOS: 0.5, 3: 0.3, 4: 0.15}, (0, 1): {EOS: 0.95}}
    step, calls = scripted(table)
    hyps = run(step, [10], beam_size=2, n_best=2)[0]
    assert [h.tokens for h in hyps] == [[3], []]
    assert [h.normalized for h in hyps] == pytest.approx(
        [h.score / 2 for h in hyps[:1]] + [hyps[1].score]
    )
    assert calls == [2, 2]  # two rows (one live at step 0, one at -inf), then two hypotheses
    raw = run(step, [10], beam_size=2, n_best=2, length_penalty=0.0)[0]
    assert [h.tokens for h in raw] == [[], [3]]
    assert raw[0].normalized == pytest.approx(raw[0].score)


def test_beam_last_step_finishes_without_eos():
    step, calls = scripted({})
    hyps = run(step, [1, 3], beam_size=3, n_best=3)
    assert all(len(h.tokens) == 1 for h in hyps[0]) and len(hyps[0]) == 3
    assert all(len(h.tokens) == 3 for h in hyps[1]) and len(hyps[1]) == 3
    assert hyps[0][0].normalized == pytest.approx(hyps[0][0].score / 1)
    assert calls == [6, 3, 3]  # 3 rows per sentence, then the 3 of the one left (compacted)


def test_beam_rows_hold_their_hypotheses_prefix():
    """Beams reorder without moving whole caches: each row's cache must still be its own
    hypothesis' prefix (BOS + tokens) when the search feeds it."""
    table = {(0, 0): {3: 0.4, 4: 0.35, 5: 0.2}, (0, 1): {4: 0.5, 3: 0.3},
             (0, 2): {EOS: 0.6}, (1, 0): {EOS: 0.9}}
    step, _ = scripted(table)
    seen = []

    def checking(state, tokens, positions, past_lengths, k):
        top, ids = step(state, tokens, positions, past_lengths, k)
        seen.extend((int(state.sentence[r]), *state.cache[r, : past_lengths[r] + 1].tolist())
                    for r in range(state.rows))
        return top, ids

    hyps = run(checking, [6, 6], beam_size=3, n_best=3)
    assert hyps[1][0].tokens == []
    assert [h.tokens for h in hyps[0]] == [[3, 4], [4, 4], [3, 3]]
    # the row that produced each hypothesis' EOS held BOS + that hypothesis in its cache
    assert all((0, BOS, *h.tokens) in seen for h in hyps[0])


def test_output_limit():
    assert output_limit(4, 10, 1.5, 512) == 16
    assert output_limit(4, 0, 0.0, 512) == 1
    assert output_limit(1000, 10, 1.5, 64) == 63


def test_a_sentence_joins_a_running_batch_and_finishes_first():
    """Continuous batching: sentence 1 joins after two steps of sentence 0, runs at its own step
    count (its rows decode position 0 while the others are at 2) and leaves first; results equal
    those of each sentence searched alone."""
    table = {(0, 12): {EOS: 0.9}, (1, 0): {4: 0.6}, (1, 1): {EOS: 0.9}}
    limits = {0: 20, 1: 4}
    for beam in (1, 3):
        step, calls = scripted(table)
        alone = [search(step, [i], [limits[i]], beam).run()[i] for i in (0, 1)]
        calls.clear()
        s = search(step, [0], [limits[0]], beam)
        assert s.step() == [] and s.step() == []
        s.admit([1], np.array([limits[1]]), np.array([[1]]), np.array([[1]]), np.zeros((1, 1)))
        order, found = [], {}
        while s.running:
            for key, hyps in s.step():
                order.append(key)
                found[key] = hyps
        assert order == [1, 0]
        assert calls[2] == 2 * beam  # both sentences in one step
        assert [h.tokens for h in found[0]] == [h.tokens for h in alone[0]]
        assert [h.tokens for h in found[1]] == [h.tokens for h in alone[1]]
        assert found[1][0].tokens == [4]


def test_a_joining_sentence_takes_a_finished_sentences_slot_in_place():
    """Sentence 0 finishes at once; sentence 2 joins later and takes its slot (its rows, stale
    cache and all) instead of new rows: every row still reads only what it wrote itself, and
    both running sentences get the results they get alone."""
    table = {(0, 0): {EOS: 0.9}, (1, 6): {EOS: 0.9}, (2, 0): {5: 0.7}, (2, 2): {EOS: 0.9}}
    limits = {i: 10 for i in range(6)} | {0: 1}  # 0 ends after a step; 1, 3, 4, 5 at 10
    for beam in (1, 3):
        step, _ = scripted(table)
        alone = {i: search(step, [i], [limits[i]], beam).run()[i] for i in limits}

        def checking(state, tokens, positions, past_lengths, k, step=step):
            top, ids = step(state, tokens, positions, past_lengths, k)
            for r in range(state.rows):  # a row's cache up to its position is its own
                assert (state.cache[r, : past_lengths[r] + 1] >= 0).all(), (r, state.cache[r])
            return top, ids

        first = [0, 1, 3, 4, 5]  # one of five finishing is below the share that compacts
        s = search(checking, first, [limits[i] for i in first], beam)
        found = dict(s.step())
        assert list(found) == [0] and s.state.rows == 5 * beam  # sentence 0's rows stay
        s.admit([2], np.array([limits[2]]), np.array([[2]]), np.array([[2]]), np.zeros((1, 1)))
        assert s.state.rows == 5 * beam and s.state.put_rows == beam  # no new rows
        while s.running:
            found.update(s.step())
        for i in limits:
            assert [h.tokens for h in found[i]] == [h.tokens for h in alone[i]], (beam, i)
        assert found[2][0].tokens == [5, 3]
