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
installed, the same for it (the candidate it was compared with).

"Lists" measures the rule for a short text in a list with `source: "auto"`
(app.translation.service: shorter than OWN_DETECTION_CHARS, it keeps its own language only
from SHORT_OWN_CONFIDENCE up): the first --list-limit training lines of each language that
short whose aligned line in the other language differs (lower-cased; "Status" is both), and of
them the share the rule gives their own language ("kept": translated in a list of another
language, which would otherwise leave them as they are) and the share it gives another
("misread": wrong even in a list of their own language). Two languages only."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

from app.text.langid import LanguageDetector
from app.translation.service import OWN_DETECTION_CHARS, SHORT_OWN_CONFIDENCE


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


def lists(detector: LanguageDetector, data: Path, langs: list[str], limit: int) -> dict:
    """The short-text rule of a list (module docstring, "Lists"), per language."""
    first, second = ((data / f"train.{lang}").read_text().splitlines() for lang in langs)
    report = {}
    for lang, mine, other in ((langs[0], first, second), (langs[1], second, first)):
        texts = [t for t, o in zip(mine, other, strict=True)
                 if 0 < len(t) < OWN_DETECTION_CHARS and t.lower() != o.lower()][:limit]
        sure = [d[0] for d in map(detector.detect, texts)
                if d[0].confidence >= SHORT_OWN_CONFIDENCE]
        n = max(1, len(texts))
        report[lang] = {"texts": len(texts),
                        "kept": round(sum(d.language == lang for d in sure) / n, 4),
                        "misread": round(sum(d.language != lang for d in sure) / n, 4)}
    return report


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("data/en-de-v2"))
    ap.add_argument("--langs", nargs="+", default=["en", "de"])
    ap.add_argument("--short-words", type=int, default=3)
    ap.add_argument("--short-limit", type=int, default=2000)
    ap.add_argument("--list-limit", type=int, default=20000)
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
    if len(args.langs) == 2:
        report["lists"] = lists(LanguageDetector(args.langs), args.data, args.langs,
                                args.list_limit)
        print(f"short texts in lists (under {OWN_DETECTION_CHARS} characters, own language from "
              f"{SHORT_OWN_CONFIDENCE}): {json.dumps(report['lists'])}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
