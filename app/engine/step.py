"""The decoder step of bundle format 3 on ONNX Runtime, with its cache bound in place.

`DecodeState` is the running batch's data: per layer one key and one value buffer
(R, H, M, Dp) that the step graph reads and writes in place (I/O binding: the same memory is the
past input and the present output), the cross-attention keys/values once per sentence
(N, H, S, Dh) and the source mask (N, S). The buffers have room for more rows than are running, so
sentences can join a running batch (`append`) without moving the others; the running rows are
the first `rows` of each buffer. `StepDecoder.step` advances all running rows by one token and
returns each row's best k log-probs and token ids, on the bundle's graph or on its specialization
for the beam width (app.engine.specialize, which also takes the cross buffers as outputs).
Reordering beams and dropping finished rows are the caller's (`copy_rows`, `keep`); nothing else
moves the cache.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from app.engine.specialize import cross_input_names

if TYPE_CHECKING:
    import onnxruntime as ort

_NP_TO_ORT = {np.dtype(np.float32): np.float32, np.dtype(np.float16): np.float16,
              np.dtype(np.int64): np.int64, np.dtype(np.int32): np.int32,
              np.dtype(np.bool_): np.bool_}


def cache_head_dim(head_dim: int) -> int:
    """GroupQueryAttention takes head sizes that are multiples of 8: the step graph pads other
    sizes with zero dimensions (which change no dot product) in the self-attention and its cache."""
    return -(-head_dim // 8) * 8


def _room(needed: int, have: int, fraction: int) -> int:
    """A buffer dimension for `needed`: `have` when enough, else grown by have // fraction at
    least (headroom, so growth is rare)."""
    return have if needed <= have else max(needed, have + have // fraction)


def grown(buf: np.ndarray, shape: tuple[int, ...], keep: tuple[slice, ...]) -> np.ndarray:
    """A zeroed buffer of `shape` holding buf[keep] at the same place."""
    new = np.zeros(shape, buf.dtype)
    new[keep] = buf[keep]
    return new


@dataclass
class DecodeState:
    """The cache of a running batch: `rows` running rows, grouped by sentence (the same number
    per sentence), and `sentences` running sentences. keys/values: per layer (capacity, H, M, Dp);
    cross_k/cross_v: per layer (sentence capacity, H, S, Dh); cross_mask (sentence capacity, S)
    int32, 0 at padding."""

    n_layers: int
    heads: int
    head_dim: int  # Dp, the cache's head size
    cross_head_dim: int  # Dh, the cross keys/values' head size
    dtype: np.dtype
    keys: list[np.ndarray] = field(default_factory=list)
    values: list[np.ndarray] = field(default_factory=list)
    cross_k: list[np.ndarray] = field(default_factory=list)
    cross_v: list[np.ndarray] = field(default_factory=list)
    cross_mask: np.ndarray | None = None
    # the cross keys/values of all layers, (L, N, H, S, Dh): cross_k/cross_v are its views
    _cross_k: Any = None
    _cross_v: Any = None
    rows: int = 0
    sentences: int = 0
    layout: int = 0  # changes whenever rows, sentences or buffers change (bindings go stale)
    sources: int = 0  # changes whenever the cross keys/values or the mask change
    # (rows, sentences) the buffers hold from the first append on and never shrink below: a
    # batch whose size is known up front (an offline decode worker) neither grows nor shrinks its
    # rows
    planned: tuple[int, int] = (0, 0)
    bound: Any = None  # the StepDecoder's binding for the current layout
    # (sources, slots) of the last `put`: the slots whose sources changed at that count
    put_slots: tuple[int, Any] = (-1, None)

    @classmethod
    def start(cls, cross_k: np.ndarray, cross_v: np.ndarray, src_mask: np.ndarray,
              rows_per_sentence: int, max_len: int, head_dim: int | None = None) -> DecodeState:
        """A state holding the encoder's output for N sentences (cross_k/cross_v
        (L, N, H, S, Dh), src_mask (N, S) bool), rows_per_sentence rows each, room for max_len
        positions; head_dim: the cache's head size when the step graph pads heads (else Dh)."""
        n_layers, _, heads, _, cross_dim = cross_k.shape
        state = cls(n_layers, heads, head_dim or cross_dim, cross_dim, cross_k.dtype)
        state.append(cross_k, cross_v, src_mask, rows_per_sentence, max_len)
        return state

    @property
    def max_len(self) -> int:
        return self.keys[0].shape[2] if self.keys else 0

    def append(self, cross_k: np.ndarray, cross_v: np.ndarray, src_mask: np.ndarray,
               rows_per_sentence: int, max_len: int) -> None:
        """Add N sentences (encoder output as in `start`) after the running ones, each with
        rows_per_sentence fresh rows; buffers grow (with headroom) only when they lack room.
        The first sentences' cross keys/values are taken as they are (no copy)."""
        n_new, src_len = src_mask.shape
        rows, sents = self.rows + n_new * rows_per_sentence, self.sentences + n_new
        if not self.keys:
            shape = (max(rows, self.planned[0]), self.heads, max_len, self.head_dim)  # R H M Dp
            self.keys = [np.zeros(shape, self.dtype) for _ in range(self.n_layers)]
            self.values = [np.zeros(shape, self.dtype) for _ in range(self.n_layers)]
            if sents >= self.planned[1]:  # taken as they are when contiguous
                self._set_cross(np.ascontiguousarray(cross_k), np.ascontiguousarray(cross_v))
                self.cross_mask = src_mask.astype(np.int32)
            else:
                cross = (self.n_layers, self.planned[1], *cross_k.shape[2:])  # (L, N, H, S, Dh)
                self._set_cross(np.zeros(cross, cross_k.dtype), np.zeros(cross, cross_v.dtype))
                self.cross_mask = np.zeros((self.planned[1], src_len), np.int32)
                self._cross_k[:, :sents], self._cross_v[:, :sents] = cross_k, cross_v
                self.cross_mask[:sents] = src_mask
        else:
            self._reserve(rows, sents, max_len, src_len)
            for base, new in ((self._cross_k, cross_k), (self._cross_v, cross_v)):
                base[:, self.sentences:sents, :, :src_len] = new
                base[:, self.sentences:sents, :, src_len:] = 0
            self.cross_mask[self.sentences:sents] = 0
            self.cross_mask[self.sentences:sents, :src_len] = src_mask
        self.rows, self.sentences = rows, sents
        self.layout += 1
        self.sources += 1

    def put(self, slots: np.ndarray, cross_k: np.ndarray, cross_v: np.ndarray,
            src_mask: np.ndarray, rows_per_sentence: int) -> None:
        """New sentences (encoder output as in `start`) in the slots of finished ones, in place:
        their rows keep stale keys/values, which a row never reads past its own length. Only a
        source longer than the cross buffers grows them."""
        src_len = src_mask.shape[1]
        if src_len > self.cross_mask.shape[1]:
            self._reserve(self.rows, self.sentences, self.max_len, src_len)
            self.layout += 1
        # by runs of consecutive slots (mostly one: a sentence joins as one finishes), all
        # layers in one copy (a copy per layer, kind and slot was a greedy decode worker's largest
        # Python cost). The keys/values past the source stay as they were: cross-attention
        # reads only unmasked positions (ours), or weighs them by exactly 0 (ONNX Runtime's);
        # zeroing them cost a greedy pass with wide cross buffers a noticeable share of its CPU
        at = 0
        for start, stop in _runs(slots.tolist()):
            first, n = int(slots[start]), stop - start
            into, take = slice(first, first + n), slice(at, at + n)
            for base, new in ((self._cross_k, cross_k), (self._cross_v, cross_v)):
                base[:, into, :, :src_len] = new[:, take]
            self.cross_mask[into, :src_len] = src_mask[take]
            self.cross_mask[into, src_len:] = 0
            at += n
        self.sources += 1
        self.put_slots = (self.sources, slots)

    def ensure_positions(self, max_len: int, most: int | None = None) -> None:
        """Room for max_len positions per row (the buffers grow by half again when short, to
        `most` positions at most: the most any running row can reach)."""
        if max_len > self.max_len:
            self._reserve(self.rows, self.sentences, max_len, self.cross_mask.shape[1], most)
            self.layout += 1

    def fit_sources(self, width: int, share: float = 0.75) -> None:
        """Narrow the cross keys/values and mask to `width` source positions (the longest
        running source) once it is `share` of their width or less (0.75: they are a third wider
        or more): padded cross-attention runs over the whole width for every sentence, so a
        long source that has finished would otherwise slow every later step of the batch."""
        if width > share * self.cross_mask.shape[1]:
            return
        self._set_cross(np.ascontiguousarray(self._cross_k[:, :, :, :width]),
                        np.ascontiguousarray(self._cross_v[:, :, :, :width]))
        self.cross_mask = np.ascontiguousarray(self.cross_mask[:, :width])
        self.layout += 1
        self.sources += 1

    def padding_share(self) -> float:
        """The share of padding in the running sentences' cross keys/values."""
        mask = self.cross_mask[:self.sentences]
        return 1 - np.count_nonzero(mask) / mask.size if mask.size else 0.0

    def _reserve(self, rows: int, sentences: int, max_len: int, src_len: int,
                 most: int | None = None) -> None:
        cap, _, length, _ = self.keys[0].shape
        _, cap_n, _, s, dh = self._cross_k.shape
        if rows > cap or max_len > length:
            # a new buffer holds the running rows, with headroom when they grow; when they use
            # less than half of the old one (the tail of a pass: a few long outputs), no more
            # (else the last rows' positions grow the cache of every planned row)
            new_rows = _room(rows, cap, 2) if rows > cap else cap if 2 * rows > cap else rows
            positions = _room(max_len, length, 2)
            if most is not None:
                positions = max(max_len, min(positions, most))
            shape = (new_rows, self.heads, positions, self.head_dim)
            keep = (slice(0, self.rows), slice(None), slice(0, length))
            _grow_each(self.keys, shape, keep)
            _grow_each(self.values, shape, keep)
        if sentences > cap_n or src_len > s:
            cross = (self.n_layers, _room(sentences, cap_n, 2), self.heads,
                     _room(src_len, s, 4), dh)
            keep = (slice(None), slice(0, self.sentences), slice(None), slice(0, s))
            # one at a time: the old keys go before the values grow
            self._set_cross(grown(self._cross_k, cross, keep), self._cross_v)
            self._set_cross(self._cross_k, grown(self._cross_v, cross, keep))
            self.cross_mask = grown(self.cross_mask, (cross[1], cross[3]), keep[1::2])

    def _set_cross(self, cross_k: np.ndarray, cross_v: np.ndarray) -> None:
        """The cross keys/values (L, N, H, S, Dh), and cross_k/cross_v their layers' views."""
        self._cross_k, self.cross_k = cross_k, list(cross_k)
        self._cross_v, self.cross_v = cross_v, list(cross_v)

    def copy_rows(self, src: np.ndarray, dst: np.ndarray, used: np.ndarray) -> None:
        """Row dst[j] takes row src[j]'s first used[j] positions (src and dst disjoint): each
        row's own length, not the batch's longest, so a beam of a short sentence beside a long
        one copies little."""
        moves = list(zip(src.tolist(), dst.tolist(), used.tolist(), strict=True))
        for buf in (*self.keys, *self.values):  # row by row: no temporary of all moved rows
            for s, d, n in moves:
                buf[d, :, :n] = buf[s, :, :n]

    def keep(self, rows: np.ndarray, sentences: np.ndarray, used: int) -> None:
        """Keep only the listed rows and sentences, entry i moving to place i; each either is
        at place i already or comes from beyond the kept count (so no move overwrites a kept
        entry). The first `used` positions of each kept row are kept. Buffers that would be
        less than half used shrink to what is kept (memory goes back as a batch thins out)."""
        rows_floor, sentences_floor = self.planned
        self.keys = [_kept(buf, rows, used, rows_floor) for buf in self.keys]
        self.values = [_kept(buf, rows, used, rows_floor) for buf in self.values]
        self._set_cross(_kept(self._cross_k, sentences, floor=sentences_floor, axis=1),
                        _kept(self._cross_v, sentences, floor=sentences_floor, axis=1))
        self.cross_mask = _kept(self.cross_mask, sentences, floor=sentences_floor)
        self.rows, self.sentences = len(rows), len(sentences)
        self.layout += 1
        self.sources += 1


