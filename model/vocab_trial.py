"""Choose a joint vocabulary size by measurement: train one SentencePiece model per size
on a corpus's training side (as model.train does) and report pieces per word on dev sets.

    python -m model.vocab_trial --corpus data/en-de --sizes 8000,16000,24000 --out runs/vocab

Fewer pieces per word mean shorter sequences (faster training and decoding) and words the
model sees whole; more pieces in the vocabulary mean a larger embedding and rarer pieces,
each seen less often in training. The table shows where the gain flattens.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from model.data import read_corpus
from model.tokenizer import Tokenizer, train_tokenizer


def pieces_per_word(tok: Tokenizer, texts: list[str]) -> float:
    """Pieces over whitespace-separated words, summed over ``texts``."""
    pieces = sum(len(ids) for ids in tok.encode_batch(texts))
    return pieces / max(sum(len(t.split()) for t in texts), 1)


def measure(tok: Tokenizer, dev_sets: dict[str, list[tuple[str, str]]]) -> dict[str, float]:
    """Pieces per word of each side of each dev set."""
    row: dict[str, float] = {}
    for name, pairs in dev_sets.items():
        row[f"{name}_en"] = round(pieces_per_word(tok, [s for s, _ in pairs]), 3)
        row[f"{name}_de"] = round(pieces_per_word(tok, [t for _, t in pairs]), 3)
    return row


def _sizes(text: str) -> list[int]:
    try:
        return [int(size) for size in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma list of whole numbers: {text!r}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m model.vocab_trial", description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--corpus", type=Path, required=True, help="directory of train.en/.de")
    parser.add_argument("--sizes", type=_sizes, default="8000,16000,24000",
                        help="comma list of vocabulary sizes")
    parser.add_argument("--dev", default="dev,dev.general", help="dev file prefixes to measure")
    parser.add_argument("--out", type=Path, required=True, help="where spm-<size>.model go")
    parser.add_argument("--max-sentences", type=int, default=2_000_000,
                        help="SentencePiece's sample of the training texts (model.train: 2M)")
    args = parser.parse_args(argv)
    try:
        train = read_corpus(str(args.corpus / "train"), "en", "de")
        dev_sets = {name: read_corpus(str(args.corpus / name), "en", "de")
                    for name in args.dev.split(",")}
    except OSError as err:  # a corpus directory or dev split that is not there
        print(f"error: {err}", file=sys.stderr)
        return 1
    texts = [side for pair in train for side in pair]
    rows = []
    for size in args.sizes:
        start = time.time()
        path = train_tokenizer(texts, args.out / f"spm-{size}.model", vocab_size=size,
                               max_sentences=args.max_sentences)
        tok = Tokenizer.load(path)
        row = {"size": size, "pieces": tok.vocab_size, **measure(tok, dev_sets),
               "train_seconds": round(time.time() - start)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    (args.out / "trial.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
