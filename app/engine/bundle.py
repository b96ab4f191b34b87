"""A model bundle: a directory with manifest.json, ONNX graphs per precision variant and the
SentencePiece model(s). Loading validates the manifest schema and the sha256 of every file it
uses; any problem raises BundleError with a message naming the file.

manifest.json (format_version 3):
    name, source_lang, target_lang         strings
    architecture                           vocab_size, d_model, n_heads, n_encoder_layers,
                                           n_decoder_layers, d_ff, max_positions, head_dim (ints)
    special_tokens                         pad_id, bos_id, eos_id, unk_id (ints)
    tokenizer                              {"file", "sha256"}: one joint SentencePiece model
    variants                               {variant: {"encoder": {"file", "sha256"},
                                                      "decoder": {"file", "sha256"},
                                                      "providers": [...], ...}}; optional
                                           "weights": {"file", "sha256"}: the external-data
                                           file both graphs keep their weights in
    default_variant                        one of variants
    graphs                                 opset; encoder/decoder {"inputs", "outputs"}: the
                                           names of graph_names(n_decoder_layers), in order
    decoding                               beam_size, length_penalty, max_len_offset,
                                           max_len_ratio: at most offset + ratio x source tokens
                                           are generated (older manifests: max_len_a = offset,
                                           max_len_b = ratio; still read)
    scores                                 {} until evaluation fills it
    training                               the training recipe, or null

    special_tokens.decoder_start_id        optional: the decoder's first input (else bos_id)
    capitalize_lowercase                   optional, true or false (the default): a source
                                           typed all in lower case that reads as a sentence
                                           gets its first letter and the pronoun "i"
                                           capitalised before it is encoded, and one written
                                           all in capitals is encoded in sentence case and
                                           its translation given back in capitals
                                           (app.engine.tokenizer.as_written), for a model
                                           trained on written text only
    masked_symbols                         optional, a string of characters: symbols the
                                           model does not copy (export.symbols measures
                                           them); the engine masks them before the model
                                           and puts them back after (app.engine.translator)
    tokenizer                              or {"source": {"file", "sha256"}, "target": ...,
                                           "vocab": ...}: source/target SentencePiece models
                                           over one shared piece -> id map (JSON)

Format 3's decoder is the step graph (export/graphs.py: in-place cache, top-k in the graph).
Formats 1 and 2 had a decoder that concatenated its cache; this engine refuses them with the
commands that re-export them (their weights are read back by export.unbundle).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT_VERSION = 3  # the only format this engine runs
LEGACY_VERSIONS = (1, 2)  # still read by export.unbundle, to re-export them
MANIFEST = "manifest.json"
ARCHITECTURE_KEYS = (
    "vocab_size",
    "d_model",
    "n_heads",
    "n_encoder_layers",
    "n_decoder_layers",
    "d_ff",
    "max_positions",
    "head_dim",
)
SPECIAL_TOKEN_KEYS = ("pad_id", "bos_id", "eos_id", "unk_id")
DECODING_KEYS = ("beam_size", "length_penalty", "max_len_offset", "max_len_ratio")
DEFAULT_DECODING = {"beam_size": 4, "length_penalty": 1.0, "max_len_offset": 10,
                    "max_len_ratio": 1.5}
# the names of manifests written before the length rule's names said what they are
LEGACY_DECODING_NAMES = {"max_len_a": "max_len_offset", "max_len_b": "max_len_ratio"}
GRAPHS = ("encoder", "decoder")
ENCODER_NAMES = {"inputs": ["src_ids"], "outputs": ["cross_k", "cross_v", "src_mask"]}


def graph_names(n_layers: int) -> dict[str, dict[str, list[str]]]:
    """The graphs' input and output names, in order: the exporter writes them, the engine feeds
    them. The step decoder has one cache buffer and one cross key/value input per layer."""
    caches = [f"cache_{kind}_{i}" for i in range(n_layers) for kind in ("k", "v")]
    cross = [f"cross_{kind}_{i}" for i in range(n_layers) for kind in ("k", "v")]
    return {
        "encoder": ENCODER_NAMES,
        "decoder": {
            "inputs": ["tokens", "positions", "past_lengths", "total_length", "top_k", *caches,
                       *cross, "cross_mask"],
            "outputs": ["top_log_probs", "top_ids", *(f"{name}_out" for name in caches)],
        },
    }
SPLIT_TOKENIZER_FILES = ("source", "target", "vocab")


class BundleError(Exception):
    """A bundle that cannot be used: the message names the file and what is wrong with it."""


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_entry(bundle_dir: Path, name: str) -> dict[str, str]:
    """The manifest entry of a file in the bundle: its relative name and sha256."""
    return {"file": name, "sha256": sha256_file(bundle_dir / name)}


VARIANT_FILES = ("encoder", "decoder", "weights")  # a variant's own files ("weights": optional)


def variant_bytes(bundle_dir: Path, entry: dict[str, Any]) -> int:
    """The size on disk of a variant's files (entry: its manifest entry)."""
    return sum((bundle_dir / entry[k]["file"]).stat().st_size for k in VARIANT_FILES if k in entry)


