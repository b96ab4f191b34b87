"""A count-based target-language model for reranking: an interpolated Kneser-Ney n-gram model
over the translation model's own pieces, written in the file app/engine/ngram.py reads.

    python -m model.ngram --train data/en-de-v3/train --lang de \
        --tokenizer bundles/en-de/sentencepiece.model --out runs/lm.ngram.bin \
        --weight general=3 --weight phrase=3 --weight dictionary=0

Counting is exact and takes seconds on a CPU, where the neural language model (model/lm.py)
needs hours to learn as much; scoring is a few table look-ups per piece, where the neural one
runs a Transformer over every hypothesis. export.lm puts the file into a bundle and chooses its
weight on dev sets.

The model (Chen and Goodman's interpolated Kneser-Ney, one discount per order):

    P(w | h) = max(c(hw) - D, 0) / c(h) + D * T(h) / c(h) * P(w | h without its first piece)

where c is the count at the highest order and the number of distinct pieces before the n-gram
(its continuation count) below it, T(h) the number of distinct pieces seen after h, and
D = n1 / (n1 + 2 n2) from the numbers of n-grams seen once and twice (times seen, weights
aside). A sentence of a domain given `--weight domain=k` counts k times (0 leaves the domain
out). N-grams of order 2 and up seen fewer than `--min-count` times are dropped unless a longer
kept one needs them as context; a dropped n-gram is scored through its context's back-off
weight, as any unseen one (the back-off weights are not renormalized, so a pruned model's
probabilities sum to less than 1). The default keeps them all: rare n-grams are much of what
the in-domain text shares with its dev set.
"""

from __future__ import annotations

import argparse
import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.engine.ngram import padded, write_ngram_file
from model.data import read_domains
from model.tokenizer import BOS_ID, EOS_ID, Tokenizer


def _discount(counts: np.ndarray) -> float:
    """Kneser and Ney's discount from the counts of counts (one and two)."""
    n1, n2 = int((counts == 1).sum()), int((counts == 2).sum())
    return n1 / (n1 + 2 * n2) if n1 and n2 else 0.5


@dataclass
class Table:
    """One order's n-grams (app/engine/ngram.py's keys), sorted, with what the estimate needs."""

    keys: np.ndarray  # uint64: place of the context in the order below << bits | last piece
    suffix: np.ndarray  # place of the n-gram without its first piece in the order below
    counts: np.ndarray  # the model's count (module docstring)
    raw: np.ndarray  # the count pruning looks at: times seen, or the continuation count


def count_ngrams(sentences: list[list[int]], weights: np.ndarray, order: int, bits: int
                 ) -> list[Table]:
    """The tables of orders 1..order. Each n-gram is named by the place of its context in the
    sorted table below (so any order fits a 64-bit key); a table also holds the n-grams that
    are only contexts of the order above (the BOS padding), with count 0."""
    pad = order - 1
    ids, lengths, offset = padded(sentences, pad, BOS_ID, EOS_ID)
    ids = ids.astype(np.uint64)
    scored = offset >= pad
    weight = np.repeat(weights, lengths)
    places: list[np.ndarray] = []  # per order, per position: the place of the n-gram ending there
    tables: list[Table] = []
    for n in range(1, order + 1):
        at = offset >= n - 1  # where an n-gram ends (BOS padding included)
        keys = ids.copy()
        if n > 1:  # the (n-1)-gram ending one position earlier, then the piece
            keys[1:] = (places[-1][:-1] << np.uint64(bits)) | ids[1:]
        unique, first, inverse = np.unique(keys[at], return_index=True, return_inverse=True)
        seen = np.bincount(inverse[scored[at]], minlength=len(unique))
        counts = np.bincount(inverse[scored[at]], weights=weight[at][scored[at]],
                             minlength=len(unique))
        # without its first piece: the (n-1)-gram ending at the same position
        suffix = places[-1][np.nonzero(at)[0][first]] if n > 1 else np.zeros(len(unique))
        place = np.zeros(len(ids), np.uint64)
        place[at] = inverse
        places.append(place)
        tables.append(Table(unique, suffix.astype(np.int64), counts, seen.astype(np.float64)))
    for n in range(1, order):  # below the top: continuation counts
        above = tables[n]
        distinct = np.bincount(above.suffix[above.raw > 0], minlength=len(tables[n - 1].keys))
        tables[n - 1].counts = tables[n - 1].raw = distinct.astype(np.float64)
    return tables


