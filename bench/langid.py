"""Language identification accuracy and speed on our dev sets, per language and on short texts.

    python -m bench.langid [--data data/en-de-v2] [--langs en de] [--short-words 3]
        [--short-limit 2000] [--json out]

Each line of dev.<lang> is labelled by app.text.langid.LanguageDetector restricted to --langs;
reported
per language: segments, accuracy, accuracy on segments of at most --short-words words, and the
mean time per segment. The dev sets hold few short segments (none on the English side: the
corpus builder keeps dev pairs of 4+ source words), so a second set, "short", takes the first
--short-limit lines of at most --short-words words from train.<lang> (the identifier never saw
our corpus, so training lines are fair test data for it). With lingua-language-detector
installed, the same for it (the candidate it was compared with)."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

from app.text.langid import LanguageDetector


def score(label: Callable[[str], str | None], rows: list[tuple[str, str]], short: int) -> dict:
    t0 = time.perf_counter()
    hits = [label(text) == lang for text, lang in rows]
    seconds = time.perf_counter() - t0
    short_hits = [h for h, (text, _) in zip(hits, rows, strict=True) if len(text.split()) <= short]
    return {
        "segments": len(rows),
        "accuracy": round(sum(hits) / max(1, len(rows)), 4),
        "short_segments": len(short_hits),
        "short_accuracy": round(sum(short_hits) / max(1, len(short_hits)), 4),
        "ms_per_segment": round(seconds / max(1, len(rows)) * 1000, 3),
    }


def lingua_labeller(langs: list[str]) -> Callable[[str], str | None] | None:
    try:
        from lingua import IsoCode639_1, Language, LanguageDetectorBuilder
    except ImportError:
        return None
    languages = [Language.from_iso_code_639_1(getattr(IsoCode639_1, c.upper())) for c in langs]
    detector = LanguageDetectorBuilder.from_languages(*languages).build()

    def label(text: str) -> str | None:
        found = detector.detect_language_of(text)
        return found.iso_code_639_1.name.lower() if found else None

    return label


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("data/en-de-v2"))
    ap.add_argument("--langs", nargs="+", default=["en", "de"])
    ap.add_argument("--short-words", type=int, default=3)
    ap.add_argument("--short-limit", type=int, default=2000)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    sets = {
        lang: [(line, lang) for line in (args.data / f"dev.{lang}").read_text().splitlines()]
        for lang in args.langs
    }
    for lang in args.langs:
        lines = (args.data / f"train.{lang}").read_text().splitlines()
        short = [t for t in lines if 0 < len(t.split()) <= args.short_words][: args.short_limit]
        sets[f"{lang}, short (train)"] = [(t, lang) for t in short]
    labellers = {"py3langid (app.text.langid)": LanguageDetector(args.langs).best}
    if lingua := lingua_labeller(args.langs):
        labellers["lingua"] = lingua
    report = {}
    for name, label in labellers.items():
        dev = [r for lang in args.langs for r in sets[lang]]
        for lang, rows in [*sets.items(), ("all dev", dev)]:
            report[f"{name} / {lang}"] = row = score(label, rows, args.short_words)
            print(f"{name:24} {lang:18} {json.dumps(row)}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