@dataclass(frozen=True)
class Bundle:
    """A validated bundle with one chosen variant."""

    path: Path
    manifest: dict[str, Any]
    variant: str
    encoder_path: Path
    decoder_path: Path
    tokenizer_files: dict[str, Path]  # {"model"} (joint) or {"source", "target", "vocab"}
    language_model_path: Path | None = None  # the reranking language model (export.lm)

    @property
    def tokenizer_path(self) -> Path | None:
        """The joint SentencePiece model; None for a bundle with split tokenizers."""
        return self.tokenizer_files.get("model")

    @property
    def name(self) -> str:
        return self.manifest["name"]

    @property
    def source_lang(self) -> str:
        return self.manifest["source_lang"]

    @property
    def target_lang(self) -> str:
        return self.manifest["target_lang"]

    @property
    def architecture(self) -> dict[str, int]:
        return self.manifest["architecture"]

    @property
    def special_tokens(self) -> dict[str, int]:
        return self.manifest["special_tokens"]

    @property
    def decoding(self) -> dict[str, Any]:
        return decoding_section(self.manifest)

    @property
    def variants(self) -> list[str]:
        return list(self.manifest["variants"])

    @property
    def capitalize_lowercase(self) -> bool:
        return bool(self.manifest.get("capitalize_lowercase", False))

    @property
    def masked_symbols(self) -> frozenset[str]:
        return frozenset(self.manifest.get("masked_symbols", ""))


