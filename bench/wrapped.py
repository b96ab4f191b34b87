"""What line breaks inside sentences cost: text wrapped at a width, translated line by line or
with the wrapped lines joined.

    python -m bench.wrapped [--bundle bundles/en-de] [--src data/en-de/test.en
        --ref data/en-de/test.de] [--sentences 300] [--width 40] [--examples 5] [--json out.json]

Test sentences longer than the width (seeded sample), each wrapped at `--width` characters as
hard-wrapped text is (e-mail, README files, subtitles), translated by the service's text path
(app.documents.translate_segments: sentence splitting, span protection) four ways:

- whole: the sentences unwrapped (what the words should read like);
- lines: every line break ends a sentence, as the service did before;
- soft_wrap: breaks joined by app.text.segment.soft_wrap (plain text, .txt, .po: the next line's
first
  word would not have fit on the line before, and it starts with a lowercase letter at the same
  indentation), as the service does now;
- always: every break joined (HTML text, where a break is a space; an upper bound for text).

Reported: chrF and BLEU of each output with its line breaks read as spaces, against the
references; for the wrapped ways, the share of outputs with as many line breaks as their
source (breaks put back by app.text.segment.rewrap) and the share of the source's breaks joined."""

from __future__ import annotations

import random
import textwrap
import time
from pathlib import Path

from app.documents import translate_segments
from app.engine import Translator
from app.text.segment import always, segment_text, soft_wrap
from bench.common import print_row, quality_parser, write_json


def never(before: str, after: str, width: int) -> bool:
    """Every line break ends a sentence (the service before soft wraps)."""
    return False


WAYS = {"lines": never, "soft_wrap": soft_wrap, "always": always}


def wrapped_set(src: Path, ref: Path, n: int, width: int, seed: int
                ) -> tuple[list[str], list[str], list[str]]:
    """(sentences, the same wrapped at width, references) for n sentences longer than width."""
    sources = src.read_text(encoding="utf-8").splitlines()
    refs = ref.read_text(encoding="utf-8").splitlines()
    usable = [i for i, s in enumerate(sources) if len(s) > width + 5 and len(s.split()) >= 4]
    picked = random.Random(seed).sample(usable, min(n, len(usable)))
    whole = [" ".join(sources[i].split()) for i in picked]
    wrapped = ["\n".join(textwrap.wrap(s, width, break_long_words=False, break_on_hyphens=False))
               for s in whole]
    return whole, wrapped, [refs[i] for i in picked]


def scores(outputs: list[str], refs: list[str], sources: list[str] | None = None) -> dict:
    import sacrebleu

    flat = [" ".join(o.split()) for o in outputs]
    row = {"chrF": round(sacrebleu.corpus_chrf(flat, [refs]).score, 2),
           "BLEU": round(sacrebleu.corpus_bleu(flat, [refs]).score, 2)}
    if sources is not None:
        kept = sum(o.count("\n") == s.count("\n") for o, s in zip(outputs, sources, strict=True))
        row["breaks_kept"] = round(kept / len(outputs), 4)
    return row


def joined_share(wrapped: list[str], wraps) -> float:
    """The share of the sources' line breaks that wraps joins (a break inside a sentence)."""
    breaks = sum(s.count("\n") for s in wrapped)
    kept = sum(sum(part.count("\n") for i, part in enumerate(seg.parts) if i not in seg.targets)
               for seg in (segment_text(s, wraps) for s in wrapped))
    return round(1 - kept / breaks, 4) if breaks else 1.0


def main(argv: list[str] | None = None) -> None:
    ap = quality_parser(__doc__, 300)
    ap.add_argument("--width", type=int, default=40)
    args = ap.parse_args(argv)
    ref = args.ref or args.src.with_suffix(".de")
    engine = Translator.from_dir(args.bundle)

    def translate(texts: list[str]) -> list[str]:
        return [r.text for r in engine.translate_batch(texts)]

    whole, wrapped, refs = wrapped_set(args.src, ref, args.sentences, args.width, args.seed)
    report = {"sentences": len(whole), "width": args.width,
              "breaks": sum(s.count("\n") for s in wrapped)}
    for way in ("whole", *WAYS):
        sources = whole if way == "whole" else wrapped
        t0 = time.perf_counter()
        outputs = translate_segments(sources, translate, wraps=WAYS.get(way, soft_wrap))
        row = scores(outputs, refs, None if way == "whole" else sources)
        if way != "whole":
            row["joined"] = joined_share(sources, WAYS[way])
        row["seconds"] = round(time.perf_counter() - t0, 1)
        report[way] = row
        print_row(f"{way:9}", row, sources, outputs, args.examples)
    if args.json:
        write_json(args.json, report)


if __name__ == "__main__":
    main()
