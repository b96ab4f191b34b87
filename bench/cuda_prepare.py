"""What the GPU machine needs for bench.cuda_check besides the repository, made here and carried
there by the device tool (docs/cuda.md): the test sentences, the wheels its image lacks, and
where asked the fp32 bundle, the fp16 bundle and a CTranslate2 model of the same weights; all of
it as one tar cut into parts that each fit, beside the working tree, under the tool's limit on
what one call takes along.

    python -m bench.cuda_prepare .cuda --src data/en-de/test.en      # payload, parts, the calls
    python -m bench.cuda_prepare --make-fp16 DIR                     # the fp16 bundle alone
    python -m bench.cuda_prepare --make-ct2 DIR                      # the CTranslate2 model alone

The fp16 bundle and the CTranslate2 model need torch (and transformers and ctranslate2 for the
latter): here, or on the GPU machine, whose image has torch; bench/cuda_check.sh makes there
whatever the payload lacks.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.common import read_pairs

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_BUNDLE = ROOT / "bundles" / "en-de"
CARRY_FILES = {"sources": "test.en", "references": "test.de", "bundle": "bundle",
               "fp16": "bundle-fp16", "ct2": "ct2-model", "wheels": "wheels"}
SENTENCES = 500  # the check's test sentences on a GPU


def log(message: str) -> None:
    print(f"[cuda_prepare] {message}", flush=True)


GPU_PYTHON = "3.12"  # the GPU machine's python3


def wheels_command(dest: Path, names: list[str], python: str = GPU_PYTHON) -> list[str]:
    """pip download of the wheels the GPU machine lacks, for its Python on x86-64."""
    platforms = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
                 "manylinux2014_x86_64", "manylinux1_x86_64"]
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            "--python-version", python, "--implementation", "cp",
            *[a for p in platforms for a in ("--platform", p)], "-d", str(dest), *names]


# what the GPU machine's image lacks or may hold too old (its package list: docs/cuda.md), at
# the versions the project's tests run with; onnxruntime-gpu 1.31.1 is built for CUDA 13 and
# cuDNN 9, as the machine's torch is (docs/cuda.md)
GPU_WHEELS = ["onnxruntime-gpu==1.31.1", "fastapi==0.165.0", "starlette==1.10.0",
              "uvicorn==0.54.0", "pydantic==2.14.4", "pydantic-core==2.50.5",
              "pydantic-settings==2.16.3", "python-dotenv==1.2.4", "py3langid==0.4.0",
              "annotated-types==0.8.0", "annotated-doc==0.0.7", "typing-inspection==0.4.5",
              "typing-extensions==4.16.0", "opentelemetry-api==1.45.2"]
CT2_WHEEL = "ctranslate2==4.8.5"


def make_fp16_bundle(bundle: Path, out: Path) -> Path:
    """The bundle's weights re-exported in half precision (export.unbundle, then export.bundle's
    fp16 variant). Needs torch: here, or on the GPU machine, whose image has it."""
    from export.bundle import write_bundle
    from export.unbundle import unbundle

    manifest = json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = unbundle(bundle, Path(tmp) / "recovered.pt")
        return write_bundle(checkpoint, out, variants=("fp16",), name=manifest["name"],
                            source_lang=manifest["source_lang"],
                            target_lang=manifest["target_lang"])


def make_ct2_model(bundle: Path, out: Path, quantization: str = "float16") -> Path:
    """A CTranslate2 model of the bundle's weights (bench.convert's Marian route); needs torch,
    transformers and ctranslate2."""
    import sentencepiece as spm

    from bench.convert import convert_ct2, to_marian
    from export.unbundle import unbundle
    from model.checkpoint import load_model

    with tempfile.TemporaryDirectory() as tmp:
        model, tokenizer, _ = load_model(unbundle(bundle, Path(tmp) / "recovered.pt"))
    sp = spm.SentencePieceProcessor(model_proto=tokenizer.model_proto)
    convert_ct2(to_marian(model), sp, out, quantization)
    (out / "sentencepiece.model").write_bytes(tokenizer.model_proto)
    return out


def folder_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


TRAVEL_LIMIT_MIB = 64  # the device tool's limit on the working tree plus the carried paths
PART_PREFIX = "part-"


def travelling_mib(repo: Path = ROOT) -> float:
    """What the device tool sends besides `carry`: tracked files and untracked files that git
    does not ignore (its rule), in MiB."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=repo, capture_output=True, check=True).stdout
    paths = [repo / p for p in listed.decode().split("\0") if p]
    return sum(p.stat().st_size for p in paths if p.is_file()) / 2**20


