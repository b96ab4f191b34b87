"""A Hugging Face MarianMTModel directory (OPUS-MT) -> one of our bundles.

    python -m export.marian HF_DIR --out bundles/<src>-<tgt> [--source-lang en --target-lang de]
        [--variants fp32,int8] [--sentences file] [--no-verify]

Reads the directory alone (config.json, model.safetensors or pytorch_model.bin, source.spm,
target.spm, vocab.json; no hub, no network), maps the weights onto our Transformer, checks that
both compute the same logits, and writes a normal bundle through export.bundle.write_bundle, with
the usual parity check (export.verify) recorded in the manifest. Needs torch and transformers.

What Marian does differently becomes ModelConfig options: the feed-forward activation (swish in
most OPUS-MT models), the positional table's layout (sines in the first half of the dimensions,
cosines in the second), the output bias (final_logits_bias), the decoder's start token (pad) and
the tokenizers (source and target SentencePiece models over one shared vocabulary, vocab.json).
The rest is our architecture: post-norm layers, embeddings scaled by sqrt(d_model), one embedding
matrix for source, target and output. A model that differs elsewhere is refused with a message
naming the config field (or file) at fault.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from model.checkpoint import save_checkpoint
from model.config import ModelConfig
from model.tokenizer import SplitTokenizer
from model.transformer import Transformer

ACTIVATIONS = {"relu": "relu", "swish": "swish", "silu": "swish", "gelu": "gelu"}
POSITIONS_KEYS = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight")
LOGIT_TOLERANCE = 1e-4  # max |logit difference| between the mapped model and Transformers'


class UnsupportedModel(ValueError):
    """A Marian model whose architecture ours cannot express; the message names the field."""


# ---------------------------------------------------------------- the weight map


def _attention_map(ours: str, theirs: str) -> dict[str, str]:
    names = {"w_q": "q_proj", "w_k": "k_proj", "w_v": "v_proj", "w_o": "out_proj"}
    params = ("weight", "bias")
    return {f"{theirs}.{hf}.{p}": f"{ours}.{w}.{p}" for w, hf in names.items() for p in params}


def _norm_map(ours: str, theirs: str) -> dict[str, str]:
    return {f"{theirs}.{p}": f"{ours}.norm.{p}" for p in ("weight", "bias")}


def _ffn_map(ours: str, theirs: str) -> dict[str, str]:
    return {f"{theirs}.fc{i}.{p}": f"{ours}.w_{i}.{p}" for i in (1, 2) for p in ("weight", "bias")}


def weight_map(config: ModelConfig) -> dict[str, str]:
    """Marian state-dict key -> our state-dict key, for every trained weight (the output bias
    and the position tables aside)."""
    shared = "embeddings.lut.weight"
    keys = {
        "model.shared.weight": shared,
        "model.encoder.embed_tokens.weight": shared,
        "model.decoder.embed_tokens.weight": shared,
        "lm_head.weight": shared,
    }
    for i in range(config.n_encoder_layers):
        hf, ours = f"model.encoder.layers.{i}", f"encoder_layers.{i}"
        keys |= _attention_map(f"{ours}.self_attn", f"{hf}.self_attn")
        keys |= _norm_map(f"{ours}.attn_norm", f"{hf}.self_attn_layer_norm")
        keys |= _ffn_map(f"{ours}.feed_forward", hf)
        keys |= _norm_map(f"{ours}.ff_norm", f"{hf}.final_layer_norm")
    for i in range(config.n_decoder_layers):
        hf, ours = f"model.decoder.layers.{i}", f"decoder_layers.{i}"
        keys |= _attention_map(f"{ours}.self_attn", f"{hf}.self_attn")
        keys |= _norm_map(f"{ours}.self_norm", f"{hf}.self_attn_layer_norm")
        keys |= _attention_map(f"{ours}.cross_attn", f"{hf}.encoder_attn")
        keys |= _norm_map(f"{ours}.cross_norm", f"{hf}.encoder_attn_layer_norm")
        keys |= _ffn_map(f"{ours}.feed_forward", hf)
        keys |= _norm_map(f"{ours}.ff_norm", f"{hf}.final_layer_norm")
    return keys


def generation_config(config, **overrides):
    """Plain greedy/beam decoding as our engine does it: no sampling, no repetition rules, no
    forced or banned tokens, starting from the decoder start token, stopping at EOS."""
    from transformers import GenerationConfig

    settings = dict(
        decoder_start_token_id=config.decoder_start_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        forced_eos_token_id=None,
        forced_bos_token_id=None,
        bad_words_ids=None,
        do_sample=False,
        num_beams=1,
        repetition_penalty=1.0,
        no_repeat_ngram_size=0,
        length_penalty=1.0,
        min_length=0,
    )
    settings.update(overrides)
    return GenerationConfig(**settings)


# ---------------------------------------------------------------- reading the directory


def _refuse(field: str, why: str) -> UnsupportedModel:
    return UnsupportedModel(f"{field}: {why}; this model cannot be imported")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _refuse(path.name, f"missing in {path.parent}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _refuse(path.name, f"not valid JSON ({exc})") from None


def check_config(cfg: dict[str, Any]) -> None:
    """Refuse the settings our architecture cannot express (read from config.json itself, so
    keys Transformers would drop are seen too)."""
    rules = [
        ("model_type", cfg.get("model_type") == "marian", "must be 'marian'"),
        ("normalize_before", not cfg.get("normalize_before"), "pre-norm layers are not supported"),
        ("normalize_embedding", not cfg.get("normalize_embedding"),
         "a LayerNorm on the embeddings is not supported"),
        ("add_final_layer_norm", not cfg.get("add_final_layer_norm"),
         "a final LayerNorm is not supported"),
        ("static_position_embeddings", cfg.get("static_position_embeddings", True),
         "learned positions are not supported (sinusoidal only)"),
        ("scale_embedding", cfg.get("scale_embedding") is True,
         "embeddings must be scaled by sqrt(d_model)"),
        ("share_encoder_decoder_embeddings", cfg.get("share_encoder_decoder_embeddings", True),
         "encoder and decoder must share one embedding matrix"),
        ("tie_word_embeddings", cfg.get("tie_word_embeddings", True),
         "the output projection must be the embedding matrix"),
        ("decoder_vocab_size", cfg.get("decoder_vocab_size") in (None, cfg.get("vocab_size")),
         "encoder and decoder must use one vocabulary"),
        ("decoder_attention_heads",
         cfg.get("decoder_attention_heads") == cfg.get("encoder_attention_heads"),
         "must equal encoder_attention_heads"),
        ("decoder_ffn_dim", cfg.get("decoder_ffn_dim") == cfg.get("encoder_ffn_dim"),
         "must equal encoder_ffn_dim"),
        ("activation_function", cfg.get("activation_function") in ACTIVATIONS,
         f"must be one of {sorted(ACTIVATIONS)}, got {cfg.get('activation_function')!r}"),
    ]
    for field, ok, why in rules:
        if not ok:
            raise _refuse(f"config.json {field}", why)


def read_tokenizer(hf_dir: Path) -> SplitTokenizer:
    """source.spm, target.spm and the shared vocab.json; refuses separate vocabularies and
    multi-target models (their >>xx<< language tokens need a target prefix we do not add)."""
    tok_cfg_path = hf_dir / "tokenizer_config.json"
    tok_cfg = _read_json(tok_cfg_path) if tok_cfg_path.is_file() else {}
    if tok_cfg.get("separate_vocabs") or (hf_dir / "target_vocab.json").is_file():
        raise _refuse("tokenizer_config.json separate_vocabs",
                      "separate source and target vocabularies are not supported")
    vocab = _read_json(hf_dir / "vocab.json")
    codes = [p for p in vocab if p.startswith(">>") and p.endswith("<<")]
    if codes:
        raise _refuse("vocab.json", f"multi-target models (language tokens such as {codes[0]}) "
                      "are not supported")
    spm_files = {}
    for side in ("source", "target"):
        path = hf_dir / f"{side}.spm"
        if not path.is_file():
            raise _refuse(path.name, f"missing in {hf_dir}")
        spm_files[side] = path.read_bytes()
    try:
        return SplitTokenizer(spm_files["source"], spm_files["target"], vocab)
    except (ValueError, RuntimeError) as exc:
        raise _refuse("vocab.json / *.spm", str(exc)) from None


def special_ids(cfg: dict[str, Any], vocab: dict[str, int]) -> dict[str, int]:
    """pad/eos/unk from config.json, checked against vocab.json; the decoder starts from
    decoder_start_token_id (pad in Marian). Marian has no BOS: bos_id takes config.json's
    bos_token_id when set, else EOS's id (it is only ever stripped from outputs)."""
    ids = {
        "pad_id": cfg.get("pad_token_id"),
        "eos_id": cfg.get("eos_token_id"),
        "unk_id": vocab.get("<unk>"),
        "decoder_start_id": cfg.get("decoder_start_token_id", cfg.get("pad_token_id")),
    }
    for key, value in ids.items():
        if not isinstance(value, int):
            raise _refuse(f"config.json {key.replace('_id', '_token_id')}",
                          f"must be one token id, got {value!r}")
    for piece, key in (("<pad>", "pad_id"), ("</s>", "eos_id")):
        if vocab.get(piece) != ids[key]:
            raise _refuse(f"config.json {key.replace('_id', '_token_id')}",
                          f"{ids[key]} is not the id of {piece} in vocab.json ({vocab.get(piece)})")
    bos = cfg.get("bos_token_id")
    ids["bos_id"] = bos if isinstance(bos, int) else ids["eos_id"]
    return ids


