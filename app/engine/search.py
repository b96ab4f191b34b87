"""Batched greedy and beam search over the step decoder's in-place cache.

The rules are those of the PyTorch reference decoders (model/search.py), so a sentence gets the
same output alone or in a batch, and the same as PyTorch:

- at most `limit` tokens are generated per sentence, EOS included (the caller computes limits);
- greedy takes the arg-max (lowest id on ties) and stops a row at EOS or at its limit;
- beam search walks each sentence's candidates (hypothesis score + next-token log-prob) by score,
  descending, ties broken by lower (beam index * V + token id); an EOS candidate becomes a finished
  hypothesis, any other token extends a live one, until `beam_size` non-EOS candidates are found
  (at the last allowed step those finish too, without EOS). Finished hypotheses are ranked by
  score / length ** length_penalty (length counts generated tokens including EOS), ties kept in
  the order they finished. A sentence ends at its limit, or once `beam_size` hypotheses have
  finished and the `beam_size`-th best of them ranks at least as high as its best live
  hypothesis would if it ended at the next step (score / (length + 1) ** length_penalty).

`Search` is a running batch: sentences join it (`admit`) between steps, each at its own step
count, and leave it when they finish, so one sentence never waits for another's batch. The step
returns each row's best k log-probs (k = 2 x beam: a step has at most beam_size EOS candidates,
so 2k hold k others; a sentence's global best 2k are among its rows' best 2k). A sentence's beams
live in fixed rows of the cache: a new hypothesis takes its parent's row if it is the parent's
first child, else a row whose hypothesis had no child, and only then is a cache row copied. A
sentence joins with beam_size rows, the first live and the others at -inf, so its first step
expands it like an unexpanded first step would, in the slot (rows and cross keys/values) of a
finished sentence when there is one, in place, so joins rarely move the cache. Finished
sentences stay in place (decoding nothing: length 0) until a quarter of the rows are finished;
then the cache is compacted, unless no sentence runs any more: the next sentences to join take
those slots in place.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from app.engine.step import GreedyRows, grown

COMPACT_SHARE = 0.25  # compact the cache once this share of its rows is finished
FIRST_POSITIONS = 32  # cache positions reserved at first; the cache grows as outputs do
FEW_SENTENCES = 2  # steps of at most this many running sentences walk on Python scalars
# the cross keys/values narrow to the longest running source once it is this share of their width
# or less (DecodeState.fit_sources)
GREEDY_FIT, BEAM_FIT = 0.25, 0.75


class State(Protocol):
    """What the search needs of a running batch's cache (app.engine.step.DecodeState)."""

    rows: int
    sentences: int
    max_len: int  # positions per row the cache holds

    def append(self, cross_k: np.ndarray, cross_v: np.ndarray, src_mask: np.ndarray,
               rows_per_sentence: int, max_len: int) -> None: ...

    def put(self, slots: np.ndarray, cross_k: np.ndarray, cross_v: np.ndarray,
            src_mask: np.ndarray, rows_per_sentence: int) -> None: ...

    def copy_rows(self, src: np.ndarray, dst: np.ndarray, used: np.ndarray) -> None: ...

    def ensure_positions(self, max_len: int, most: int | None = None) -> None: ...

    def fit_sources(self, width: int, share: float = 0.75) -> None: ...

    def keep(self, rows: np.ndarray, sentences: np.ndarray, used: int) -> None: ...


# (state, tokens, positions, past_lengths, k) -> top log-probs (R, k), top ids (R, k)
StepFn = Callable[[State, np.ndarray, np.ndarray, np.ndarray, int], tuple[np.ndarray, np.ndarray]]
# (state, rows) -> rows.ended: a greedy step that updates the rows' arrays in place
# (app.engine.step.StepDecoder.advance)
AdvanceFn = Callable[[State, GreedyRows], np.ndarray]


@dataclass(frozen=True)
class Hypothesis:
    tokens: list[int]  # generated ids, without BOS and EOS
    score: float  # sum of log-probs (EOS included when finished by EOS)
    normalized: float  # score / length ** length_penalty


