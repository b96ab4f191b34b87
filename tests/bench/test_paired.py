"""bench.paired on the tiny model: two engines in worker processes of their own, timed in
alternation (our fp32 and int8 variants stand in for our engine and a peer, so the test runs
without the bench extra); a worker that cannot load gives an error, not a hang."""

from __future__ import annotations

import pytest

from bench import paired
from tests.conftest import toy_pairs

pytestmark = pytest.mark.timeout(300)


def specs(tiny_bundle, texts):
    base = {"threads": 1, "texts": texts, "latency_texts": texts[:7], "max_positions": 64,
            "bundle": str(tiny_bundle)}
    return {**base, "engine": "ort-int8"}, {**base, "engine": "ort-fp32"}


def test_two_engines_alternate_and_give_ratios_and_p50s(tiny_bundle, tmp_path):
    texts = [en for en, _ in toy_pairs(12, seed=5)]
    a, b = specs(tiny_bundle, texts)
    result = paired.compare(a, b, [1, 4], pairs=3, latency_rounds=1, tmp=tmp_path, threads=1)
    assert result.error is None
    assert sorted(result.searches) == ["1", "4"]
    for s in result.searches.values():
        assert len(s.a_tokens_per_s) == len(s.b_tokens_per_s) == 3
        assert all(r > 0 for r in s.ratios)
        assert min(s.ratios) <= s.median_ratio <= max(s.ratios)
        assert s.a_p50_ms > 0 and s.b_p50_ms > 0
        assert s.p50_ratio == pytest.approx(s.a_p50_ms / s.b_p50_ms)
        assert s.b_latency_layout == "main"  # our engine has one layout for single sentences
    lines = paired.report(result)
    assert "ort-int8 against ort-fp32 in alternation" in lines[1]
    assert any(line.startswith("| 4 | ") for line in lines)
    data = result.to_json()
    assert data["searches"]["1"]["ratios"] == result.searches["1"].ratios


def test_a_worker_that_cannot_load_is_an_error(tiny_bundle, tmp_path):
    texts = [en for en, _ in toy_pairs(4, seed=6)]
    a, b = specs(tiny_bundle, texts)
    b["bundle"] = str(tmp_path / "missing")
    result = paired.compare(a, b, [1], pairs=1, latency_rounds=1, tmp=tmp_path, threads=1)
    assert result.error is not None and "ort-fp32" in result.error
    assert result.searches == {}
    assert "Failed:" in "\n".join(paired.report(result))


def test_the_same_engine_on_both_sides_keeps_their_numbers_apart(tiny_bundle, tmp_path):
    """Two bundles (here: one, twice) of the same engine: A's and B's passes and calls are
    counted by side, not merged under the engine's name."""
    texts = [en for en, _ in toy_pairs(6, seed=7)]
    a, _ = specs(tiny_bundle, texts)
    result = paired.compare(a, dict(a), [1], pairs=2, latency_rounds=1, tmp=tmp_path, threads=1)
    assert result.error is None
    search = result.searches["1"]
    assert len(search.a_tokens_per_s) == len(search.b_tokens_per_s) == 2
    assert search.a_tokens_per_s != search.b_tokens_per_s  # two processes, timed apart