def model_config(cfg: dict[str, Any], special: dict[str, int], output_bias: bool) -> ModelConfig:
    return ModelConfig(
        vocab_size=cfg["vocab_size"],
        d_model=cfg["d_model"],
        n_heads=cfg["encoder_attention_heads"],
        n_encoder_layers=cfg["encoder_layers"],
        n_decoder_layers=cfg["decoder_layers"],
        d_ff=cfg["encoder_ffn_dim"],
        dropout=float(cfg.get("dropout", 0.1)),
        max_positions=cfg["max_position_embeddings"],
        activation=ACTIVATIONS[cfg["activation_function"]],
        positional_layout="halves",
        output_bias=output_bias,
        **special,
    )


def load_marian(hf_dir: Path):
    """Transformers' own reading of the directory (weights from safetensors or .bin)."""
    from transformers import MarianMTModel

    return MarianMTModel.from_pretrained(hf_dir, local_files_only=True).eval()


# ---------------------------------------------------------------- the mapping


def to_ours(hf, cfg: dict[str, Any], special: dict[str, int]) -> Transformer:
    """The Marian model's weights in our Transformer (eval mode)."""
    theirs = hf.state_dict()
    bias = theirs["final_logits_bias"].reshape(-1)  # (1, V) -> (V,)
    config = model_config(cfg, special, output_bias=bool(bias.any()))
    model = Transformer(config).eval()
    for key in POSITIONS_KEYS:  # our table must be Marian's sinusoidal one, not learned weights
        if key in theirs and not torch.allclose(theirs[key], model.positional.table, atol=1e-6):
            raise _refuse(key, "is not the sinusoidal table (learned positions?)")
    if not torch.equal(theirs["lm_head.weight"], theirs["model.shared.weight"]):
        raise _refuse("lm_head.weight", "differs from model.shared.weight (untied output)")
    mapping = weight_map(config)
    state = {ours: theirs[key] for key, ours in mapping.items()}
    if config.output_bias:
        state["output_bias"] = bias
    model.load_state_dict(state)  # strict: every one of our weights is set
    return model


