"""What a period that does not end a sentence costs: the service's sentence splitting against
cutting at every period followed by a space (as it did before: "Mr.", "e.g." and "Fig." ended
sentences).

    python -m bench.sentence_ends [--bundle bundles/en-de] [--src data/en-de/test.en
        --ref data/en-de/test.de] [--also data/en-de/dev.en] [--sentences 400] [--json out.json]
    python -m bench.sentence_ends --split-only --language de --src data/en-de-v3/test.de
        [--also /usr/share/locale/de/LC_MESSAGES] [--sentences 0]

Two measurements, both through the service's text path (app.documents.translate_segments),
with the rules of --language (default: none, the rules for any text):

- changed: every line of the given files (held-out splits, one segment per line) that the two
  rules split differently, translated both ways; BLEU and chrF of each against the references.
- boundaries: a seeded sample of adjacent lines joined by a space, the first ending in a period
  and the second starting with a capital (two real sentences); the share of those joins the
  service still cuts (every period rule: all of them), and the ones it does not; --sentences 0
  takes every such pair.

--split-only needs no model and no references, so it reads text in any language: besides the
boundaries (with the language's rules and with the rules for any text), the lines that the
language's rules split differently from the rules for any text, with the sentence ends each
rule drops or adds there, to read. A source may be a text file (a segment a line), a gettext
catalog (.mo) or a folder of them (each message's lines).
"""

from __future__ import annotations

import random
from pathlib import Path
from unittest import mock

from app.documents import translate_segments
from app.engine import Translator
from app.text import segment as segmenting
from bench.common import print_row, quality_parser, write_json
from bench.wrapped import scores


def every_period() -> mock._patch:
    """The rule before: every period followed by a space ends a sentence."""
    return mock.patch.object(segmenting, "_ends_sentence", lambda *args: True)


def sentences(line: str, language: str | None = None) -> list[str]:
    return segmenting.segment_text(line, language=language).sentences


def changed_lines(pairs: list[tuple[str, str]], language: str | None = None
                  ) -> list[tuple[str, str]]:
    """The (source, reference) pairs whose source the two rules split differently."""
    now = [sentences(src, language) for src, _ in pairs]
    with every_period():
        before = [sentences(src) for src, _ in pairs]
    return [p for p, a, b in zip(pairs, now, before, strict=True) if a != b]


def joined_pairs(sources: list[str], n: int, seed: int, language: str | None = None
                 ) -> list[tuple[str, str]]:
    """Adjacent lines where the first ends in a period and the second starts with a capital
    letter: two sentences with a real boundary between them (n pairs, all with n = 0)."""
    usable = [(a, b) for a, b in zip(sources, sources[1:], strict=False)
              if a.endswith(".") and b[:1].isupper() and len(sentences(a, language)) == 1
              and len(sentences(b, language)) == 1]
    return random.Random(seed).sample(usable, min(n, len(usable)) if n else len(usable))


def boundaries(pairs: list[tuple[str, str]], language: str | None) -> dict:
    """How many of the pairs, joined by a space, `language`'s rules cut between the two, and
    the joined pairs they don't."""
    not_cut = [f"{a} {b}" for a, b in pairs if len(a) not in ends(f"{a} {b}", language)]
    cut = len(pairs) - len(not_cut)
    return {"pairs": len(pairs), "cut": cut,
            "share_cut": round(cut / len(pairs), 4) if pairs else None, "not_cut": not_cut}


def ends(line: str, language: str | None) -> set[int]:
    """Where the sentences of `line` end (the offsets after them), the last one left out."""
    seg, pos, out = segmenting.segment_text(line, language=language), 0, set()
    for i, part in enumerate(seg.parts):
        pos += len(part)
        if i in seg.targets:
            out.add(pos)
    return out - {len(line)}


def by_language(lines: list[str], language: str) -> dict:
    """The lines `language`'s rules split differently from the rules for any text, with the
    sentence ends only one of the two cut."""
    changed, dropped, added = [], 0, 0
    for line in dict.fromkeys(lines):
        now, before = ends(line, language), ends(line, None)
        if now != before:
            dropped, added = dropped + len(before - now), added + len(now - before)
            changed.append({"line": line, "any_language": sentences(line),
                            language: sentences(line, language)})
    return {"lines": len(changed), "ends_dropped": dropped, "ends_added": added,
            "changed": changed}


def read_lines(path: Path) -> list[str]:
    """A text file's lines, or the translated messages' lines of a gettext catalog (.mo) or a
    folder of them."""
    if path.is_dir() or path.suffix == ".mo":
        import polib  # the documents extra

        files = sorted(path.glob("*.mo")) if path.is_dir() else [path]
        return [line.strip() for file in files for entry in polib.mofile(str(file))
                for line in entry.msgstr.splitlines() if entry.msgid and line.strip()]
    return path.read_text(encoding="utf-8").splitlines()


def read(src: Path) -> list[tuple[str, str]]:
    refs = src.with_suffix(".de").read_text(encoding="utf-8").splitlines()
    return list(zip(src.read_text(encoding="utf-8").splitlines(), refs, strict=True))


def main(argv: list[str] | None = None) -> None:
    ap = quality_parser(__doc__, 400)
    ap.add_argument("--also", type=Path, action="append", default=[],
                    help="more held-out source files (references beside them, .de)")
    ap.add_argument("--language", help="the source language whose rules split sentences")
    ap.add_argument("--split-only", action="store_true",
                    help="no model, no references: how the lines are split (any language)")
    args = ap.parse_args(argv)
    if args.split_only:
        split_only(args)
        return
    pairs = [p for path in [args.src, *args.also] for p in read(path)]
    language = args.language
    changed = changed_lines(pairs, language)
    engine = Translator.from_dir(args.bundle)

    def translate(texts: list[str]) -> list[str]:
        return [r.text for r in engine.translate_batch(texts)]

    sources, refs = [s for s, _ in changed], [r for _, r in changed]
    report: dict = {"lines": len(pairs), "changed": len(changed)}
    if changed:
        with every_period():
            report["every_period"] = scores(
                translate_segments(sources, translate, language=language), refs)
        outputs = translate_segments(sources, translate, language=language)
        report["service"] = scores(outputs, refs)
        print_row("changed", report, sources, outputs, args.examples)
    joined = joined_pairs([s for s, _ in pairs], args.sentences, args.seed, language)
    report["boundaries"] = boundaries(joined, language)
    print_row("boundaries", report["boundaries"], [], [])
    if args.json:
        write_json(args.json, report)


def split_only(args) -> None:
    lines = [line for path in [args.src, *args.also] for line in read_lines(path)]
    language = args.language
    joined = joined_pairs(lines, args.sentences, args.seed, language)
    report: dict = {"lines": len(lines), "language": language,
                    "boundaries": boundaries(joined, language),
                    "boundaries_any_language": boundaries(joined, None)}
    for key in ("boundaries", "boundaries_any_language"):
        print_row(key, {k: v for k, v in report[key].items() if k != "not_cut"}, [], [])
    if language:
        report["by_language"] = by_language(lines, language)
        print_row("by_language", {k: v for k, v in report["by_language"].items()
                                  if k != "changed"}, [], [])
    if args.json:
        write_json(args.json, report)


if __name__ == "__main__":
    main()
