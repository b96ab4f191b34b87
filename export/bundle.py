"""Checkpoint -> bundle directory: graphs per variant, SentencePiece model, manifest, model card.

The manifest schema lives with its reader (app.engine.bundle); the bundle is validated with it
right after writing, so the exporter can never write what the service would refuse.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.engine.bundle import (
    DEFAULT_DECODING,
    FORMAT_VERSION,
    MANIFEST,
    decoding_section,
    file_entry,
    graph_names,
    load_bundle,
    sha256_file,
    variant_bytes,
)
from app.engine.tokenizer import SENTENCE_WORDS
from export.graphs import OPSET, export_graphs
from export.variants import VARIANTS, quantize_int8
from model.checkpoint import load_model
from model.config import ModelConfig
from model.tokenizer import SplitTokenizer
from model.transformer import Transformer

TOKENIZER_FILE = "sentencepiece.model"
SPLIT_FILES = SplitTokenizer.FILES
PROVIDERS = {"fp32": ["cpu", "cuda"], "int8": ["cpu"], "fp16": ["cuda"]}


def architecture(model: Transformer) -> dict[str, Any]:
    """The numbers the engine checks, plus the model options that differ from their defaults
    (the graphs carry them; export.unbundle reads them back)."""
    c = model.config
    options = {
        name: getattr(c, name)
        for name in ("activation", "positional_layout", "output_bias")
        if getattr(c, name) != ModelConfig.__dataclass_fields__[name].default
    }
    options |= {
        name: getattr(c, name)
        for name in ("pre_norm", "layer_norm_eps", "scale_embeddings", "source_vocab_size",
                     "tied_output")
        if getattr(c, name) != ModelConfig.__dataclass_fields__[name].default
    }
    return {
        "vocab_size": c.vocab_size,
        "d_model": c.d_model,
        "n_heads": c.n_heads,
        "n_encoder_layers": c.n_encoder_layers,
        "n_decoder_layers": c.n_decoder_layers,
        "d_ff": c.d_ff,
        "max_positions": c.max_positions,
        "head_dim": c.head_dim,
        "parameters": model.num_parameters(),
        **options,
    }


def _languages(name: str, state: dict[str, Any], source: str | None, target: str | None):
    """Source/target language: explicit flags, else the recipe, else the bundle name 'xx-yy'."""
    recipe = state.get("recipe") or {}
    parts = name.split("-")
    guess = (parts[0], parts[1]) if len(parts) == 2 else ("und", "und")
    return (
        source or recipe.get("source_lang") or recipe.get("src_lang") or guess[0],
        target or recipe.get("target_lang") or recipe.get("tgt_lang") or guess[1],
    )


def _decoding_defaults(state: dict[str, Any]) -> dict[str, Any]:
    recipe = state.get("recipe") or {}
    found = decoding_section(recipe) if isinstance(recipe.get("decoding"), dict) else {}
    return {key: found.get(key, value) for key, value in DEFAULT_DECODING.items()}


def share_variant(out: Path, entry: dict[str, Any], variant: str) -> None:
    """Move the variant's weights into one file both graphs read (export.shared), and record
    its checksum and the graphs' new ones in the manifest entry."""
    from export.shared import store_once

    name = store_once(out, entry["encoder"]["file"], entry["decoder"]["file"], variant)
    entry.update(encoder=file_entry(out, entry["encoder"]["file"]),
                 decoder=file_entry(out, entry["decoder"]["file"]),
                 weights=file_entry(out, name))


def _write_variants(model: Transformer, out: Path, variants: list[str], per_channel: bool,
                    share: bool = False):
    """Write encoder.<variant>.onnx / decoder.<variant>.onnx; return manifest entries. share:
    each variant's weights stored once (see export.shared)."""
    entries: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = export_graphs(model, Path(tmp) / "fp32", share=share)  # (encoder, decoder)
        for variant in variants:
            settings: dict[str, Any] = {}
            if variant == "fp16":  # written in half precision, not converted
                fp16 = export_graphs(model, Path(tmp) / "fp16", float16=True, share=share)
                settings = {"precision": "fp16 weights, activations and caches; fp32 log-softmax "
                                         "and top_log_probs"}
            for graph, src in zip(("encoder", "decoder"), fp32, strict=True):
                dst = out / f"{graph}.{variant}.onnx"
                if variant == "fp32":
                    shutil.copyfile(src, dst)
                elif variant == "int8":
                    settings = {"quantization": quantize_int8(src, dst, per_channel)}
                else:
                    shutil.copyfile(fp16[0 if graph == "encoder" else 1], dst)
            entries[variant] = {
                "encoder": file_entry(out, f"encoder.{variant}.onnx"),
                "decoder": file_entry(out, f"decoder.{variant}.onnx"),
                "providers": PROVIDERS[variant],
                **settings,
            }
            if share:
                share_variant(out, entries[variant], variant)
    if "fp16" in entries:
        entries["fp16"]["note"] = "for the CUDA provider (docs/cuda.md: quality and speed on a GPU)"
    return entries


