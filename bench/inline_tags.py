"""What inline tags cost the translation: tag pairs as masks in the sentence vs carried over.

    python -m bench.inline_tags [--bundle bundles/en-de] [--src data/en-de/test.en
        --ref data/en-de/test.de] [--sentences 200] [--seed 0] [--examples 10] [--json out.json]

Test sentences of 4-25 words without markup (the corpus strips markup, so the test split has
none), in three sets: "pair", one to three words at a random place (seeded) wrapped in
`<b>...</b>`; "atom", a tag that stands alone (`<img src="icon.png"/>` or `<x id="1"/>`) put
between two words at random; "br", a `<br>` with no space around it between two words of one
sentence (the next word lowercase, the one before ending no clause; sentences with no such
place are left out). Translated with the bundle's default decoding three ways:

- plain: the sentences without the tags (what the words should read like);
- masks: the tags masked in the sentence (`{1}...{2}`, app.text.protect), as the service did before
  (for "br": split, the text on each side of the `<br>` translated apart, as the HTML path did
  before: app.documents.html_file without app.text.protect.join_breaks);
- carried: app.text.tags, as the service does now: the plain sentence and the wrapped words
  translated and the pair carried over; an atom taken out and put back by app.text.protect.unmask
  (for "br": each sentence in a `<p>` through app.documents.translate_document, as .html
  documents and the `format: html` API go).

Reported: chrF and BLEU of each output with the tags stripped, against the references, and the
share of outputs holding the tags as the source does (the pair once, opening before closing;
the atom once).

    python -m bench.inline_tags --speed [--pairs 1000,2000,4000] [--against REV] [--repeat 3]

What carrying pairs over costs, without a model: one paragraph of that many pairs through
app.documents.translate_segments (markup, as a .docx paragraph of formatting runs goes), a
stand-in translator, best of --repeat runs, two paragraphs: "packed", `<b>a</b> ` again and
again, the words returned as they are; "moved", sentences with two pairs each, their words
returned in reverse order, so each pair's words move across its sentence. With --against, the
same with app/text/tags.py as it is at that git revision, its seconds, the ratio, and whether
the outputs are the same."""

from __future__ import annotations

import random
import re
import subprocess
import sys
import time
import types
from pathlib import Path

from app import documents
from app.documents import html_file, translate_document
from app.engine import Translator
from app.text import tags
from app.text.protect import find_spans, mask, unmask
from bench.common import print_row, quality_parser, write_json

ATOMS = ('<img src="icon.png"/>', '<x id="1"/>')


def tagged_set(src: Path, ref: Path, n: int, seed: int, kind: str = "pair"
               ) -> tuple[list[str], list[str], list[str]]:
    """(plain sources, the same with a <b> pair or an atom, references)."""
    sources = src.read_text(encoding="utf-8").splitlines()
    refs = ref.read_text(encoding="utf-8").splitlines()
    rng = random.Random(seed)
    usable = [i for i, s in enumerate(sources) if 4 <= len(s.split()) <= 25 and not find_spans(s)]
    picked = rng.sample(usable, min(n, len(usable)))
    plain = [sources[i] for i in picked]
    tagged = []
    for s in plain:
        words = s.split()
        if kind == "atom":
            a = rng.randrange(1, len(words))
            tagged.append(" ".join([*words[:a], rng.choice(ATOMS), *words[a:]]))
            continue
        if kind == "br":
            places = [a for a in range(1, len(words)) if words[a][0].islower()
                      and words[a - 1][-1] not in ".!?…:;,"]
            if not places:
                tagged.append("")
                continue
            a = rng.choice(places)
            tagged.append(" ".join([*words[:a - 1], words[a - 1] + "<br>" + words[a],
                                    *words[a + 1:]]))
            continue
        a = rng.randrange(len(words))
        b = min(len(words), a + rng.randint(1, 3))
        tagged.append(" ".join([*words[:a], "<b>" + " ".join(words[a:b]) + "</b>", *words[b:]]))
    keep = [k for k, t in enumerate(tagged) if t]
    return ([plain[k] for k in keep], [tagged[k] for k in keep],
            [refs[picked[k]] for k in keep])


_INSERTED = re.compile("</?b>|<br>|" + "|".join(re.escape(a) for a in ATOMS))


def scores(outputs: list[str], refs: list[str], kind: str) -> dict:
    """chrF and BLEU with the inserted tags stripped (and the spaces an atom leaves closed up),
    and the share of outputs that hold the inserted tags as the source does."""
    import sacrebleu

    stripped = [re.sub(r" {2,}", " ", _INSERTED.sub("" if kind == "pair" else " ", o)).strip()
                for o in outputs]
    if kind == "pair":
        kept = sum(o.count("<b>") == 1 and o.count("</b>") == 1
                   and o.index("<b>") < o.index("</b>") for o in outputs)
    elif kind == "br":
        kept = sum(o.count("<br>") == 1 for o in outputs)
    else:
        kept = sum(sum(o.count(a) for a in ATOMS) == 1 for o in outputs)
    return {"chrF": round(sacrebleu.corpus_chrf(stripped, [refs]).score, 2),
            "BLEU": round(sacrebleu.corpus_bleu(stripped, [refs]).score, 2),
            "tags_kept": round(kept / len(outputs), 4)}


# a paragraph's repeated text, its pairs, what the stand-in translator does to a sentence
SPEED_PARAGRAPHS = {
    "packed": ("<b>a</b> ", 1, lambda s: s),
    "moved": ("Open the <b>file</b> menu and choose <i>Save</i> now. ", 2,
              lambda s: " ".join(reversed(s.split()))),
}


