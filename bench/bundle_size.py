"""A bundle's int8 files on disk against CTranslate2's int8 `model.bin` of the same weights.

    python -m bench.bundle_size bundles/en-de [--work /tmp/bundle-size]

The weights are read back from the bundle's fp32 graphs (export.unbundle) and converted to
CTranslate2 with its int8 quantization, as bench.convert converts our models for the speed
comparison. Prints one JSON line: the bytes of the bundle variant's files (both graphs and the
weights file they share, where there is one), of model.bin, and their ratio. Needs the `bench`
and `train` extras.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path


def measure(bundle: Path, work: Path, variant: str = "int8") -> dict:
    import sentencepiece as spm

    from app.engine.bundle import read_manifest, variant_bytes
    from bench.convert import convert_ct2, to_marian
    from export.unbundle import unbundle
    from model.checkpoint import load_model

    manifest = read_manifest(bundle)
    checkpoint = unbundle(bundle, work / "recovered.pt")
    model, tokenizer, _ = load_model(checkpoint)
    sp = spm.SentencePieceProcessor(model_proto=tokenizer.model_proto)
    ct2 = convert_ct2(to_marian(model), sp, work / "ct2-int8", "int8")
    ours = variant_bytes(bundle, manifest["variants"][variant])
    theirs = (ct2 / "model.bin").stat().st_size
    return {"bundle": str(bundle), "variant": variant, "ours_bytes": ours,
            "ct2_int8_model_bin_bytes": theirs, "ratio": round(ours / theirs, 3)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bundle_size",
                                description=__doc__.splitlines()[0])
    p.add_argument("bundle", type=Path)
    p.add_argument("--variant", default="int8")
    p.add_argument("--work", type=Path, help="keep the checkpoint and model.bin here")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        print(json.dumps(measure(args.bundle, work, args.variant)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
