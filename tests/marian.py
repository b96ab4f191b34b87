"""Tiny Marian (OPUS-MT layout) model directories, built locally with transformers and
sentencepiece: config.json + model.safetensors (save_pretrained), source.spm and target.spm
trained on a few toy lines each, vocab.json joining both models' pieces the way OPUS-MT does
(</s> 0, <unk> 1, ..., <pad> last), tokenizer_config.json with the languages.

The weights are briefly trained on the toy corpus (random ones repeat one token to the length
limit), with a random output bias.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import toy_pairs


@dataclass(frozen=True)
class MarianSpec:
    name: str  # the bundle name, "<src>-<tgt>"
    activation: str
    d_model: int
    heads: int
    layers: tuple[int, int]  # encoder, decoder
    ffn: int
    seed: int

    @property
    def langs(self) -> tuple[str, str]:
        source, target = self.name.split("-")
        return source, target


# two configurations of different sizes and activations (and the pairs of the pivot test)
SPECS = (
    MarianSpec("fr-en", "relu", d_model=32, heads=2, layers=(2, 2), ffn=64, seed=1),
    MarianSpec("de-es", "swish", d_model=48, heads=4, layers=(3, 2), ffn=96, seed=2),
)


def _spm(lines: list[str], size: int) -> bytes:
    import sentencepiece as spm

    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=out, vocab_size=size, model_type="unigram",
        character_coverage=1.0, hard_vocab_limit=False, minloglevel=2, num_threads=1,
    )
    return out.getvalue()


def _vocab(models: list[bytes]) -> dict[str, int]:
    import sentencepiece as spm

    vocab = {"</s>": 0, "<unk>": 1}
    for proto in models:
        sp = spm.SentencePieceProcessor(model_proto=proto)
        for i in range(sp.get_piece_size()):
            piece = sp.id_to_piece(i)
            if not (sp.is_control(i) or sp.is_unknown(i)) and piece not in vocab:
                vocab[piece] = len(vocab)
    vocab["<pad>"] = len(vocab)
    return vocab


def _train(model, source: bytes, target: bytes, vocab: dict[str, int], pairs, seed: int) -> None:
    """A short run on the toy corpus, so outputs are word-by-word translations that end at EOS
    (random weights repeat one token forever). final_logits_bias is a buffer, not trained: it is
    set to random values first, so the output bias is exercised."""
    import sentencepiece as spm
    import torch

    def ids(proto: bytes, texts: list[str]) -> list[list[int]]:
        pieces = spm.SentencePieceProcessor(model_proto=proto).encode(texts, out_type=str)
        return [[vocab.get(p, vocab["<unk>"]) for p in row] + [vocab["</s>"]] for row in pieces]

    def pad(rows: list[list[int]], value: int):
        width = max(len(r) for r in rows)
        return torch.tensor([r + [value] * (width - len(r)) for r in rows])  # (B, T)

    src = ids(source, [s for s, _ in pairs])
    tgt = ids(target, [t for _, t in pairs])
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        model.final_logits_bias.copy_(0.5 * torch.randn(model.final_logits_bias.shape, generator=g))
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    model.train()
    for _ in range(STEPS):
        rows = torch.randint(0, len(pairs), (32,), generator=g).tolist()
        input_ids = pad([src[i] for i in rows], vocab["<pad>"])
        labels = pad([tgt[i] for i in rows], -100)
        loss = model(
            input_ids=input_ids, attention_mask=input_ids.ne(vocab["<pad>"]), labels=labels
        ).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()


STEPS = 150


def make_marian_dir(spec: MarianSpec, out: Path) -> Path:
    """Write a tiny MarianMTModel directory for spec into out; returns out."""
    import torch
    from transformers import MarianConfig, MarianMTModel

    pairs = toy_pairs(300, seed=spec.seed)
    source = _spm([s for s, _ in pairs], 60)
    target = _spm([t for _, t in pairs], 60)
    vocab = _vocab([source, target])
    pad = vocab["<pad>"]
    config = MarianConfig(
        vocab_size=len(vocab), decoder_vocab_size=len(vocab), max_position_embeddings=64,
        d_model=spec.d_model, encoder_layers=spec.layers[0], decoder_layers=spec.layers[1],
        encoder_attention_heads=spec.heads, decoder_attention_heads=spec.heads,
        encoder_ffn_dim=spec.ffn, decoder_ffn_dim=spec.ffn, activation_function=spec.activation,
        scale_embedding=True, dropout=0.1, pad_token_id=pad, eos_token_id=0,
        decoder_start_token_id=pad, forced_eos_token_id=0, share_encoder_decoder_embeddings=True,
    )
    torch.manual_seed(spec.seed)
    model = MarianMTModel(config).eval()
    with torch.random.fork_rng():
        _train(model, source, target, vocab, pairs, spec.seed)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    (out / "source.spm").write_bytes(source)
    (out / "target.spm").write_bytes(target)
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    src_lang, tgt_lang = spec.langs
    (out / "tokenizer_config.json").write_text(
        json.dumps({"source_lang": src_lang, "target_lang": tgt_lang}), encoding="utf-8"
    )
    return out
