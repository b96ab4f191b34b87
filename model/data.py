"""Parallel corpus readers, a cleaning pass, and token-budget batching with length buckets."""

from __future__ import annotations

import ctypes
import itertools
import random
import signal
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

Pair = tuple[str, str]
XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"


def read_tsv(path: str | Path) -> list[Pair]:
    """Tab-separated pairs, source first; lines without exactly one tab are skipped."""
    pairs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) == 2:
                pairs.append((parts[0], parts[1]))
    return pairs


def read_moses(src_path: str | Path, tgt_path: str | Path) -> list[Pair]:
    """Line-aligned files (train.en + train.de); they must have the same number of lines."""
    src = Path(src_path).read_text(encoding="utf-8").splitlines()
    tgt = Path(tgt_path).read_text(encoding="utf-8").splitlines()
    if len(src) != len(tgt):
        raise ValueError(f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}")
    return list(zip(src, tgt, strict=True))


def read_tmx(path: str | Path, src_lang: str, tgt_lang: str) -> list[Pair]:
    """Translation units of a TMX file holding both languages (matched on the language prefix)."""
    pairs = []
    for _, tu in ET.iterparse(path, events=("end",)):
        if tu.tag != "tu":
            continue
        texts = {}
        for tuv in tu.iter("tuv"):
            lang = (tuv.get(XML_LANG) or tuv.get("lang") or "").lower().split("-")[0]
            seg = tuv.find("seg")
            if seg is not None:
                texts[lang] = "".join(seg.itertext())
        if src_lang in texts and tgt_lang in texts:
            pairs.append((texts[src_lang], texts[tgt_lang]))
        tu.clear()
    return pairs


def read_corpus(path: str | Path, src_lang: str = "en", tgt_lang: str = "de") -> list[Pair]:
    """Read a .tsv or .tmx file, or a Moses prefix (reads prefix.src_lang and prefix.tgt_lang)."""
    path = Path(path)
    if path.suffix == ".tsv":
        return read_tsv(path)
    if path.suffix == ".tmx":
        return read_tmx(path, src_lang, tgt_lang)
    return read_moses(f"{path}.{src_lang}", f"{path}.{tgt_lang}")


@dataclass
class CleanReport:
    kept: int = 0
    dropped: Counter = field(default_factory=Counter)

    def __str__(self) -> str:
        reasons = ", ".join(f"{k}: {v}" for k, v in sorted(self.dropped.items())) or "none"
        return f"kept {self.kept} pairs; dropped {sum(self.dropped.values())} ({reasons})"


def clean_pairs(
    pairs: list[Pair], max_chars: int = 1000, max_ratio: float = 3.0
) -> tuple[list[Pair], CleanReport]:
    """Drop empty pairs, overlong ones, extreme length ratios and exact duplicates."""
    report = CleanReport()
    seen: set[Pair] = set()
    kept = []
    for src, tgt in pairs:
        src, tgt = " ".join(src.split()), " ".join(tgt.split())
        if not src or not tgt:
            reason = "empty"
        elif max(len(src), len(tgt)) > max_chars:
            reason = "too_long"
        elif max(len(src), len(tgt)) / min(len(src), len(tgt)) > max_ratio and len(src) > 10:
            reason = "length_ratio"
        elif (src, tgt) in seen:
            reason = "duplicate"
        else:
            seen.add((src, tgt))
            kept.append((src, tgt))
            continue
        report.dropped[reason] += 1
    report.kept = len(kept)
    return kept, report


@dataclass(frozen=True)
class Example:
    src: list[int]  # source ids followed by EOS
    tgt: list[int]  # BOS, target ids, EOS


def make_examples(
    src_ids: list[list[int]], tgt_ids: list[list[int]], bos: int, eos: int, max_len: int
) -> list[Example]:
    """Wrap encoded pairs with BOS/EOS, dropping any longer than max_len tokens."""
    examples = []
    for s, t in zip(src_ids, tgt_ids, strict=True):
        if 0 < len(s) < max_len and 0 < len(t) < max_len - 1:
            examples.append(Example(s + [eos], [bos] + t + [eos]))
    return examples


def token_batches(
    examples: list[Example], max_tokens: int, seed: int | None = None
) -> list[list[Example]]:
    """Group examples into batches whose padded size (rows x longest side) stays within
    max_tokens. Examples are sorted by their longer side, the length the budget counts (with a
    little noise when seeded, so that batches differ between epochs), then by source length;
    the batch order is shuffled when seeded. Sorting by the source alone left much of a batch's
    target side padding: targets of one source length vary widely."""
    rng = random.Random(seed)
    noise = (lambda: rng.random()) if seed is not None else (lambda: 0.0)
    order = sorted(examples, key=lambda e: (max(len(e.src), len(e.tgt)) + noise(), len(e.src)))
    batches: list[list[Example]] = []
    current: list[Example] = []
    longest = 0
    for ex in order:
        size = max(len(ex.src), len(ex.tgt))
        if current and max(longest, size) * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(ex)
        longest = max(longest, size)
    if current:
        batches.append(current)
    if seed is not None:
        rng.shuffle(batches)
    return batches