def _grow_each(buffers: list[np.ndarray], shape: tuple[int, ...], keep: tuple[slice, ...]
               ) -> None:
    """Each buffer in the list replaced by grown(buffer, shape, keep), one at a time: an old
    buffer goes as soon as its copy is made, so a growth holds one extra buffer, not a layer
    list's worth (the peak of a pass's RSS is at the growth of its longest outputs' cache)."""
    for i in range(len(buffers)):
        buffers[i] = grown(buffers[i], shape, keep)


def _kept(buf: np.ndarray, index: np.ndarray, used: int | None = None,
          floor: int = 0, axis: int = 0) -> np.ndarray:
    """buf with buf[index[i]] along `axis` (0 or 1; with used, axis 0 and the first `used`
    positions along axis 2) at i: in place (as DecodeState.keep orders them), or in a buffer of
    len(index) entries (floor at least) when that is at most half of buf's. Copied by runs of
    consecutive entries; entries already in place stay."""
    n = max(len(index), floor)
    if 2 * n > buf.shape[axis]:
        out = buf
    else:
        out = np.zeros((*buf.shape[:axis], n, *buf.shape[axis + 1:]), buf.dtype)
    head = (slice(None),) * axis
    tail = () if used is None else (slice(None), slice(0, used))
    for start, stop in _runs(index.tolist()):
        first = int(index[start])
        if out is not buf or first != start:
            out[(*head, slice(start, stop), *tail)] = buf[
                (*head, slice(first, first + stop - start), *tail)]
    return out


