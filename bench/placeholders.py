"""Do placeholders, tags, URLs and addresses survive translation? Raw against app.text.protect's
masks.

    python -m bench.placeholders [--bundle bundles/en-de] [--src data/en-de-v2/test.en
        --ref data/en-de-v2/test.de] [--limit 0] [--synthetic 100] [--threads 1] [--json out.json]
        [--words recipes/software-words-en.txt recipes/commands-en.txt]
        [--numbers recipes/numbers-en.txt recipes/quantities-en.txt]
        [--written recipes/times-en.txt recipes/dates-en.txt]

Segments: the test sentences holding at least one protected span (app.text.protect.find_spans), and
--synthetic sentences made from span-free test sentences by adding an inline tag pair around the
first word, a URL or an e-mail address (the corpus strips markup, so the test split has none).
Two more sets for the words of software (paths, file names, identifiers, @mentions, hashes,
command lines: app.text.protect.WORD_KINDS): the test sentences holding one, and the lines of
--words (fixed lists of such sentences written for this project, without references). Numbers with
thousands separators and quantities, which the service writes the target language's way
("1,000" -> "1.000", "€19.99" -> "€19,99"), are left out of these counts;
--numbers (fixed lists of sentences holding them) reports the share of sentences with every
one written so, raw and masked as the service masks them; --written, the share of sentences
with a time on the 12-hour clock ("5 pm") or a date of numbers ("12/31/2026") whose translation
has it the target's way ("17:00", "31.12.2026").
Each set is translated with the bundle's default decoding (beam 4) five ways:

- raw: the sentence as it is;
- keep-brace (app.text.protect's default): placeholders stay as they are, tags, URLs, addresses and
  code become `{1}, {2}, ...`; restored (and repaired) by app.text.protect.unmask;
- keep: the same with `%1, %2, ...` masks;
- qt / brace: every span replaced by `%1, %2, ...` or `{1}, {2}, ...`, restored the same way.

Reported per set and way: the share of segments whose spans come back exactly (the same multiset
of span strings; a command line, read in the output up to its first English word, only has to
be there), for masks also the share where the model itself returned every mask exactly
once (before unmask repairs anything), and chrF against the reference where there is one.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

from app.engine import Translator
from app.text.protect import (
    BRACE_STYLE,
    CLOCK_12,
    DATE,
    DATE_FORMATS,
    KEEP_BRACE_STYLE,
    KEEP_STYLE,
    QT_STYLE,
    SPAN_RE,
    WORD_KINDS,
    MaskStyle,
    date_for,
    find_spans,
    mask,
    on_24_hours,
    unmask,
)

STYLES = {
    "keep-brace": KEEP_BRACE_STYLE,
    "keep": KEEP_STYLE,
    "qt": QT_STYLE,
    "brace": BRACE_STYLE,
}
_ADDITIONS = (
    lambda s: "<b>" + s.replace(" ", "</b> ", 1) if " " in s else f"<b>{s}</b>",
    lambda s: f"{s.rstrip('.')}: see https://example.org/docs/setup.html for details.",
    lambda s: f"{s.rstrip('.')}. Write to support@example.org if it fails.",
)


NUMERIC = frozenset({"number", "quantity"})


def found(text: str) -> list:
    """The spans of text but numbers and quantities (measured on their own: `numbers`)."""
    return [span for span in find_spans(text) if span.kind not in NUMERIC]


def spans_of(text: str) -> Counter:
    return Counter(text[s.start : s.end] for s in found(text) if s.kind != "command")


def survive(source: str, output: str) -> bool:
    """Whether the output holds exactly the source's spans, and each of its command lines: a
    command is read up to the first English word, so in German it runs on ("git status ein")."""
    commands = Counter(source[s.start : s.end] for s in found(source) if s.kind == "command")
    return spans_of(source) == spans_of(output) and all(
        output.count(command) >= n for command, n in commands.items())


def raw_and_masked(translator: Translator, sources: list[str]
                   ) -> tuple[list, list[str], list[str]]:
    """The sources masked with the translator's languages (as the service masks them), and
    their translations raw and masked (restored)."""
    masked = [mask(s, languages=(translator.source_lang, translator.target_lang))
              for s in sources]
    raw = [r.text for r in translator.translate_batch(sources)]
    out = [unmask(m, r.text) for m, r in zip(masked, translator.translate_batch(
        [m.text for m in masked]), strict=True)]
    return masked, raw, out


def numbers(translator: Translator, sources: list[str]) -> dict:
    """The share of sentences whose translation has each of their numbers and quantities
    written the target's way, translated raw and masked with the languages (as the service
    does)."""
    masked, raw, out = raw_and_masked(translator, sources)
    wanted = [Counter(o for o, kind in zip(m.originals, m.kinds, strict=True) if kind in NUMERIC)
              for m in masked]

    def share(outputs: list[str]) -> float:
        return round(sum(all(o.count(n) >= k for n, k in w.items())
                         for o, w in zip(outputs, wanted, strict=True)) / len(sources), 4)

    return {"segments": len(sources), "raw": share(raw), "masked": share(out)}


def written(translator: Translator, sources: list[str]) -> dict:
    """The share of sentences with a time on the 12-hour clock or a date of numbers whose day
    is clear, whose translation has each written the target's way ("17:00", "31.12.2026"; "17
    Uhr" for a whole hour counts too), translated raw and as the service sends them
    (app.text.protect: times written on the 24-hour clock, dates masked)."""
    form = DATE_FORMATS.get(translator.target_lang)
    wanted = [[on_24_hours(m).rstrip(".") for m in CLOCK_12.finditer(s)]
              + [d for m in DATE.finditer(s) if form and (d := date_for(m.group(), form))
                 != m.group()]
              for s in sources]
    sources = [s for s, w in zip(sources, wanted, strict=True) if w]
    wanted = [w for w in wanted if w]
    _, raw, out = raw_and_masked(translator, sources)

    def right(output: str, forms: list[str]) -> bool:
        return all(f in output or (f.endswith(":00") and f"{f[:-3]} Uhr" in output)
                   for f in forms)

    def share(outputs: list[str]) -> float:
        return round(sum(map(right, outputs, wanted)) / len(sources), 4)

    return {"segments": len(sources), "raw": share(raw), "masked": share(out)}


def test_sets(src: Path, ref: Path | None, limit: int, synthetic: int,
              words: list[Path] = ()) -> dict[str, tuple]:
    sources = src.read_text(encoding="utf-8").splitlines()
    refs = ref.read_text(encoding="utf-8").splitlines() if ref else [None] * len(sources)
    with_spans = [(s, r) for s, r in zip(sources, refs, strict=True) if found(s)]
    plain = [s for s in sources if not found(s) and 4 <= len(s.split()) <= 25]
    made = [_ADDITIONS[i % len(_ADDITIONS)](s) for i, s in enumerate(plain[:synthetic])]
    if limit:
        with_spans = with_spans[:limit]
    with_words = [(s, r) for s, r in with_spans
                  if any(span.kind in WORD_KINDS for span in found(s))]
    sets = {
        "test split": ([s for s, _ in with_spans], [r for _, r in with_spans]),
        "synthetic markup/URL/e-mail": (made, [None] * len(made)),
        "test split, words": ([s for s, _ in with_words], [r for _, r in with_words]),
    }
    for path in words:
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        sets[path.name] = (lines, [None] * len(lines))
    return sets


def chrf(hyps: list[str], refs: list[str | None]) -> float | None:
    pairs = [(h, r) for h, r in zip(hyps, refs, strict=True) if r is not None]
    if not pairs:
        return None
    import sacrebleu

    return round(sacrebleu.corpus_chrf([h for h, _ in pairs], [[r for _, r in pairs]]).score, 1)


def measure(translator: Translator, sources: list[str], refs: list, style: MaskStyle | None):
    t0 = time.perf_counter()
    if style is None:
        outputs = [r.text for r in translator.translate_batch(sources)]
        model_ok = None
    else:
        masked = [mask(s, style) for s in sources]
        raw = [r.text for r in translator.translate_batch([m.text for m in masked])]
        outputs = [unmask(m, out) for m, out in zip(masked, raw, strict=True)]
        model_ok = sum(
            Counter(x.group() for x in SPAN_RE.finditer(out)) == Counter(m.masks)
            for m, out in zip(masked, raw, strict=True)
        ) / len(sources)
    exact = sum(survive(s, o) for s, o in zip(sources, outputs, strict=True))
    return {
        "segments": len(sources),
        "spans_survive": round(exact / len(sources), 4),
        "model_returned_masks": None if model_ok is None else round(model_ok, 4),
        "chrF": chrf(outputs, refs),
        "seconds": round(time.perf_counter() - t0, 1),
    }, outputs


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", default="bundles/en-de")
    ap.add_argument("--src", type=Path, default=Path("data/en-de-v2/test.en"))
    ap.add_argument("--ref", type=Path, default=None, help="default: --src with .de")
    ap.add_argument("--limit", type=int, default=0, help="test-split segments (0: all)")
    ap.add_argument("--synthetic", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--words", type=Path, nargs="+", default=[],
                    help="sentences with words of software, one a line")
    ap.add_argument("--written", type=Path, nargs="+", default=[],
                    help="sentences with times on the 12-hour clock or dates of numbers")
    ap.add_argument("--numbers", type=Path, nargs="+", default=[],
                    help="sentences with numbers such as 1,000, or quantities")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--examples", type=int, default=0, help="print this many failures per way")
    args = ap.parse_args(argv)
    ref = args.ref or (args.src.with_suffix(".de") if args.src.suffix == ".en" else None)
    translator = Translator.from_dir(args.bundle, intra_threads=args.threads, inter_threads=1)
    report = {}
    sets = test_sets(args.src, ref, args.limit, args.synthetic, args.words)
    for name, (sources, refs) in sets.items():
        if not sources:
            continue  # (no test sentence with a word of software within --limit)
        for way, style in [("raw", None), *STYLES.items()]:
            row, outputs = measure(translator, sources, refs, style)
            report[f"{name} / {way}"] = row
            print(f"{name:30} {way:6} {json.dumps(row)}", flush=True)
            lost = [(s, o) for s, o in zip(sources, outputs, strict=True)
                    if not survive(s, o)]
            for s, o in lost[: args.examples]:
                print(f"    {s!r}\n -> {o!r}")
    for path in args.written:
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        report[f"written: {path.name}"] = row = written(translator, lines)
        print(f"{path.name:30} written the target's way {json.dumps(row)}")
    for path in args.numbers:
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        report[f"numbers: {path.name}"] = row = numbers(translator, lines)
        print(f"{path.name:30} written the target's way {json.dumps(row)}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
