"""Translation quality on text from outside the corpus, with and without reranking.

The dev and test splits share their sources with the training text (a catalog's messages are
split at random) and with the reranking language model counted on it. This bench scores a
bundle on German catalogs of Debian packages that no corpus source reads (their German is the
reference), and on the reserved packages kept for that purpose (model/corpus/sources.py,
RESERVED):

    python -m bench.outside                      # the default packages, bundles/en-de
    python -m bench.outside --package kstars-data --per-source 400 --json runs/outside.json

Each package's `.mo` catalogs are read as the corpus reads them (`message_pairs`); a pair is
kept when both sides are one line of 2 to 40 words without placeholders, markup or braces (`&`,
the accelerator mark, dropped), the first pair of each English and each German text; half of
them by a hash of the English, at most `--per-source` per package in catalog order, are the
test set. The engine translates each set as the service does (the bundle's decoding, beam
search) with reranking off and on; it prints BLEU / chrF per package and over all of them, and
a paired bootstrap of the difference over all (95 % interval). A package that the corpus
already reads is refused: its text would not be from outside.

`--write DIR` writes the test sets instead, as `export.evaluate` reads them (DIR/<package>.en
and .de, and DIR/all.en and .de, every package's in turn), and translates nothing: the shipped
model card's rows "outside the corpus" are

    python -m bench.outside --write data/outside
    python -m export.evaluate bundles/en-de --data data/outside/all --variants int8 --record \
        --domain "outside the corpus: catalogs of other packages (bench.outside)" \
        [--no-rerank]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import re
from pathlib import Path

import numpy as np

from bench.common import write_json

# package -> what it is: applications outside the corpus, and the two reserved campaigns
PACKAGES = {
    "kmymoney-common": "personal finance (KDE)",
    "skrooge-common": "personal finance (KDE)",
    "homebank-data": "personal finance (GTK)",
    "kstars-data": "astronomy (KDE)",
    "wesnoth-1.16-httt": "a game's campaign (reserved)",
    "wesnoth-1.16-trow": "a game's campaign (reserved)",
}
CATALOGS = "*/de/LC_MESSAGES/*.mo"
UNWANTED = re.compile(r"<|%\d|%[a-z]|\{")  # markup, placeholders, templates
MIN_WORDS, MAX_WORDS = 2, 40
RESAMPLES = 300


def corpus_packages() -> frozenset[str]:
    """Every package a corpus source reads (model/corpus/sources.py)."""
    from model.corpus import sources

    return frozenset({*sources.GETTEXT_PACKAGES, *sources.GENERAL_GETTEXT_PACKAGES,
                      *sources.DATA_SOURCES, *sources.HELP_PACKAGES, "trans-de-en"})


def held_out_pairs(catalogs: list[Path], per_source: int) -> list[tuple[str, str]]:
    """The test half of the catalogs' usable pairs (module docstring), at most per_source."""
    from model.corpus.gettext import message_pairs, read_mo

    pairs, seen_en, seen_de = [], set(), set()
    for path in catalogs:
        for en, de in message_pairs(read_mo(path)):
            en, de = en.replace("&", "").strip(), de.replace("&", "").strip()
            if (not en or not de or f"{en}\n{de}".splitlines() != [en, de]  # one line each
                    or UNWANTED.search(en + de)
                    or not MIN_WORDS <= len(en.split()) <= MAX_WORDS
                    or en in seen_en or de in seen_de):
                continue
            seen_en.add(en)
            seen_de.add(de)
            if hashlib.sha256(en.encode()).digest()[0] % 2:  # the other half: unused
                pairs.append((en, de))
    return pairs[:per_source]


def fetch(packages: list[str], cache: Path) -> dict[str, list[Path]]:
    """Each package's German catalogs, downloaded and unpacked into cache (as the corpus
    builder does)."""
    from model.corpus import debian

    apt = debian.Apt(cache)
    apt.ensure_lists(packages[0])
    missing = sorted(set(packages) - set(apt.available(packages)))
    if missing:
        raise SystemExit(f"apt knows no package {', '.join(missing)}")
    debs = apt.download(packages, cache / "debs")
    found = {}
    for package in packages:
        root = debian.unpack(debs[package], cache / "unpacked", (CATALOGS,))
        found[package] = sorted(root.glob("**/de/LC_MESSAGES/*.mo"))
        if not found[package]:
            raise SystemExit(f"{package} has no German catalog ({CATALOGS})")
    return found


