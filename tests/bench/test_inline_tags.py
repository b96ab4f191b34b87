"""bench.inline_tags on the tiny bundle: both sets, three ways each, every tag kept where the
service's way (carried) is used."""

from __future__ import annotations

import json

from bench import inline_tags

SOURCES = [f"open the file and save the window number {n} now" for n in range(12)]


def test_inline_tags_bench_reports_both_sets(tiny_bundle, tmp_path, capsys):
    src, ref, out = tmp_path / "t.en", tmp_path / "t.de", tmp_path / "r.json"
    src.write_text("\n".join(SOURCES) + "\n")
    ref.write_text("\n".join(f"öffne die Datei {n}" for n in range(12)) + "\n")
    inline_tags.main(["--bundle", str(tiny_bundle), "--src", str(src), "--ref", str(ref),
                      "--sentences", "8", "--json", str(out)])
    report = json.loads(out.read_text())
    ways = {"pair": ("plain", "masks", "carried"), "atom": ("plain", "masks", "carried"),
            "br": ("plain", "split", "carried")}
    assert set(report) == {f"{k} / {w}" for k, ws in ways.items() for w in (*ws, "sentences")}
    assert report["pair / sentences"] == report["atom / sentences"] == 8
    assert report["br / sentences"] == 8  # every sentence has a lowercase word after the first
    for kind in ways:
        assert report[f"{kind} / carried"]["tags_kept"] == 1.0, kind
    assert all(0 <= row["chrF"] <= 100 for row in report.values() if isinstance(row, dict))
    assert "pair carried" in capsys.readouterr().out
    plain, tagged, refs = inline_tags.tagged_set(src, ref, 8, 0, "atom")
    assert len(plain) == len(tagged) == len(refs) == 8
    assert all(sum(t.count(a) for a in inline_tags.ATOMS) == 1 for t in tagged)
    plain, tagged, refs = inline_tags.tagged_set(src, ref, 8, 0, "br")
    assert all(t.count("<br>") == 1 and " <br>" not in t and "<br> " not in t for t in tagged)
    assert [t.replace("<br>", " ") for t in tagged] == plain
