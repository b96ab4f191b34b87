"""One of our checkpoints -> a Hugging Face MarianMTModel and CTranslate2 models (fp32, int8),
with a greedy parity check against model.search.greedy_search.

    python -m bench.convert --checkpoint runs/en-de/averaged.pt --out /tmp/peers \\
        [--sentences data/en-de/test.en --limit 200] [--threads 2]

writes OUT/hf (save_pretrained + the SentencePiece model), OUT/ct2-fp32, OUT/ct2-int8 and prints
the parity of each against PyTorch: fp32 must give token ids identical to ours on every sentence
(exit 1 otherwise); int8 reports its agreement.

The mapping. Our model is the paper's Transformer, and so is Marian: post-norm layers
(LayerNorm(x + sublayer(x)), no normalize_before), ReLU feed-forward, embeddings scaled by
sqrt(d_model), sinusoidal positions, no layernorm_embedding, no final LayerNorm, one shared
embedding matrix for source, target and output projection (final_logits_bias zero). Differences,
and how they are bridged:

- positions: Marian's table puts sin in the first half of the dimensions and cos in the second;
  ours interleaves them (sin on even, cos on odd dimensions). Our table is copied into both
  embed_positions weights. Transformers leaves these weights out of save_pretrained (it rebuilds
  them in Marian's layout on load), so `save_hf` saves them anyway and `load_hf` checks they
  came back.
- special ids: ours are pad 0, BOS 1, EOS 2, unk 3; the decoder starts from BOS
  (decoder_start_token_id = 1) and sources end with EOS. Marian's generation defaults that would
  change decoding (forced_eos_token_id, bad_words_ids, max_length) are cleared.
- CTranslate2: its Marian loader assumes a Marian vocabulary (it drops the last vocabulary row as
  Transformers' extra <pad>) and decoding from a zero embedding (start_from_zero_embedding). Ours
  has neither, so `NmtMarianLoader` keeps the Bart/Marian weight mapping but starts the decoder
  from the BOS embedding, takes the vocabulary from our SentencePiece model (pieces in id order)
  and sets add_source_eos, so callers pass SentencePiece pieces without EOS, like our engine.
  CTranslate2 stops at EOS and leaves it out of the result; min_decoding_length must be 0 (its
  default 1 forbids an empty output, which our search allows).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm
import torch

from bench.common import output_limit, read_lines
from export.marian import POSITIONS_KEYS, generation_config, weight_map
from model.checkpoint import load_model
from model.search import greedy_search
from model.transformer import Transformer

HF_DIR, CT2_FP32_DIR, CT2_INT8_DIR = "hf", "ct2-fp32", "ct2-int8"
TOKENIZER_FILE = "sentencepiece.model"


# ---------------------------------------------------------------- Hugging Face Marian


def marian_config(model: Transformer):
    from transformers import MarianConfig

    c = model.config
    return MarianConfig(
        vocab_size=c.vocab_size,
        decoder_vocab_size=c.vocab_size,
        max_position_embeddings=c.max_positions,
        d_model=c.d_model,
        encoder_layers=c.n_encoder_layers,
        decoder_layers=c.n_decoder_layers,
        encoder_attention_heads=c.n_heads,
        decoder_attention_heads=c.n_heads,
        encoder_ffn_dim=c.d_ff,
        decoder_ffn_dim=c.d_ff,
        activation_function="relu",
        scale_embedding=True,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        encoder_layerdrop=0.0,
        decoder_layerdrop=0.0,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        pad_token_id=c.pad_id,
        bos_token_id=c.bos_id,
        eos_token_id=c.eos_id,
        decoder_start_token_id=c.bos_id,
        forced_eos_token_id=None,
    )


def check_marian_architecture(hf) -> None:
    """The Marian settings that make it our architecture; raise if one is off."""
    cfg = hf.config
    checks = {
        "scale_embedding": cfg.scale_embedding is True,
        "activation_function relu": cfg.activation_function == "relu",
        "normalize_before absent or False": not getattr(cfg, "normalize_before", False),
        "no layernorm_embedding": not any("layernorm_embedding" in k for k in hf.state_dict()),
        "no final encoder/decoder LayerNorm": not any(
            k.startswith(("model.encoder.layer_norm", "model.decoder.layer_norm"))
            for k in hf.state_dict()
        ),
        "final_logits_bias zero": not hf.final_logits_bias.any(),
        "embeddings tied": hf.lm_head.weight.data_ptr()
        == hf.model.shared.weight.data_ptr()
        == hf.model.encoder.embed_tokens.weight.data_ptr()
        == hf.model.decoder.embed_tokens.weight.data_ptr(),
    }
    failed = [name for name, ok in checks.items() if not ok]
    if failed:
        raise ValueError(f"the Marian model does not match our architecture: {failed}")


def to_marian(model: Transformer):
    """Our Transformer -> an equivalent transformers.MarianMTModel (eval mode, fp32)."""
    from transformers import MarianMTModel

    hf = MarianMTModel(marian_config(model)).eval()
    ours = model.state_dict()
    mapping = weight_map(model.config)
    theirs = hf.state_dict()
    unmapped = set(theirs) - set(mapping) - {"final_logits_bias", *POSITIONS_KEYS}
    unused = {k for k in ours if k not in set(mapping.values())}
    if unmapped or unused:
        raise ValueError(f"weight map incomplete: Marian {sorted(unmapped)}, ours {sorted(unused)}")
    table = model.positional.table  # (P, D): sin on even, cos on odd dimensions
    with torch.no_grad():
        for key, tensor in theirs.items():
            if key in mapping:
                tensor.copy_(ours[mapping[key]])
            elif key in POSITIONS_KEYS:
                tensor.copy_(table)
            else:  # final_logits_bias
                tensor.zero_()
    hf.generation_config = generation_config(hf.config)
    check_marian_architecture(hf)
    return hf


def save_hf(hf, out: Path, tokenizer_proto: bytes) -> Path:
    """save_pretrained, keeping our position tables (Transformers skips them by default)."""
    out.mkdir(parents=True, exist_ok=True)
    hf._keys_to_ignore_on_save = None
    hf.save_pretrained(out)
    (out / TOKENIZER_FILE).write_bytes(tokenizer_proto)
    return out


def load_hf(path: Path, table: torch.Tensor | None = None):
    """from_pretrained, then check that our position table came back (not Marian's own)."""
    from safetensors import safe_open
    from transformers import MarianMTModel

    hf = MarianMTModel.from_pretrained(path).eval()
    if table is None:
        with safe_open(str(path / "model.safetensors"), framework="pt") as f:
            table = f.get_tensor(POSITIONS_KEYS[0])
    state = hf.state_dict()
    for key in POSITIONS_KEYS:
        if not torch.equal(state[key], table):
            raise ValueError(f"{path}: {key} is not the saved position table")
    check_marian_architecture(hf)
    return hf


# ---------------------------------------------------------------- CTranslate2


def ct2_loader(pieces: list[str], bos: str, eos: str, unk: str):
    """CTranslate2's Marian loader, adjusted to our conventions (see the module docstring)."""
    from ctranslate2.converters.transformers import BartLoader, MarianMTLoader

    class NmtMarianLoader(MarianMTLoader):
        def get_model_spec(self, model):
            model.config.normalize_before = False
            model.config.normalize_embedding = False  # no layernorm_embedding
            return BartLoader.get_model_spec(self, model)  # without _remove_pad_weights

        def set_decoder(self, spec, decoder):
            BartLoader.set_decoder(self, spec, decoder)  # start_from_zero_embedding stays False

        def get_vocabulary(self, model, tokenizer):
            return list(pieces)

        def set_config(self, config, model, tokenizer):
            config.bos_token, config.eos_token, config.unk_token = bos, eos, unk
            config.decoder_start_token = pieces[model.config.decoder_start_token_id]
            config.add_source_eos = True
            config.layer_norm_epsilon = 1e-5  # torch.nn.LayerNorm's

    return NmtMarianLoader()


def convert_ct2(hf, sp: spm.SentencePieceProcessor, out: Path, quantization: str) -> Path:
    """The in-memory Marian model -> a CTranslate2 model directory (quantization float32/int8)."""
    import ctranslate2

    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    if len(set(pieces)) != len(pieces):
        raise ValueError("SentencePiece pieces are not unique; CTranslate2 needs a unique vocab")
    special = [pieces[i] for i in (sp.bos_id(), sp.eos_id(), sp.unk_id())]
    loader = ct2_loader(pieces, *special)

    class Converter(ctranslate2.converters.Converter):
        def _load(self):
            with torch.no_grad():
                return loader(hf, None)

    Converter().convert(str(out), quantization=quantization, force=True)
    return out


def convert(checkpoint: Path, out: Path) -> dict[str, Path]:
    """Write OUT/hf, OUT/ct2-fp32 and OUT/ct2-int8; return their paths.

    Without CTranslate2 installed only OUT/hf is written (bench.run skips the ct2 engines)."""
    model, tokenizer, _ = load_model(checkpoint)
    sp = spm.SentencePieceProcessor(model_proto=tokenizer.model_proto)
    hf = to_marian(model)
    paths = {"hf": save_hf(hf, out / HF_DIR, tokenizer.model_proto)}
    if importlib.util.find_spec("ctranslate2") is None:
        return paths
    for name, quant in ((CT2_FP32_DIR, "float32"), (CT2_INT8_DIR, "int8")):
        paths[name] = convert_ct2(hf, sp, out / name, quant)
        (out / name / TOKENIZER_FILE).write_bytes(tokenizer.model_proto)
    return paths


# ---------------------------------------------------------------- greedy decoding of the peers


def limits_for(sources: list[list[int]], max_positions: int, a: int = 10, b: float = 1.5):
    return [output_limit(len(s), a, b, max_positions) for s in sources]


def _groups_by_limit(limits: list[int], size: int) -> list[list[int]]:
    """Indices grouped by equal limit (chunks of at most size), so every call has exact limits."""
    by_limit: dict[int, list[int]] = {}
    for i, limit in enumerate(limits):
        by_limit.setdefault(limit, []).append(i)
    return [g[s : s + size] for g in by_limit.values() for s in range(0, len(g), size)]


@torch.no_grad()
def hf_greedy(hf, sources: list[list[int]], limits: list[int], batch: int = 32) -> list[list[int]]:
    """Greedy ids (no BOS/EOS) of the Marian model, each source with its exact length limit."""
    cfg = hf.config
    out: list[list[int]] = [[] for _ in sources]
    for group in _groups_by_limit(limits, batch):
        rows = [sources[i] + [cfg.eos_token_id] for i in group]
        width = max(len(r) for r in rows)
        ids = torch.tensor([r + [cfg.pad_token_id] * (width - len(r)) for r in rows])  # (B, S)
        generated = hf.generate(
            input_ids=ids,
            attention_mask=ids.ne(cfg.pad_token_id),
            generation_config=generation_config(cfg, max_new_tokens=limits[group[0]]),
        )  # (B, 1 + T): decoder start, tokens, EOS, pads
        for i, row in zip(group, generated[:, 1:].tolist(), strict=True):
            out[i] = strip_eos(row, cfg.eos_token_id)
    return out


def strip_eos(row: list[int], eos: int) -> list[int]:
    return row[: row.index(eos)] if eos in row else row


def ct2_translate(translator, pieces: list[str], sources, limits, beam: int, batch: int = 32):
    """Ids (no BOS/EOS) from a CTranslate2 translator, each source with its exact limit."""
    index = {p: i for i, p in enumerate(pieces)}
    out: list[list[int]] = [[] for _ in sources]
    for group in _groups_by_limit(limits, batch):
        results = translator.translate_batch(
            [[pieces[t] for t in sources[i]] for i in group],
            beam_size=beam,
            max_decoding_length=limits[group[0]],
            min_decoding_length=0,
            max_input_length=0,
        )
        for i, r in zip(group, results, strict=True):
            out[i] = [index[p] for p in r.hypotheses[0]]
    return out


# ---------------------------------------------------------------- parity


@dataclass
class Parity:
    name: str
    identical: int
    total: int
    token_agreement: float  # share of reference tokens matched position by position
    must_match: bool

    @property
    def ok(self) -> bool:
        return self.identical == self.total or not self.must_match

    def line(self) -> str:
        verdict = "OK" if self.ok else "FAIL"
        if not self.must_match:
            verdict = "reported"
        return (
            f"{self.name:9} greedy identical to PyTorch on {self.identical}/{self.total} "
            f"sentences ({100 * self.identical / max(1, self.total):.1f}%), token agreement "
            f"{100 * self.token_agreement:.1f}%  [{verdict}]"
        )


def compare(name: str, ref: list[list[int]], got: list[list[int]], must_match: bool) -> Parity:
    pairs = list(zip(ref, got, strict=True))
    same = sum(r == g for r, g in pairs)
    matched = sum(sum(a == b for a, b in zip(r, g, strict=False)) for r, g in pairs)
    total_tokens = sum(max(len(r), len(g)) for r, g in pairs)
    return Parity(name, same, len(ref), matched / max(1, total_tokens), must_match)


def greedy_reference(model: Transformer, sources: list[list[int]]) -> list[list[int]]:
    """greedy_search in batches of 32 sorted by source length, with its default length rule
    (10 + 1.5 x source length, the same as `limits_for`); rows come back in input order."""
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    ref: list[list[int]] = [[] for _ in sources]
    for start in range(0, len(order), 32):
        chunk = order[start : start + 32]
        for i, ids in zip(chunk, greedy_search(model, [sources[i] for i in chunk]), strict=True):
            ref[i] = ids
    return ref


def check_parity(
    checkpoint: Path, paths: dict[str, Path], texts: list[str], threads: int = 2
) -> list[Parity]:
    """Greedy ids of the HF model (saved and reloaded) and both CTranslate2 models against
    model.search.greedy_search, with the same per-sentence length limits."""
    import ctranslate2

    model, tokenizer, _ = load_model(checkpoint)
    max_positions = model.config.max_positions
    sources = [ids[: max_positions - 1] for ids in tokenizer.encode_batch(texts)]
    limits = limits_for(sources, max_positions)
    ref = greedy_reference(model, sources)
    results = [
        compare(
            "hf-fp32",
            ref,
            hf_greedy(load_hf(paths["hf"], model.positional.table), sources, limits),
            True,
        )
    ]
    sp = spm.SentencePieceProcessor(model_proto=tokenizer.model_proto)
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    for name, key, compute in (
        ("ct2-fp32", CT2_FP32_DIR, "float32"),
        ("ct2-int8", CT2_INT8_DIR, "int8"),
    ):
        translator = ctranslate2.Translator(
            str(paths[key]), device="cpu", compute_type=compute, intra_threads=threads
        )
        got = ct2_translate(translator, pieces, sources, limits, beam=1)
        results.append(compare(name, ref, got, must_match=compute == "float32"))
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True, help="directory for hf/, ct2-fp32/, ...")
    p.add_argument("--sentences", type=Path, help="parity sentences, one per line")
    p.add_argument("--limit", type=int, default=200, help="parity sentences to use (default 200)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no-parity", action="store_true")
    p.add_argument("--json", type=Path, help="write the parity results here")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    paths = convert(args.checkpoint, args.out)
    for name, path in paths.items():
        print(f"{name:9} {path}")
    if args.no_parity:
        return 0
    if args.sentences:
        texts = read_lines(args.sentences, args.limit)
    else:
        from export.verify import DEFAULT_SENTENCES

        texts = DEFAULT_SENTENCES
    results = check_parity(args.checkpoint, paths, texts, args.threads)
    for r in results:
        print(r.line())
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ | {"ok": r.ok} for r in results], indent=2))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
