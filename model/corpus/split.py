"""Deterministic train/dev/test assignment by a hash of the normalised source text.

Every pair whose English side is identical lands in the same split, so no source
sentence can appear in two splits.  Only sources with at least ``MIN_EVAL_WORDS``
words are eligible for dev/test (one-word UI labels make poor test sentences);
all others always go to train.
"""

from __future__ import annotations

import hashlib

BUCKETS = 10_000
DEV_BUCKETS = 160  # 1.6 % of eligible sources each for dev and test (~2k with this corpus)
TEST_BUCKETS = 160
MIN_EVAL_WORDS = 4


def source_hash(source: str) -> int:
    """Stable 64-bit hash of a normalised source segment."""
    return int.from_bytes(hashlib.sha256(source.encode("utf-8")).digest()[:8], "big")


def assign(source: str, dev_buckets: int = DEV_BUCKETS, test_buckets: int = TEST_BUCKETS) -> str:
    """Return ``"train"``, ``"dev"`` or ``"test"`` for a normalised source segment."""
    if len(source.split()) < MIN_EVAL_WORDS:
        return "train"
    bucket = source_hash(source) % BUCKETS
    if bucket < dev_buckets:
        return "dev"
    if bucket < dev_buckets + test_buckets:
        return "test"
    return "train"
