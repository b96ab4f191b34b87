"""bench.outside: which catalog messages become its test pairs, its refusal of the corpus's own
packages, and its paired bootstrap. Downloading and translating are the corpus builder's and the
engine's, tested where they live."""

from __future__ import annotations

import hashlib

import pytest
from sacrebleu.metrics import BLEU

from bench.outside import bootstrap, held_out_pairs, main, write_sets
from model.corpus.gettext import Message, write_mo


def _tested(english: str) -> bool:  # the half of the pairs the bench keeps
    return bool(hashlib.sha256(english.encode()).digest()[0] % 2)


def _catalog(tmp_path, messages: list[Message], name: str = "app.mo"):
    path = tmp_path / name
    path.write_bytes(write_mo(messages))
    return path


def test_only_plain_one_line_messages_of_two_to_forty_words_are_kept(tmp_path):
    plain = [f"Open the file number {word} now" for word in
             ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")]
    rejected = ["Save %s now", "Press %1 to go on", "Click <b>here</b> please", "Use {name} here",
                "Two\nlines here", "Two\rlines here", "Quit", " ".join(["word"] * 41)]
    messages = [Message(en, (f"Übersetzung {i}",)) for i, en in enumerate(plain + rejected)]
    messages += [Message("Open the file number one now", ("Eine andere Übersetzung",)),  # again
                 Message("An untranslated message here", ("",)),
                 Message("&Close the window", ("Fenster &schließen",))]
    pairs = held_out_pairs([_catalog(tmp_path, messages)], per_source=100)
    catalog_order = plain + ["Close the window"]  # the catalog is sorted by its English text
    want = [en for en in sorted(catalog_order) if _tested(en)]
    assert [en for en, _ in pairs] == want and want  # (some do fall in the tested half)
    assert all("&" not in en + de for en, de in pairs)
    assert dict(pairs).get("Close the window", "Fenster schließen") == "Fenster schließen"
    assert held_out_pairs([_catalog(tmp_path, messages)], per_source=1) == pairs[:1]


def test_a_german_text_seen_before_is_not_a_second_pair(tmp_path):
    english = [f"Show the list of things number {i}" for i in range(40)]
    messages = [Message(en, ("Die Liste zeigen",)) for en in english]
    pairs = held_out_pairs([_catalog(tmp_path, messages)], per_source=100)
    assert len(pairs) <= 1


def test_a_package_the_corpus_reads_is_refused(capsys):
    with pytest.raises(SystemExit, match="gimp-data: the corpus reads"):
        main(["--package", "gimp-data", "--package", "kstars-data"])


def test_the_bootstrap_brackets_a_real_difference_and_not_a_null_one():
    refs = [f"das ist der satz nummer {i} hier" for i in range(60)]
    worse = [f"das ist ein satz {i}" for i in range(60)]
    delta, low, high = bootstrap(worse, refs, refs, BLEU())
    assert delta > 0 and 0 < low <= delta <= high
    assert bootstrap(worse, worse, refs, BLEU()) == (0.0, 0.0, 0.0)


def test_the_written_sets_are_one_pair_per_line_and_all_of_them_in_turn(tmp_path):
    sets = {"a-data": [("One two", "Eins zwei"), ("Three four", "Drei vier")],
            "b-data": [("Five six", "Fünf sechs")]}
    write_sets(sets, tmp_path / "out")
    read = {p.name: p.read_text(encoding="utf-8") for p in (tmp_path / "out").iterdir()}
    assert read == {"a-data.en": "One two\nThree four\n", "a-data.de": "Eins zwei\nDrei vier\n",
                    "b-data.en": "Five six\n", "b-data.de": "Fünf sechs\n",
                    "all.en": "One two\nThree four\nFive six\n",
                    "all.de": "Eins zwei\nDrei vier\nFünf sechs\n"}