def estimate(tables: list[Table], bits: int, vocab_size: int
             ) -> tuple[list[np.ndarray], list[np.ndarray], float]:
    """Interpolated Kneser-Ney (module docstring): for each order, each key's log P and its
    log back-off weight as a context; and the log-probability of a piece never seen."""
    logp: list[np.ndarray] = []
    backoff: list[np.ndarray] = [np.zeros(len(t.keys)) for t in tables]
    unk = 0.0
    for n, t in enumerate(tables, start=1):
        d = _discount(t.raw[t.raw > 0])
        context = (t.keys >> np.uint64(bits)).astype(np.int64) if n > 1 else np.zeros(
            len(t.keys), np.int64)
        size = len(tables[n - 2].keys) if n > 1 else 1
        total = np.bincount(context, weights=t.counts, minlength=size)
        kinds = np.bincount(context, weights=(t.counts > 0).astype(np.float64), minlength=size)
        gamma = np.divide(d * kinds, total, out=np.ones_like(total), where=total > 0)
        first = np.divide(np.maximum(t.counts - d, 0), total[context],
                          out=np.zeros_like(t.counts), where=total[context] > 0)
        if n == 1:
            lower = np.full(len(t.keys), 1.0 / vocab_size)
            unk = float(np.log(gamma[0] / vocab_size))
        else:
            lower = np.exp(logp[-1][t.suffix])
            backoff[n - 2] = np.log(gamma)
        logp.append(np.log(first + gamma[context] * lower))
    return logp, backoff, unk


def prune(tables: list[Table], bits: int, min_count: int) -> list[np.ndarray]:
    """For each order, the mask of keys kept: every unigram; above, those seen min_count times
    or more, and every context of a kept n-gram of the order above."""
    keep = [tables[-1].raw >= min_count]
    for n in range(len(tables) - 1, 0, -1):
        mask = tables[n - 1].raw >= min_count
        mask[(tables[n].keys[keep[0]] >> np.uint64(bits)).astype(np.int64)] = True
        keep.insert(0, mask)
    keep[0][:] = True
    return keep


def build(sentences: list[list[int]], weights: np.ndarray, vocab_size: int, order: int = 4,
          min_count: int = 1) -> tuple[dict, dict[str, np.ndarray]]:
    """The header and arrays of an n-gram file (app/engine/ngram.py) from tokenized
    sentences."""
    bits = max(int(vocab_size - 1).bit_length(), 1)
    tables = count_ngrams(sentences, weights, order, bits)
    logp, backoff, unk = estimate(tables, bits, vocab_size)
    keep = prune(tables, bits, min_count)
    header = {"order": order, "bits": bits, "bos": BOS_ID, "eos": EOS_ID, "unk_logp": unk}
    arrays: dict[str, np.ndarray] = {}
    low = np.uint64((1 << bits) - 1)
    for n in range(1, order + 1):
        keys, kept = tables[n - 1].keys[keep[n - 1]], keep[n - 1]
        if n > 1:  # contexts renumbered to their places among the kept
            renumber = (np.cumsum(keep[n - 2]) - 1).astype(np.uint64)
            keys = (renumber[(keys >> np.uint64(bits)).astype(np.int64)] << np.uint64(bits)) | (
                keys & low)
        largest = int(keys[-1]) if len(keys) else 0
        arrays[f"keys{n}"] = keys.astype(next(t for t in (np.uint16, np.uint32, np.uint64)
                                              if largest <= np.iinfo(t).max))
        arrays[f"logp{n}"], arrays[f"logp_values{n}"] = quantize(logp[n - 1][kept])
        if n < order:
            arrays[f"backoff{n}"], arrays[f"backoff_values{n}"] = quantize(backoff[n - 1][kept])
    return header, arrays


