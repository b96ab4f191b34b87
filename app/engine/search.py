"""Batched greedy and beam search over the decoder graph's key/value cache, in numpy.

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

Finished rows (greedy) and finished sentences (beam) leave the running batch: their rows are
dropped from the cache, so the decoder only computes live rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# tokens, positions, past_k, past_v, cross_k, cross_v, src_mask -> log_probs, present_k, present_v
DecodeFn = Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray]]


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


def empty_cache(cross_k: np.ndarray) -> np.ndarray:
    """A cache with no positions yet, shaped like cross_k: (L, B, H, 0, Dh)."""
    n_layers, batch, heads, _, head_dim = cross_k.shape
    return np.empty((n_layers, batch, heads, 0, head_dim), dtype=cross_k.dtype)


def greedy_search(
    decode: DecodeFn,
    cross_k: np.ndarray,
    cross_v: np.ndarray,
    src_mask: np.ndarray,
    limits: np.ndarray,
    bos_id: int,
    eos_id: int,
    length_penalty: float = 1.0,
) -> list[Hypothesis]:
    """Greedy decoding of a batch (cross_k/cross_v (L, B, H, S, Dh), src_mask (B, S))."""
    batch = len(limits)
    max_steps = int(limits.max())
    out = np.zeros((batch, max_steps), dtype=np.int64)  # generated ids, EOS included
    n_tokens = np.zeros(batch, dtype=np.int64)  # generated ids without EOS
    lengths = np.zeros(batch, dtype=np.int64)  # generated ids with EOS
    scores = np.zeros(batch, dtype=np.float32)
    rows = np.arange(batch)  # the original index of each running row
    tokens = np.full((batch, 1), bos_id, dtype=np.int64)  # (B, 1)
    past_k, past_v = empty_cache(cross_k), empty_cache(cross_v)
    for step in range(max_steps):
        positions = np.full_like(tokens, step)  # (R, 1)
        log_probs, past_k, past_v = decode(
            tokens, positions, past_k, past_v, cross_k, cross_v, src_mask
        )  # (R, V), (L, R, H, step + 1, Dh)
        next_ids = log_probs.argmax(axis=1)  # (R,), the first maximum: lowest id on ties
        scores[rows] += log_probs[np.arange(len(rows)), next_ids]
        is_eos = next_ids == eos_id
        out[rows, step] = next_ids
        n_tokens[rows] = step + 1 - is_eos
        lengths[rows] = step + 1
        finished = is_eos | (step + 1 >= limits[rows])
        if finished.all():
            break
        if finished.any():  # shrink the running batch to the live rows
            live = ~finished
            rows, next_ids = rows[live], next_ids[live]
            past_k, past_v = past_k[:, live], past_v[:, live]  # (L, R', H, step + 1, Dh)
            cross_k, cross_v = cross_k[:, live], cross_v[:, live]  # (L, R', H, S, Dh)
            src_mask = src_mask[live]  # (R', S)
        tokens = next_ids[:, None]  # (R, 1)
    return [
        Hypothesis(
            out[i, : n_tokens[i]].tolist(),
            float(scores[i]),
            float(scores[i]) / float(lengths[i]) ** length_penalty,
        )
        for i in range(batch)
    ]


def top_candidates(flat: np.ndarray, m: int) -> np.ndarray:
    """flat (N, C) scores -> (N, m) column indices of the m best per row, ordered by score
    descending, ties by lower index: the first m of a stable descending sort, without sorting C."""
    n, c = flat.shape
    if m >= c:
        return np.argsort(-flat, axis=1, kind="stable")
    part = np.argpartition(-flat, m - 1, axis=1)[:, :m]  # (N, m), unordered
    values = np.take_along_axis(flat, part, axis=1)  # (N, m)
    order = np.lexsort((part, -values), axis=1)  # by score desc, then index
    best = np.take_along_axis(part, order, axis=1)  # (N, m)
    # argpartition picks arbitrarily among candidates tied with the m-th score: redo those rows.
    kth = values.min(axis=1, keepdims=True)  # (N, 1)
    tied = (flat == kth).sum(axis=1) > (values == kth).sum(axis=1)
    for r in np.flatnonzero(tied):
        idx = np.flatnonzero(flat[r] >= kth[r])  # ascending index
        best[r] = idx[np.argsort(-flat[r, idx], kind="stable")[:m]]
    return best


def beam_search(
    decode: DecodeFn,
    cross_k: np.ndarray,
    cross_v: np.ndarray,
    src_mask: np.ndarray,
    limits: np.ndarray,
    bos_id: int,
    eos_id: int,
    beam_size: int = 4,
    length_penalty: float = 1.0,
    n_best: int = 1,
) -> list[list[Hypothesis]]:
    """Beam search for a batch of sentences; per sentence the n_best hypotheses, best first.

    Every sentence keeps its live hypotheses as rows of one running batch, grouped by sentence
    and, within a sentence, in the order the walk found them (that order is the beam index)."""
    n_sent = len(limits)
    finished: list[list[tuple[list[int], float, int]]] = [[] for _ in range(n_sent)]
    n_finished = np.zeros(n_sent, dtype=np.int64)
    active = np.arange(n_sent)  # sentences still searching
    row_sent = np.arange(n_sent)  # per row: its sentence's index into `active`
    row_beam = np.zeros(n_sent, dtype=np.int64)  # per row: its beam index in the sentence
    row_score = np.zeros(n_sent, dtype=np.float32)
    history = np.zeros((n_sent, 0), dtype=np.int64)  # (R, step) generated ids
    last = np.full(n_sent, bos_id, dtype=np.int64)
    row_origin = np.arange(n_sent)  # per row: its original sentence (for the cross cache)
    rows_cross_k, rows_cross_v, rows_mask = cross_k, cross_v, src_mask
    past_k, past_v = empty_cache(cross_k), empty_cache(cross_v)
    m = 2 * beam_size  # a step has at most beam_size EOS candidates: 2k hold k others

    for step in range(int(limits.max())):
        log_probs, past_k, past_v = decode(
            last[:, None],
            np.full((len(last), 1), step, dtype=np.int64),
            past_k,
            past_v,
            rows_cross_k,
            rows_cross_v,
            rows_mask,
        )  # (R, V), (L, R, H, step + 1, Dh)
        vocab = log_probs.shape[1]
        scores = row_score[:, None] + log_probs.astype(np.float32, copy=False)  # (R, V)
        n_rows = np.bincount(row_sent, minlength=len(active))  # live rows per sentence
        width = int(n_rows.max())
        if (n_rows == width).all():  # the usual case: rows already form a (N, K) grid
            flat = scores.reshape(len(active), width * vocab)  # (N, K*V)
        else:
            grid = np.full((len(active), width, vocab), -np.inf, dtype=np.float32)  # (N, K, V)
            grid[row_sent, row_beam] = scores
            flat = grid.reshape(len(active), width * vocab)  # (N, K*V)
        # flat index = beam * V + token, as in the reference's (K, V) score matrix
        best = top_candidates(flat, min(m, width * vocab))  # (N, M)
        best_scores = np.take_along_axis(flat, best, axis=1)  # (N, M)
        beams, tokens = np.divmod(best, vocab)  # (N, M) each
        valid = beams < n_rows[:, None]
        # Walk up to the beam_size-th non-EOS candidate: EOS candidates finish, the others
        # extend a live hypothesis, or finish too at the last step.
        is_eos = tokens == eos_id  # (N, M)
        stop = np.cumsum(~is_eos & valid, axis=1) >= beam_size
        walked = valid & (np.cumsum(stop, axis=1) - stop == 0)  # up to and including the stop
        ends = is_eos | (step + 1 >= limits[active])[:, None]  # (N, M)
        first_row = np.cumsum(n_rows) - n_rows  # (N,) where each sentence's rows start

        for s, j in zip(*np.nonzero(walked & ends), strict=True):
            sent = active[s]
            ids = history[first_row[s] + beams[s, j]].tolist()
            if tokens[s, j] != eos_id:
                ids.append(int(tokens[s, j]))
            finished[sent].append((ids, float(best_scores[s, j]), step + 1))
            n_finished[sent] += 1

        extend = walked & ~ends  # (N, M)
        still = extend.any(axis=1)  # (N,)
        for s in np.nonzero(still & (n_finished[active] >= beam_size))[0]:
            hyps = finished[active[s]]
            ranks = sorted((sc / n**length_penalty for _, sc, n in hyps), reverse=True)
            best_live = float(best_scores[s][extend[s]].max())
            still[s] = ranks[beam_size - 1] < best_live / (step + 2) ** length_penalty
        extend &= still[:, None]
        if not still.any():
            break
        s_idx, j_idx = np.nonzero(extend)  # grouped by sentence, in walk order
        parents = first_row[s_idx] + beams[s_idx, j_idx]  # (R',) source row of each new row
        new_local = np.cumsum(still) - 1  # old sentence index -> new one
        row_sent = new_local[s_idx]
        counts = np.bincount(row_sent)
        row_beam = np.arange(len(s_idx)) - (np.cumsum(counts) - counts)[row_sent]
        row_score = best_scores[s_idx, j_idx]
        last = tokens[s_idx, j_idx]
        history = np.concatenate([history[parents], last[:, None]], axis=1)  # (R', step + 1)
        past_k, past_v = past_k[:, parents], past_v[:, parents]  # (L, R', H, step + 1, Dh)
        active = active[still]
        origin = active[row_sent]
        if not np.array_equal(origin, row_origin):  # the sentence of some rows changed
            row_origin = origin
            rows_cross_k, rows_cross_v = cross_k[:, origin], cross_v[:, origin]  # (L, R', H, S, Dh)
            rows_mask = src_mask[origin]  # (R', S)

    results = []
    for hyps in finished:
        ranked = sorted(
            (Hypothesis(ids, score, score / length**length_penalty) for ids, score, length in hyps),
            key=lambda h: h.normalized,
            reverse=True,
        )
        results.append(ranked[:n_best])
    return results
