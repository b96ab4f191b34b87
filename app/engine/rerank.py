"""Reranking a sentence's hypotheses with the bundle's language model (export.lm).

The beam search ranks hypotheses by how well each follows the source (its score per token,
length-normalized). A small translation model often finds the right sentence but ranks it
below one that reads wrong ("der nächstgelegene Zugstation" above "die nächstgelegene
Zugstation"). A language model of the target language, trained on the same pieces, scores each
of the `candidates` best hypotheses: they are ranked again by

    score + weight * (language model log-probability per token, EOS included)

with the weight chosen on dev sets at export (export.lm), among the hypotheses that keep every
name and number the search's best copied from the source (`keeps`). The language model judges
how well a hypothesis reads in the target language, not what it says: it would trade a name it
has never seen for common words ("Casa Grande" -> "Katastrophe", "Fort McMurray" ->
"Festungsmurray"). A hypothesis that lost such a piece is ranked after those that kept them all.

The language model is one of two kinds: a count-based n-gram model (`lm.ngram.bin`,
app/engine/ngram.py: a few table look-ups per piece), or a neural one (`lm.int8.onnx`,
model/lm.py: one ONNX Runtime call per sentence, its hypotheses as one batch, on the CPU
whatever the translation graphs' provider).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from app.engine.ngram import NgramModel
from app.engine.search import Hypothesis

if TYPE_CHECKING:
    from app.engine.bundle import Bundle


def lm_rows(token_lists: list[list[int]], bos: int, eos: int, pad: int) -> np.ndarray:
    """Hypotheses' tokens (no BOS/EOS) -> the graph's input (B, T): BOS, tokens, EOS, padding."""
    width = max(len(t) for t in token_lists) + 2
    out = np.full((len(token_lists), width), pad, dtype=np.int64)
    for r, tokens in enumerate(token_lists):
        out[r, : len(tokens) + 2] = [bos, *tokens, eos]
    return out


def name_pieces(ids: tuple[int, ...], marked: frozenset[int], starts: frozenset[int]
                ) -> frozenset[int]:
    """Every piece of the words of ids (a source) that have a piece in `marked` (a capital
    letter or a digit; JointTokenizer.name_pieces gives both sets, `starts` the pieces that
    begin a word): the names and numbers, their lower-case pieces too ("Daryn" is "▁D", "ary",
    "n", and "Däne" shares only "▁D" and "n" with it)."""
    words: list[list[int]] = []
    for i in ids:
        if i in starts or not words:
            words.append([])
        words[-1].append(i)
    return frozenset(i for word in words if marked.intersection(word) for i in word)


def keeps(token_lists: list[list[int]], names: frozenset[int]) -> np.ndarray:
    """(N,) whether each hypothesis has every piece of `names` (the source's names and
    numbers: name_pieces) that the first one, the search's best, has."""
    copied = names.intersection(token_lists[0])
    return np.array([copied.issubset(tokens) for tokens in token_lists], dtype=bool)


class NeuralModel:
    """A neural language model's scoring graph (export.lm) in an ONNX Runtime session. It
    judges every piece, the unknown one too."""

    def __init__(self, path: str | Path, bos: int, eos: int, pad: int) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        # a few short rows per call: one thread, and none spinning between calls
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(path), options,
                                            providers=["CPUExecutionProvider"])
        self.bos, self.eos, self.pad = bos, eos, pad

    def per_token(self, token_lists: list[list[int]]) -> np.ndarray:
        """(N,) each hypothesis' log-probability per token (EOS counted)."""
        rows = lm_rows(token_lists, self.bos, self.eos, self.pad)
        log_prob = self.session.run(None, {"ids": rows})[0]
        return log_prob / np.array([len(t) + 1 for t in token_lists], dtype=np.float32)


class Reranker:
    """The language model and the manifest's weight and candidate count."""

    def __init__(self, path: str | Path, weight: float, candidates: int, bos: int = 1,
                 eos: int = 2, pad: int = 0, unk: int | None = None) -> None:
        self.model = (NeuralModel(path, bos, eos, pad) if Path(path).suffix == ".onnx"
                      else NgramModel(path))
        self.weight, self.candidates, self.unk = float(weight), int(candidates), unk

    @classmethod
    def of(cls, bundle: Bundle) -> Reranker | None:
        """The bundle's reranker, or None where it has no language model or its weight is 0."""
        entry = bundle.manifest.get("rerank")
        if bundle.language_model_path is None or not entry or not entry["weight"]:
            return None
        special = bundle.special_tokens
        return cls(bundle.language_model_path, entry["weight"], entry["candidates"],
                   special["bos_id"], special["eos_id"], special["pad_id"],
                   special.get("unk_id"))

    def per_token(self, token_lists: list[list[int]]) -> np.ndarray:
        """(N,) each hypothesis' log-probability per token (EOS counted; the n-gram model
        leaves the unknown piece out: NgramModel.per_token)."""
        if isinstance(self.model, NgramModel):
            return self.model.per_token(token_lists, unjudged=self.unk)
        return self.model.per_token(token_lists)

    def order(self, hyps: list[Hypothesis], names: frozenset[int] = frozenset()
              ) -> list[Hypothesis]:
        """hyps (the search's best first) ranked again, best first: those that keep the
        pieces of `names` the first has (`keeps`) before those that do not, each group by
        score plus weight x language model (ties keep the search's order). Each keeps its own
        score: a result's score and confidence stay the translation model's."""
        if len(hyps) < 2:
            return hyps
        tokens = [h.tokens for h in hyps]
        lm, kept = self.per_token(tokens), keeps(tokens, names)
        combined = [h.normalized + self.weight * float(x) for h, x in zip(hyps, lm, strict=True)]
        ranked = sorted(range(len(hyps)), key=lambda i: (not kept[i], -combined[i]))
        return [hyps[i] for i in ranked]
