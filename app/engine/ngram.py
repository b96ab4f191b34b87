"""A count-based language model of the target side, for reranking (model/ngram.py builds it).

It reads the translation model's own pieces, so a hypothesis is scored from its token ids with
no text in between. The file (`lm.ngram.bin`) is memory-mapped, not read: its pages are the
page cache's, so every process serving the bundle shares them and the load takes no time.

    b"NMTNGRAM", the header's length (uint64, little-endian), the header (JSON), then the
    arrays, each at an offset that is a multiple of 64; the header names them:
    {"order": N, "bits": b, "bos": .., "eos": .., "unk_logp": .., "info": {how it was made},
     "arrays": {name: {"dtype": "<u4", "length": .., "offset": ..}}}

For each order n = 1..N, a sorted table of the n-grams kept, an n-gram named by its context's
place in the table of order n-1 and its last piece:

    keys{n}            unsigned  place of the context << bits | last piece (a unigram: the
                                 piece), in the smallest width that holds the largest
    logp{n}            uint8     log P(last piece | the others), natural log, as a code into
    logp_values{n}     float32   the order's values (each code the mean of a quantile's bin)
    backoff{n}         uint8     (n < N) the log back-off weight of the n-gram as a context,
    backoff_values{n}  float32   a code into these values

`unk_logp` is the log-probability of a piece the corpus never had. A sentence is read as N-1
BOS, its pieces, then EOS. The log-probability of a piece is that of the longest n-gram ending
in it that the file holds, plus the back-off weights of the longer contexts the file holds (the
back-off form of an interpolated Kneser-Ney model, as an ARPA file writes it). Every context of
a kept n-gram is kept, so scoring walks the tables one order at a time: one vectorized binary
search per order, far cheaper than the search that found the hypotheses.
"""

from __future__ import annotations

import json
import mmap
import struct
from pathlib import Path
from typing import Any

import numpy as np

MAGIC = b"NMTNGRAM"
ALIGN = 64


def _aligned(size: int) -> int:
    """size rounded up to a multiple of ALIGN."""
    return -(-size // ALIGN) * ALIGN


def write_ngram_file(path: str | Path, header: dict[str, Any],
                     arrays: dict[str, np.ndarray]) -> None:
    """The file of the module docstring: header (all but "arrays") and the named arrays."""
    places, offset = {}, 0
    for name, a in arrays.items():
        places[name] = {"dtype": a.dtype.str, "length": len(a), "offset": offset}
        offset += _aligned(a.nbytes)
    text = json.dumps({**header, "arrays": places}).encode()
    start = _aligned(len(MAGIC) + 8 + len(text))
    with open(path, "wb") as f:
        f.write(MAGIC + struct.pack("<Q", len(text)) + text)
        for name, a in arrays.items():
            f.seek(start + places[name]["offset"])
            f.write(np.ascontiguousarray(a).tobytes())
        f.truncate(start + offset)


def padded(token_lists: list[list[int]], pad: int, bos: int, eos: int
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows as one array, each `pad` BOS, its tokens, then EOS (as the model reads a
    sentence); with each row's length and each position's offset within its row."""
    rows = [np.array([bos] * pad + list(t) + [eos], dtype=np.int64) for t in token_lists]
    lengths = np.array([len(r) for r in rows])
    ids = np.concatenate(rows)
    return ids, lengths, np.arange(len(ids)) - np.repeat(np.cumsum(lengths) - lengths, lengths)


class NgramModel:
    """An n-gram file's tables, scoring hypotheses as the neural language model's graph does:
    the log-probability per token of each (EOS counted)."""

    def __init__(self, path: str | Path) -> None:
        with open(path, "rb") as f:
            if f.read(len(MAGIC)) != MAGIC:
                raise ValueError(f"{path} is not an n-gram file (model/ngram.py)")
            self.map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        (length,) = struct.unpack_from("<Q", self.map, len(MAGIC))
        header = json.loads(self.map[len(MAGIC) + 8 : len(MAGIC) + 8 + length])
        start = _aligned(len(MAGIC) + 8 + length)
        arrays = {name: np.frombuffer(self.map, np.dtype(p["dtype"]), p["length"],
                                      start + p["offset"])
                  for name, p in header["arrays"].items()}
        self.order, self.bits = int(header["order"]), int(header["bits"])
        self.bos, self.eos = int(header["bos"]), int(header["eos"])
        self.unk_logp = np.float32(header["unk_logp"])
        self.info: dict[str, Any] = header.get("info", {})
        orders = range(1, self.order + 1)
        self.keys = [arrays[f"keys{n}"] for n in orders]
        self.logp = [(arrays[f"logp{n}"], arrays[f"logp_values{n}"]) for n in orders]
        self.backoff = [(arrays[f"backoff{n}"], arrays[f"backoff_values{n}"])
                        for n in range(1, self.order)]

    def _find(self, n: int, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(found, place) of keys (uint64) in order n's table."""
        table = self.keys[n - 1]
        if not len(table):  # every n-gram of the order pruned
            return np.zeros(len(keys), bool), np.zeros(len(keys), np.int64)
        fits = keys <= np.iinfo(table.dtype).max
        query = np.where(fits, keys, 0).astype(table.dtype)
        place = np.minimum(np.searchsorted(table, query), len(table) - 1)
        return fits & (table[place] == query), place

    def log_probs(self, ids: np.ndarray) -> np.ndarray:
        """(len(ids),) the log-probability of each piece of ids given those before it; ids must
        begin with order - 1 BOS (their values are meaningless)."""
        ids = ids.astype(np.uint64)
        found, place = self._find(1, ids)
        out = np.where(found, _value(self.logp[0], place), self.unk_logp)
        for n in range(2, self.order + 1):
            # the n-gram ending at i: the (n-1)-gram ending at i - 1, then piece i
            has_context = np.concatenate([[False], found[:-1]])
            context = np.concatenate([[0], place[:-1]])
            found, place = self._find(n, (context.astype(np.uint64) << np.uint64(self.bits))
                                      | ids)
            found &= has_context
            backed_off = out + np.where(has_context, _value(self.backoff[n - 2], context), 0)
            out = np.where(found, _value(self.logp[n - 1], place), backed_off)
        return out

    def per_token(self, token_lists: list[list[int]], unjudged: int | None = None
                  ) -> np.ndarray:
        """(N,) each hypothesis' log-probability per token (EOS counted). A piece `unjudged`
        (the unknown piece, which stands for source text the vocabulary lacks and the engine
        copies back) adds nothing and is not counted: the model would rank a hypothesis that
        drops such text above one that keeps it."""
        pad = self.order - 1
        ids, lengths, offset = padded(token_lists, pad, self.bos, self.eos)
        scored = offset >= pad  # a row's tokens and EOS: its padding is not predicted
        if unjudged is not None:
            scored &= ids != unjudged
        row = np.repeat(np.arange(len(lengths)), lengths)[scored]
        total = np.bincount(row, weights=self.log_probs(ids)[scored], minlength=len(lengths))
        count = np.maximum(np.bincount(row, minlength=len(lengths)), 1)
        return (total / count).astype(np.float32)


def _value(coded: tuple[np.ndarray, np.ndarray], place: np.ndarray) -> np.ndarray:
    """The values at `place` (zeros for an order pruned away: nothing there is found)."""
    codes, values = coded
    return values[codes[place]] if len(codes) else np.zeros(len(place), np.float32)
