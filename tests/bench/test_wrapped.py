"""bench.wrapped on the tiny bundle: every way reported, the line-by-line way joins nothing,
and every break of a wrapped source is either joined or kept."""

from __future__ import annotations

import json

from bench import wrapped

SOURCES = [f"open the file and save the window number {n} now before you close it and leave the "
           "room" for n in range(12)]  # words of at most six letters: lines of 28-34


def test_wrapped_bench_reports_every_way(tiny_bundle, tmp_path, capsys):
    src, ref, out = tmp_path / "t.en", tmp_path / "t.de", tmp_path / "r.json"
    src.write_text("\n".join(SOURCES) + "\n")
    ref.write_text("\n".join(f"öffne die Datei {n}" for n in range(12)) + "\n")
    wrapped.main(["--bundle", str(tiny_bundle), "--src", str(src), "--ref", str(ref),
                  "--sentences", "8", "--width", "34", "--json", str(out)])
    report = json.loads(out.read_text())
    assert report["sentences"] == 8 and report["breaks"] >= 16
    assert set(report) >= {"whole", "lines", "soft_wrap", "always"}
    assert report["lines"]["joined"] == 0.0
    # every line of these sources starts with a lowercase word: each break is a soft wrap
    assert report["soft_wrap"]["joined"] == report["always"]["joined"] == 1.0
    assert report["lines"]["breaks_kept"] == 1.0
    assert all(0 <= report[w]["chrF"] <= 100 for w in ("whole", "lines", "soft_wrap"))
    assert "soft_wrap" in capsys.readouterr().out
    whole, lines, refs = wrapped.wrapped_set(src, ref, 8, 34, 0)
    assert len(whole) == len(lines) == len(refs) == 8
    assert all(max(len(x) for x in w.split("\n")) <= 34 and w.replace("\n", " ") == s
               for s, w in zip(whole, lines, strict=True))
