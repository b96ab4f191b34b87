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


GERMAN = ["Die Messe beginnt am 3. Oktober in Berlin.", "Der Wert ist 5. Danach endet es.",
          "Das war im 19. Jahrhundert.", "Es gibt 5.", "Neue Zeilen folgen."]


def test_split_only_counts_a_language_s_rules_against_the_rules_for_any_text(tmp_path):
    """No model: German lines in a text file and in a gettext catalog; the ordinals' periods
    are the ends the German rules drop, and the real ends (after "ist 5.", between the lines)
    are still cut."""
    import polib

    src, catalog, out = tmp_path / "t.de", tmp_path / "de.mo", tmp_path / "r.json"
    src.write_text("\n".join(GERMAN) + "\n")
    mo = polib.POFile()
    mo.append(polib.POEntry(msgid="x", msgstr="Seit dem 1. Januar gilt es.\nSo ist es."))
    mo.save_as_mofile(str(catalog))
    sentence_ends.main(["--split-only", "--language", "de", "--src", str(src), "--also",
                        str(catalog), "--sentences", "0", "--json", str(out)])
    report = json.loads(out.read_text())
    assert report["lines"] == 7
    # lines 1-2 and 2-3 are not pairs (the second is two sentences); 3-4, 4-5, 5-6, 6-7 are
    assert report["boundaries"] == {"pairs": 4, "cut": 4, "share_cut": 1.0, "not_cut": []}
    by_language = report["by_language"]
    assert (by_language["lines"], by_language["ends_dropped"], by_language["ends_added"]) == (
        3, 3, 0)
    assert by_language["changed"][0] == {
        "line": GERMAN[0], "any_language": ["Die Messe beginnt am 3.", "Oktober in Berlin."],
        "de": [GERMAN[0]]}
