"""DecodeState's buffer moves against a plain numpy model of what they must hold."""

from __future__ import annotations

import numpy as np
import pytest

from app.engine.search import _fill_holes
from app.engine.step import DecodeState

L, H, S, D, K = 2, 3, 5, 4, 2  # layers, heads, source length, head size, rows per sentence


def state_of(sentences: int, positions: int) -> DecodeState:
    """A state of `sentences` sentences whose every entry tells where it came from."""
    rng = np.random.default_rng(0)
    cross = rng.standard_normal((L, sentences, H, S, D)).astype(np.float32)
    mask = np.ones((sentences, S), bool)
    state = DecodeState.start(cross, cross + 1, mask, K, positions)
    for buf in (*state.keys, *state.values):
        buf[...] = rng.standard_normal(buf.shape)
    return state


@pytest.mark.parametrize("alive", [
    [1, 0, 1, 0, 1, 1, 1, 1],  # 6 of 8 run: moved in place
    [0, 0, 0, 1, 0, 1, 0, 0],  # 2 of 8: the buffers shrink
    [1, 1, 1, 1, 1, 1, 1, 0],  # only the last finished: nothing moves
])
def test_keep_moves_the_running_sentences_into_the_finished_slots(alive):
    alive = np.array(alive, bool)
    state = state_of(len(alive), positions=6)
    before = [b.copy() for b in (*state.keys, *state.values)]
    cross_before = [b.copy() for b in (*state.cross_k, *state.cross_v)]
    order = _fill_holes(alive)
    assert sorted(order) == list(np.flatnonzero(alive))
    assert all(s == i or s >= len(order) for i, s in enumerate(order))  # keep's contract
    rows = (order[:, None] * K + np.arange(K)).ravel()
    used = 4
    state.keep(rows, order, used)
    assert state.rows == len(rows) and state.sentences == len(order)
    for new, old in zip((*state.keys, *state.values), before, strict=True):
        np.testing.assert_array_equal(new[: len(rows), :, :used], old[rows, :, :used])
        if alive.sum() * 2 <= len(alive):
            assert len(new) == len(rows)  # shrunk to what is kept
    for new, old in zip((*state.cross_k, *state.cross_v), cross_before, strict=True):
        np.testing.assert_array_equal(new[: len(order)], old[order])


def test_put_writes_a_slot_in_place_and_grows_the_cross_buffers_for_a_longer_source():
    state = state_of(3, positions=4)
    layout, keys = state.layout, [b.copy() for b in state.keys]
    new = np.full((L, 1, H, S, D), 7.0, np.float32)
    state.put(np.array([1]), new, new, np.ones((1, S), bool), K)
    assert state.layout == layout  # same buffers: the step's binding stays valid
    assert (state.cross_k[0][1] == 7).all() and (state.cross_k[0][0] != 7).all()
    for buf, old in zip(state.keys, keys, strict=True):
        np.testing.assert_array_equal(buf, old)  # rows are not touched
    longer = np.full((L, 1, H, S + 3, D), 5.0, np.float32)
    state.put(np.array([2]), longer, longer, np.ones((1, S + 3), bool), K)
    assert state.layout > layout and state.cross_mask.shape[1] >= S + 3
    assert (state.cross_v[1][2, :, : S + 3] == 5).all() and state.cross_mask[2].sum() == S + 3
    assert state.cross_mask[0, S:].sum() == 0  # the others' padding stays masked
    assert (state.cross_k[0][1, :, :S] == 7).all()


def test_fit_sources_keeps_each_sentences_first_positions():
    """Narrowing the cross buffers keeps every sentence's first `width` source positions (keys,
    values and mask) and changes the layout (bindings go stale); a width over three quarters of
    the buffer's leaves it as it is."""
    state = state_of(3, positions=4)
    state.cross_mask[:, 3:] = False  # every source is 3 positions long
    before = [b.copy() for b in (*state.cross_k, *state.cross_v)]
    mask, layout = state.cross_mask.copy(), state.layout
    state.fit_sources(4)  # 4 of 5: kept as it is
    assert state.cross_mask.shape[1] == S and state.layout == layout
    state.fit_sources(3)
    assert state.layout == layout + 1
    for buf, old in zip((*state.cross_k, *state.cross_v), before, strict=True):
        assert buf.shape == (3, H, 3, D) and buf.flags.c_contiguous
        np.testing.assert_array_equal(buf, old[:, :, :3])
    np.testing.assert_array_equal(state.cross_mask, mask[:, :3])


def test_a_planned_state_holds_its_rows_from_the_start_and_keeps_them():
    """With `planned` (rows, sentences), the first sentences get buffers for all of them, later
    ones join without growing the rows, and dropping finished ones never shrinks below it."""
    rng = np.random.default_rng(1)
    state = DecodeState(L, H, D, D, np.dtype(np.float32), planned=(4 * K, 4))
    one = rng.standard_normal((L, 1, H, S, D)).astype(np.float32)
    state.append(one, one + 1, np.ones((1, S), bool), K, 6)
    assert state.rows == K and state.sentences == 1
    assert len(state.keys[0]) == 4 * K and len(state.cross_k[0]) == 4
    np.testing.assert_array_equal(state.cross_k[1][:1], one[1])
    np.testing.assert_array_equal(state.cross_v[0][:1], one[0] + 1)
    assert state.cross_mask[:1].all() and not state.cross_mask[1:].any()
    keys = state.keys[0]
    three = rng.standard_normal((L, 3, H, S, D)).astype(np.float32)
    state.append(three, three, np.ones((3, S), bool), K, 6)
    assert state.keys[0] is keys and state.rows == 4 * K  # no new buffer
    np.testing.assert_array_equal(state.cross_k[0][1:4], three[0])
    state.keep(np.arange(K), np.arange(1), 6)  # 1 of 4 sentences left
    assert len(state.keys[0]) == 4 * K and len(state.cross_k[0]) == 4
    np.testing.assert_array_equal(state.cross_k[1][:1], one[1])


def test_positions_grow_for_the_running_rows_only_and_no_further_than_the_most_needed():
    """A growth of positions keeps every row's positions; where the running rows use less than
    half of the rows' room (a planned batch's tail) the new buffers hold only them, and `most`
    caps the headroom; a later sentence still joins (the rows grow again)."""
    rng = np.random.default_rng(2)
    state = DecodeState(L, H, D, D, np.dtype(np.float32), planned=(4 * K, 4))
    four = rng.standard_normal((L, 4, H, S, D)).astype(np.float32)
    state.append(four, four, np.ones((4, S), bool), K, 4)
    for buf in (*state.keys, *state.values):
        buf[...] = rng.standard_normal(buf.shape)
    state.ensure_positions(5)  # all rows run: the rows stay, positions grow by half
    assert state.keys[0].shape[:3] == (4 * K, H, 6)
    state.keep(np.arange(K), np.arange(1), 5)  # one sentence left
    before = [b[:K, :, :5].copy() for b in (*state.keys, *state.values)]
    state.ensure_positions(7, most=8)  # room for 9 by half again; no row reaches past 8
    assert state.keys[0].shape[:3] == (K, H, 8) and state.values[1].shape[:3] == (K, H, 8)
    for new, old in zip((*state.keys, *state.values), before, strict=True):
        np.testing.assert_array_equal(new[:, :, :5], old)
    state.append(four[:, :2], four[:, :2], np.ones((2, S), bool), K, 8)
    assert state.rows == 3 * K and len(state.keys[0]) >= 3 * K
    np.testing.assert_array_equal(state.keys[0][:K, :, :5], before[0])