def revision_tags(rev: str) -> types.ModuleType:
    """app/text/tags.py as it is at git revision `rev`, loaded as a module of its own."""
    root = Path(__file__).resolve().parents[1]
    source = subprocess.run(["git", "show", f"{rev}:app/text/tags.py"], cwd=root, check=True,
                            capture_output=True, text=True).stdout
    module = types.ModuleType(f"tags_at_{rev}")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"{rev}:app/text/tags.py", "exec"), module.__dict__)
    return module


def carrying_seconds(kind: str, pairs: int, module: types.ModuleType, repeat: int
                     ) -> tuple[float, str]:
    """(best seconds of `repeat` runs, the output) of a `kind` paragraph of `pairs` pairs
    through app.documents.translate_segments, with `module` as its app.text.tags."""
    unit, per, standin = SPEED_PARAGRAPHS[kind]
    text = unit * max(1, pairs // per)
    kept, documents.tags = documents.tags, module
    try:
        best, out = float("inf"), ""
        for _ in range(repeat):
            t0 = time.perf_counter()
            out = documents.translate_segments([text], lambda ts: [standin(t) for t in ts],
                                               markup=True)[0]
            best = min(best, time.perf_counter() - t0)
    finally:
        documents.tags = kept
    return best, out


def speed(args) -> dict:
    """--speed: seconds per paragraph now (and at --against), by kind and number of pairs."""
    baseline = revision_tags(args.against) if args.against else None
    report = {}
    print(f"{'paragraph':9} {'pairs':>6} {'now s':>8}"
          + (f" {args.against + ' s':>12} {'ratio':>6}  same output" if baseline else ""))
    for kind in SPEED_PARAGRAPHS:
        for pairs in args.pairs:
            seconds, out = carrying_seconds(kind, pairs, tags, args.repeat)
            row = {"seconds": round(seconds, 3)}
            line = f"{kind:9} {pairs:>6} {seconds:>8.3f}"
            if baseline:
                before, old = carrying_seconds(kind, pairs, baseline, args.repeat)
                row |= {f"{args.against} seconds": round(before, 3),
                        "ratio": round(before / seconds, 1), "same_output": old == out}
                line += f" {before:>12.3f} {before / seconds:>6.1f}  {old == out}"
            report[f"{kind} / {pairs}"] = row
            print(line, flush=True)
    return report


def main(argv: list[str] | None = None) -> None:
    ap = quality_parser(__doc__, 200)
    ap.add_argument("--speed", action="store_true",
                    help="time carrying pairs over instead (no model; see above)")
    ap.add_argument("--pairs", type=lambda v: [int(n) for n in v.split(",")],
                    default=[1000, 2000, 4000], help="with --speed: pairs per paragraph")
    ap.add_argument("--against", help="with --speed: also time app/text/tags.py at this git "
                    "revision")
    ap.add_argument("--repeat", type=int, default=3, help="with --speed: best of this many")
    args = ap.parse_args(argv)
    if args.speed:
        report = speed(args)
        if args.json:
            write_json(args.json, report)
        return
    ref = args.ref or args.src.with_suffix(".de")
    engine = Translator.from_dir(args.bundle)

    def translate(texts: list[str]) -> list[str]:
        return [r.text for r in engine.translate_batch(texts)]

    def masks(texts: list[str]) -> list[str]:
        masked = [mask(t) for t in texts]
        return [unmask(m, o) for m, o in zip(masked, translate([m.text for m in masked]),
                                             strict=True)]

    def carried(texts: list[str]) -> list[str]:
        masked = [mask(t) for t in texts]
        plans, inputs = tags.plan([m.text for m in masked],
                                  [tags.tag_marks(m) for m in masked])
        return [unmask(m, o) for m, o in zip(masked, tags.carried(plans, translate(inputs)),
                                             strict=True)]

    def html_path(texts: list[str], join: bool = True) -> list[str]:
        """Each text in a <p> through the .html document path; join False: a <br> always
        ends the sentence, as before app.text.protect.join_breaks."""
        source = "".join(f"<p>{t}</p>\n" for t in texts).encode()
        kept = html_file.join_breaks
        if not join:
            html_file.join_breaks = lambda parts: parts
        try:
            out = translate_document(source, "html", translate).decode()
        finally:
            html_file.join_breaks = kept
        return [line[3:-4] for line in out.splitlines()]

    ways = {"pair": (("masks", masks), ("carried", carried)),
            "atom": (("masks", masks), ("carried", carried)),
            "br": (("split", lambda texts: html_path(texts, join=False)), ("carried", html_path))}
    report = {}
    for kind, tagged_ways in ways.items():
        plain, tagged, refs = tagged_set(args.src, ref, args.sentences, args.seed, kind)
        report[f"{kind} / sentences"] = len(plain)
        print(f"{kind:4} {len(plain)} sentences", flush=True)
        for way, sources, run in (("plain", plain, translate),
                                  *((w, tagged, r) for w, r in tagged_ways)):
            t0 = time.perf_counter()
            outputs = run(sources)
            row = {**scores(outputs, refs, kind), "seconds": round(time.perf_counter() - t0, 1)}
            if way == "plain":
                row.pop("tags_kept")
            report[f"{kind} / {way}"] = row
            print_row(f"{kind:4} {way:8}", row, sources, outputs, args.examples)
    if args.json:
        write_json(args.json, report)


if __name__ == "__main__":
    main()
