"""Score a bundle's variants on a test set with the ONNX Runtime engine, as the service runs them.

    python -m export.evaluate bundles/en-de --data data/en-de/test [--beam-size 4] [--record]
    python -m export.evaluate bundles/en-de --data data/en-de/test.general --domain general --record
    python -m export.evaluate bundles/en-de --examples recipes/everyday-en.txt --record
    python -m export.evaluate bundles/en-de --data data/en-de/dev --tune-length-penalty \\
        0.6,1.0,1.4,1.8 --record

For each variant: sacreBLEU BLEU and chrF (with signatures) and target tokens/s, translating the
test set in length-sorted batches of 32. --record writes the numbers into manifest.json (and so
MODEL_CARD.md), and makes int8 the default variant when it is faster and loses at most
--max-int8-loss BLEU against fp32. With --domain, the numbers go to the per-domain table
(``domain_scores``) instead, and the default variant is left alone. --examples translates each
line of a file with the default variant and records the real outputs for the model card.
--hurried scores the test set as users type it in a hurry: sources lower-cased, a final full
stop, question or exclamation mark dropped from source and reference. --capitals scores it as
written all in capitals (sources and references upper-cased); it is not recorded.
Decoding uses the bundle's defaults (its manifest's `decoding`) unless given.
--tune-length-penalty scores the default variant with each length penalty on --data (a dev split,
not the test split) and, with --record, makes the best one the bundle's default when it gains
at least --min-gain BLEU over the current default (noise on a dev split is a few tenths).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

from tqdm import tqdm

from app.engine.bundle import (
    DEFAULT_DECODING,
    MANIFEST,
    BundleError,
    decoding_section,
    load_bundle,
)
from app.engine.translator import Translator
from app.engine.types import TranslationOptions
from export.bundle import save_manifest
from model.data import read_corpus, typed_in_a_hurry
from model.evaluate import corpus_scores
from model.hardware import machine


def score_variant(
    bundle_dir: Path,
    variant: str,
    sources: list[str],
    refs: list[str],
    options: TranslationOptions,
    threads: int,
    batch_size: int = 32,
) -> tuple[dict, list[str]]:
    """Translate sources with one variant; returns its scores and the translations."""
    translator = Translator.from_dir(bundle_dir, variant=variant, intra_threads=threads)
    translator.warmup()
    hyps: list[str] = []
    n_tokens = 0
    started = time.perf_counter()
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    by_index: dict[int, str] = {}
    for start in tqdm(range(0, len(order), batch_size), desc=variant, unit="batch"):
        chunk = order[start : start + batch_size]
        for i, result in zip(
            chunk, translator.translate_batch([sources[i] for i in chunk], options), strict=True
        ):
            by_index[i] = result.text
            n_tokens += len(result.tokens) + 1  # EOS counts as a generated token
    seconds = time.perf_counter() - started
    hyps = [by_index[i] for i in range(len(sources))]
    scores = corpus_scores(hyps, refs)
    scores.update(
        tokens_per_s=round(n_tokens / seconds, 1),
        seconds=round(seconds, 1),
        bleu=round(scores["bleu"], 2),
        chrf=round(scores["chrf"], 2),
    )
    return scores, hyps


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m export.evaluate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bundle", type=Path)
    p.add_argument("--data", default="data/en-de/test", help="Moses prefix, .tsv or .tmx")
    p.add_argument("--variants", help="comma list (default: every variant of the bundle)")
    p.add_argument("--beam-size", type=int,
                   help="default: the bundle's (manifest decoding.beam_size)")
    p.add_argument("--length-penalty", type=float,
                   help="default: the bundle's (manifest decoding.length_penalty)")
    p.add_argument("--tune-length-penalty", metavar="VALUES",
                   help="comma list: score each on --data; --record keeps the best as default")
    p.add_argument("--min-gain", type=float, default=0.3,
                   help="tuning: BLEU a value must gain over the current default to replace it")
    p.add_argument("--limit", type=int, default=0, help="only the first N pairs")
    p.add_argument("--threads", type=int, default=0, help="ONNX Runtime intra-op threads")
    p.add_argument("--record", action="store_true", help="write scores into manifest.json")
    p.add_argument("--max-int8-loss", type=float, default=1.0)
    p.add_argument("--output-dir", type=Path, help="write each variant's translations here")
    p.add_argument("--corpus", type=Path, help="corpus.json of the training data, for the card")
    p.add_argument("--limitations", help="the model card's 'intended use and limits' text")
    p.add_argument("--domain", help="record the scores as this domain's row (software, general...)")
    p.add_argument("--examples", type=Path, help="translate each line of this file instead")
    p.add_argument("--hurried", action="store_true",
                   help="the sources as typed in a hurry: lower-cased, without their final "
                        "mark (dropped from the reference too)")
    p.add_argument("--no-rerank", action="store_true",
                   help="leave out the bundle's reranking language model (export.lm)")
    p.add_argument("--capitals", action="store_true",
                   help="the sources and references written all in capitals (not recorded)")
    args = p.parse_args(argv)
    if args.capitals and args.record:
        p.error("--capitals scores are not recorded (the card has no row for them)")

    try:
        manifest = load_bundle(args.bundle).manifest
        decoding = decoding_section(manifest)
        if args.length_penalty is None:
            args.length_penalty = float(decoding.get("length_penalty",
                                                     DEFAULT_DECODING["length_penalty"]))
        if args.beam_size is None:
            args.beam_size = int(decoding.get("beam_size", DEFAULT_DECODING["beam_size"]))
        variants = args.variants.split(",") if args.variants else list(manifest["variants"])
        args.reranked = (not args.no_rerank and args.beam_size > 1
                         and bool((manifest.get("rerank") or {}).get("weight")))
        unknown = sorted(set(variants) - set(manifest["variants"]))
        if unknown:
            raise BundleError(f"{args.bundle} has no variant {', '.join(unknown)} "
                              f"(it has {', '.join(manifest['variants'])})")
        if args.examples:
            return examples(args, manifest)
        pairs = read_corpus(args.data, manifest["source_lang"], manifest["target_lang"])
    except (BundleError, OSError) as exc:  # not a bundle, no such variant, test set or file
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.limit:
        pairs = pairs[: args.limit]
    if args.hurried:
        pairs = [typed_in_a_hurry(s, t) for s, t in pairs]
    if args.capitals:
        pairs = [(s.upper(), t.upper()) for s, t in pairs]
    sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
    if args.tune_length_penalty:
        return tune_length_penalty(args, manifest, sources, refs)
    options = TranslationOptions(beam_size=args.beam_size, length_penalty=args.length_penalty,
                                 rerank=not args.no_rerank)
    results = {}
    for variant in variants:
        if "cpu" not in manifest["variants"][variant].get("providers", []):
            print(f"{variant}: skipped (not a CPU variant)")
            continue
        scores, hyps = score_variant(args.bundle, variant, sources, refs, options, args.threads)
        results[variant] = scores
        print(
            f"{variant}: BLEU {scores['bleu']:.2f} chrF {scores['chrf']:.2f} "
            f"{scores['tokens_per_s']:.0f} tokens/s ({scores['seconds']} s)"
        )
        if args.output_dir:
            args.output_dir.mkdir(parents=True, exist_ok=True)
            (args.output_dir / f"{variant}.{manifest['target_lang']}").write_text(
                "\n".join(hyps) + "\n", encoding="utf-8"
            )
    if not results:
        return 1
    first = next(iter(results.values()))
    print(f"signatures: {first['bleu_signature']} | {first['chrf_signature']}")
    if args.record and args.domain:
        record_domain(args.bundle, manifest, results, args, len(pairs))
    elif args.record:
        record(args.bundle, manifest, results, args, len(pairs))
    return 0


def tune_length_penalty(args: argparse.Namespace, manifest: dict, sources: list[str],
                        refs: list[str]) -> int:
    """BLEU of the default variant per length penalty; --record keeps the best as the default."""
    values = [float(x) for x in args.tune_length_penalty.split(",")]
    if "test" in Path(str(args.data)).name:
        print(f"warning: {args.data} looks like a test split; tune on a dev split")
    variant = args.variants.split(",")[0] if args.variants else manifest["default_variant"]
    bleu = {}
    for value in values:
        options = TranslationOptions(beam_size=args.beam_size, length_penalty=value,
                                     rerank=not args.no_rerank)
        scores, _ = score_variant(args.bundle, variant, sources, refs, options, args.threads)
        bleu[value] = scores["bleu"]
        print(f"length penalty {value}: BLEU {scores['bleu']:.2f} chrF {scores['chrf']:.2f}")
    best = max(values, key=lambda v: (bleu[v], -abs(v - 1.0)))
    current = args.length_penalty
    if current in bleu and bleu[best] - bleu[current] < args.min_gain:
        print(f"best: {best}, but it gains less than --min-gain {args.min_gain} BLEU over the "
              f"current default {current}, which stays")
        best = current
    print(f"best: {best}")
    if args.record:
        manifest.setdefault("decoding", {})["length_penalty"] = best
        manifest["decoding_tuning"] = {
            "data": str(args.data), "sentences": len(sources), "variant": variant,
            "beam_size": args.beam_size, "bleu": {str(v): bleu[v] for v in values},
            "chosen": best, "min_gain": args.min_gain,
        }
        save_manifest(args.bundle, manifest)
        print(f"recorded length penalty {best} as the default in {args.bundle / MANIFEST}")
    return 0


def examples(args: argparse.Namespace, manifest: dict) -> int:
    """Translate a fixed list of sentences with the default variant; print (and record) them."""
    lines = [x for x in args.examples.read_text(encoding="utf-8").splitlines() if x.strip()]
    variant = manifest["default_variant"]
    translator = Translator.from_dir(args.bundle, variant=variant, intra_threads=args.threads)
    options = TranslationOptions(beam_size=args.beam_size, length_penalty=args.length_penalty,
                                 rerank=not args.no_rerank)
    results = translator.translate_batch(lines, options)
    rows = [{"source": x, "translation": r.text} for x, r in zip(lines, results, strict=True)]
    for row in rows:
        print(f"{row['source']}\n  -> {row['translation']}")
    if args.record:
        manifest["examples"] = {
            "file": str(args.examples),
            "variant": variant,
            "beam_size": args.beam_size,
            "reranked": args.reranked,
            "rows": rows,
        }
        save_manifest(args.bundle, manifest)
    return 0


def record_domain(bundle: Path, manifest: dict, results: dict, args, n: int) -> None:
    """Store one domain's scores (the per-domain table of the card)."""
    key = decoding_mode(args.beam_size, args.reranked)
    row = manifest.setdefault("domain_scores", {}).setdefault(args.domain, {})
    if row and row.get("hurried", False) != args.hurried:
        # a written row and its typed-in-a-hurry twin are two rows; one must not replace the other
        kind = "typed in a hurry" if args.hurried else "written"
        held = "written" if args.hurried else "typed-in-a-hurry"
        raise SystemExit(f"domain {args.domain!r} holds {held} scores: record the {kind} ones "
                         f"under a name of their own (--domain)")
    if row.get("data") != str(args.data):
        row.clear()
    row.update(data=str(args.data), sentences=n, length_penalty=args.length_penalty)
    if args.hurried:
        row["hurried"] = True
    for variant, s in results.items():
        row.setdefault(variant, {})[key] = {k: s[k] for k in ("bleu", "chrf")}
    save_manifest(bundle, manifest)
    print(f"recorded domain {args.domain} in {bundle / MANIFEST}")