def write_sets(sets: dict[str, list[tuple[str, str]]], out: Path) -> None:
    """Each package's pairs as out/<package>.en and .de, and all of them as out/all.*."""
    out.mkdir(parents=True, exist_ok=True)
    every = [pair for pairs in sets.values() for pair in pairs]
    for name, pairs in (*sets.items(), ("all", every)):
        for side, lang in enumerate(("en", "de")):
            (out / f"{name}.{lang}").write_text("".join(p[side] + "\n" for p in pairs),
                                                encoding="utf-8")
    print(f"{len(every)} pairs of {len(sets)} packages written to {out}/")


def bootstrap(a: list[str], b: list[str], refs: list[str], metric, seed: int = 1
              ) -> tuple[float, float, float]:
    """(b's score - a's, and the 95 % interval of that difference over RESAMPLES paired
    resamples of the sentences)."""
    rng = np.random.default_rng(seed)
    diffs = []
    for _ in range(RESAMPLES):
        pick = rng.integers(0, len(refs), len(refs))
        ref = [[refs[i] for i in pick]]
        diffs.append(metric.corpus_score([b[i] for i in pick], ref).score
                     - metric.corpus_score([a[i] for i in pick], ref).score)
    delta = metric.corpus_score(b, [refs]).score - metric.corpus_score(a, [refs]).score
    return delta, float(np.percentile(diffs, 2.5)), float(np.percentile(diffs, 97.5))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, default=Path("bundles/en-de"))
    ap.add_argument("--package", action="append", default=[], metavar="NAME",
                    help=f"a Debian package with German catalogs (default: {', '.join(PACKAGES)})")
    ap.add_argument("--per-source", type=int, default=800)
    ap.add_argument("--cache", type=Path, default=Path(".cache"),
                    help="download/unpack cache, shared with the corpus builder")
    ap.add_argument("--threads", type=int, default=0, help="the engine's threads (0: all)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--write", type=Path, metavar="DIR",
                    help="write the test sets into DIR and translate nothing")
    args = ap.parse_args(argv)
    packages = args.package or list(PACKAGES)
    inside = sorted(set(packages) & corpus_packages())
    if inside:
        raise SystemExit(f"{', '.join(inside)}: the corpus reads these packages; their text is "
                         "not from outside it")

    import sacrebleu

    from app.engine import Translator

    sets = {p: held_out_pairs(c, args.per_source) for p, c in fetch(packages, args.cache).items()}
    if args.write:
        write_sets(sets, args.write)
        return 0
    translator = Translator.from_dir(args.bundle, intra_threads=args.threads)
    if translator.reranker is None:
        raise SystemExit(f"{args.bundle} does not rerank: nothing to compare")
    report, every = {"bundle": str(args.bundle), "packages": {}}, {"ref": []}
    print(f"{'package':20s} {'pairs':>5s}  {'no reranking':>13s}  {'reranked':>13s}  (BLEU / chrF)")
    for package, pairs in sets.items():
        sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
        row = {"pairs": len(pairs), "what": PACKAGES.get(package, "")}
        for name, rerank in (("plain", False), ("reranked", True)):
            options = dataclasses.replace(translator.default_options, rerank=rerank)
            out = [r.text for r in translator.translate_batch(sources, options)]
            every.setdefault(name, []).extend(out)
            row[name] = {"bleu": round(sacrebleu.corpus_bleu(out, [refs]).score, 2),
                         "chrf": round(sacrebleu.corpus_chrf(out, [refs]).score, 2)}
        every["ref"] += refs
        report["packages"][package] = row
        print(f"{package:20s} {len(pairs):5d}  " + "  ".join(
            f"{row[n]['bleu']:6.2f} / {row[n]['chrf']:5.2f}" for n in ("plain", "reranked")),
              flush=True)
    refs = every["ref"]
    report["all"] = {"pairs": len(refs), "changed": sum(
        a != b for a, b in zip(every["plain"], every["reranked"], strict=True))}
    for name, metric in (("bleu", sacrebleu.BLEU()), ("chrf", sacrebleu.CHRF())):
        delta, low, high = bootstrap(every["plain"], every["reranked"], refs, metric)
        report["all"][name] = {n: round(metric.corpus_score(every[n], [refs]).score, 2)
                               for n in ("plain", "reranked")}
        report["all"][name]["delta"] = [round(delta, 2), round(low, 2), round(high, 2)]
        print(f"all {len(refs)} pairs, {report['all']['changed']} changed by reranking: "
              f"{name} {report['all'][name]['plain']:.2f} -> {report['all'][name]['reranked']:.2f}"
              f" ({delta:+.2f}, 95 % [{low:+.2f}, {high:+.2f}])")
    if args.json:
        write_json(args.json, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
