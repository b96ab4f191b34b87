"""Argos Translate packages and CTranslate2 model directories -> our bundles.

    python -m export.argos PACKAGE.argosmodel|PACKAGE_DIR|CT2_DIR [--out DIR]
        [--sp-model FILE --source-lang xx --target-lang yy]   (a bare CTranslate2 directory)
        [--variants fp32,int8] [--sentences FILE]
    python -m export.argos --argos-packages [DIR]            (every installed package)

An Argos package (a zip, `.argosmodel`, or the directory Argos installs it as) holds
metadata.json (from_code, to_code, package_version, ...), model/ (a CTranslate2 model:
model.bin, config.json, vocabularies), sentencepiece.model, and often README.md and stanza/ (a
sentence splitter; ours replaces it). The CTranslate2 model is read by export.ct2_model and
mapped onto our Transformer by export.ct2_mapping (refusing, with the field named, what we
cannot run); the vocabulary keeps CTranslate2's order, and the bundle's tokenizer maps
SentencePiece pieces to it by their strings.

Conventions reproduced from argostranslate (translate.py, tokenizer.py) as LibreTranslate runs
it: the source is SentencePiece pieces as tokens, nothing appended (unless config.json's
add_source_eos says so); the output pieces are joined by SentencePiece's decode_pieces, then
U+2581 and "_" become spaces and one leading space is dropped; beam size 4 (ARGOS_BEAM_SIZE's
default) and length penalty 0.2 are the bundle's decoding defaults. Not reproduced: CTranslate2's
replace_unknowns (an unknown output token becomes SentencePiece's unknown surface, not the
source token it attended to most), its minimum output length of one token, and its absolute
limit of 256 output tokens (ours: 10 + 1.5 x the source length).

The bundle has fp32 and int8 variants (int8 quantized from the dequantized weights by
export.variants, then given fixed activation scales by export.calibrate), each storing every
weight once (export.shared). The manifest records the package, the int8-vs-fp32 agreement and,
where ctranslate2 is installed, the fp32 bundle's agreement with CTranslate2 on the same model.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from export.ct2_mapping import UnsupportedCT2Model
from export.ct2_model import CT2FormatError, read_model_dir, read_vocabularies

METADATA = "metadata.json"
SP_MODEL = "sentencepiece.model"
IMPORT_RECORD = "import.json"  # in a bundle: what it was imported from, with the checksum
# LibreTranslate translates through argostranslate.translate, which calls CTranslate2 with
# beam_size = max(num_hypotheses, settings.beam_size) (ARGOS_BEAM_SIZE, default 4) and
# length_penalty = 0.2
LIBRETRANSLATE_DECODING = {"beam_size": 4, "length_penalty": 0.2}
AGREEMENT_SENTENCES = 100


class ImportRefused(ValueError):
    """A path that cannot be imported; the message names the file or field."""


@dataclass(frozen=True)
class Package:
    """An Argos package (or a bare CTranslate2 directory described by options)."""

    root: Path
    model_dir: Path
    sp_model: Path
    from_code: str
    to_code: str
    metadata: dict[str, Any]
    readme: str | None = None

    @property
    def name(self) -> str:
        """The package's name: its code, else its directory's name (an installed package's,
        or the top directory of the zip)."""
        return self.metadata.get("code") or self.root.name


# ---------------------------------------------------------------- what a path is


def argos_packages_dir() -> Path:
    """Argos Translate's package directory, as its settings module finds it: ARGOS_PACKAGES_DIR,
    else $XDG_DATA_HOME/argos-translate/packages (XDG_DATA_HOME defaults to ~/.local/share;
    under a snap, its SNAP_USER_DATA replaces the home directory)."""
    found = os.environ.get("ARGOS_PACKAGES_DIR")
    if found:
        return Path(found)
    home = Path(os.environ["SNAP_USER_DATA"]) if "SNAP" in os.environ else Path.home()
    data = Path(os.environ.get("XDG_DATA_HOME") or home / ".local" / "share")
    return data / "argos-translate" / "packages"


def kind_of(path: Path) -> str:
    """'argosmodel' (a zip), 'argos' (an unpacked package), 'ct2' (a CTranslate2 model
    directory) or 'marian' (a Transformers Marian directory)."""
    if path.is_file():
        if zipfile.is_zipfile(path):
            return "argosmodel"
        raise ImportRefused(f"{path}: not a zip archive, so not an .argosmodel package")
    if not path.is_dir():
        raise ImportRefused(f"{path}: no such file or directory")
    if (path / METADATA).is_file() and (path / "model").is_dir():
        return "argos"
    if (path / "model.bin").is_file():
        return "ct2"
    config = path / "config.json"
    if config.is_file():
        with contextlib.suppress(ValueError, UnicodeDecodeError):
            if json.loads(config.read_text(encoding="utf-8")).get("model_type") == "marian":
                return "marian"
    raise ImportRefused(f"{path}: neither an Argos package (metadata.json + model/), a "
                        "CTranslate2 model (model.bin) nor a Marian directory (config.json "
                        "with model_type marian)")


def _read_package_dir(root: Path) -> Package:
    try:
        metadata = json.loads((root / METADATA).read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ImportRefused(f"{root / METADATA}: not valid JSON ({exc})") from None
    if not isinstance(metadata, dict):
        raise ImportRefused(f"{root / METADATA}: must be a JSON object")
    kind = metadata.get("type", "translate")
    if kind != "translate":
        raise ImportRefused(f"{root / METADATA} type: {kind!r} (only translate packages hold a "
                            "translation model)")
    if metadata.get("target_prefix"):
        raise ImportRefused(f"{root / METADATA} target_prefix: {metadata['target_prefix']!r}; "
                            "a target prefix is not supported")
    for key in ("from_code", "to_code"):
        if not isinstance(metadata.get(key), str) or not metadata[key]:
            raise ImportRefused(f"{root / METADATA} {key}: missing (the language code)")
    if not (root / SP_MODEL).is_file():
        found = "bpe.model (BPE packages are not supported)" if (root / "bpe.model").is_file() \
            else "nothing"
        raise ImportRefused(f"{root / SP_MODEL}: missing; found {found}")
    readme = root / "README.md"
    return Package(root, root / "model", root / SP_MODEL, metadata["from_code"],
                   metadata["to_code"], metadata,
                   readme.read_text(encoding="utf-8", errors="replace")
                   if readme.is_file() else None)


def _safe_extract(archive: zipfile.ZipFile, into: Path) -> None:
    for member in archive.namelist():
        target = (into / member).resolve()
        if not target.is_relative_to(into.resolve()):
            raise ImportRefused(f"{archive.filename}: member {member!r} points outside the "
                                "package")
    archive.extractall(into)


@contextlib.contextmanager
def open_package(path: Path, sp_model: Path | None = None, source_lang: str | None = None,
                 target_lang: str | None = None) -> Iterator[Package]:
    """The package at path (a zip is unpacked into a temporary directory for the duration)."""
    kind = kind_of(path)
    if kind == "argosmodel":
        with tempfile.TemporaryDirectory(prefix="argos-") as tmp, zipfile.ZipFile(path) as z:
            _safe_extract(z, Path(tmp))
            roots = [p.parent for p in Path(tmp).rglob(METADATA)]
            if len(roots) != 1:
                raise ImportRefused(f"{path}: holds {len(roots)} metadata.json files, not one")
            yield _read_package_dir(roots[0])
    elif kind == "argos":
        yield _read_package_dir(path)
    elif kind == "ct2":
        if sp_model is None or not source_lang or not target_lang:
            raise ImportRefused(f"{path}: a bare CTranslate2 model needs --sp-model, "
                                "--source-lang and --target-lang")
        yield Package(path, path, sp_model, source_lang, target_lang,
                      {"code": f"{source_lang}-{target_lang}", "from_code": source_lang,
                       "to_code": target_lang})
    else:
        raise ImportRefused(f"{path}: a Marian directory (import it with export.marian)")


def package_checksum(path: Path) -> str:
    """sha256 of a package: the zip file, or every file of a directory (paths and bytes)."""
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for file in files:
        if path.is_dir():
            digest.update(str(file.relative_to(path)).encode())
        with open(file, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def licence(package: Package) -> str:
    """The licence the package names: metadata, else the README's licence line or section."""
    for key in ("license", "licence"):
        if isinstance(package.metadata.get(key), str):
            return package.metadata[key]
    lines = (package.readme or "").splitlines()
    for i, line in enumerate(lines):
        low = line.lower()
        if "licen" in low:
            text = line.split(":", 1)[1].strip() if ":" in line else ""
            if not text and line.lstrip().startswith("#"):  # a heading: its first text line
                text = next((n.strip() for n in lines[i + 1:] if n.strip()), "")
            if text:
                return text[:200]
    return "not stated in the package"