@torch.no_grad()
def check_logits(hf, model: Transformer, seed: int = 0) -> float:
    """Teacher-forced logits of both models on random ids; raise if they differ."""
    c = model.config
    g = torch.Generator().manual_seed(seed)
    low = 0 if c.vocab_size < 8 else 2
    src = torch.randint(low, c.vocab_size - 1, (2, 7), generator=g)  # (B, S)
    src[:, -1] = c.eos_id
    src[src == c.pad_id] = c.unk_id
    tgt = torch.randint(low, c.vocab_size - 1, (2, 5), generator=g)  # (B, T)
    tgt[:, 0] = c.start_id
    theirs = hf(input_ids=src, attention_mask=torch.ones_like(src), decoder_input_ids=tgt).logits
    diff = float((model(src, tgt) - theirs).abs().max())
    if diff > LOGIT_TOLERANCE:
        raise UnsupportedModel(
            f"the mapped model's logits differ from Transformers' by {diff:.3g} "
            f"(> {LOGIT_TOLERANCE}); this Marian variant is not supported"
        )
    return diff


def import_marian(hf_dir: str | Path, checkpoint: str | Path) -> tuple[Path, dict[str, Any]]:
    """Read the directory, map it, check the logits and save one of our checkpoints."""
    hf_dir = Path(hf_dir)
    cfg = _read_json(hf_dir / "config.json")
    check_config(cfg)
    tokenizer = read_tokenizer(hf_dir)
    special = special_ids(cfg, tokenizer.engine.vocab)
    if tokenizer.vocab_size != cfg["vocab_size"]:
        raise _refuse("config.json vocab_size",
                      f"{cfg['vocab_size']} but vocab.json has {tokenizer.vocab_size} pieces")
    hf = load_marian(hf_dir)
    model = to_ours(hf, cfg, special)
    diff = check_logits(hf, model)
    tok_cfg_path = hf_dir / "tokenizer_config.json"
    tok_cfg = _read_json(tok_cfg_path) if tok_cfg_path.is_file() else {}
    beams = getattr(hf.generation_config, "num_beams", None) or 4
    recipe = {
        "imported_from": {"format": "marian", "directory": str(hf_dir.resolve()), "config": cfg},
        "logit_max_abs_diff": float(f"{diff:.3g}"),
        "source_lang": tok_cfg.get("source_lang"),
        "target_lang": tok_cfg.get("target_lang"),
        "decoding": {"beam_size": int(beams)},
    }
    return save_checkpoint(checkpoint, model, tokenizer, recipe=recipe), recipe


