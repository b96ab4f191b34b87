"""bench.glossary and bench.confidence on the tiny bundle: terms picked from a dictionary file in
the Ding format, each found in the output once glossed; ranks and the rank correlation."""

from __future__ import annotations

import json

import pytest

from bench import confidence, glossary

SOURCES = ["open the file", "save the new window", "the dog likes the cat", "close a window"]
REFS = ["oeffne die datei", "speichere das neue fenster", "der hund mag die katze",
        "schliesse ein Fensterchen"]
# Ding lines: German first; "Datei" is not in the reference as a word (it has "datei"), "tree"
# is in no source, "the" and "cat" are too short to be terms; "Fensterchen" is a word the tiny
# model never writes: only the glossary puts it there
DING = """# comment
Datei {f} :: file
datei :: file
fenster {n} :: window
Fensterchen {n} :: window
Baum {m} :: tree
die :: the
katze {f}; Mieze {f} :: cat; kitty
"""


def test_terms_are_picked_where_the_source_and_the_reference_have_them():
    terms = glossary.dictionary([("file", "datei"), ("window", "fenster"), ("the", "die"),
                                 ("computer", "Computer"), ("open a file", "Datei öffnen")])
    assert terms == {"file": {"datei"}, "window": {"fenster"}, "open a file": {"Datei öffnen"}}
    assert glossary.pick_term("Open a file now", "Datei öffnen jetzt", terms) == (
        "open a file", "Datei öffnen")  # the longest
    assert glossary.pick_term("the profile", "das profil", terms) is None  # whole words
    assert glossary.has_term("Fenster zu", "fenster") and not glossary.has_term("Fenstern",
                                                                                "fenster")


def test_glossary_bench_finds_every_term_after(tiny_bundle, tmp_path, capsys):
    src, ref, out = tmp_path / "t.en", tmp_path / "t.de", tmp_path / "r.json"
    src.write_text("\n".join(SOURCES) + "\n")
    ref.write_text("\n".join(REFS) + "\n")
    ding = tmp_path / "ding"
    (ding / "usr/share/trans").mkdir(parents=True)
    (ding / "usr/share/trans/de-en").write_text(DING, encoding="utf-8")
    glossary.main(["--bundle", str(tiny_bundle), "--src", str(src), "--ref", str(ref),
                   "--ding", str(ding), "--threads", "1", "--json", str(out)])
    report = json.loads(out.read_text())
    assert (report["sentences"], report["with_term"]) == (4, 3)
    assert report["term_present_after"] == 1.0
    assert report["term_present_before"] < 1.0  # "Fensterchen" at least
    for key in ("term_sentences_without", "term_sentences_with", "all_without", "all_with"):
        assert set(report[key]) == {"bleu", "chrf"}
    assert "term_present_after" in capsys.readouterr().out


def test_rank_correlation():
    assert confidence.ranks([3.0, 1.0, 2.0, 2.0]).tolist() == [4.0, 1.0, 2.5, 2.5]
    assert confidence.spearman([1, 2, 3, 4], [10, 20, 30, 45]) == pytest.approx(1.0)
    assert confidence.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert confidence.fifths([0.5, 0.1, 0.9, 0.3, 0.7], [50, 10, 90, 30, 70]) == [
        10, 30, 50, 70, 90]


def test_confidence_bench_reports_a_correlation(tiny_bundle, tmp_path):
    src, ref, out = tmp_path / "t.en", tmp_path / "t.de", tmp_path / "r.json"
    src.write_text("\n".join(SOURCES * 2) + "\n")
    ref.write_text("\n".join(REFS * 2) + "\n")
    confidence.main(["--bundle", str(tiny_bundle), "--src", str(src), "--ref", str(ref),
                     "--threads", "1", "--json", str(out)])
    report = json.loads(out.read_text())
    assert report["sentences"] == 8
    assert -1 <= report["spearman_confidence_chrf"] <= 1
    assert len(report["chrf_by_confidence_fifth"]) == 5
    lows = report["confidence_by_fifth"]
    assert lows == sorted(lows) and 0 < lows[0] <= lows[-1] <= 1