def quantize(values: np.ndarray, levels: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """(codes uint8, the values they stand for): each code a quantile's bin, standing for the
    mean of the values in it. Reranking compares sums of log-probabilities, and a byte per
    value keeps them within a few hundredths of a nat on average."""
    if not len(values):
        return np.zeros(0, np.uint8), np.zeros(1, np.float32)
    edges = np.unique(np.quantile(values, np.linspace(0, 1, levels + 1)[1:-1]))
    codes = np.searchsorted(edges, values)
    sums = np.bincount(codes, weights=values, minlength=len(edges) + 1)
    sizes = np.maximum(np.bincount(codes, minlength=len(edges) + 1), 1)
    return codes.astype(np.uint8), (sums / sizes).astype(np.float32)


def parse_weights(items: list[str]) -> dict[str, float]:
    """["general=3", ...] -> {"general": 3.0}"""
    weights = {}
    for item in items:
        name, _, value = item.partition("=")
        try:
            weight = float(value)
        except ValueError:
            weight = -1.0
        if not name or weight < 0:
            raise SystemExit(f"--weight wants DOMAIN=NUMBER >= 0, got {item!r}")
        weights[name] = weight
    return weights


def build_file(train: str, lang: str, tokenizer: str | Path, out: str | Path, order: int = 4,
               min_count: int = 1, domain_weights: dict[str, float] | None = None) -> dict:
    """Count <train>.<lang> into the n-gram file `out`; returns what the file records of its
    making (its `info`: export.lm copies it into the manifest)."""
    if order < 1 or min_count < 1:
        raise SystemExit(f"order and min_count must be >= 1, got {order} and {min_count}")
    started = time.monotonic()
    texts = Path(f"{train}.{lang}").read_text(encoding="utf-8").splitlines()
    weights = np.ones(len(texts))
    if domain_weights:
        labels = read_domains(f"{train}.domain", len(texts))
        unknown = set(domain_weights) - set(labels)
        if unknown:
            raise SystemExit(f"--weight names {sorted(unknown)}, not in {train}.domain")
        weights = np.array([domain_weights.get(label, 1.0) for label in labels])
    chosen = np.array([w > 0 and bool(t.strip()) for t, w in zip(texts, weights, strict=True)],
                      dtype=bool)
    tok = Tokenizer.load(tokenizer)
    print(f"{int(chosen.sum())} sentences; tokenizing", flush=True)
    sentences = tok.encode_batch([t for t, keep in zip(texts, chosen, strict=True) if keep])
    print(f"{sum(map(len, sentences))} pieces; counting", flush=True)
    header, arrays = build(sentences, weights[chosen], tok.vocab_size, order, min_count)
    info = {"kind": "ngram", "corpus": f"{train}.{lang}", "order": order,
            "min_count": min_count, "domain_weights": domain_weights or {},
            "sentences": len(sentences), "pieces": sum(map(len, sentences)),
            "ngrams": [len(arrays[f"keys{n}"]) for n in range(1, order + 1)],
            "tokenizer_sha256": hashlib.sha256(tok.state()).hexdigest()}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    write_ngram_file(out, {**header, "info": info}, arrays)
    info["megabytes"] = round(Path(out).stat().st_size / 1e6, 1)
    info["seconds"] = round(time.monotonic() - started)
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m model.ngram", description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--train", required=True, help="corpus prefix: <train>.<lang>, "
                        "and <train>.domain for --weight")
    parser.add_argument("--lang", required=True, help="the target language's suffix")
    parser.add_argument("--tokenizer", required=True,
                        help="the translation model's SentencePiece model")
    parser.add_argument("--out", required=True, help="the file to write (lm.ngram.bin)")
    parser.add_argument("--order", type=int, default=4)
    parser.add_argument("--min-count", type=int, default=1,
                        help="drop n-grams (order 2 and up) seen fewer times (default: keep all)")
    parser.add_argument("--weight", action="append", default=[], metavar="DOMAIN=K",
                        help="count a domain's sentences K times (0: leave it out)")
    args = parser.parse_args(argv)
    info = build_file(args.train, args.lang, args.tokenizer, args.out, args.order,
                      args.min_count, parse_weights(args.weight))
    kept = ", ".join(f"{n}-grams {c}" for n, c in enumerate(info["ngrams"], start=1))
    print(f"{args.out}: {kept}; {info['megabytes']} MB, {info['seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