def write_bundle(
    checkpoint: str | Path,
    out_dir: str | Path,
    variants: list[str] | tuple[str, ...] = ("fp32", "int8"),
    name: str | None = None,
    source_lang: str | None = None,
    target_lang: str | None = None,
    per_channel: bool = True,
    share: bool = False,
    capitalize_lowercase: bool = False,
) -> Path:
    """Export checkpoint into out_dir (created; existing bundle files are overwritten). share:
    each variant's weights in one file that both graphs read, the embedding stored once
    (export.shared; imported bundles are written so). capitalize_lowercase: the engine
    capitalises sources typed all in lower case that read as sentences, and translates those
    written in capitals in sentence case (app.engine.bundle), for a model trained on written
    text."""
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown or not variants:
        raise ValueError(f"unknown variants {unknown}; choose from {list(VARIANTS)}")
    model, tokenizer, state = load_model(checkpoint)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = name or out.resolve().name
    src_lang, tgt_lang = _languages(name, state, source_lang, target_lang)
    files = tokenizer.bundle_files()
    for file, data in files.items():
        (out / file).write_bytes(data)
    entries = {file: file_entry(out, file) for file in files}
    split = len(files) > 1  # source.spm, target.spm, vocab.json
    c = model.config
    special = {"pad_id": c.pad_id, "bos_id": c.bos_id, "eos_id": c.eos_id, "unk_id": c.unk_id}
    if c.decoder_start_id is not None:
        special["decoder_start_id"] = c.decoder_start_id
    manifest = {
        "format_version": FORMAT_VERSION,
        "name": name,
        "source_lang": src_lang,
        "target_lang": tgt_lang,
        "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "architecture": architecture(model),
        "special_tokens": special,
        "tokenizer": (
            {key: entries[name] for key, name in SPLIT_FILES.items()}
            if split
            else entries[TOKENIZER_FILE]
        ),
        "graphs": {
            "opset": OPSET,
            **graph_names(c.n_decoder_layers),
        },
        "variants": _write_variants(model, out, list(variants), per_channel, share),
        "default_variant": "fp32" if "fp32" in variants else variants[0],
        "decoding": _decoding_defaults(state),
        "capitalize_lowercase": capitalize_lowercase,
        "scores": {},
        "training": state.get("recipe"),
        "training_log": state.get("history"),
        "checkpoint": {
            "file": Path(checkpoint).name,
            "sha256": sha256_file(checkpoint),
            "step": state.get("step"),
            "epoch": state.get("epoch"),
            "train_minutes": state.get("train_minutes"),
            "machines": state.get("machines"),
            "averaged_from": state.get("averaged_from"),
        },
    }
    save_manifest(out, manifest)
    for variant in manifest["variants"]:
        load_bundle(out, variant)  # the reader's own checks
    return out


CAPITALIZED = ("A source typed all in lower case that reads as a sentence "
               f"({SENTENCE_WORDS} words or more, letters only, not an infinitive) has its "
               "first letter and the pronoun \"i\" capitalised before it is translated, and "
               f"one written all in capitals ({SENTENCE_WORDS} words or more) is translated in "
               "sentence case and given back in capitals (`capitalize_lowercase`): the model "
               "learned from written text.")


MASKED = ("Symbols the model does not copy (`python -m export.symbols`: each lost in a short "
          "sentence) are masked before it and put back where it puts the mask "
          "(`masked_symbols`): {}")


def save_manifest(bundle_dir: str | Path, manifest: dict[str, Any]) -> None:
    """Write manifest.json and regenerate MODEL_CARD.md from it."""
    out = Path(bundle_dir)
    text = json.dumps(manifest, indent=2, ensure_ascii=False, default=str) + "\n"
    (out / MANIFEST).write_text(text, encoding="utf-8")
    (out / "MODEL_CARD.md").write_text(model_card(manifest, out), encoding="utf-8")


