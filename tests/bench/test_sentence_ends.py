"""bench.sentence_ends on the tiny bundle: the lines the two rules split differently are found
and scored both ways, and joined pairs of real sentences are counted as cut."""

from __future__ import annotations

import json

from bench import sentence_ends

SOURCES = ["Open the file, e.g. the red one.", "Save the window.", "Close the file now.",
           "Mr. Smith opened the window.", "open the file. save it."]


def test_sentence_ends_bench_scores_the_changed_lines_both_ways(tiny_bundle, tmp_path):
    src, out = tmp_path / "t.en", tmp_path / "r.json"
    src.write_text("\n".join(SOURCES) + "\n")
    (tmp_path / "t.de").write_text("\n".join(f"öffne die Datei {n}" for n in range(5)) + "\n")
    sentence_ends.main(["--bundle", str(tiny_bundle), "--src", str(src), "--json", str(out)])
    report = json.loads(out.read_text())
    # the first and the fourth line: one sentence now, two when every period ended one
    assert report["lines"] == 5 and report["changed"] == 2
    assert all(0 <= report[way]["chrF"] <= 100 for way in ("every_period", "service"))
    # each of the first four lines with the next: real ends, all cut (not the last, in lower case)
    assert report["boundaries"] == {"pairs": 3, "cut": 3, "share_cut": 1.0, "not_cut": []}
    with sentence_ends.every_period():
        assert sentence_ends.sentences(SOURCES[3]) == ["Mr.", "Smith opened the window."]
    assert sentence_ends.sentences(SOURCES[3]) == [SOURCES[3]]
