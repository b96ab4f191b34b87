"""Ding dictionary lines -> (English, German) pairs."""

from __future__ import annotations

from model.corpus.ding import ding_pairs, entry_pairs, is_example_sentence


def test_sub_entries_pair_in_order_and_notes_are_dropped():
    line = (
        "je; jemals {adv} | mehr als je zuvor; mehr als jemals davor [geh.] | "
        "Siehst du ihn jemals? :: ever | more than ever; more than ever before | "
        "Do you ever see him?\n"
    )
    assert entry_pairs(line) == [
        ("ever", "je"),
        ("more than ever", "mehr als je zuvor"),
        ("Do you ever see him?", "Siehst du ihn jemals?"),
    ]


def test_explanations_labels_and_abbreviations_are_removed():
    line = "geografische Breite {f} [geogr.] :: latitude /lat./"
    assert entry_pairs(line) == [("latitude", "geografische Breite")]
    line = "größte Breite {f} (eines Schiffes) :: beam (of a ship)"
    assert entry_pairs(line) == [("beam", "größte Breite")]


def test_lines_that_do_not_align_are_skipped():
    assert entry_pairs("# Version :: devel 2023-01-30") == []
    assert entry_pairs("a | b :: only one") == []
    assert entry_pairs("Breiten… :: latitudinal") == []
    assert entry_pairs("no separator here") == []


def test_ding_pairs_reads_every_line():
    lines = ["Hund {m} :: dog", "# comment", "Katze {f} | Katzen {pl} :: cat | cats"]
    assert list(ding_pairs(lines)) == [("dog", "Hund"), ("cat", "Katze"), ("cats", "Katzen")]


def test_example_sentences_are_told_from_words_and_patterns():
    for sentence in ("Do you ever see him?", "I don’t know any details.",
                     "He said: “Keep away from acids.”", "Tim and Mary left together!"):
        assert is_example_sentence(sentence), sentence
    for entry in ("nice weather", "more than ever", "to dry your hands.",
                  "Do you see sb. often?", "to leave open sth.", "Do you see?",
                  "The empire strikes back"):
        assert not is_example_sentence(entry), entry
