"""One joint SentencePiece vocabulary for source and target, with fixed special ids."""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from pathlib import Path

import sentencepiece as spm

from app.engine import tokenizer as engine_tokenizer

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
# Placeholders the service must carry through untouched: keep each one a single piece.
PLACEHOLDER_SYMBOLS = ["%s", "%d", "%u", "%i", "%1", "%2", "%3", "%4", "%ld", "%lu"]


def train_tokenizer(
    texts: Iterable[str],
    model_path: str | Path,
    vocab_size: int = 8000,
    model_type: str = "unigram",
    max_sentences: int = 2_000_000,
) -> Path:
    """Train a SentencePiece model on texts (both languages) and write it to model_path."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=model,
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=1.0,
        pad_id=PAD_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        unk_id=UNK_ID,
        user_defined_symbols=PLACEHOLDER_SYMBOLS,
        hard_vocab_limit=False,  # tiny corpora get a smaller vocabulary instead of an error
        input_sentence_size=max_sentences,
        shuffle_input_sentence=True,
        num_threads=2,
        minloglevel=2,
    )
    path = Path(model_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model.getvalue())
    return path


class Tokenizer:
    """Text <-> ids. Encoded ids carry no BOS/EOS; callers add them where the model needs them."""

    def __init__(self, model_proto: bytes) -> None:
        self.model_proto = model_proto
        self.sp = spm.SentencePieceProcessor(model_proto=model_proto)
        if (self.sp.pad_id(), self.sp.bos_id(), self.sp.eos_id(), self.sp.unk_id()) != (
            PAD_ID,
            BOS_ID,
            EOS_ID,
            UNK_ID,
        ):
            raise ValueError(
                "SentencePiece model does not use the fixed ids 0/1/2/3 for pad/bos/eos/unk"
            )

    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
        return cls(Path(path).read_bytes())

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(text)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self.sp.encode(texts)

    def decode(self, ids: Iterable[int]) -> str:
        return self.sp.decode([i for i in ids if i not in (PAD_ID, BOS_ID, EOS_ID)])

    def state(self) -> bytes:
        """What a checkpoint stores: the SentencePiece model."""
        return self.model_proto

    def bundle_files(self) -> dict[str, bytes]:
        return {"sentencepiece.model": self.model_proto}


class SplitTokenizer:
    """Source and target SentencePiece models over a vocabulary: Marian's shared piece -> id map,
    or an imported CTranslate2 model's token lists (see app.engine.tokenizer.SplitTokenizer,
    which does the work)."""

    FILES = {"source": "source.spm", "target": "target.spm", "vocab": "vocab.json"}

    def __init__(self, source: bytes, target: bytes, vocab: dict[str, int]) -> None:
        self.protos = {"source": source, "target": target}
        self.engine = engine_tokenizer.SplitTokenizer(source, target, vocab)

    @property
    def vocab_size(self) -> int:
        return self.engine.vocab_size

    def encode(self, text: str) -> list[int]:
        return self.engine.encode([text])[0]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self.engine.encode(texts)

    def state(self) -> dict:
        return {**self.protos, "vocab": self.engine.spec}

    def bundle_files(self) -> dict[str, bytes]:
        vocab = json.dumps(self.engine.spec, ensure_ascii=False, indent=0).encode("utf-8")
        return {
            self.FILES["source"]: self.protos["source"],
            self.FILES["target"]: self.protos["target"],
            self.FILES["vocab"]: vocab,
        }


def tokenizer_from_state(state: bytes | dict) -> Tokenizer | SplitTokenizer:
    """A checkpoint's tokenizer: a joint SentencePiece model (bytes) or split ones (a dict)."""
    if isinstance(state, dict):
        return SplitTokenizer(state["source"], state["target"], state["vocab"])
    return Tokenizer(state)
