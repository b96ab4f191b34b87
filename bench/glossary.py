"""Do glossary terms come out as given? Test sentences translated without and with a glossary.

    python -m bench.glossary [--bundle bundles/en-de] [--src data/en-de/test.en
        --ref data/en-de/test.de] [--ding .cache/unpacked/trans-de-en_1.9-6_all] [--limit 0]
        [--threads 2] [--json out.json]

Term pairs come from the Ding dictionary (model.corpus.ding: its English-German pairs): for each
test sentence, the dictionary entries whose English term (one to three words, four letters or
more, not the German term itself) is in the English sentence and whose German term is in the
reference, both as whole words; the longest English term is the sentence's glossary (one entry,
as a client would send it). Each such sentence is translated twice through the service's own
path (app.translation.service: protected spans, segmentation, the glossary's masks and targets)
with the bundle's decoding defaults (beam 4) on the served variant (int8 where the bundle has it):
without the glossary and with it; and, to show why the service also translates the text as it is,
with the masks alone (every term masked, its target written after).

Reported: the share of sentences whose German term is in the output (as a whole word, as given
or capitalised), before and after; BLEU and chrF (sacreBLEU) of those sentences, and of the whole
test split (the sentences without a term translated once, the same both ways), without and with.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from collections.abc import Iterable
from pathlib import Path

import sacrebleu

from app.config import Settings
from app.engine import Translator
from app.engine.types import Result, TranslationOptions
from app.text.glossary import Glossary
from app.translation.registry import LoadedModel
from app.translation.service import (
    RequestedOptions,
    TextResult,
    TranslationRequest,
    TranslationService,
    check_glossary,
)
from bench.common import read_pairs

_WORD = re.compile(r"[^\W\d_]+(?:[-'][^\W\d_]+)*")
_ENGLISH = re.compile(r"[a-z]+(?:[ -][a-z]+){0,2}")  # one to three lowercase words
_GERMAN = re.compile(r"[^\W\d_]+(?:[ -][^\W\d_]+){0,2}")
MIN_TERM_CHARS = 4


class DirectBatcher:
    """The batcher's one call the service makes, straight on the engine in batches."""

    def __init__(self, batch_size: int = 32) -> None:
        self.batch_size = batch_size

    async def translate(self, engine, texts: list[str], options: TranslationOptions,
                        timeout: float | None = None, priority=None) -> list[Result]:
        out: list[Result] = []
        for i in range(0, len(texts), self.batch_size):
            out += engine.translate_batch(texts[i : i + self.batch_size], options)
        return out


def served(translator: Translator, texts: list[str], glossaries: list[dict[str, str] | None],
           options: RequestedOptions = RequestedOptions()) -> list[TextResult]:
    """Each text translated as the service translates a one-text request (its glossary, if
    any, over no server glossary)."""
    settings = Settings(models_dir=Path("."))
    service = TranslationService(None, DirectBatcher(), settings)  # type: ignore[arg-type]
    model = LoadedModel(translator, Path("."))

    async def run_all() -> list[TextResult]:
        out = []
        hops = [(model, _options(model, options))]
        for text, glossary in zip(texts, glossaries, strict=True):
            request = TranslationRequest([text], translator.source_lang,
                                         translator.target_lang, options=options)
            terms = check_glossary(glossary, settings, "glossary")
            results, _ = await service._run_route(request, hops, terms)
            out += results
        return out

    return asyncio.run(run_all())


def _options(model: LoadedModel, requested: RequestedOptions) -> TranslationOptions:
    from app.translation.service import build_options

    return build_options(requested, model.default_options, Settings(models_dir=Path(".")))


def dictionary(pairs: Iterable[tuple[str, str]]) -> dict[str, set[str]]:
    """English term -> its German terms, for the entries a glossary test can use."""
    found: dict[str, set[str]] = {}
    for en, de in pairs:
        if (len(en) >= MIN_TERM_CHARS and _ENGLISH.fullmatch(en) and _GERMAN.fullmatch(de)
                and de.casefold() != en.casefold()):
            found.setdefault(en, set()).add(de)
    return found


