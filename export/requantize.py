"""Rebuild a bundle's int8 variant from its own fp32 graphs, with today's quantization settings.

    python -m export.requantize bundles/en-de [--no-per-channel]

For a bundle written before a change to the int8 settings (for instance the 7-bit weights of
export.variants), or an imported one, when its checkpoint is not at hand: the fp32 graphs are
quantized again into `encoder.int8.onnx` and `decoder.int8.onnx`, and the manifest's int8 entry
gets the new files' checksums and settings. Its parity numbers and scores were measured on the
old graphs, so they are dropped; run `python -m export.verify --record` (needs the checkpoint)
and `python -m export.evaluate --record` to measure them again. Needs the `train` extra (onnx).
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

from app.engine.bundle import file_entry, load_bundle
from export.bundle import PROVIDERS, save_manifest, share_variant
from export.variants import quantize_int8


def requantize(bundle_dir: Path, per_channel: bool = True) -> dict:
    """Quantize the bundle's fp32 graphs again; returns the manifest's new int8 entry."""
    manifest = load_bundle(bundle_dir, "fp32").manifest
    fp32 = manifest["variants"]["fp32"]
    entry: dict = {}
    for graph in ("encoder", "decoder"):
        name = f"{graph}.int8.onnx"
        settings = quantize_int8(bundle_dir / fp32[graph]["file"], bundle_dir / name, per_channel)
        entry[graph] = file_entry(bundle_dir, name)
    entry.update(providers=PROVIDERS["int8"], quantization=settings,
                 requantized=datetime.now(UTC).strftime("%Y-%m-%d"))
    if "weights" in fp32:  # a bundle that stores each weight once: so does its int8 variant
        share_variant(bundle_dir, entry, "int8")
    manifest["variants"]["int8"] = entry
    forget_measurements(manifest, "int8")
    save_manifest(bundle_dir, manifest)
    return entry


def forget_measurements(manifest: dict, variant: str) -> None:
    """Drop the variant's scores, per-domain scores and recorded examples from manifest: they
    were measured on graphs that have changed."""
    (manifest.get("scores") or {}).pop(variant, None)
    for row in (manifest.get("domain_scores") or {}).values():
        row.pop(variant, None)
    if (manifest.get("examples") or {}).get("variant") == variant:
        manifest.pop("examples")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m export.requantize", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bundle", type=Path)
    p.add_argument("--no-per-channel", action="store_true", help="one weight scale per tensor")
    args = p.parse_args(argv)
    try:
        entry = requantize(args.bundle, per_channel=not args.no_per_channel)
    except Exception as exc:  # noqa: BLE001 - a CLI: say what went wrong, exit 1
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{args.bundle}: int8 graphs rebuilt ({entry['quantization']}); run export.verify "
          "--record and export.evaluate --record to measure them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