def copy_bundle(bundle: Path, out: Path, variant: str = "fp32") -> Path:
    """The bundle's manifest, tokenizer and one variant's graphs (what loading that variant
    reads and checks), for a machine whose copy of the repository lacks them. The reranking
    language model stays behind, its entry left out of the copy's manifest: it runs on the CPU
    whatever the provider, the peer comparison runs without it, and it would add a part."""
    from app.engine.bundle import read_manifest, tokenizer_entries

    manifest = read_manifest(bundle)
    out.mkdir(parents=True, exist_ok=True)
    files = ["MODEL_CARD.md",
             *(e["file"] for e in tokenizer_entries(manifest["tokenizer"], bundle).values()),
             *(manifest["variants"][variant][g]["file"] for g in ("encoder", "decoder"))]
    if "weights" in manifest["variants"][variant]:
        files.append(manifest["variants"][variant]["weights"]["file"])
    for name in files:
        if (bundle / name).is_file():
            shutil.copyfile(bundle / name, out / name)
    manifest.pop("rerank", None)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n",
                                       encoding="utf-8")
    return out


def split_payload(payload: Path, dest: Path, part_mib: float) -> list[Path]:
    """payload/ as one tar cut into parts of at most part_mib (one per device call: the machine
    keeps what a call stages while it stays warm), and parts.sha256 to check them there."""
    import hashlib
    import tarfile

    for old in dest.glob(PART_PREFIX + "*"):
        old.unlink()
    tar = dest / "payload.tar"
    with tarfile.open(tar, "w") as archive:
        archive.add(payload, arcname=".")
    size, parts, sums = int(part_mib * 2**20), [], []
    with tar.open("rb") as source:
        while chunk := source.read(size):
            part = dest / f"{PART_PREFIX}{len(parts):02d}"
            part.write_bytes(chunk)
            parts.append(part)
            sums.append(f"{hashlib.sha256(chunk).hexdigest()}  {part.name}")
    tar.unlink()
    (dest / "parts.sha256").write_text("\n".join(sums) + "\n", encoding="utf-8")
    return parts


@dataclass(frozen=True)
class Preparation:
    """What --prepare puts in the carried folder's payload/. bundle: the fp32 bundle too (for a
    session that keeps the tracked bundle out of what travels); fp16 / ct2: made here rather
    than on the GPU machine; wheels: pip download of what that machine lacks."""

    sentences: int = SENTENCES
    bundle: bool = False
    fp16: bool = False
    ct2: bool = False
    wheels: bool = True
    part_mib: float | None = None  # None: what the limit leaves beside the working tree
    python: str = GPU_PYTHON  # the wheels' Python version (another for a rehearsal elsewhere)