def decoding_section(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest's decoding defaults under today's names (older manifests' names mapped)."""
    section = dict(manifest.get("decoding") or {})
    for old, new in LEGACY_DECODING_NAMES.items():
        if old in section and new not in section:
            section[new] = section.pop(old)
    return section


def _require(cond: bool, where: Path, what: str) -> None:
    if not cond:
        raise BundleError(f"{where}: {what}")


def _check_numbers(section: Any, keys: tuple[str, ...], where: Path, label: str) -> None:
    _require(isinstance(section, dict), where, f"'{label}' must be an object")
    for key in keys:
        value = section.get(key)
        _require(
            isinstance(value, int | float) and not isinstance(value, bool),
            where,
            f"'{label}.{key}' must be a number, got {value!r}",
        )


def _check_file_entry(entry: Any, where: Path, label: str) -> None:
    _require(
        isinstance(entry, dict)
        and isinstance(entry.get("file"), str)
        and isinstance(entry.get("sha256"), str),
        where,
        f"'{label}' must be an object with 'file' and 'sha256' strings",
    )
    _require(
        not Path(entry["file"]).is_absolute() and ".." not in Path(entry["file"]).parts,
        where,
        f"'{label}.file' must be a path inside the bundle, got {entry['file']!r}",
    )


def _check_graph_names(graphs: Any, n_layers: int, where: Path) -> None:
    _require(isinstance(graphs, dict), where, "'graphs' must be an object")
    for graph, names in graph_names(n_layers).items():
        entry = graphs.get(graph)
        _require(isinstance(entry, dict), where, f"'graphs.{graph}' must be an object")
        for kind, expected in names.items():
            _require(
                entry.get(kind) == expected,
                where,
                f"'graphs.{graph}.{kind}' is {entry.get(kind)!r}; this engine feeds {expected}",
            )


def validate_manifest(manifest: Any, where: Path, legacy: bool = False) -> None:
    """Check the schema of a parsed manifest; raise BundleError naming `where` on a problem.
    legacy: also accept formats 1 and 2 (for reading their weights back, not for running)."""
    _require(isinstance(manifest, dict), where, "the manifest must be a JSON object")
    version = manifest.get("format_version")
    bundle_dir = where.parent
    _require(
        version == FORMAT_VERSION or (legacy and version in LEGACY_VERSIONS),
        where,
        f"format_version {version!r}: this engine runs format {FORMAT_VERSION} bundles only"
        + (
            f". Re-export it (needs the train extra): python -m export.unbundle {bundle_dir} "
            f"--out model.pt && python -m export --checkpoint model.pt --out {bundle_dir}"
            if version in LEGACY_VERSIONS
            else ""
        ),
    )
    for key in ("name", "source_lang", "target_lang", "default_variant"):
        _require(isinstance(manifest.get(key), str), where, f"'{key}' must be a string")
    _check_numbers(manifest.get("architecture"), ARCHITECTURE_KEYS, where, "architecture")
    _check_numbers(manifest.get("special_tokens"), SPECIAL_TOKEN_KEYS, where, "special_tokens")
    _require(isinstance(manifest.get("decoding"), dict), where, "'decoding' must be an object")
    _check_numbers(decoding_section(manifest), DECODING_KEYS, where, "decoding")
    if version == FORMAT_VERSION:
        _check_graph_names(manifest.get("graphs"), manifest["architecture"]["n_decoder_layers"],
                           where)
    for label, entry in tokenizer_entries(manifest.get("tokenizer"), where).items():
        _check_file_entry(entry, where, label)
    start = (manifest.get("special_tokens") or {}).get("decoder_start_id")
    _require(
        start is None or (isinstance(start, int) and not isinstance(start, bool)),
        where,
        f"'special_tokens.decoder_start_id' must be an integer, got {start!r}",
    )
    _require(isinstance(manifest.get("capitalize_lowercase", False), bool), where,
             f"'capitalize_lowercase' must be true or false, got "
             f"{manifest.get('capitalize_lowercase')!r}")
    _require(isinstance(manifest.get("masked_symbols", ""), str), where,
             f"'masked_symbols' must be a string of characters, got "
             f"{manifest.get('masked_symbols')!r}")
    _require(isinstance(manifest.get("scores"), dict), where, "'scores' must be an object")
    if "rerank" in manifest:
        _check_rerank(manifest["rerank"], where)
    variants = manifest.get("variants")
    _require(
        isinstance(variants, dict) and bool(variants),
        where,
        "'variants' must be a non-empty object",
    )
    for name, variant in variants.items():
        _require(isinstance(variant, dict), where, f"'variants.{name}' must be an object")
        for graph in GRAPHS:
            _check_file_entry(variant.get(graph), where, f"variants.{name}.{graph}")
        if "weights" in variant:
            _check_file_entry(variant["weights"], where, f"variants.{name}.weights")
    _require(
        manifest["default_variant"] in variants,
        where,
        f"default_variant {manifest['default_variant']!r} is not one of {sorted(variants)}",
    )


def _check_rerank(entry: Any, where: Path) -> None:
    """The reranking language model's entry (export.lm): its file, a weight >= 0 and a count of
    candidates >= 2."""
    _require(isinstance(entry, dict), where, "'rerank' must be an object")
    _check_file_entry(entry.get("language_model"), where, "rerank.language_model")
    weight, candidates = entry.get("weight"), entry.get("candidates")
    _require(isinstance(weight, int | float) and not isinstance(weight, bool) and weight >= 0,
             where, f"'rerank.weight' must be a number >= 0, got {weight!r}")
    _require(isinstance(candidates, int) and not isinstance(candidates, bool)
             and candidates >= 2, where,
             f"'rerank.candidates' must be an integer >= 2, got {candidates!r}")


def tokenizer_entries(tokenizer: Any, where: Path) -> dict[str, Any]:
    """The tokenizer's file entries by label: {"tokenizer"} for a joint SentencePiece model,
    {"tokenizer.source", "tokenizer.target", "tokenizer.vocab"} for split ones."""
    if isinstance(tokenizer, dict) and "file" not in tokenizer and "source" in tokenizer:
        _require(
            set(tokenizer) == set(SPLIT_TOKENIZER_FILES),
            where,
            f"'tokenizer' must have exactly the entries {list(SPLIT_TOKENIZER_FILES)}",
        )
        return {f"tokenizer.{k}": tokenizer[k] for k in SPLIT_TOKENIZER_FILES}
    return {"tokenizer": tokenizer}


def read_manifest(bundle_dir: str | Path, legacy: bool = False) -> dict[str, Any]:
    """Parse and validate manifest.json of a bundle directory (no checksums); legacy: formats 1
    and 2 pass too (see validate_manifest)."""
    path = Path(bundle_dir) / MANIFEST
    if not Path(bundle_dir).is_dir():
        raise BundleError(f"{bundle_dir}: not a bundle directory")
    if not path.is_file():
        raise BundleError(f"{path}: missing manifest")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleError(f"{path}: not valid JSON ({exc})") from exc
    validate_manifest(manifest, path, legacy)
    return manifest


def _checked_file(bundle_dir: Path, entry: dict[str, str], verify: bool) -> Path:
    path = bundle_dir / entry["file"]
    if not path.is_file():
        raise BundleError(f"{path}: file listed in {MANIFEST} is missing")
    if verify:
        actual = sha256_file(path)
        if actual != entry["sha256"]:
            raise BundleError(
                f"{path}: sha256 mismatch (manifest {entry['sha256'][:12]}…, file {actual[:12]}…);"
                " the file is corrupted or was changed after export"
            )
    return path


# when no variant is named and the manifest's default does not list the provider (the shipped
# default, int8, is made for the CPU: on CUDA its quantized products would run on the CPU between
# copies), the first of these that does; fp32 before fp16, whose quality is checked by
# bench.cuda_check rather than at export
PROVIDER_VARIANTS = {"cpu": ("int8", "fp32"), "cuda": ("fp32", "fp16")}


def variant_for(manifest: dict[str, Any], provider: str = "cpu") -> str:
    """The variant to load for `provider` when none is named: the manifest's default where its
    `providers` list the provider (a variant without that list runs anywhere), else the first
    of PROVIDER_VARIANTS[provider] that does, else the default."""
    variants = manifest["variants"]

    def runs_on(name: str) -> bool:
        return name in variants and provider in variants[name].get("providers", [provider])

    default = manifest["default_variant"]
    if runs_on(default):
        return default
    return next((v for v in PROVIDER_VARIANTS.get(provider, ()) if runs_on(v)), default)


def load_bundle(
    bundle_dir: str | Path, variant: str | None = None, verify_checksums: bool = True,
    provider: str = "cpu",
) -> Bundle:
    """Validate the manifest and the files of one variant (if None, the one for `provider`:
    variant_for)."""
    root = Path(bundle_dir)
    manifest = read_manifest(root)
    chosen = variant or variant_for(manifest, provider)
    if chosen not in manifest["variants"]:
        raise BundleError(
            f"{root / MANIFEST}: no variant {chosen!r}; available: {sorted(manifest['variants'])}"
        )
    files = manifest["variants"][chosen]
    if "weights" in files:  # read by ONNX Runtime through the graphs: checked here
        _checked_file(root, files["weights"], verify_checksums)
    return Bundle(
        path=root,
        manifest=manifest,
        variant=chosen,
        encoder_path=_checked_file(root, files["encoder"], verify_checksums),
        decoder_path=_checked_file(root, files["decoder"], verify_checksums),
        tokenizer_files={
            label.split(".")[-1].replace("tokenizer", "model"): _checked_file(
                root, entry, verify_checksums
            )
            for label, entry in tokenizer_entries(manifest["tokenizer"], root / MANIFEST).items()
        },
        language_model_path=(_checked_file(root, manifest["rerank"]["language_model"],
                                           verify_checksums)
                             if "rerank" in manifest else None),
    )


def find_bundles(root: str | Path) -> list[Path]:
    """Bundle directories (those holding a manifest.json) directly under root, sorted by name."""
    base = Path(root)
    if not base.is_dir():
        return []
    return sorted(p for p in base.iterdir() if (p / MANIFEST).is_file())
