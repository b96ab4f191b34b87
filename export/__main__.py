"""python -m export --checkpoint ckpt.pt --out bundles/<name> [--variants fp32,int8] [--name en-de]

Exports the graphs, writes the bundle, then (unless --no-verify) runs the parity check and records
its numbers per variant in manifest.json and MODEL_CARD.md.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from export.bundle import write_bundle
from export.variants import VARIANTS


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m export", description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True, help="checkpoint file written by model/")
    p.add_argument("--out", required=True, help="bundle directory to write, e.g. bundles/en-de")
    p.add_argument("--variants", default="fp32,int8", help=f"comma list of {', '.join(VARIANTS)}")
    p.add_argument("--name", help="bundle name (default: the --out directory name)")
    p.add_argument("--source-lang", help="default: the checkpoint's recipe, else the name xx-yy")
    p.add_argument("--target-lang")
    p.add_argument(
        "--no-per-channel", action="store_true", help="int8: one weight scale per tensor"
    )
    p.add_argument(
        "--capitalize-lowercase", action="store_true",
        help="the engine capitalises a source typed all in lower case that reads as a sentence "
             "(for a model trained on written text: docs/export.md)")
    p.add_argument("--sentences", help="file of source sentences for the parity check")
    p.add_argument("--no-verify", action="store_true", help="skip the parity check")
    p.add_argument("--threads", type=int, default=0, help="parity check: ORT and PyTorch threads")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    args = parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if args.sentences and not Path(args.sentences).is_file():  # found out only after the export
        print(f"error: {args.sentences}: no such file", file=sys.stderr)
        return 1
    try:
        out = write_bundle(
            args.checkpoint,
            args.out,
            variants=variants,
            name=args.name,
            source_lang=args.source_lang,
            target_lang=args.target_lang,
            per_channel=not args.no_per_channel,
            capitalize_lowercase=args.capitalize_lowercase,
        )
    except (OSError, ValueError) as exc:  # no such checkpoint, an unknown variant
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote bundle {out} ({', '.join(variants)})")
    if args.no_verify:
        return 0
    from export.verify import verify_bundle

    report = verify_bundle(
        out, args.checkpoint, sentences_file=args.sentences, record=True, threads=args.threads
    )
    print(report.summary())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
