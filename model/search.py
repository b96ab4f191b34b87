"""The PyTorch reference decoders: batched greedy search and per-sentence beam search.

Both use the incremental decoder with its key/value cache. These are the outputs the ONNX engine
is checked against, so their rules are spelled out exactly:

- the maximum number of generated tokens (EOS included) is
  `max_len_offset + max_len_ratio * len(src)`,
  capped by the model's position table;
- greedy takes the arg-max of the logits (lowest id on ties) and stops a row at EOS;
- beam search keeps `beam_size` live hypotheses. At each step the candidates (hypothesis score +
  log-prob of the next token) are ordered by score, descending, ties broken by lower
  (beam index * V + token id); walking that order, an EOS candidate becomes a finished hypothesis
  and any other token extends a live one, until `beam_size` non-EOS candidates are found (at the
  length limit those finish too, without EOS). Finished hypotheses are ranked by
  score / length ** length_penalty, where length counts generated tokens including EOS, ties in
  the order they finished. Search ends at the length limit, or once `beam_size` hypotheses have
  finished and the `beam_size`-th best of them ranks at least as high as the best live
  hypothesis would if it ended at the next step (its score / (its length + 1) ** length_penalty):
  so weak hypotheses that end early cannot stop the search while a better one is still live.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from model.transformer import Transformer


@dataclass(frozen=True)
class Hypothesis:
    tokens: list[int]  # generated ids, without BOS and EOS
    score: float  # sum of log-probs (EOS included when finished)
    normalized: float  # score / length ** length_penalty


def max_output_length(
    model: Transformer, src_len: int, max_len_offset: int, max_len_ratio: float
) -> int:
    limit = int(max_len_offset + max_len_ratio * src_len)
    return max(1, min(limit, model.config.max_positions - 1))


def _src_tensor(model: Transformer, batch: list[list[int]]) -> Tensor:
    """Source id lists -> (B, S) padded tensor on the model's device, EOS appended to each."""
    c = model.config
    rows = [ids + [c.eos_id] for ids in batch]
    width = max(len(r) for r in rows)
    padded = [r + [c.pad_id] * (width - len(r)) for r in rows]
    return torch.tensor(padded, dtype=torch.long, device=_device(model))


def _device(model: Transformer) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def greedy_search(
    model: Transformer,
    sources: list[list[int]],
    max_len_offset: int = 10,
    max_len_ratio: float = 1.5,
) -> list[list[int]]:
    """Batched greedy decoding; returns the generated ids of each source (no BOS/EOS)."""
    c = model.config
    model.eval()
    src = _src_tensor(model, sources)
    memory, src_mask = model.encode(src)
    cross = model.cross_kv(memory)
    limits = [max_output_length(model, len(s), max_len_offset, max_len_ratio) for s in sources]
    tokens = torch.full((len(sources), 1), c.start_id, dtype=torch.long, device=src.device)
    # tokens (B, 1)
    outputs: list[list[int]] = [[] for _ in sources]
    done = [False] * len(sources)
    past = None
    for step in range(max(limits)):
        positions = torch.full_like(tokens, step)
        logits, past = model.decode_step(tokens, positions, cross, src_mask, past)
        next_ids = logits[:, -1].float().argmax(dim=-1)  # (B,)
        for i, token in enumerate(next_ids.tolist()):
            if done[i]:
                continue
            if token == c.eos_id:
                done[i] = True
            else:
                outputs[i].append(token)
                done[i] = len(outputs[i]) >= limits[i]
        if all(done):
            break
        tokens = next_ids[:, None]
    return outputs


def _rank_candidates(scores: Tensor) -> Tensor:
    """scores (K, V) -> flat candidate indices ordered by score desc, ties by lower index."""
    flat = scores.reshape(-1)
    return torch.sort(flat, descending=True, stable=True).indices


@torch.no_grad()
def beam_search(
    model: Transformer,
    source: list[int],
    beam_size: int = 4,
    length_penalty: float = 1.0,
    n_best: int = 1,
    max_len_offset: int = 10,
    max_len_ratio: float = 1.5,
) -> list[Hypothesis]:
    """Beam search for one source sentence; returns the n_best finished hypotheses, best first."""
    c = model.config
    model.eval()
    src = _src_tensor(model, [source])
    memory, src_mask = model.encode(src)
    cross = model.cross_kv(memory)
    limit = max_output_length(model, len(source), max_len_offset, max_len_ratio)

    live_tokens: list[list[int]] = [[]]
    live_scores = torch.zeros(1, device=src.device)
    finished: list[tuple[list[int], float, int]] = []  # tokens, score, length incl. EOS
    last = torch.full((1, 1), c.start_id, dtype=torch.long, device=src.device)
    past = None
    for step in range(limit):
        k = len(live_tokens)
        step_cross = [(kk.expand(k, -1, -1, -1), vv.expand(k, -1, -1, -1)) for kk, vv in cross]
        positions = torch.full_like(last, step)
        logits, past = model.decode_step(last, positions, step_cross, src_mask, past)
        log_probs = torch.log_softmax(logits[:, -1].float(), dim=-1)  # (K, V)
        scores = live_scores[:, None] + log_probs
        vocab = scores.size(1)
        keep_beams: list[int] = []
        keep_tokens: list[int] = []
        keep_scores: list[float] = []
        found = 0  # non-EOS candidates walked
        for flat in _rank_candidates(scores).tolist():
            beam, token = divmod(flat, vocab)
            score = scores[beam, token].item()
            if token == c.eos_id:
                finished.append((live_tokens[beam], score, len(live_tokens[beam]) + 1))
                continue
            if step + 1 < limit:
                keep_beams.append(beam)
                keep_tokens.append(token)
                keep_scores.append(score)
            else:  # the length limit: the hypothesis ends here without EOS
                finished.append((live_tokens[beam] + [token], score, limit))
            found += 1
            if found == beam_size:
                break
        if not keep_beams:
            break
        if len(finished) >= beam_size:
            ranks = sorted((s / n**length_penalty for _, s, n in finished), reverse=True)
            if ranks[beam_size - 1] >= max(keep_scores) / (step + 2) ** length_penalty:
                break
        live_tokens = [live_tokens[b] + [t] for b, t in zip(keep_beams, keep_tokens, strict=True)]
        live_scores = torch.tensor(keep_scores, device=src.device)
        index = torch.tensor(keep_beams, device=src.device)
        past = [(pk[index], pv[index]) for pk, pv in past]
        last = torch.tensor(keep_tokens, device=src.device)[:, None]

    ranked = sorted(
        (Hypothesis(t, s, s / n**length_penalty) for t, s, n in finished),
        key=lambda h: h.normalized,
        reverse=True,
    )
    return ranked[:n_best]