def has_term(text: str, term: str) -> bool:
    """`term` in `text` as a whole word (as given, or with its first letter capitalised)."""
    forms = {term, term[:1].upper() + term[1:]}
    return any(re.search(rf"(?<!\w){re.escape(f)}(?!\w)", text) for f in forms)


def pick_term(source: str, reference: str, terms: dict[str, set[str]]) -> tuple[str, str] | None:
    """The longest English term of the sentence (one to three words) whose German term is in
    the reference; None when there is none."""
    words = [w.lower() for w in _WORD.findall(source)]
    best: tuple[str, str] | None = None
    for n in (3, 2, 1):
        for i in range(len(words) - n + 1):
            en = " ".join(words[i : i + n])
            for de in sorted(terms.get(en, ())):
                if has_term(reference, de) and has_term(source.lower(), en) and (
                        best is None or len(en) > len(best[0])):
                    best = (en, de)
    return best


def scores(hyps: list[str], refs: list[str]) -> dict[str, float]:
    return {"bleu": round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2),
            "chrf": round(sacrebleu.corpus_chrf(hyps, [refs]).score, 2)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", default="bundles/en-de")
    ap.add_argument("--src", type=Path, default=Path("data/en-de/test.en"))
    ap.add_argument("--ref", type=Path, default=None, help="default: --src with .de")
    ap.add_argument("--ding", type=Path,
                    default=Path(".cache/unpacked/trans-de-en_1.9-6_all"),
                    help="the unpacked trans-de-en package")
    ap.add_argument("--limit", type=int, default=0, help="test sentences (0: all)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--examples", type=int, default=0, help="print this many misses")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    from model.corpus.ding import read_ding

    ref_path = args.ref or args.src.with_suffix(".de")
    sources, refs = read_pairs(args.src, ref_path, args.limit or None)
    assert refs is not None
    terms = dictionary(read_ding(args.ding))
    picked = [pick_term(s, r, terms) for s, r in zip(sources, refs, strict=True)]
    with_term = [i for i, p in enumerate(picked) if p]
    translator = Translator.from_dir(args.bundle, intra_threads=args.threads, inter_threads=1)
    print(f"{len(with_term)} of {len(sources)} test sentences have a dictionary term; "
          f"variant {translator.variant}", flush=True)
    t0 = time.perf_counter()
    base = [r.text for r in served(translator, sources, [None] * len(sources))]
    subset = [sources[i] for i in with_term]
    glossaries = [dict([picked[i]]) for i in with_term]  # type: ignore[arg-type]
    glossed = [r.text for r in served(translator, subset, glossaries)]
    # the masks alone (no translation without them to prefer): the masked text through the
    # same path, each mask's target written after
    masks = [Glossary.of(g).mask(s) for g, s in zip(glossaries, subset, strict=True)]
    masked = [m.restore(r.text) for m, r in zip(masks, served(
        translator, [m.text for m in masks], [None] * len(masks)), strict=True)]
    full = list(base)
    for i, text in zip(with_term, glossed, strict=True):
        full[i] = text
    sub_refs = [refs[i] for i in with_term]
    targets = [picked[i][1] for i in with_term]  # type: ignore[index]
    before = [has_term(base[i], t) for i, t in zip(with_term, targets, strict=True)]
    after = [has_term(out, t) for out, t in zip(glossed, targets, strict=True)]
    masks_only = [has_term(out, t) for out, t in zip(masked, targets, strict=True)]
    report = {
        "sentences": len(sources), "with_term": len(with_term), "variant": translator.variant,
        "term_present_before": round(sum(before) / len(before), 4),
        "term_present_after": round(sum(after) / len(after), 4),
        "term_present_masks_only": round(sum(masks_only) / len(masks_only), 4),
        "term_sentences_without": scores([base[i] for i in with_term], sub_refs),
        "term_sentences_with": scores(glossed, sub_refs),
        "term_sentences_masks_only": scores(masked, sub_refs),
        "all_without": scores(base, refs),
        "all_with": scores(full, refs),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    print(json.dumps(report, indent=2))
    misses = [(sources[i], picked[i], t) for i, t, ok in zip(with_term, glossed, after,
                                                             strict=True) if not ok]
    for source, term, out in misses[: args.examples]:
        print(f"  {term}: {source!r}\n    -> {out!r}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