def _runs(index: list[int]) -> list[tuple[int, int]]:
    """[start, stop) ranges of positions in index whose values are consecutive."""
    runs, start = [], 0
    for i in range(1, len(index) + 1):
        if i == len(index) or index[i] != index[i - 1] + 1:
            runs.append((start, i))
            start = i
    return runs


@dataclass
class _Binding:
    """An I/O binding of one DecodeState layout: the buffers by pointer, and the step's small
    inputs and outputs as arrays that each step fills in place (so a step binds nothing)."""

    key: tuple[int, int, int]  # (layout, k, id of the session)
    binding: Any
    tokens: np.ndarray
    positions: np.ndarray
    past_lengths: np.ndarray
    total_length: np.ndarray
    top_k: np.ndarray
    top_log_probs: np.ndarray
    top_ids: np.ndarray
    by_length: bool = False  # the session attends over each sentence's own source length
    greedy: GreedyRows | None = None  # the greedy search's arrays bound, for GreedyAdvance
    # its extra inputs (app.engine.specialize.cross_input_names), filled from the state's
    # sources at `sources`
    last: list[np.ndarray] = field(default_factory=list)  # per layer k, v: (N, 1, H Dh)
    last_all: np.ndarray | None = None  # their array (L, 2, N, 1, H Dh)
    seqlens: np.ndarray | None = None  # (N,) int32
    cross_total: np.ndarray | None = None  # () int32
    sources: int = -1
    cross_bound: int = -1  # the state's `sources` when the cross inputs were last bound