# ---------------------------------------------------------------- the checkpoint


def tokenizer_spec(ct2, source: list[str], target: list[str], tokens: dict[str, str]) -> dict:
    """The bundle's vocabulary file: CTranslate2's token lists and conventions (see
    app.engine.tokenizer.SplitTokenizer)."""
    return {"format": "ctranslate2", "source_tokens": source, "target_tokens": target,
            "special_tokens": tokens,
            "add_source_eos": bool(ct2.config.get("add_source_eos", False)),
            "detokenize": "argos"}


def build_checkpoint(package: Package, checkpoint: Path) -> dict[str, Any]:
    """Read and map the package's model; save it as one of our checkpoints; return the recipe."""
    import numpy as np
    import torch

    from export.ct2_mapping import to_ours
    from model.checkpoint import save_checkpoint
    from model.config import ModelConfig
    from model.tokenizer import SplitTokenizer
    from model.transformer import Transformer

    ct2 = read_model_dir(package.model_dir)
    source, target, shared = read_vocabularies(package.model_dir)
    fields, state, tokens = to_ours(ct2, source, target)
    model = Transformer(ModelConfig(**fields)).eval()
    model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()})
    sp = package.sp_model.read_bytes()
    tokenizer = SplitTokenizer(sp, sp, tokenizer_spec(ct2, source, target, tokens))
    recipe = {
        "imported_from": {
            "format": "argos" if package.root != package.model_dir else "ctranslate2",
            "package": package.name,
            "package_version": package.metadata.get("package_version", ""),
            "argos_version": package.metadata.get("argos_version", ""),
            "licence": licence(package),
            "ctranslate2_spec": f"{ct2.spec} revision {ct2.revision} (binary {ct2.binary_version})",
            "weight_dtypes": ", ".join(sorted({t for n, t in ct2.dtypes.items()
                                               if ct2.variables[n].ndim >= 2})),
            "vocabulary": "shared" if shared else "source and target",
        },
        "source_lang": package.from_code,
        "target_lang": package.to_code,
        "decoding": dict(LIBRETRANSLATE_DECODING),
        "decoding_note": "LibreTranslate's settings for Argos packages (beam size 4, length "
                         "penalty 0.2)",
    }
    save_checkpoint(checkpoint, model, tokenizer, recipe=recipe)
    return recipe


