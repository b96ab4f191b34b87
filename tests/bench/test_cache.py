"""bench.cache on the tiny bundle: two real servers, one with the translation cache; after the
warm-up the cached one decodes nothing of the repeated sentences, the other decodes them all."""

from __future__ import annotations

import json

from bench import cache


def test_cache_bench_drives_both_servers_and_the_cached_one_never_decodes(tiny_bundle,
                                                                          tmp_path, capsys):
    out = tmp_path / "cache.json"
    assert cache.main(["--models-dir", str(tiny_bundle), "--concurrency", "1,4", "--seconds",
                       "1", "--threads", "1", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert {(r["server"], r["concurrency"]) for r in rows} == {
        (s, c) for s in ("no cache", "cache") for c in (1, 4)}
    assert all(r["requests"] > 0 and r["errors"] == 0 for r in rows)
    assert all(r["engine_batches"] == 0 for r in rows if r["server"] == "cache")
    assert all(r["engine_batches"] > 0 for r in rows if r["server"] == "no cache")
    assert "| clients | req/s no cache | req/s cache |" in capsys.readouterr().out
