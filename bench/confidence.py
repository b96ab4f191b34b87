"""How well does a translation's confidence rank its quality? Confidence against chrF per sentence.

    python -m bench.confidence [--bundle bundles/en-de] [--src data/en-de/test.en
        --ref data/en-de/test.de] [--limit 0] [--threads 2] [--json out.json]

Each test sentence is translated through the service's own path (app.translation.service,
bench.glossary.served) with the bundle's decoding defaults (beam 4) on the served variant and
`options.confidence` (exp of the mean log-probability per output token). Reported: Spearman's
rank correlation between the confidence and the sentence's chrF (sacreBLEU, against its
reference); the same for the source length in characters (shorter sentences score higher, so a
signal that only measured length would show here too); and the mean chrF of each fifth of the
sentences ranked by confidence, lowest first.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import sacrebleu

from app.engine import Translator
from app.translation.service import RequestedOptions
from bench.common import read_pairs
from bench.glossary import served


def ranks(values: list[float]) -> np.ndarray:
    """Ranks from 1, ties sharing their mean rank."""
    x = np.asarray(values, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    out = np.empty(len(x))
    out[order] = np.arange(1, len(x) + 1)
    for value in np.unique(x):  # ties: their mean rank
        tied = x == value
        if tied.sum() > 1:
            out[tied] = out[tied].mean()
    return out


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation: Pearson's correlation of the ranks."""
    return float(np.corrcoef(ranks(a), ranks(b))[0, 1])


def fifths(confidences: list[float], chrfs: list[float]) -> list[float]:
    """Mean chrF of each fifth of the sentences ranked by confidence, lowest first."""
    order = np.argsort(np.asarray(confidences), kind="mergesort")
    return [round(float(np.mean(np.asarray(chrfs)[part])), 2)
            for part in np.array_split(order, 5)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", default="bundles/en-de")
    ap.add_argument("--src", type=Path, default=Path("data/en-de/test.en"))
    ap.add_argument("--ref", type=Path, default=None, help="default: --src with .de")
    ap.add_argument("--limit", type=int, default=0, help="test sentences (0: all)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    sources, refs = read_pairs(args.src, args.ref or args.src.with_suffix(".de"),
                               args.limit or None)
    assert refs is not None
    translator = Translator.from_dir(args.bundle, intra_threads=args.threads, inter_threads=1)
    t0 = time.perf_counter()
    results = served(translator, sources, [None] * len(sources),
                     RequestedOptions(confidence=True))
    confidences = [r.confidence for r in results]
    chrfs = [sacrebleu.sentence_chrf(r.text, [ref]).score for r, ref in
             zip(results, refs, strict=True)]
    report = {
        "sentences": len(sources), "variant": translator.variant,
        "spearman_confidence_chrf": round(spearman(confidences, chrfs), 4),
        "spearman_source_length_chrf": round(spearman([len(s) for s in sources], chrfs), 4),
        "chrf_by_confidence_fifth": fifths(confidences, chrfs),
        "confidence_by_fifth": [round(float(np.mean(np.sort(confidences)[part])), 3) for part
                                in np.array_split(np.arange(len(confidences)), 5)],
        "seconds": round(time.perf_counter() - t0, 1),
    }
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