# ---------------------------------------------------------------- agreement checks


def sample_texts(sp_model: Path, n: int = AGREEMENT_SENTENCES, seed: int = 0) -> list[str]:
    """Texts to compare variants on when no sentences are given: random runs of the
    SentencePiece model's word-initial pieces (the source language's own pieces)."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(sp_model))
    words = [sp.id_to_piece(i) for i in range(sp.get_piece_size())
             if sp.id_to_piece(i).startswith("\u2581") and not sp.is_control(i)
             and not sp.is_unknown(i) and len(sp.id_to_piece(i)) > 1]
    if not words:
        return ["Hello."] * n
    rng = random.Random(seed)
    return [sp.decode_pieces(rng.choices(words, k=rng.randint(3, 12))).strip() for _ in range(n)]


def agreement(bundle: Path, texts: list[str], beam_size: int = 1) -> dict[str, Any]:
    """int8 against fp32, greedy: the share of texts translated identically."""
    from dataclasses import replace

    from app.engine import Translator

    outputs = {}
    for variant in ("fp32", "int8"):
        translator = Translator.from_dir(bundle, variant=variant, intra_threads=1, workers=1)
        options = replace(translator.default_options, beam_size=beam_size)
        outputs[variant] = [r.text for r in translator.translate_batch(texts, options)]
    same = sum(a == b for a, b in zip(outputs["fp32"], outputs["int8"], strict=True))
    return {"identical": same, "sentences": len(texts), "rate": round(same / len(texts), 4),
            "decoding": "greedy" if beam_size == 1 else f"beam {beam_size}"}


def ct2_agreement(bundle: Path, package: Package, texts: list[str]) -> dict[str, Any] | None:
    """The fp32 bundle against CTranslate2 on the package's own model, greedy, as
    argostranslate tokenizes and detokenizes; None without ctranslate2."""
    try:
        import ctranslate2
    except ImportError:
        return None
    from dataclasses import replace

    import sentencepiece as spm

    from app.engine import Translator

    translator = Translator.from_dir(bundle, variant="fp32", intra_threads=1, workers=1)
    options = replace(translator.default_options, beam_size=1)
    ours = [r.text for r in translator.translate_batch(texts, options)]
    sp = spm.SentencePieceProcessor(model_file=str(package.sp_model))
    peer = ctranslate2.Translator(str(package.model_dir), device="cpu", intra_threads=1,
                                  compute_type="float32")
    tokens = [sp.encode(t, out_type=str) for t in texts]
    limits = translator.output_limits(translator.encode(texts), options)
    vocab = translator.tokenizer  # a SplitTokenizer: imported bundles carry CTranslate2's order
    theirs = []
    for text, row, limit in zip(texts, tokens, limits, strict=True):
        result = peer.translate_batch([row], beam_size=1, max_decoding_length=int(limit),
                                      min_decoding_length=0)[0].hypotheses[0]
        # decoded as ours are (an unknown piece as the source's: Translator.result)
        theirs.append(translator.decode([vocab.target_ids.get(p, vocab.unk_id) for p in result],
                                        translator.unknowns(text)))
    same = sum(a == b for a, b in zip(ours, theirs, strict=True))
    return {"identical": same, "sentences": len(texts), "rate": round(same / len(texts), 4),
            "decoding": "greedy", "ctranslate2": ctranslate2.__version__}


# ---------------------------------------------------------------- the bundle


def import_package(path: Path, out: Path | None = None, variants: tuple[str, ...] = ("fp32",
                   "int8"), sentences: Path | None = None, sp_model: Path | None = None,
                   source_lang: str | None = None, target_lang: str | None = None,
                   calibrate: bool = True) -> Path:
    """Import the package at path into a bundle directory (default bundles/<from>-<to>)."""
    from export.bundle import save_manifest, write_bundle

    checksum = package_checksum(path)
    with open_package(path, sp_model, source_lang, target_lang) as package, \
            tempfile.TemporaryDirectory() as tmp:
        out = out or Path("bundles") / f"{package.from_code}-{package.to_code}"
        checkpoint = Path(tmp) / "imported.pt"
        try:
            recipe = build_checkpoint(package, checkpoint)
        except (UnsupportedCT2Model, CT2FormatError, json.JSONDecodeError,
                UnicodeDecodeError) as exc:
            raise ImportRefused(f"{package.model_dir}: {exc}") from None
        if out.exists() and any(out.iterdir()) and not (out / "manifest.json").is_file():
            raise ImportRefused(f"{out}: exists and is not a bundle; choose another --out")
        write_bundle(checkpoint, out, variants=list(variants),
                     name=f"{package.from_code}-{package.to_code}",
                     source_lang=package.from_code, target_lang=package.to_code, share=True)
        texts = (_lines(sentences) if sentences else sample_texts(package.sp_model))
        text_source = str(sentences) if sentences else "random runs of the package's pieces"
        if "int8" in variants and calibrate:
            from export.calibrate import calibrate as calibrate_int8

            sample = Path(tmp) / "calibration.txt"
            sample.write_text("\n".join(texts) + "\n", encoding="utf-8")
            calibrate_int8(out, sample, limit=len(texts))
        from app.engine.bundle import read_manifest

        manifest = read_manifest(out)
        manifest["imported_from"] = {**recipe["imported_from"], "path": str(path.resolve()),
                                     "sha256": checksum}
        checks: dict[str, Any] = {"texts": text_source}
        if "int8" in variants and "fp32" in variants:
            checks["int8_vs_fp32"] = agreement(out, texts)
        if "fp32" in variants:
            found = ct2_agreement(out, package, texts)
            if found:
                checks["fp32_vs_ctranslate2"] = found
        manifest["import_checks"] = checks
        save_manifest(out, manifest)
        (out / IMPORT_RECORD).write_text(json.dumps(
            {"path": str(path.resolve()), "sha256": checksum, "package": package.name},
            indent=2) + "\n", encoding="utf-8")
    return out


def _lines(path: Path) -> list[str]:
    lines = [x.strip() for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    if not lines:
        raise ImportRefused(f"{path}: no sentences")
    return lines[:1000]


def already_imported(package: Path, out: Path) -> bool:
    """Whether out holds a bundle imported from a package with the same checksum."""
    record = out / IMPORT_RECORD
    if not record.is_file() or not (out / "manifest.json").is_file():
        return False
    with contextlib.suppress(ValueError):
        return json.loads(record.read_text(encoding="utf-8")).get("sha256") == \
            package_checksum(package)
    return False


def installed_packages(root: Path) -> list[Path]:
    """The package directories under root (those with metadata.json and model/), by name."""
    if not root.is_dir():
        raise ImportRefused(f"{root}: no such directory (Argos Translate's packages are looked "
                            "for there; give the directory)")
    return sorted(p for p in root.iterdir() if (p / METADATA).is_file() and (p / "model").is_dir())


def import_all(root: Path, bundles: Path, variants: tuple[str, ...], out=None) -> int:
    """Import every translate package under root into bundles/<from>-<to>; one summary line
    per package (to out, default stdout; the progress bar goes to stderr). Returns the number
    of refusals."""
    from tqdm import tqdm

    out = out or sys.stdout
    packages = installed_packages(root)
    refused = 0
    bar = tqdm(packages, unit="package", file=sys.stderr, desc="argos packages")
    for path in bar:
        bar.set_postfix_str(path.name)
        try:
            with open_package(path) as package:
                target = bundles / f"{package.from_code}-{package.to_code}"
            if already_imported(path, target):
                line = f"{path.name}: skipped, already imported into {target} (same checksum)"
            else:
                import_package(path, target, variants)
                line = f"{path.name}: imported into {target}"
        except ImportRefused as exc:
            refused += 1
            line = f"{path.name}: refused: {exc}"
        bar.write(line, file=out)
    if not packages:
        print(f"{root}: no Argos packages found", file=out)
    return refused


# ---------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="nmt import", description=__doc__.splitlines()[0],
        epilog="A Transformers Marian (OPUS-MT) directory given to `nmt import` goes to "
               "export.marian instead (python -m export.marian --help). See docs/import.md.")
    p.add_argument("path", nargs="?", type=Path,
                   help=".argosmodel file, unpacked Argos package, or CTranslate2 directory")
    p.add_argument("--argos-packages", nargs="?", const=argos_packages_dir(), type=Path,
                   metavar="DIR", help="import every installed package (default: Argos "
                   f"Translate's package directory, here {argos_packages_dir()})")
    p.add_argument("--out", type=Path, help="bundle directory (default bundles/<from>-<to>; "
                   "with --argos-packages, the directory the bundles go under)")
    p.add_argument("--sp-model", type=Path, help="a bare CTranslate2 directory's SentencePiece "
                   "model")
    p.add_argument("--source-lang", help="a bare CTranslate2 directory's source language")
    p.add_argument("--target-lang", help="its target language")
    p.add_argument("--variants", default="fp32,int8", help="comma list of fp32, int8, fp16")
    p.add_argument("--sentences", type=Path, help="source sentences for int8 calibration and "
                   "the agreement checks (default: random runs of the package's pieces)")
    args = p.parse_args(argv)
    variants = tuple(v.strip() for v in args.variants.split(",") if v.strip())
    if (args.path is None) == (args.argos_packages is None):
        p.error("give a PATH or --argos-packages (not both)")
    try:
        if args.argos_packages is not None:
            refused = import_all(args.argos_packages, args.out or Path("bundles"), variants)
            return 1 if refused else 0
        out = import_package(args.path, args.out, variants, args.sentences, args.sp_model,
                             args.source_lang, args.target_lang)
    except ImportRefused as exc:
        print(f"nmt import: {exc}", file=sys.stderr)
        return 2
    print(f"wrote bundle {out} ({', '.join(variants)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