def output_limit(
    src_len: int, max_len_offset: int, max_len_ratio: float, max_positions: int
) -> int:
    """The most tokens (EOS included) generated for a source of src_len tokens (without EOS)."""
    return max(1, min(int(max_len_offset + max_len_ratio * src_len), max_positions - 1))


def ranked(finished: list[tuple[list[int], float, int]], length_penalty: float,
           n_best: int) -> list[Hypothesis]:
    """A sentence's n_best finished hypotheses (ids, score, length), best first: by
    score / length ** length_penalty, ties in the order they finished."""
    hyps = sorted(
        (Hypothesis(ids, score, score / length**length_penalty)
         for ids, score, length in finished),
        key=lambda h: h.normalized,
        reverse=True,
    )
    return hyps[:n_best]


class Search:
    """Greedy (beam_size 1) or beam search over a running batch of sentences.

    admit() adds sentences (with their encoder output) between steps; step() advances every
    running sentence by one token and returns the sentences that finished, each with its n_best
    hypotheses, best first; run() steps until none is left."""

    def __init__(self, step_fn: StepFn, state: State, start_id: int, eos_id: int,
                 vocab_size: int, beam_size: int = 1, length_penalty: float = 1.0,
                 n_best: int = 1, advance: AdvanceFn | None = None) -> None:
        self.step_fn, self.state = step_fn, state
        # greedy steps whose bookkeeping runs in the step graph (GreedyAdvance), where given
        self.advance = advance if beam_size == 1 else None
        self.start_id, self.eos_id, self.vocab_size = start_id, eos_id, vocab_size
        self.greedy = beam_size == 1
        self.k = beam_size  # rows per sentence
        self.m = 1 if self.greedy else min(2 * beam_size, vocab_size)  # candidates per row
        self.length_penalty, self.n_best = length_penalty, n_best
        # per sentence
        self.keys: list[Hashable] = []
        self.t = np.zeros(0, np.int64)  # steps done (greedy: 0 once finished, its past length)
        self.limit = np.zeros(0, np.int64)
        self.alive = np.zeros(0, bool)
        self.src_len = np.zeros(0, np.int64)  # source positions, EOS included
        self.finished: list[list[tuple[list[int], float, int]]] = []
        # per row
        self.rank = np.zeros(0, np.int64)  # beam index within the sentence
        self.score = np.zeros(0, np.float32)
        self.last = np.zeros(0, np.int64)
        self.history = np.zeros((0, 1), np.int64)  # generated ids
        # a joining sentence's rows: beam b gets rank b, the first scores 0 and the others -inf
        self._beams = np.arange(self.k)
        self._start_scores = np.r_[0.0, np.full(self.k - 1, -np.inf)].astype(np.float32)
        self._running = 0  # count of alive, kept with it
        # greedy: the past lengths as int32 and each step's finished lengths, for GreedyAdvance
        self._past = np.zeros(0, np.int32)
        self._ended = np.zeros(0, np.int32)
        self._total, self._eos = np.ones((), np.int32), np.array(eos_id, np.int64)
        self._bound: GreedyRows | None = None
        self._fit_share = GREEDY_FIT if self.greedy else BEAM_FIT

    @property
    def running(self) -> int:
        """Sentences still searching."""
        return self._running

    def admit(self, keys: list[Hashable], limits: np.ndarray, cross_k: np.ndarray,
              cross_v: np.ndarray, src_mask: np.ndarray) -> None:
        """Add sentences: keys name them in step()'s results, limits (N,) are their most tokens
        (EOS included), cross_k/cross_v (L, N, ...) and src_mask (N, S) their encoder output.
        They take the slots of finished sentences first (in place: nothing else moves), then
        new rows after the running ones."""
        if not keys:
            return
        limits = np.asarray(limits, np.int64)
        have = self.history.shape[1]
        width = max(have, int(limits.max()))
        if width > have:  # with headroom: a new array means a new binding of the greedy step
            width = max(width, have + have // 2)
            self.history = grown(self.history, (len(self.history), width),
                                 (slice(None), slice(0, have)))
        k, n = self.k, len(keys)
        slots = np.flatnonzero(~self.alive)[:n]  # finished sentences' slots, taken in place
        r = len(slots)
        if r:
            self.state.put(slots, cross_k[:, :r], cross_v[:, :r], src_mask[:r], k)
        if n > r:  # the rest go after the running sentences
            self.state.append(cross_k[:, r:], cross_v[:, r:], src_mask[r:], k,
                              min(width, FIRST_POSITIONS))
            slots = np.concatenate([slots, len(self.keys) + np.arange(n - r)])
            self._add_slots(n - r)
        for slot, key in zip(slots.tolist(), keys, strict=True):
            self.keys[slot], self.finished[slot] = key, []
        self.t[slots], self.limit[slots], self.alive[slots] = 0, limits, True
        if self.greedy:
            self._past[slots] = 0
        self._running += n
        self.src_len[slots] = np.count_nonzero(src_mask, axis=1)
        self.state.fit_sources(int(self.src_len[self.alive].max()), self._fit_share)
        rows = slots[:, None] * k + self._beams  # (n, K): each row gets its beam's start
        self.rank[rows] = self._beams
        self.score[rows] = self._start_scores
        self.last[rows] = self.start_id

    def cancel(self, keys: list[Hashable]) -> None:
        """The running sentences under these keys end at the next step, with what they have then
        (nobody waits for them any more: they need not decode to their limit)."""
        wanted = set(keys)
        for s, key in enumerate(self.keys):
            if key in wanted and self.alive[s]:
                self.limit[s] = min(self.limit[s], self.t[s] + 1)  # in place: a bound array

    def _add_slots(self, n: int) -> None:
        """n more (blank) sentence slots in the bookkeeping, k rows each."""
        rows = n * self.k
        self.keys += [None] * n
        self.finished += [[] for _ in range(n)]
        self.t = np.concatenate([self.t, np.zeros(n, np.int64)])
        self.limit = np.concatenate([self.limit, np.zeros(n, np.int64)])
        self.alive = np.concatenate([self.alive, np.zeros(n, bool)])
        self.src_len = np.concatenate([self.src_len, np.zeros(n, np.int64)])
        self.rank = np.concatenate([self.rank, np.zeros(rows, np.int64)])
        self.score = np.concatenate([self.score, np.zeros(rows, np.float32)])
        self.last = np.concatenate([self.last, np.zeros(rows, np.int64)])
        self.history = np.concatenate([self.history,
                                       np.zeros((rows, self.history.shape[1]), np.int64)])
        if self.greedy:
            self._past = np.concatenate([self._past, np.zeros(rows, np.int32)])
            self._ended = np.zeros(len(self._past), np.int32)

    def run(self) -> dict[Hashable, list[Hypothesis]]:
        results: dict[Hashable, list[Hypothesis]] = {}
        while self.running:
            results.update(self.step())
        return results

    def step(self) -> list[tuple[Hashable, list[Hypothesis]]]:
        """One decoder step for every running sentence; the sentences it finished."""
        if self.advance is not None:
            ended = self._advance_step()
        else:
            # per row; finished ones decode nothing (a finished greedy row's t is 0)
            past = self.t if self.greedy else np.repeat(np.where(self.alive, self.t, 0), self.k)
            self._room_for(past)
            log_probs, ids = self.step_fn(self.state, self.last, past, past, self.m)
            if self.greedy:
                few = self._running <= FEW_SENTENCES
                ended = self._greedy_few(log_probs, ids) if few else self._greedy(log_probs, ids)
            else:
                ended = self._beam(log_probs, ids)
                self._running -= len(ended)
        done = [(self.keys[s], self._ranked(s)) for s in ended]
        if _should_compact(self.running * self.k, len(self.rank)):
            self._compact()
        return done

    def _room_for(self, past: np.ndarray) -> int:
        """The positions this step needs (the longest past + 1), the cache grown to them (it
        grows with the outputs)."""
        needed = int(past.max()) + 1
        if needed > self.state.max_len:
            self.state.ensure_positions(needed, int(self.limit[self.alive].max()) + 1)
        return needed

    def _greedy(self, log_probs: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """Every row updated, finished ones too (their score and history are set again when a
        sentence takes their slot, and their t stays 0): a few whole-array operations a step.
        Where the step graph has GreedyAdvance, _advance_step does this instead."""
        live, t = self.alive, self.t
        next_ids = ids[:, 0]
        self.score += log_probs[:, 0]
        self.history[np.arange(len(t)), t] = next_ids
        is_eos = next_ids == self.eos_id
        ended = np.flatnonzero(live & (is_eos | (t + 1 >= self.limit)))
        for s in ended.tolist():
            n_tokens = int(t[s]) + 1 - bool(is_eos[s])
            self.finished[s].append((self.history[s, :n_tokens].tolist(), float(self.score[s]),
                                     int(t[s]) + 1))
        if len(ended):
            self.alive[ended] = False
            self._running -= len(ended)
        self.last[:] = next_ids  # the step overwrites its outputs next time
        t += 1
        t *= self.alive
        return ended

    def _advance_step(self) -> list[int]:
        """A greedy step whose bookkeeping (scores, history, positions, which rows end) the step
        graph's GreedyAdvance node does in place on the search's arrays: Python looks only at
        the rows that finished. The same rules and float32 sums as _greedy."""
        arrays = (self.last, self.t, self._past, self.score, self.history, self.limit,
                  self.alive, self._ended)
        rows = self._bound
        if rows is None or not rows.same(*arrays):  # one of them replaced: bound anew
            rows = self._bound = GreedyRows(*arrays, self._total, self._eos)
        self._total[...] = self._room_for(self.t)
        lengths = self.advance(self.state, rows)
        ended = np.flatnonzero(lengths).tolist()
        for s in ended:
            length = int(lengths[s])
            n_tokens = length - int(self.history[s, length - 1] == self.eos_id)
            self.finished[s].append((self.history[s, :n_tokens].tolist(), float(self.score[s]),
                                     length))
        self._running -= len(ended)
        return ended

    def _greedy_few(self, log_probs: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """_greedy sentence by sentence on Python scalars (the score added in float32 as
        there), without the dozen numpy calls per step that dominate batch-1 greedy search."""
        ended = []
        for s in np.flatnonzero(self.alive).tolist():
            t, token = int(self.t[s]), int(ids[s, 0])
            self.score[s] += log_probs[s, 0]
            self.history[s, t] = self.last[s] = token
            if token == self.eos_id or t + 1 >= self.limit[s]:
                n_tokens = t + (token != self.eos_id)
                self.finished[s].append((self.history[s, :n_tokens].tolist(),
                                         float(self.score[s]), t + 1))
                self.alive[s] = False
                self.t[s] = 0
                self._running -= 1
                ended.append(s)
            else:
                self.t[s] = t + 1
        return np.array(ended, np.int64)

    def _beam(self, log_probs: np.ndarray, ids: np.ndarray) -> np.ndarray:
        if self.running <= FEW_SENTENCES:
            return self._beam_few(log_probs, ids)
        n, k, m, t = len(self.keys), self.k, self.m, self.t
        # each sentence's k x m candidates, ordered by score desc, then beam * V + token
        scores = (self.score[:, None] + log_probs).reshape(n, k * m)  # (N, K*m)
        order_key = (self.rank[:, None] * self.vocab_size + ids).reshape(n, k * m)  # (N, K*m)
        best = np.lexsort((order_key, -scores), axis=1)[:, :m]  # (N, m)
        best_scores = np.take_along_axis(scores, best, axis=1)  # (N, m)
        tokens = np.take_along_axis(ids.reshape(n, k * m), best, axis=1)  # (N, m)
        parents = np.arange(n)[:, None] * k + best // m  # (N, m) rows of the state

        # Walk up to the beam_size-th non-EOS candidate: EOS candidates finish, the others
        # extend a live hypothesis, or finish too at the last step.
        is_eos = tokens == self.eos_id
        stop = np.cumsum(~is_eos, axis=1) >= k
        walked = (np.cumsum(stop, axis=1) - stop == 0) & self.alive[:, None]  # up to the stop
        ends = is_eos | (t + 1 >= self.limit)[:, None]  # (N, m)
        for s, j in zip(*np.nonzero(walked & ends), strict=True):
            ids_j = self.history[parents[s, j], : t[s]].tolist()
            if tokens[s, j] != self.eos_id:
                ids_j.append(int(tokens[s, j]))
            self.finished[s].append((ids_j, float(best_scores[s, j]), int(t[s] + 1)))

        extend = walked & ~ends  # (N, m): exactly k per sentence that goes on
        still = extend.any(axis=1)
        lp = self.length_penalty
        for s in np.flatnonzero(still & (np.array([len(f) for f in self.finished]) >= k)):
            ranks = sorted((sc / n_ ** lp for _, sc, n_ in self.finished[s]), reverse=True)
            best_live = float(best_scores[s][extend[s]].max())
            still[s] = ranks[k - 1] < best_live / (t[s] + 2) ** lp
        ended = np.flatnonzero(self.alive & ~still)
        self.alive = still
        s_idx, j_idx = np.nonzero(extend & still[:, None])  # by sentence, in walk order
        src_rows = parents[s_idx, j_idx]
        dst_rows = _place(src_rows, still, k)
        moved = dst_rows != src_rows
        self.state.copy_rows(src_rows[moved], dst_rows[moved], t[s_idx[moved]] + 1)
        # the bookkeeping moves like the cache: in place, copying only the moved rows (the rows
        # of finished sentences keep stale values; nothing reads them)
        self.history[dst_rows[moved]] = self.history[src_rows[moved]]
        self.history[dst_rows, t[s_idx]] = tokens[s_idx, j_idx]
        self.rank[dst_rows] = np.arange(len(s_idx)) % k
        self.score[dst_rows] = best_scores[s_idx, j_idx]
        self.last[dst_rows] = tokens[s_idx, j_idx]
        self.t[still] += 1
        return ended

    def _beam_few(self, log_probs: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """_beam's walk sentence by sentence on Python lists: the same candidates, order, scores
        (float32, summed in numpy as there) and row placement, without the vectorized walk's
        fixed cost of some forty numpy calls per step, which dominates when one or two
        sentences run (batch-1 beam search). The tests run both on the same inputs."""
        k, m, lp, eos, vocab = self.k, self.m, self.length_penalty, self.eos_id, self.vocab_size
        # every row's m candidates, flattened: -(score), the tie-break key beam * V + token and
        # the token (the scores float32, summed in numpy as in _beam)
        neg_scores = (-(self.score[:, None] + log_probs)).ravel().tolist()
        order_keys = (self.rank[:, None] * vocab + ids).ravel().tolist()  # unique per sentence
        all_tokens = ids.ravel().tolist()
        ended, moved_src, moved_dst, moved_used = [], [], [], []
        for s in np.flatnonzero(self.alive).tolist():
            first, t = s * k, int(self.t[s])
            a, b = first * m, (first + k) * m  # the sentence's candidates in the flat lists
            found = zip(neg_scores[a:b], order_keys[a:b], range(a, b), strict=True)
            candidates = sorted(found)[:m]
            last_step = t + 1 >= int(self.limit[s])
            finished, extend, others = self.finished[s], [], 0
            for neg_score, _, at in candidates:
                token, parent = all_tokens[at], at // m
                if token == eos or last_step:
                    ids_j = self.history[parent, :t].tolist()
                    if token != eos:
                        ids_j.append(token)
                    finished.append((ids_j, -neg_score, t + 1))
                else:
                    extend.append((-neg_score, token, parent))
                if token != eos:
                    others += 1
                    if others >= k:
                        break
            still = bool(extend)
            if still and len(finished) >= k:
                normalized = sorted((sc / n_**lp for _, sc, n_ in finished), reverse=True)
                still = normalized[k - 1] < max(e[0] for e in extend) / (t + 2) ** lp
            if not still:
                ended.append(s)
                self.alive[s] = False
                continue
            parents = {p for _, _, p in extend}
            free = iter(r for r in range(first, first + k) if r not in parents)
            placed: set[int] = set()
            for i, (score, token, parent) in enumerate(extend):
                row = parent if parent not in placed else next(free)
                placed.add(parent)
                if row != parent:
                    moved_src.append(parent)
                    moved_dst.append(row)
                    moved_used.append(t + 1)
                    self.history[row] = self.history[parent]
                self.history[row, t] = token
                self.rank[row], self.score[row], self.last[row] = i, score, token
            self.t[s] += 1
        if moved_src:
            self.state.copy_rows(np.array(moved_src, np.int64), np.array(moved_dst, np.int64),
                                 np.array(moved_used, np.int64))
        return np.array(ended, np.int64)

    def _ranked(self, s: int) -> list[Hypothesis]:
        return ranked(self.finished[s], self.length_penalty, self.n_best)

    def _compact(self) -> None:
        """Drop finished sentences and their rows from the cache and the bookkeeping."""
        if self.alive.all():
            return
        kept = _fill_holes(self.alive)
        rows = (kept[:, None] * self.k + np.arange(self.k)).ravel()  # (N' * K,)
        used = int(self.t[kept].max()) + 1 if len(kept) else 0
        self.state.keep(rows, kept, used)
        self.keys = [self.keys[s] for s in kept]
        self.finished = [self.finished[s] for s in kept]
        self.t, self.limit, self.alive = self.t[kept], self.limit[kept], self.alive[kept]
        self.src_len = self.src_len[kept]
        if len(kept):
            self.state.fit_sources(int(self.src_len.max()), self._fit_share)
        self.rank, self.score, self.last = self.rank[rows], self.score[rows], self.last[rows]
        self.history = self.history[rows]
        if self.greedy:
            self._past, self._ended = self._past[rows], np.zeros(len(rows), np.int32)


def _fill_holes(alive: np.ndarray) -> np.ndarray:
    """The order of the running sentences after compaction: those among the first n (n = the
    running count) stay in place and the ones beyond take the finished slots among the first n,
    so only those move (a shift to the front would move every sentence after the first gap)."""
    kept = np.flatnonzero(alive)
    n = len(kept)
    order = np.arange(n)
    order[~alive[:n]] = kept[kept >= n]
    return order


def _should_compact(alive_rows: int, rows: int) -> bool:
    """Whether to drop finished rows: once they are a share of the batch, and only while some
    row still runs (a batch with none left keeps its slots for the next sentences to take in
    place, or is dropped by its owner)."""
    return 0 < alive_rows < rows and rows - alive_rows >= COMPACT_SHARE * rows


def _place(src_rows: np.ndarray, alive: np.ndarray, width: int) -> np.ndarray:
    """Rows for new hypotheses, given their parents' rows grouped by sentence (`width` per live
    sentence): a parent's first child keeps its row; the other children take, in order, the
    rows of their sentence whose hypotheses had no child."""
    dst = np.full(len(src_rows), -1, dtype=np.int64)
    _, first = np.unique(src_rows, return_index=True)
    dst[first] = src_rows[first]
    taken = np.zeros(len(alive) * width, dtype=bool)
    taken[src_rows[first]] = True
    own = np.repeat(alive, width) & ~taken  # free rows of live sentences, by sentence
    others = np.flatnonzero(dst < 0)  # grouped by sentence, as the free rows are
    dst[others] = np.flatnonzero(own)
    return dst