# ---------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m export.marian", description=__doc__.splitlines()[0])
    p.add_argument("hf_dir", type=Path, help="directory of a Transformers MarianMTModel")
    p.add_argument("--out", type=Path, required=True, help="bundle directory, e.g. bundles/en-de")
    p.add_argument("--name", help="bundle name (default: the --out directory name)")
    p.add_argument("--source-lang", help="default: tokenizer_config.json, else the name xx-yy")
    p.add_argument("--target-lang")
    p.add_argument("--variants", default="fp32,int8", help="comma list of fp32, int8, fp16")
    p.add_argument("--sentences", help="source sentences for the parity check, one per line")
    p.add_argument("--no-verify", action="store_true", help="skip the parity check")
    p.add_argument("--threads", type=int, default=0, help="parity check: ORT and torch threads")
    p.add_argument("--checkpoint", type=Path,
                   help="keep the mapped checkpoint here (for export.verify later)")
    args = p.parse_args(argv)
    from export.bundle import write_bundle
    from export.verify import verify_bundle

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = args.checkpoint or Path(tmp) / f"{args.hf_dir.resolve().name}.pt"
        try:
            import_marian(args.hf_dir, checkpoint)
        except UnsupportedModel as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        out = write_bundle(checkpoint, args.out, variants=variants, name=args.name,
                           source_lang=args.source_lang, target_lang=args.target_lang)
        print(f"wrote bundle {out} ({', '.join(variants)})")
        if args.no_verify:
            return 0
        report = verify_bundle(out, checkpoint, sentences_file=args.sentences, record=True,
                               threads=args.threads)
    print(report.summary())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
