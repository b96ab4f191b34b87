"""bench.agreement: nouns' genders read from Ding lines, article-noun disagreements found in
German as the rules allow it, and the bench's report on the tiny bundle."""

from __future__ import annotations

import json

import pytest

from bench import agreement

# Ding lines: German first, genders in braces; plural forms as sub-entries
DING = """# comment
Suppe {f}; Brühe {f} | Suppen {pl} :: soup | soups
Strand {m} :: beach
Station {f} :: station
Auto {n} | Autos {pl} :: car | cars
Name {m} :: name
Kriegerin {f} :: female warrior
Kämpfer {m} :: fighter
Haus {n} | ein großes Haus :: house | a big house
Verzeichnis {n} | Verzeichnisse {pl} :: directory | directories
"""


def lexicon():
    return agreement.noun_genders(DING.splitlines())


def test_genders_come_from_each_sub_entry_and_synonym():
    lex = lexicon()
    assert lex["Suppe"] == {"f"} and lex["Brühe"] == {"f"} and lex["Suppen"] == {"pl"}
    assert lex["Auto"] == {"n"} and lex["Autos"] == {"pl"}
    assert "ein" not in lex and "großes" not in lex  # only a sub-entry's first word, with a gender
    assert agreement.genders("Zugstation", lex) == {"f"}  # a compound by its head
    assert agreement.genders("Xyz", lex) is None


def test_disagreements_follow_the_article_the_adjective_ending_and_the_noun():
    lex = lexicon()
    wrong = {
        "Das Suppe ist zu salzig.": ["Das Suppe"],
        "Das Strand war voller Leute.": ["Das Strand"],
        "Wo ist der nächstgelegene Zugstation?": ["der nächstgelegene Zugstation"],
        "Ich sehe die Haus und den Suppe.": ["die Haus", "den Suppe"],
    }
    for text, found in wrong.items():
        assert agreement.disagreements(text, lex) == found, text
    right = [
        "Die Suppe ist zu salzig.",
        "Wo ist die nächstgelegene Zugstation?",
        "Er wartet vor der nächstgelegenen Zugstation.",  # dative feminine
        "Die Farbe des Autos.",  # an ending the dictionary does not list
        "Mit dem Namen.",
        "Beim Erstellen des Verzeichnisses.",  # the genitive of a noun in -nis
        "Mit den Kriegerinnen.",  # the dative plural of a known noun
        "Die Kämpfer kommen.",  # the same form in the plural
        "Die Pop-Suppe",  # part of a hyphenated word: not read
        "Ein Haus, der seine Suppe isst.",  # a pronoun before the phrase, not an adjective
        "Das Xyz ist da.",  # an unknown noun is not judged
    ]
    for text in right:
        assert agreement.disagreements(text, lex) == [], text


def test_measure_counts_outputs_hypotheses_and_references():
    lex = lexicon()
    outputs = [["Das Suppe ist heiß.", "Die Suppe ist heiß."],
               ["Das Strand.", "Das Strand!"],
               ["Der Strand.", "Das Strand."]]
    report = agreement.measure(outputs, ["Die Suppe.", "Der Strand.", "Die Strand."], lex)
    assert report == {"sentences": 3, "with_disagreement": 2, "another_hypothesis_without": 1,
                      "references_with_disagreement": 1, "flagged": [0, 1]}


def test_the_bench_runs_on_a_bundle(tiny_bundle, tmp_path, capsys):
    src, out = tmp_path / "t.en", tmp_path / "r.json"
    src.write_text("the dog likes the cat\nopen the file\n")
    ding = tmp_path / "ding"
    (ding / "usr/share/trans").mkdir(parents=True)
    (ding / "usr/share/trans/de-en").write_text(DING, encoding="utf-8")
    agreement.main(["--bundle", str(tiny_bundle), "--src", str(src), "--ding", str(ding),
                    "--threads", "1", "--json", str(out)])
    report = json.loads(out.read_text())
    assert report["sentences"] == 2 and report["references_with_disagreement"] is None
    assert report["reranked"] is False  # the tiny bundle has no language model
    assert 0 <= report["another_hypothesis_without"] <= report["with_disagreement"] <= 2
    assert report["nouns"] == len(lexicon())
    assert '"sentences": 2' in capsys.readouterr().out


def test_a_missing_dictionary_is_named(tmp_path):
    with pytest.raises(SystemExit, match="no usr/share/trans/de-en under"):
        agreement.main(["--ding", str(tmp_path), "--src", str(tmp_path / "t.en")])
