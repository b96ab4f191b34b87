"""Command line: ``python -m model.corpus build --pair en-de --out data/en-de``."""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from .build import build


def _sample(out: Path, count: int, seed: int) -> None:
    en = (out / "train.en").read_text(encoding="utf-8").splitlines()
    de = (out / "train.de").read_text(encoding="utf-8").splitlines()
    rng = random.Random(seed)
    for i in sorted(rng.sample(range(len(en)), min(count, len(en)))):
        print(f"{en[i]}\n  -> {de[i]}")


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(prog="python -m model.corpus", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="download packages and build the corpus")
    b.add_argument("--pair", default="en-de")
    b.add_argument("--out", type=Path, default=Path("data/en-de"))
    b.add_argument(
        "--cache",
        type=Path,
        default=Path(".cache"),
        help="download/unpack cache (debs/, unpacked/, apt/)",
    )
    b.add_argument(
        "--domains",
        default="software,documentation,general",
        help="comma list of the domains to build (software,documentation: the first corpus)",
    )
    s = sub.add_parser("sample", help="print random training pairs")
    s.add_argument("--out", type=Path, default=Path("data/en-de"))
    s.add_argument("-n", type=int, default=50)
    s.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            build(args.out, args.cache, args.pair, tuple(args.domains.split(",")))
        else:
            _sample(args.out, args.n, args.seed)
    except (OSError, ValueError, RuntimeError) as err:  # a wrong option or path, apt's failure
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