@dataclass
class GreedyRows:
    """A greedy search's per-row arrays that the step graph's GreedyAdvance node reads and
    writes in place (app/engine/kernels/greedy_advance.cc), as the search keeps them: tokens,
    positions (steps so far; 0 for a finished row), the same as int32 past lengths, scores,
    history, limits, alive, and the lengths of the rows that finished at the last step (else
    0); total: the step's longest past + 1; eos: the end token."""

    tokens: np.ndarray
    positions: np.ndarray
    past: np.ndarray
    score: np.ndarray
    history: np.ndarray
    limit: np.ndarray
    alive: np.ndarray
    ended: np.ndarray
    total: np.ndarray
    eos: np.ndarray

    def same(self, *arrays: np.ndarray) -> bool:
        """Whether these are the arrays held (in field order, from tokens to ended)."""
        held = (self.tokens, self.positions, self.past, self.score, self.history, self.limit,
                self.alive, self.ended)
        return all(a is b for a, b in zip(arrays, held, strict=True))


# Beam steps attend over each sentence's own source length (a specialized graph) only when the
# running sources are mostly padding: on batches of like lengths the padded attention is quicker
# for K > 1 beams; the specialized graph wins once about half of the positions are padding
# (bench.cross_attention; BENCHMARKS.md). Between the two shares a step keeps the graph it has
# (no rebinding back and forth). Greedy steps always use the specialized graph, quicker at any
# padding.
PADDING_SWITCH_ON, PADDING_SWITCH_OFF = 0.5, 0.4