def prepare(dest: Path, bundle: Path, src: Path, ref: Path, what: Preparation) -> dict:
    """Fill dest/payload with what the GPU machine needs besides the repository, cut it into
    parts that fit beside the working tree (split_payload), and say how many calls carry them."""
    payload = dest / "payload"
    shutil.rmtree(payload, ignore_errors=True)  # nothing left from an earlier preparation
    payload.mkdir(parents=True)
    sources, references = read_pairs(src, ref, what.sentences)
    (payload / CARRY_FILES["sources"]).write_text("\n".join(sources) + "\n", encoding="utf-8")
    (payload / CARRY_FILES["references"]).write_text("\n".join(references) + "\n",
                                                     encoding="utf-8")
    log(f"prepare: {len(sources)} test sentences from {src}")
    if what.bundle:
        copy_bundle(bundle, payload / "bundle")
    if what.fp16:
        make_fp16_bundle(bundle, payload / CARRY_FILES["fp16"])
        log("prepare: fp16 bundle written")
    if what.ct2:
        make_ct2_model(bundle, payload / CARRY_FILES["ct2"])
        log("prepare: CTranslate2 model written")
    if what.wheels:
        names = GPU_WHEELS + ([CT2_WHEEL] if what.ct2 else [])
        subprocess.run(wheels_command(payload / CARRY_FILES["wheels"], names, what.python),
                       check=True)
    sizes = {p.name: round(folder_mib(p) if p.is_dir() else p.stat().st_size / 2**20, 2)
             for p in sorted(payload.iterdir())}
    tree = travelling_mib()
    room = what.part_mib or TRAVEL_LIMIT_MIB - tree - 1  # 1 MiB for the checksums, slack
    report = {"payload_mib": sizes, "payload_total_mib": round(folder_mib(payload), 2),
              "working_tree_mib": round(tree, 2), "part_mib": round(room, 2)}
    if room <= 0:
        report["error"] = (f"the working tree that travels is {tree:.1f} MiB, over the "
                           f"{TRAVEL_LIMIT_MIB} MiB limit: no room for any part (docs/cuda.md: "
                           "the bundle's graphs kept out of what travels, --with-bundle, "
                           "--part-mib)")
        return report
    if tree + room > TRAVEL_LIMIT_MIB:
        report["warning"] = (f"a part of {room:.1f} MiB fits only once what travels besides it "
                             f"is under {TRAVEL_LIMIT_MIB - room:.1f} MiB; now {tree:.1f} MiB "
                             "(docs/cuda.md: the bundle's graphs kept out of what travels)")
    parts = split_payload(payload, dest, room)
    report["parts"] = [p.name for p in parts]
    report["calls"] = [{"carry": [f"{dest.name}/{p.name}"]
                        + ([f"{dest.name}/parts.sha256"] if i == len(parts) - 1 else []),
                        "command": "bash bench/cuda_check.sh "
                        + ("run" if i == len(parts) - 1 else "stage")}
                       for i, p in enumerate(parts)]
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dest", type=Path, nargs="?", help="the carried folder to fill, e.g. .cuda")
    ap.add_argument("--bundle", type=Path, default=SHIPPED_BUNDLE)
    ap.add_argument("--src", type=Path, default=ROOT / "data" / "en-de" / "test.en")
    ap.add_argument("--ref", type=Path, help="default: --src with .de")
    ap.add_argument("--with-bundle", action="store_true",
                    help="also the fp32 bundle (when the tracked one cannot travel)")
    ap.add_argument("--fp16", action="store_true",
                    help="make the fp16 bundle here (else on the GPU machine)")
    ap.add_argument("--ct2", action="store_true",
                    help="also the ctranslate2 wheel and a CTranslate2 model")
    ap.add_argument("--no-wheels", action="store_true", help="no pip download")
    ap.add_argument("--part-mib", type=float, help="size of each carried part (default: what "
                    "the 64 MiB limit leaves beside the working tree)")
    ap.add_argument("--python", default=GPU_PYTHON, help="the wheels' Python version")
    ap.add_argument("--make-fp16", type=Path, metavar="DIR",
                    help="only write the fp16 bundle of --bundle to DIR")
    ap.add_argument("--make-ct2", type=Path, metavar="DIR",
                    help="only write a CTranslate2 model of --bundle to DIR")
    args = ap.parse_args(argv)
    if args.make_fp16 is not None:
        make_fp16_bundle(args.bundle, args.make_fp16)
        return 0
    if args.make_ct2 is not None:
        make_ct2_model(args.bundle, args.make_ct2)
        return 0
    if args.dest is None:
        ap.error("give the carried folder, --make-fp16 or --make-ct2")
    what = Preparation(SENTENCES, args.with_bundle, args.fp16, args.ct2, not args.no_wheels,
                       args.part_mib, args.python)
    report = prepare(args.dest, args.bundle, args.src, args.ref or args.src.with_suffix(".de"),
                     what)
    print(json.dumps(report, indent=1))
    return 0 if "error" not in report else 1


if __name__ == "__main__":
    sys.exit(main())
