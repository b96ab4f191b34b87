"""What the reranking language model costs and gives: the bundle's default decoding with and
without it, timed in alternation on the same sentences, and scored.

    python -m bench.rerank [--bundle bundles/en-de] [--data data/en-de-v3/test.general]
                           [--sentences 500] [--single 100] [--rounds 3]

Each round translates the sentences in batches of 32 (one call, the engine's running batches)
and --single of them one at a time (the fused search, as a lone request runs), first with the
language model and then without, or the other way round in the next round. Printed: the
best-of-rounds sentences/s of each, their ratio, batch-1 p50 latency, and BLEU/chrF of each
against the references (all --sentences).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from app.engine import TranslationOptions, Translator
from model.data import read_corpus
from model.evaluate import corpus_scores


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.rerank", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bundle", type=Path, default=Path("bundles/en-de"))
    p.add_argument("--data", default="data/en-de-v3/test.general", help="Moses prefix")
    p.add_argument("--sentences", type=int, default=500)
    p.add_argument("--single", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    translator = Translator.from_dir(args.bundle)
    if translator.reranker is None:
        raise SystemExit(f"{args.bundle} has no reranking language model (python -m export.lm)")
    pairs = read_corpus(args.data, translator.source_lang, translator.target_lang)
    sources, refs = [s for s, _ in pairs[: args.sentences]], [t for _, t in pairs[: args.sentences]]
    translator.warmup()
    on = translator.default_options
    modes = {"with the language model": on, "without": TranslationOptions(
        **{**on.__dict__, "rerank": False})}
    rates: dict[str, list[float]] = {m: [] for m in modes}
    single: dict[str, list[float]] = {m: [] for m in modes}
    outputs: dict[str, list[str]] = {}
    for r in range(args.rounds):
        for mode in (list(modes) if r % 2 == 0 else list(modes)[::-1]):
            started = time.perf_counter()
            results = translator.translate_batch(sources, modes[mode])
            rates[mode].append(len(sources) / (time.perf_counter() - started))
            outputs[mode] = [x.text for x in results]
            for text in sources[: args.single]:
                started = time.perf_counter()
                translator.translate_batch([text], modes[mode])
                single[mode].append(time.perf_counter() - started)
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(
            f"{m} {rates[m][-1]:.1f} sentences/s" for m in modes))
    print(f"\n{len(sources)} sentences of {args.data}, {translator.variant}, beam "
          f"{on.beam_size}, {translator.reranker.candidates} candidates, weight "
          f"{translator.reranker.weight}; best of {args.rounds} rounds\n")
    print("| decoding | sentences/s (batches of 32) | batch-1 p50 ms | BLEU | chrF |")
    print("|---|---:|---:|---:|---:|")
    for mode in modes:
        s = corpus_scores(outputs[mode], refs)
        print(f"| {mode} | {max(rates[mode]):.1f} | {statistics.median(single[mode]) * 1000:.1f} "
              f"| {s['bleu']:.2f} | {s['chrf']:.2f} |")
    first, second = (max(rates[m]) for m in modes)
    p50 = [statistics.median(single[m]) for m in modes]
    print(f"\nthroughput with/without: {first / second:.3f}; batch-1 p50 with/without: "
          f"{p50[0] / p50[1]:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