def decoding_mode(beam_size: int, reranked: bool = False) -> str:
    """The key scores are stored under: "greedy", "beam4", "beam4+lm" (reranked by the bundle's
    language model), ..."""
    return (f"beam{beam_size}" + ("+lm" if reranked else "")) if beam_size > 1 else "greedy"


def record(bundle: Path, manifest: dict, results: dict, args: argparse.Namespace, n: int) -> None:
    """Store the scores under the decode settings used, and pick the serving default variant."""
    key = decoding_mode(args.beam_size, args.reranked)
    scores = manifest.setdefault("scores", {})
    scores["test_set"] = {"data": str(args.data), "sentences": n, "machine": machine(),
                          "length_penalty": args.length_penalty}
    for variant, s in results.items():
        scores.setdefault(variant, {})[key] = {
            k: s[k] for k in ("bleu", "chrf", "tokens_per_s", "bleu_signature", "chrf_signature")
        }
    fp32, int8 = results.get("fp32"), results.get("int8")
    if fp32 and int8:
        faster = int8["tokens_per_s"] > fp32["tokens_per_s"]
        close = fp32["bleu"] - int8["bleu"] <= args.max_int8_loss
        manifest["default_variant"] = "int8" if faster and close else "fp32"
        print(
            f"default variant: {manifest['default_variant']} (int8 faster: {faster}, "
            f"BLEU loss {fp32['bleu'] - int8['bleu']:.2f})"
        )
    if args.corpus:
        manifest["data"] = corpus_summary(args.corpus)
    if args.limitations:
        manifest["limitations"] = args.limitations
    save_manifest(bundle, manifest)
    print(f"recorded in {bundle / MANIFEST}")


