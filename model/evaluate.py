"""Decode a test set with the PyTorch reference decoders and score it with sacreBLEU.

    python -m model.evaluate --checkpoint runs/en-de/averaged.pt --data data/en-de/test \\
        [--beam-size 4] [--output hyps.de]

Prints BLEU and chrF with their sacreBLEU signatures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from tqdm import tqdm

from model.search import beam_search, greedy_search
from model.tokenizer import Tokenizer
from model.transformer import Transformer


def corpus_scores(hyps: list[str], refs: list[str]) -> dict:
    """Corpus BLEU and chrF (sacreBLEU defaults, 13a tokenization for BLEU)."""
    from sacrebleu.metrics import BLEU, CHRF

    bleu, chrf = BLEU(), CHRF()
    b = bleu.corpus_score(hyps, [refs])
    c = chrf.corpus_score(hyps, [refs])
    return {
        "bleu": b.score,
        "chrf": c.score,
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }


def translate_greedy(
    model: Transformer,
    tok: Tokenizer,
    texts: list[str],
    batch_size: int = 64,
    progress: bool = False,
    **length: float,
) -> list[str]:
    """Greedy translations in length-sorted batches, returned in input order."""
    ids = tok.encode_batch(texts)
    order = sorted(range(len(texts)), key=lambda i: len(ids[i]))
    out: list[str] = [""] * len(texts)
    starts = range(0, len(order), batch_size)
    for start in tqdm(starts, disable=not progress, unit="batch"):
        chunk = order[start : start + batch_size]
        for i, hyp in zip(
            chunk, greedy_search(model, [ids[i] for i in chunk], **length), strict=True
        ):
            out[i] = tok.decode(hyp)
    return out


def translate_beam(
    model: Transformer,
    tok: Tokenizer,
    texts: list[str],
    beam_size: int = 4,
    length_penalty: float = 1.0,
    progress: bool = False,
    **length: float,
) -> list[str]:
    """Beam-search translations, one sentence at a time (the reference, not the fast path)."""
    out = []
    for text in tqdm(texts, disable=not progress, unit="sent"):
        best = beam_search(model, tok.encode(text), beam_size, length_penalty, **length)[0]
        out.append(tok.decode(best.tokens))
    return out


def main(argv: list[str] | None = None) -> int:
    from model.checkpoint import load_model
    from model.data import read_corpus

    parser = argparse.ArgumentParser(
        prog="python -m model.evaluate", description=__doc__,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--data", default="data/en-de/test", help="Moses prefix, .tsv or .tmx")
    parser.add_argument("--src-lang", default="en")
    parser.add_argument("--tgt-lang", default="de")
    parser.add_argument("--beam-size", type=int, default=1, help="1 = greedy search")
    parser.add_argument("--length-penalty", type=float, default=1.0)
    parser.add_argument("--limit", type=int, default=0, help="only the first N pairs")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--output", help="write the translations here, one per line")
    parser.add_argument("--json", help="write the scores here as JSON")
    args = parser.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        model, tok, _ = load_model(args.checkpoint)
        pairs = read_corpus(args.data, args.src_lang, args.tgt_lang)
    except OSError as err:  # a checkpoint or test set that is not there
        print(f"error: {err}", file=sys.stderr)
        return 1
    if args.limit:
        pairs = pairs[: args.limit]
    sources = [s for s, _ in pairs]
    started = time.perf_counter()
    if args.beam_size == 1:
        hyps = translate_greedy(model, tok, sources, progress=True)
    else:
        hyps = translate_beam(
            model, tok, sources, args.beam_size, args.length_penalty, progress=True
        )
    seconds = time.perf_counter() - started
    scores = corpus_scores(hyps, [t for _, t in pairs])
    scores.update(
        sentences=len(pairs),
        beam_size=args.beam_size,
        seconds=round(seconds, 1),
        data=str(args.data),
        checkpoint=str(args.checkpoint),
    )
    print(f"BLEU {scores['bleu']:.2f}  ({scores['bleu_signature']})")
    print(f"chrF {scores['chrf']:.2f}  ({scores['chrf_signature']})")
    print(f"{len(pairs)} sentences in {seconds:.1f} s, beam {args.beam_size}")
    if args.output:
        Path(args.output).write_text("\n".join(hyps) + "\n", encoding="utf-8")
    if args.json:
        Path(args.json).write_text(json.dumps(scores, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