def _variant_rows(manifest: dict[str, Any], out: Path) -> list[str]:
    rows = [
        "| variant | providers | encoder + decoder size | greedy agreement with PyTorch "
        "| max log-prob diff | tokens/s (greedy, one batch) |",
        "|---|---|---|---|---|---|",
    ]
    for variant, entry in manifest["variants"].items():
        size = variant_bytes(out, entry)
        check = entry.get("verification") or {}
        agreement = check.get("greedy_agreement")
        rows.append(
            f"| {variant} | {', '.join(entry['providers'])} | {size / 1e6:.1f} MB | "
            f"{'untested' if agreement is None else f'{agreement:.1%}'} | "
            f"{check.get('max_abs_logprob_diff', 'untested')} | "
            f"{check.get('tokens_per_s', 'untested')} |"
        )
    return rows


def _measured(scores: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(variant, decoding mode, metrics) of a scores section; other entries (the test set's
    description) are skipped."""
    return [
        (variant, mode, m)
        for variant, modes in scores.items()
        if isinstance(modes, dict) and variant != "test_set"
        for mode, m in modes.items()
        if isinstance(m, dict) and "bleu" in m
    ]


def _score_rows(scores: dict[str, Any]) -> list[str]:
    """The evaluation table: BLEU, chrF and speed per variant and decoding mode."""
    rows = _measured(scores)
    if not rows:
        return [
            "Not measured yet (`scores` in manifest.json is filled by `python -m export.evaluate`)."
        ]
    test = scores.get("test_set", {})
    lines = [
        f"Test set: `{test.get('data', '?')}` ({test.get('sentences', '?')} sentences), "
        "each line translated whole by the ONNX Runtime engine with the service's decoding (the "
        "service cuts a line of several sentences first).",
        "",
        "| variant | decoding | BLEU | chrF | target tokens/s |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {v} | {mode} | {m['bleu']:.2f} | {m['chrf']:.2f} | {m.get('tokens_per_s', '?')} |"
        for v, mode, m in rows
    ]
    first = rows[0][2]
    lines += [
        "",
        f"sacreBLEU signatures: BLEU `{first.get('bleu_signature')}`, "
        f"chrF `{first.get('chrf_signature')}`.",
    ]
    return lines


HURRIED = " typed in a hurry (lower case, no final mark)"


def _domain_rows(domains: dict[str, Any] | None) -> list[str]:
    """Scores per domain of the corpus (each domain's own test split)."""
    if not domains:
        return []
    lines = [
        "",
        "By domain (each domain's own test split):",
        "",
        "| domain | test set | sentences | variant | decoding | BLEU | chrF |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {domain} | `{row.get('data')}`{HURRIED if row.get('hurried') else ''} "
        f"| {row.get('sentences')} | {variant} | {mode} | "
        f"{m['bleu']:.2f} | {m['chrf']:.2f} |"
        for domain, row in domains.items()
        for variant, mode, m in _measured(row)
    ]
    return lines


def _example_rows(examples: dict[str, Any] | None) -> list[str]:
    """Real outputs for a fixed list of everyday sentences."""
    if not examples:
        return []
    lines = [
        "## Everyday examples",
        "",
        f"The sentences of `{examples.get('file')}` (a fixed list, written before the model's "
        f"results were seen), translated by the {examples.get('variant')} variant with beam "
        f"{examples.get('beam_size')}"
        + (" reranked by the language model" if examples.get("reranked") else "")
        + "; outputs as the model gives them, unedited.",
        "",
        "| English | model output |",
        "|---|---|",
    ]
    lines += [f"| {r['source']} | {r['translation']} |" for r in examples.get("rows", [])]
    return [*lines, ""]


def _curve_rows(history: list[dict[str, Any]], manifest: dict[str, Any]) -> list[str]:
    """The training log's evaluations: the loss and dev BLEU curve."""
    if not history:
        return []
    checkpoint = manifest.get("checkpoint") or {}
    scored_on = (manifest.get("scores") or {}).get("test_set", {}).get("machine")
    machine = ", then ".join(checkpoint.get("machines") or []) or scored_on or "unknown machine"
    minutes = checkpoint.get("train_minutes")
    took = f"{minutes:.0f} minutes of training" if minutes else "training time not recorded"
    lines = [
        f"Trained on {machine} until step {checkpoint.get('step')} (epoch "
        f"{checkpoint.get('epoch')}), {took} (wall time, evaluations included, summed over "
        "resumed runs); the shipped weights average "
        f"{len(checkpoint.get('averaged_from') or []) or 1} checkpoints.",
        "",
        "Validation during training (greedy dev BLEU on a dev prefix, PyTorch):",
        "",
        "| step | epoch | minutes | train loss | dev loss | dev BLEU | dev chrF |",
        "|---|---|---|---|---|---|---|",
    ]
    for h in history:
        lines.append(
            f"| {h.get('step')} | {h.get('epoch')} | {h.get('minutes')} | {h.get('train_loss')} "
            f"| {h.get('dev_loss')} | {h.get('dev_bleu')} | {h.get('dev_chrf')} |"
        )
    return [*lines, ""]


def _data_rows(data: dict[str, Any] | None) -> list[str]:
    """Where the training data came from, and its licences."""
    if not data:
        return []
    lines = ["## Data", "", data.get("description", ""), ""]
    counts = data.get("counts") or {}
    if counts:
        lines += [", ".join(f"{k}: {v:,} pairs" for k, v in counts.items()), ""]
    top = data.get("top_sources") or []
    if top:
        lines += ["| source | pairs (new, unique) | licence |", "|---|---|---|"]
        lines += [f"| {t['source']} | {t['pairs']:,} | {t['licence']} |" for t in top]
        lines.append("")
    if data.get("licences"):
        lines += [
            f"Licences of all {data.get('packages', '?')} source packages: "
            + ", ".join(f"{k} ({v})" for k, v in data["licences"].items()),
            "",
        ]
    return lines


def _tokenizer_line(entry: dict[str, Any]) -> str:
    if "file" in entry:
        return f"SentencePiece, `{entry['file']}`"
    return (
        f"source SentencePiece `{entry['source']['file']}`, target `{entry['target']['file']}`, "
        f"shared ids `{entry['vocab']['file']}`"
    )


def _options_line(a: dict[str, Any]) -> str:
    return (
        f"- {'pre-norm layers with final LayerNorms' if a.get('pre_norm') else 'post-norm layers'}"
        f", feed-forward activation {a.get('activation', 'relu')}, positions "
        f"{a.get('positional_layout', 'interleaved')}"
        + (", unscaled embeddings" if a.get("scale_embeddings") is False else "")
        + (f", a separate source vocabulary of {a['source_vocab_size']}"
           if a.get("source_vocab_size") else "")
        + (", an output projection of its own" if a.get("tied_output") is False else "")
        + (", output bias" if a.get("output_bias") else "")
    )


def _provenance_rows(source: dict[str, Any] | None) -> list[str]:
    """Where an imported model came from (export.argos fills `imported_from`)."""
    if not source:
        return []
    rows = ["## Provenance", ""]
    rows += [f"- {key.replace('_', ' ')}: {value}" for key, value in source.items()
             if isinstance(value, str | int | float) and value != ""]
    return [*rows, ""]


def _import_check_rows(checks: dict[str, Any] | None) -> list[str]:
    """An imported bundle's agreement checks (export.argos fills `import_checks`)."""
    if not checks:
        return []
    rows = ["## Import checks", "", f"On {checks.get('texts')}:", ""]
    names = {"int8_vs_fp32": "int8 against fp32",
             "fp32_vs_ctranslate2": "fp32 against CTranslate2 on the package's model"}
    for key, label in names.items():
        found = checks.get(key)
        if found:
            rows.append(f"- {label}, {found['decoding']}: {found['identical']} of "
                        f"{found['sentences']} translations identical ({found['rate']:.1%})")
    return [*rows, ""]


def _tuning_rows(tuning: dict[str, Any] | None) -> list[str]:
    """How the default length penalty was chosen (python -m export.evaluate
    --tune-length-penalty), when it was."""
    if not tuning:
        return []
    tried = ", ".join(f"{v}: {b:.2f}" for v, b in tuning.get("bleu", {}).items())
    return ["", f"The length penalty was chosen on `{tuning.get('data')}` "
                f"({tuning.get('sentences')} sentences, {tuning.get('variant')}, beam "
                f"{tuning.get('beam_size')}), BLEU per value tried: {tried}; a value replaces "
                f"the previous default only when it gains at least {tuning.get('min_gain', 0)} "
                "BLEU."]


def _rerank_rows(rerank: dict[str, Any] | None) -> list[str]:
    """The reranking language model (export.lm), when the bundle has one."""
    if not rerank:
        return []
    m = rerank.get("model", {})
    if m.get("kind") == "ngram":
        weights = ", ".join(f"{d} {w:g}" for d, w in m.get("domain_weights", {}).items())
        what = (f"a {m.get('order', '?')}-gram Kneser-Ney model of the translation model's "
                f"pieces, counted on `{m.get('corpus', '?')}` ({m.get('sentences', '?')} "
                f"sentences{'; domains weighted ' + weights if weights else ''}), "
                f"{sum(m.get('ngrams', [])):,} n-grams")
    else:
        shape = m.get("shape", {})
        what = (f"{shape.get('n_layers', '?')} layers, d_model {shape.get('d_model', '?')}, "
                f"trained {m.get('step', '?')} steps, dev perplexity "
                f"{m.get('dev_perplexity', '?')}")
    lines = ["", f"Reranking: the {rerank['candidates']} best hypotheses of the beam are ranked "
             f"again by their score plus {rerank['weight']} x the log-probability per token of a "
             f"language model of the target language (`{rerank['language_model']['file']}`, "
             f"{what}; a decoding named \"+lm\" below). A hypothesis that lost a name or "
             f"number the best one copied from the source ranks after those that kept them."
             + ("" if rerank["weight"] else " Its weight is 0: the engine does not rerank.")]
    tuning = rerank.get("tuning")
    if tuning:
        tried = ", ".join(f"{w}: {b:.2f}" for w, b in tuning.get("bleu", {}).items())
        data = ", ".join(f"`{d}`" for d in tuning.get("data", []))
        lines.append(f"The weight was chosen on {data} ({tuning.get('sentences')} sentences, "
                     f"{tuning.get('variant')}, beam {tuning.get('beam_size')}), BLEU per weight "
                     f"tried: {tried}; a weight is kept only when it gains at least "
                     f"{tuning.get('min_gain', 0)} BLEU over none.")
    return lines


def model_card(manifest: dict[str, Any], out: Path) -> str:
    """MODEL_CARD.md filled from the manifest: what is known, and 'not measured' where not."""
    a = manifest["architecture"]
    score_lines = _score_rows(manifest.get("scores") or {})
    training = manifest.get("training")
    training_lines = (
        ["```json", json.dumps(training, indent=2, ensure_ascii=False, default=str), "```"]
        if training
        else ["The checkpoint carried no training recipe."]
    )
    d = decoding_section(manifest)
    lines = [
        f"# Model card: {manifest['name']}",
        "",
        f"Machine translation from `{manifest['source_lang']}` to `{manifest['target_lang']}`: an "
        + ("encoder-decoder Transformer imported from an Argos Translate / CTranslate2 model "
           "(provenance and architecture below)" if manifest.get("imported_from") else
           "encoder-decoder Transformer (post-norm, sinusoidal positions, shared SentencePiece "
           "vocabulary and tied embeddings)")
        + ", exported to ONNX with an incremental KV-cache decoder.",
        "",
        *_provenance_rows(manifest.get("imported_from")),
        *_import_check_rows(manifest.get("import_checks")),
        "## Architecture",
        "",
        f"- {a['n_encoder_layers']} encoder + {a['n_decoder_layers']} decoder layers, "
        f"d_model {a['d_model']}, {a['n_heads']} heads, d_ff {a['d_ff']}",
        f"- vocabulary {a['vocab_size']} ({_tokenizer_line(manifest['tokenizer'])}), "
        f"at most {a['max_positions']} positions",
        _options_line(a),
        f"- {a.get('parameters', 'unknown')} parameters",
        "",
        "## Variants",
        "",
        *_variant_rows(manifest, out),
        "",
        "## Decoding defaults",
        "",
        f"beam size {d['beam_size']}, length penalty {d['length_penalty']}, at most "
        f"{d['max_len_offset']} + {d['max_len_ratio']} x source tokens generated.",
        *_tuning_rows(manifest.get("decoding_tuning")),
        *_rerank_rows(manifest.get("rerank")),
        *([CAPITALIZED] if manifest.get("capitalize_lowercase") else []),
        *([MASKED.format(manifest["masked_symbols"])] if manifest.get("masked_symbols") else []),
        "",
        "## Evaluation",
        "",
        *score_lines,
        *_domain_rows(manifest.get("domain_scores")),
        "",
        *_example_rows(manifest.get("examples")),
        "## Training",
        "",
        *_curve_rows(manifest.get("training_log") or [], manifest),
        *training_lines,
        "",
        *_data_rows(manifest.get("data")),
        "",
        "## Intended use and limits",
        "",
        manifest.get("limitations")
        or "Sentence-level translation of short texts in the domain of the training corpus. "
        "Inputs longer than the position table are truncated. Quality outside the training "
        "domain is unknown; check the scores above before relying on it.",
        "",
    ]
    return "\n".join(lines)