def collate(batch: list[Example], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """-> src (B, S), tgt_in (B, T), tgt_out (B, T), padded with pad_id."""

    def pad(rows: list[list[int]]) -> torch.Tensor:
        width = max(len(r) for r in rows)
        return torch.tensor([r + [pad_id] * (width - len(r)) for r in rows], dtype=torch.long)

    src = pad([e.src for e in batch])
    tgt = pad([e.tgt for e in batch])  # (B, T + 1)
    return src, tgt[:, :-1], tgt[:, 1:]


def iterate_epochs(
    examples: list[Example] | Callable[[int], list[Example]],
    max_tokens: int,
    seed: int,
    start_epoch: int = 0,
) -> Iterator[tuple[int, int, list[Example]]]:
    """Endless (epoch, batch index, batch) stream; each epoch has its own deterministic order.
    `examples` may be a function of the epoch (a per-epoch sample of the corpus)."""
    epoch = start_epoch
    while True:
        chosen = examples(epoch) if callable(examples) else examples
        for i, batch in enumerate(token_batches(chosen, max_tokens, seed=seed + epoch)):
            yield epoch, i, batch
        epoch += 1


class Batch(NamedTuple):
    """One batch as the step takes it: src (B, S), tgt_in and tgt_out (B, T), and the flat
    indices of tgt_out's real (not padding) positions, found on the host so that a GPU need
    not send anything back (a mask's count) before it can go on."""

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    real: torch.Tensor


def prepare_batch(batch: list[Example], pad_id: int) -> Batch:
    src, tgt_in, tgt_out = collate(batch, pad_id)
    return Batch(src, tgt_in, tgt_out, (tgt_out != pad_id).flatten().nonzero().squeeze(1))


class BatchStream(IterableDataset):
    """iterate_epochs' (epoch, batch index, Batch) stream without its first `skip` batches (a
    resumed run has seen them). Read by n DataLoader workers, worker w makes every n-th batch
    from the w-th on, so that the loader, taking from the workers in turn, keeps the order."""

    def __init__(self, examples: list[Example] | Callable[[int], list[Example]],
                 max_tokens: int, seed: int, start_epoch: int, skip: int, pad_id: int) -> None:
        self.examples, self.max_tokens, self.seed = examples, max_tokens, seed
        self.start_epoch, self.skip, self.pad_id = start_epoch, skip, pad_id

    def __iter__(self) -> Iterator[tuple[int, int, Batch]]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        stream = iterate_epochs(self.examples, self.max_tokens, self.seed, self.start_epoch)
        for k, (epoch, index, batch) in enumerate(itertools.islice(stream, self.skip, None)):
            if k % workers == worker:
                yield epoch, index, prepare_batch(batch, self.pad_id)


def _tie_to_the_trainer(worker_id: int) -> None:
    # A stop signal sent to the whole run (Ctrl-C, or SIGTERM to every process of it) must not
    # kill a worker: the trainer, still reading batches, would fail before it saves. The
    # loader ends its workers when the trainer stops reading.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # A trainer killed outright (SIGKILL, the kernel's OOM killer) takes its workers with it:
    # left alone, a worker whose made batches nobody reads waits for ever to hand them over.
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


_PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies


def stream_batches(stream: BatchStream, workers: int, pin: bool,
                   ready: int = 256) -> Iterator[tuple[int, int, Batch]]:
    """The stream's batches, made in the calling process (workers=0) or ahead of the trainer by
    that many worker processes, up to `ready` batches waiting: an epoch's sampling, typing in a
    hurry and bucketing take seconds of one core, which a GPU would otherwise spend waiting.
    `pin` puts them in page-locked memory, so the copy to a GPU does not hold the host up."""
    if not workers:
        return iter(stream)
    # fork: the workers share the corpus already in memory instead of receiving a pickled copy
    loader = DataLoader(stream, batch_size=None, num_workers=workers, pin_memory=pin,
                        prefetch_factor=max(1, ready // workers), multiprocessing_context="fork",
                        worker_init_fn=_tie_to_the_trainer)
    return iter(loader)


END_MARKS = ".!?"
HURRIES = ("lower", "unmarked", "both")


def typed_in_a_hurry(src: str, tgt: str, how: str = "both") -> Pair:
    """A pair whose source reads as users type in a chat box: lower-cased ("lower"), without
    its final full stop, question or exclamation mark ("unmarked"), or both. A mark goes from
    both sides or neither, so no mark in means none out; the German keeps its case (its nouns
    stay capitalised whatever the English looked like)."""
    if how not in HURRIES:
        raise ValueError(f"how must be one of {HURRIES}, got {how!r}")
    if how != "unmarked":
        src = src.lower()
    if how != "lower" and src[-1:] in END_MARKS and tgt[-1:] in END_MARKS:
        src, tgt = src.rstrip(END_MARKS).rstrip(), tgt.rstrip(END_MARKS).rstrip()
    return src, tgt


def read_domains(path: str | Path, count: int) -> list[str]:
    """One domain label per line, aligned with a corpus of `count` pairs."""
    labels = Path(path).read_text(encoding="utf-8").splitlines()
    if len(labels) != count:
        raise ValueError(f"{path} has {len(labels)} labels for {count} pairs")
    return labels


def sample_domains(
    by_domain: dict[str, list[Example]], fractions: dict[str, float], seed: int
) -> list[Example]:
    """Every domain's examples, those of a domain in `fractions` taken that many times: a share
    below 1 is a seeded random sample (the same when a run resumes), 2.5 is every example twice
    plus a sample of half of them (up-weighting a small domain)."""
    rng = random.Random(seed)
    chosen: list[Example] = []
    for domain in sorted(by_domain):
        examples = by_domain[domain]
        share = fractions.get(domain, 1.0)
        whole, part = divmod(share, 1.0)
        chosen.extend(examples * int(whole))
        if part:
            chosen.extend(rng.sample(examples, round(part * len(examples))))
    return chosen