class StepDecoder:
    """Runs the format-3 decoder step graph over a DecodeState with I/O binding. The session
    comes from session_for(beams, small): beams = rows per sentence for the graph specialized
    for that beam width (app.engine.specialize; 0 = the bundle's graph as it is), small = the
    step has at most small_rows rows (a one-thread session serves those best)."""

    def __init__(self, session_for: Callable[..., ort.InferenceSession], n_layers: int,
                 small_rows: int = 0, rebind_inputs: bool = False) -> None:
        self.session_for, self.small_rows = session_for, small_rows
        self.n_layers = n_layers
        # ONNX Runtime copies a bound input to the device of the node that reads it when it is
        # bound (IOBinding::BindInput), not at each run. On the CPU provider nothing is copied and
        # every run reads the bound memory, which the search fills in place; on another
        # provider (CUDA) a binding would keep feeding the values its inputs had when bound, so
        # there the inputs that change are bound again before every run (the cross keys, values
        # and mask when the state's sources have changed)
        self.rebind_inputs = rebind_inputs

    def advance(self, state: DecodeState, rows: GreedyRows) -> np.ndarray:
        """A greedy step of every running row on the graph with the GreedyAdvance node (its
        session from session_for(1, small, advance=True)): the rows' arrays are updated in
        place; returns rows.ended."""
        b = state.bound
        session = self.session_for(1, state.rows <= self.small_rows, True)
        if b is None or b.key != (state.layout, 1, id(session)) or b.greedy is not rows:
            b = state.bound = self._bind(session, state, 1, rows)
        if b.by_length and b.sources != state.sources:
            _fill_sources(b, state)
        if self.rebind_inputs:
            self._bind_inputs(b, state)
        session.run_with_iobinding(b.binding)
        return rows.ended

    def step(self, state: DecodeState, tokens: np.ndarray, positions: np.ndarray,
             past_lengths: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """tokens, positions, past_lengths (R,) for the running rows -> top log-probs (R, k)
        float32 and their token ids (R, k) int64, best first; each row's new key/value lands at
        its past_length. The returned arrays are overwritten by the next step."""
        b = state.bound
        beams = state.rows // state.sentences if state.sentences else 1
        if beams > 1:
            now = b is not None and b.by_length
            padding = state.padding_share()
            if padding < (PADDING_SWITCH_OFF if now else PADDING_SWITCH_ON):
                beams = 0
        session = self.session_for(beams, state.rows <= self.small_rows)
        if b is None or b.key != (state.layout, k, id(session)):
            b = state.bound = self._bind(session, state, k)
        if b.by_length and b.sources != state.sources:
            _fill_sources(b, state)
        b.tokens[:] = tokens
        b.positions[:] = positions
        b.past_lengths[:] = past_lengths
        b.total_length[...] = int(past_lengths.max()) + 1
        if self.rebind_inputs:
            self._bind_inputs(b, state)
        session.run_with_iobinding(b.binding)
        return b.top_log_probs, b.top_ids

    def _bind(self, session: ort.InferenceSession, state: DecodeState, k: int,
              greedy: GreedyRows | None = None) -> _Binding:
        rows, sents = state.rows, state.sentences
        if greedy is None:
            small = (np.zeros(rows, np.int64), np.zeros(rows, np.int64),
                     np.zeros(rows, np.int32), np.ones((), np.int32))
        else:  # the search's own arrays, which the GreedyAdvance node updates in place
            small = (greedy.tokens, greedy.positions, greedy.past, greedy.total)
        b = _Binding(
            key=(state.layout, k, id(session)), binding=session.io_binding(),
            tokens=small[0], positions=small[1], past_lengths=small[2], total_length=small[3],
            top_k=np.array([k], np.int64), top_log_probs=np.empty((rows, k), np.float32),
            top_ids=np.empty((rows, k), np.int64), greedy=greedy,
        )
        bind_out = b.binding.bind_output
        if greedy is not None:
            g = greedy
            for name, array in (("tokens_next", g.tokens), ("positions_next", g.positions),
                                ("past_lengths_next", g.past), ("greedy_score_next", g.score),
                                ("greedy_history_next", g.history),
                                ("greedy_alive_next", g.alive), ("greedy_ended", g.ended)):
                _bind(bind_out, name, array, rows)  # in place
        by_length = b.by_length = any(o.name == "cross_k_0_out" for o in session.get_outputs())
        for i in range(self.n_layers):
            for kind, buf in (("k", state.keys[i]), ("v", state.values[i])):
                _bind(bind_out, f"cache_{kind}_{i}_out", buf, rows)  # in place
            if by_length:  # written back in place (the same values)
                for kind, buf in (("k", state.cross_k[i]), ("v", state.cross_v[i])):
                    _bind(bind_out, f"cross_{kind}_{i}_out", buf, sents)
        if by_length:
            # (L, 2, N, 1, H Dh): per layer k, v, views of one array (filled in one copy)
            b.last_all = np.zeros((self.n_layers, 2, sents, 1,
                                   state.heads * state.cross_head_dim), state.dtype)
            b.last = [b.last_all[i, j] for i in range(self.n_layers) for j in range(2)]
            b.seqlens, b.cross_total = np.zeros(sents, np.int32), np.zeros((), np.int32)
        self._bind_inputs(b, state)
        _bind(bind_out, "top_log_probs", b.top_log_probs)
        _bind(bind_out, "top_ids", b.top_ids)
        return b

    def _bind_inputs(self, b: _Binding, state: DecodeState) -> None:
        """Bind the inputs of b's step: b's small arrays and the state's caches, and the cross
        keys, values and mask where the state's sources changed since they were bound."""
        bind_in, rows, sents = b.binding.bind_input, state.rows, state.sentences
        if b.greedy is not None:
            g = b.greedy
            for name, array in (("greedy_score", g.score), ("greedy_history", g.history),
                                ("greedy_limit", g.limit), ("greedy_alive", g.alive),
                                ("greedy_eos", g.eos)):
                _bind(bind_in, name, array, None if array.ndim == 0 else rows)
        for name in ("tokens", "positions", "past_lengths"):
            _bind(bind_in, name, getattr(b, name), rows)
        for name in ("total_length", "top_k"):
            _bind(bind_in, name, getattr(b, name))
        for i in range(self.n_layers):
            _bind(bind_in, f"cache_k_{i}", state.keys[i], rows)
            _bind(bind_in, f"cache_v_{i}", state.values[i], rows)
        if b.cross_bound != state.sources:
            _bind(bind_in, "cross_mask", state.cross_mask, sents)
            for i in range(self.n_layers):
                _bind(bind_in, f"cross_k_{i}", state.cross_k[i], sents)
                _bind(bind_in, f"cross_v_{i}", state.cross_v[i], sents)
            b.cross_bound = state.sources
        if b.by_length:
            names = cross_input_names(self.n_layers)
            for name, array in zip(names, [*b.last, b.seqlens, b.cross_total], strict=True):
                _bind(bind_in, name, array)


def _fill_sources(b: _Binding, state: DecodeState) -> None:
    """The specialized graph's extra inputs from the state's cross buffers: each sentence's
    source length - 1 (at least 0: a slot without a source must not write before its start),
    the key and value at that position, and the buffers' width."""
    n = state.sentences
    changed, slots = state.put_slots
    if changed == state.sources and b.sources == changed - 1:  # only a put since: its slots
        rows = slots
    else:
        rows = np.arange(n)
        b.cross_total[...] = state.cross_mask.shape[1]
    lengths = np.count_nonzero(state.cross_mask[rows], axis=1)
    b.seqlens[rows] = np.maximum(lengths - 1, 0)
    at = (slice(None), rows, slice(None), b.seqlens[rows])  # -> (n, L, H, Dh)
    for j, base in enumerate((state._cross_k, state._cross_v)):
        b.last_all[:, j, rows, 0] = base[at].transpose(1, 0, 2, 3).reshape(
            state.n_layers, len(rows), -1)
    b.sources = state.sources


def _bind(bind, name: str, array: np.ndarray, first: int | None = None) -> None:
    """Bind array (or its first `first` entries along axis 0, a contiguous prefix) by pointer:
    ONNX Runtime reads and writes that memory at each run, so the array must outlive the
    binding (the _Binding and DecodeState hold them)."""
    shape = list(array.shape) if first is None else [first, *array.shape[1:]]
    bind(name, "cpu", 0, _NP_TO_ORT[array.dtype], shape, array.ctypes.data)
