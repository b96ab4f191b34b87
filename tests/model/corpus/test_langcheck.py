"""Language identification of both sides of a pair, and its place in the build's filters."""

from __future__ import annotations

import pytest

from model.corpus import build, langcheck


@pytest.fixture(scope="module")
def check() -> langcheck.LanguageCheck:
    return langcheck.LanguageCheck()


def test_german_side_in_english_and_english_side_in_german_are_dropped(check):
    english = "The old bridge over the river was closed for repairs."
    german = "Die alte Brücke über den Fluss war wegen Reparaturen gesperrt."
    assert check.reject_reason(english, german) is None
    assert check.reject_reason(english, english + " Really.") == langcheck.DE_IS_ENGLISH
    assert check.reject_reason(german, german + " Wirklich.") == langcheck.EN_IS_GERMAN


def test_names_and_short_labels_are_never_judged(check):
    # Short strings read as either language: they are kept whatever the model says.
    for src, tgt in [("Status", "Status"), ("Berlin", "Berlin"), ("Kill 5 zombies", "Töte 5")]:
        assert not check.judged(tgt)
        assert check.reject_reason(src, tgt) is None
    # English terms named after German places and people stay (the English side needs more)
    for src, tgt in [
        ("From Friedrich Nietzsche, Ecce Homo", "Aus: Friedrich Nietzsche, Ecce Homo"),
        ("The Van der Waals linkage", "Die Van-der-Waals-Bindung"),
    ]:
        assert check.reject_reason(src, tgt) is None, src
    strict = langcheck.LanguageCheck(langcheck.LangCheckConfig(min_words=1, min_chars=1))
    assert strict.judged("Status")


def test_build_counts_language_drops_and_keeps_samples(check):
    corpus = build.Corpus(check=check)
    pairs = [
        ("The children played in the garden.", "Die Kinder spielten im Garten."),
        # English on both sides, but not the same text: the rule-based filters let it through
        ("Press the button to open the door.", "Push this knob, gates open quickly."),
        ("Die Kinder spielen draußen im Garten.", "Die Kinder spielen im Garten."),
    ]
    corpus.add("game", pairs)
    stats = corpus.stats["game"]
    assert stats.kept == 1
    assert stats.rejected[langcheck.DE_IS_ENGLISH] == stats.rejected[langcheck.EN_IS_GERMAN] == 1
    assert corpus.drops[langcheck.DE_IS_ENGLISH] == [list(pairs[1])]
    assert stats.new_words_en == len(build.words(pairs[0][0])) == 5  # "The" and "the" are one
