"""What a period that does not end a sentence costs: the service's sentence splitting against
cutting at every period followed by a space (as it did before: "Mr.", "e.g." and "Fig." ended
sentences).

    python -m bench.sentence_ends [--bundle bundles/en-de] [--src data/en-de/test.en
        --ref data/en-de/test.de] [--also data/en-de/dev.en] [--sentences 400] [--json out.json]

Two measurements, both through the service's text path (app.documents.translate_segments):

- changed: every line of the given files (held-out splits, one segment per line) that the two
  rules split differently, translated both ways; BLEU and chrF of each against the references.
- boundaries: a seeded sample of adjacent lines joined by a space, the first ending in a period
  and the second starting with a capital (two real sentences); the share of those joins the
  service still cuts (every period rule: all of them), and the ones it does not.
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


def sentences(line: str) -> list[str]:
    return segmenting.segment_text(line).sentences


def changed_lines(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The (source, reference) pairs whose source the two rules split differently."""
    now = [sentences(src) for src, _ in pairs]
    with every_period():
        before = [sentences(src) for src, _ in pairs]
    return [p for p, a, b in zip(pairs, now, before, strict=True) if a != b]


def joined_pairs(sources: list[str], n: int, seed: int) -> list[str]:
    """Adjacent lines joined by a space where the first ends in a period and the second starts
    with a capital letter: two sentences with a real boundary between them."""
    usable = [f"{a} {b}" for a, b in zip(sources, sources[1:], strict=False)
              if a.endswith(".") and b[:1].isupper() and len(sentences(a)) == 1
              and len(sentences(b)) == 1]
    return random.Random(seed).sample(usable, min(n, len(usable)))


def read(src: Path) -> list[tuple[str, str]]:
    refs = src.with_suffix(".de").read_text(encoding="utf-8").splitlines()
    return list(zip(src.read_text(encoding="utf-8").splitlines(), refs, strict=True))


def main(argv: list[str] | None = None) -> None:
    ap = quality_parser(__doc__, 400)
    ap.add_argument("--also", type=Path, action="append", default=[],
                    help="more held-out source files (references beside them, .de)")
    args = ap.parse_args(argv)
    pairs = [p for path in [args.src, *args.also] for p in read(path)]
    changed = changed_lines(pairs)
    engine = Translator.from_dir(args.bundle)

    def translate(texts: list[str]) -> list[str]:
        return [r.text for r in engine.translate_batch(texts)]

    sources, refs = [s for s, _ in changed], [r for _, r in changed]
    report: dict = {"lines": len(pairs), "changed": len(changed)}
    if changed:
        with every_period():
            report["every_period"] = scores(translate_segments(sources, translate), refs)
        outputs = translate_segments(sources, translate)
        report["service"] = scores(outputs, refs)
        print_row("changed", report, sources, outputs, args.examples)
    joined = joined_pairs([s for s, _ in pairs], args.sentences, args.seed)
    kept = [j for j in joined if len(sentences(j)) == 2]
    report["boundaries"] = {"pairs": len(joined), "cut": len(kept),
                            "share_cut": round(len(kept) / len(joined), 4) if joined else None,
                            "not_cut": [j for j in joined if j not in kept]}
    print_row("boundaries", report["boundaries"], [], [])
    if args.json:
        write_json(args.json, report)


if __name__ == "__main__":
    main()
