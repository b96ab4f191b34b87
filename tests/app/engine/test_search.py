"""The search rules on a scripted decoder: EOS, limits, shrinking batches, tie-breaking."""

from __future__ import annotations

import numpy as np
import pytest

from app.engine.search import beam_search, greedy_search, output_limit, top_candidates

BOS, EOS, V = 1, 2, 6
L, H, DH = 1, 1, 2


def scripted(table):
    """A decoder whose next-token log-probs depend only on (source row id, step): table maps
    (row id, step) -> {token: prob}, the rest of the mass spread over the other tokens.
    The source row id travels in cross_k[0, :, 0, 0, 0], so it follows rows through shrinking.
    Records the batch size of every call."""
    calls = []

    def decode(tokens, positions, past_k, past_v, cross_k, cross_v, src_mask):
        rows = cross_k[0, :, 0, 0, 0].astype(int)
        step = int(positions[0, 0])
        calls.append(len(rows))
        probs = np.full((len(rows), V), 1e-3, dtype=np.float64)
        for r, row in enumerate(rows):
            for token, p in table.get((row, step), {3: 0.9}).items():
                probs[r, token] = p
        probs /= probs.sum(axis=1, keepdims=True)
        new = np.zeros((L, len(rows), H, 1, DH), dtype=np.float32)
        present = np.concatenate([past_k, new], axis=3)  # (L, R, H, Tpast + 1, DH)
        return np.log(probs).astype(np.float32), present, present.copy()

    return decode, calls


def cross_for(n):
    cross = np.zeros((L, n, H, 3, DH), dtype=np.float32)  # (L, B, H, S, Dh)
    cross[0, :, 0, 0, 0] = np.arange(n)
    return cross, cross.copy(), np.ones((n, 3), dtype=bool)


def test_greedy_stops_rows_at_eos_and_limit_and_shrinks_the_batch():
    table = {(0, 1): {EOS: 0.9}, (1, 3): {EOS: 0.9}}  # row 2 never ends: its limit stops it
    decode, calls = scripted(table)
    limits = np.array([10, 10, 5])
    hyps = greedy_search(decode, *cross_for(3), limits, BOS, EOS)
    assert [h.tokens for h in hyps] == [[3], [3, 3, 3], [3] * 5]
    assert calls == [3, 3, 2, 2, 1]  # row 0 leaves after step 1, row 1 after step 3
    # scores: log-probs summed, EOS included; normalized by the length including EOS
    assert hyps[0].normalized == pytest.approx(hyps[0].score / 2)
    assert hyps[2].normalized == pytest.approx(hyps[2].score / 5)


def test_greedy_ties_take_the_lowest_id():
    decode, _ = scripted({(0, 0): {4: 0.4, 5: 0.4}, (0, 1): {EOS: 0.9}})
    assert greedy_search(decode, *cross_for(1), np.array([5]), BOS, EOS)[0].tokens == [4]


def test_beam_finishes_eos_candidates_and_ranks_by_normalized_score():
    # step 0: EOS is the best candidate (finished, empty), then tokens 3 and 4 extend;
    # step 1: both end with EOS. [3] scores log(.3 * .95) = -1.25 over 2 tokens: -0.63 per token,
    # better than [] with log(.5) = -0.69 over 1 token; without normalization [] wins.
    table = {(0, 0): {EOS: 0.5, 3: 0.3, 4: 0.15}, (0, 1): {EOS: 0.95}}
    decode, calls = scripted(table)
    args = (decode, *cross_for(1), np.array([10]), BOS, EOS)
    hyps = beam_search(*args, beam_size=2, n_best=2)[0]
    assert [h.tokens for h in hyps] == [[3], []]
    assert [h.normalized for h in hyps] == pytest.approx(
        [h.score / 2 for h in hyps[:1]] + [hyps[1].score]
    )
    assert calls == [1, 2]  # one row at step 0, two live hypotheses at step 1, then done
    raw = beam_search(*args, beam_size=2, n_best=2, length_penalty=0.0)[0]
    assert [h.tokens for h in raw] == [[], [3]]
    assert raw[0].normalized == pytest.approx(raw[0].score)


def test_beam_last_step_finishes_without_eos():
    decode, _ = scripted({})
    hyps = beam_search(decode, *cross_for(2), np.array([1, 3]), BOS, EOS, beam_size=3, n_best=3)
    assert all(len(h.tokens) == 1 for h in hyps[0]) and len(hyps[0]) == 3
    assert all(len(h.tokens) == 3 for h in hyps[1]) and len(hyps[1]) == 3
    assert hyps[0][0].normalized == pytest.approx(hyps[0][0].score / 1)


def test_top_candidates_is_a_stable_descending_sort():
    rng = np.random.default_rng(0)
    flat = rng.integers(0, 4, size=(50, 40)).astype(np.float32)  # many ties
    for m in (1, 3, 8, 40):
        expected = np.argsort(-flat, axis=1, kind="stable")[:, :m]
        np.testing.assert_array_equal(top_candidates(flat, m), expected)


def test_output_limit():
    assert output_limit(4, 10, 1.5, 512) == 16
    assert output_limit(4, 0, 0.0, 512) == 1
    assert output_limit(1000, 10, 1.5, 64) == 63
