"""Two bundles on our engine in alternation: is a rewritten bundle as fast as the one before?

    python -m bench.paired_bundles OLD_BUNDLE NEW_BUNDLE [--variant int8] [--pairs 4]
        [--sentences data/en-de/test.en --limit 500 --latency-limit 100] [--threads 2]

Each bundle is loaded in a worker process of its own (bench.paired), and only one works at a
time: pairs of throughput passes over the same sentences (batch 32, greedy and beam 4) in the
order A B, B A, ..., then batch-1 chunks alternating; A is OLD_BUNDLE. Prints bench.paired's
table (ratios > 1: the old bundle faster) and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from bench import paired
from bench.common import read_lines
from bench.run import BEAMS, ROOT, log


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.paired_bundles",
                                description=__doc__.splitlines()[0])
    p.add_argument("old", type=Path)
    p.add_argument("new", type=Path)
    p.add_argument("--variant", default="int8")
    p.add_argument("--sentences", type=Path, default=ROOT / "data/en-de/test.en")
    p.add_argument("--limit", type=int, default=500)
    p.add_argument("--latency-limit", type=int, default=100)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--pairs", type=int, default=4)
    p.add_argument("--latency-rounds", type=int, default=1)
    args = p.parse_args(argv)
    texts = read_lines(args.sentences)[: args.limit]
    from app.engine.bundle import read_manifest

    positions = read_manifest(args.old)["architecture"]["max_positions"]
    specs = [{"engine": f"ort-{args.variant}", "bundle": str(bundle.resolve()),
              "threads": args.threads, "texts": texts,
              "latency_texts": texts[: args.latency_limit], "max_positions": positions}
             for bundle in (args.old, args.new)]
    with tempfile.TemporaryDirectory() as tmp:
        result = paired.compare(*specs, list(BEAMS), args.pairs, args.latency_rounds,
                                Path(tmp), args.threads, log)
    print("\n".join(paired.report(result)))
    print(json.dumps({"old": str(args.old), "new": str(args.new), **result.to_json()}))
    return 1 if result.error else 0


if __name__ == "__main__":
    sys.exit(main())
