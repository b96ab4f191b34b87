"""The hash split: deterministic, disjoint by source, roughly the configured size."""

from __future__ import annotations

from model.corpus.split import BUCKETS, DEV_BUCKETS, MIN_EVAL_WORDS, assign, source_hash

SOURCES = [f"This is sentence number {i} of the test" for i in range(20_000)]


def test_assignment_is_deterministic():
    first = [assign(s) for s in SOURCES]
    assert first == [assign(s) for s in SOURCES]
    assert source_hash("abc") == source_hash("abc") != source_hash("abd")


def test_same_source_never_in_two_splits():
    pairs = [(s, t) for s in SOURCES[:2000] for t in ("eins", "zwei")]
    seen: dict[str, set[str]] = {}
    for src, _tgt in pairs:
        seen.setdefault(src, set()).add(assign(src))
    assert all(len(splits) == 1 for splits in seen.values())


def test_split_sizes_follow_bucket_fractions():
    names = [assign(s) for s in SOURCES]
    expected = len(SOURCES) * DEV_BUCKETS / BUCKETS
    for name in ("dev", "test"):
        assert 0.7 * expected < names.count(name) < 1.3 * expected


def test_short_sources_always_train():
    short = ["word " * (MIN_EVAL_WORDS - 1) + str(i) for i in range(500)]
    short = [" ".join(s.split()[: MIN_EVAL_WORDS - 1]) + str(i) for i, s in enumerate(short)]
    assert {assign(s) for s in short} == {"train"}
    assert assign("a b c", dev_buckets=BUCKETS) == "train"
    assert assign("one two three four", dev_buckets=BUCKETS) == "dev"