# sources of the corpus builder that are not gettext catalogs, as the model card names them
CARD_SOURCES = (
    ("libreoffice-help", "LibreOffice's help (aligned by paragraph id)"),
    ("trans-de-en", "the Ding German-English dictionary (entries and example phrases)"),
)


def corpus_summary(path: Path, top: int = 12) -> dict:
    """The model card's view of a corpus.json written by `python -m model.corpus build`."""
    corpus = json.loads(path.read_text(encoding="utf-8"))
    packages = corpus.get("packages", {})
    sources = sorted(
        corpus.get("sources", {}).items(), key=lambda kv: -kv[1].get("new_unique_pairs", 0)
    )
    licence = {"libreoffice-help": "MPL-2.0"}
    rows = [
        {
            "source": name,
            "pairs": info.get("new_unique_pairs", 0),
            "licence": licence.get(name)
            or packages.get(name, {}).get("licence", "see corpus.json"),
        }
        for name, info in sources[:top]
    ]
    licences = Counter(p.get("licence", "unknown") for p in packages.values())
    named = corpus.get("sources", {})
    parts = [what for source, what in CARD_SOURCES if source in named]
    parts.append("gettext catalogs of programs and games")
    kinds = " and ".join([", ".join(parts[:-1]), parts[-1]] if len(parts) > 1 else parts)
    domains = corpus.get("domains") or {}
    by_domain = "; ".join(f"{d}: {n.get('train', 0):,} train, {n.get('dev', 0):,} dev, "
                          f"{n.get('test', 0):,} test" for d, n in domains.items())
    return {
        "description": f"Parallel text built by `python -m model.corpus build --pair "
        f"{corpus.get('pair', '?')}` from Debian's packages: {kinds}; {len(packages)} packages in "
        "all. Split by a hash of the source text."
        + (f" Pairs per domain: {by_domain}." if by_domain else ""),
        "counts": corpus.get("counts", {}),
        "top_sources": rows,
        "packages": len(packages),
        "licences": dict(licences.most_common()),
    }


if __name__ == "__main__":
    sys.exit(main())
