"""Text <-> ids for the engine, in the two layouts a bundle may carry.

- JointTokenizer: one SentencePiece model for both sides; ids are its piece ids (our own models).
- SplitTokenizer: a source and a target SentencePiece model over one shared vocabulary that maps
  pieces to ids (vocab.json), Marian's layout: the source model cuts the input into pieces, the
  vocabulary numbers them (unknown pieces become unk), and the target model joins the output
  pieces back into text.

Both encode without BOS/EOS and decode ids that the caller has stripped of special tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

import sentencepiece as spm


class JointTokenizer:
    def __init__(self, model_file: str | Path) -> None:
        self.sp = spm.SentencePieceProcessor(model_file=str(model_file))

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def piece_id(self, piece: str) -> int | None:
        """The id of a special piece, or None when the model has none (SentencePiece: -1)."""
        found = {
            "pad": self.sp.pad_id(),
            "bos": self.sp.bos_id(),
            "eos": self.sp.eos_id(),
            "unk": self.sp.unk_id(),
        }[piece]
        return None if found < 0 else found

    def encode(self, texts: list[str]) -> list[list[int]]:
        # one call per text: SentencePiece encodes a list on a pool of threads that it starts
        # for each call, which costs far more than encoding a short text
        return [self.sp.encode(text) for text in texts]

    def decode(self, ids: list[int]) -> str:
        return self.sp.decode(ids)


SPECIAL_PIECES = {"pad": "<pad>", "bos": "<s>", "eos": "</s>", "unk": "<unk>"}


class SplitTokenizer:
    """Source/target SentencePiece models (serialized protos) and the shared piece -> id map."""

    def __init__(self, source: bytes, target: bytes, vocab: dict[str, int]) -> None:
        ids = sorted(vocab.values())
        if ids != list(range(len(ids))):
            raise ValueError("the vocabulary's ids must be 0 .. size-1, each once")
        if SPECIAL_PIECES["unk"] not in vocab:
            raise ValueError(f"the vocabulary has no {SPECIAL_PIECES['unk']} piece")
        self.source = spm.SentencePieceProcessor(model_proto=source)
        self.target = spm.SentencePieceProcessor(model_proto=target)
        self.vocab = dict(vocab)
        self.pieces = [""] * len(ids)  # id -> piece
        for piece, i in vocab.items():
            self.pieces[i] = piece
        self.unk_id = vocab[SPECIAL_PIECES["unk"]]

    @classmethod
    def from_files(cls, source: str | Path, target: str | Path, vocab: str | Path):
        mapping = json.loads(Path(vocab).read_text(encoding="utf-8"))
        if not isinstance(mapping, dict):
            raise ValueError("the vocabulary must be a JSON object of piece -> id")
        return cls(Path(source).read_bytes(), Path(target).read_bytes(), mapping)

    @property
    def vocab_size(self) -> int:
        return len(self.pieces)

    def piece_id(self, piece: str) -> int | None:
        return self.vocab.get(SPECIAL_PIECES[piece])

    def encode(self, texts: list[str]) -> list[list[int]]:
        rows = [self.source.encode(text, out_type=str) for text in texts]  # as JointTokenizer
        return [[self.vocab.get(p, self.unk_id) for p in row] for row in rows]

    def decode(self, ids: list[int]) -> str:
        return self.target.decode_pieces([self.pieces[i] for i in ids])
