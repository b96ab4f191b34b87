"""Segmentation keeps every character that is not translated, and rejoin puts translations back."""

from __future__ import annotations

import random
import re

import pytest

from app.text.segment import (
    MAX_SENTENCE_CHARS,
    always,
    rewrap,
    segment,
    segment_text,
    soft_wrap,
    subtitle_wrap,
    translate_fitting,
)

TEXTS = [
    "Hello world.",
    "  Hello world. How are you?  \n\n\tNew paragraph!  Yes.\r\n123\n",
    "",
    "   \n\n ",
    "No punctuation at all",
    'He said "hi." Then he left... Really?! Ok',
    "x, " * 300,
    "a" * 1000,
    "Line one\nLine two\n\n\nLine three\n",
    "A sentence wrapped\n  at a width goes\r\non as one.\nNext.\n",
]


@pytest.mark.parametrize("text", TEXTS)
def test_parts_concatenate_to_the_input(text):
    seg = segment(text)
    assert "".join(seg.parts) == text
    assert all(len(s) <= MAX_SENTENCE_CHARS for s in seg.sentences)


def test_sentences_and_whitespace_are_split_apart():
    seg = segment("  Hello world. How are you?  \n\n\tFine!\n")
    assert seg.sentences == ["Hello world.", "How are you?", "Fine!"]
    out = seg.rejoin(["A.", "B?", "C!"])
    assert out == "  A. B?  \n\n\tC!\n"


@pytest.mark.parametrize("text, sentences", [
    ("Mr. and Mrs. Smith vs. the rest wrote it. It sold well.",
     ["Mr. and Mrs. Smith vs. the rest wrote it.", "It sold well."]),
    ("Bring food, e.g. bread, i.e. anything. Then go.",
     ["Bring food, e.g. bread, i.e. anything.", "Then go."]),
    ("Hardly... go home.", ["Hardly... go home."]),
    ("See Fig. 3 and No. 5. No. It is not.", ["See Fig. 3 and No. 5.", "No.", "It is not."]),
    ("J. R. R. Tolkien wrote it. A. Smith read it.", ["J. R. R. Tolkien wrote it.",
                                                      "A. Smith read it."]),
    ("Hide column A. Column B stays. The option is a. The end.",
     ["Hide column A.", "Column B stays.", "The option is a.", "The end."]),
    ("Das sind z. B. Äpfel, d. h. Obst. Ja.", ["Das sind z. B. Äpfel, d. h. Obst.", "Ja."]),
    ('He said "Stop." Then he left. Wait... What?',
     ['He said "Stop."', "Then he left.", "Wait...", "What?"]),
    # typed all in lower case: nothing tells a sentence's end from an abbreviation's
    ("hi. how are you? fine.", ["hi.", "how are you?", "fine."]),
])
def test_a_period_ends_a_sentence_unless_an_abbreviation_or_lower_case_word_says_not(
        text, sentences):
    assert segment(text).sentences == sentences


GERMAN = "Die Messe beginnt am 3. Oktober in Berlin. Sie dauert drei Tage."


@pytest.mark.parametrize("text, sentences", [
    (GERMAN, ["Die Messe beginnt am 3. Oktober in Berlin.", "Sie dauert drei Tage."]),
    # an ordinal after an article or a contraction, before a month, or in a date
    ("Das war im 19. Jahrhundert. Er kam zum 2. Mal. Der 1. FC Köln verlor.",
     ["Das war im 19. Jahrhundert.", "Er kam zum 2. Mal.", "Der 1. FC Köln verlor."]),
    ("Termin ist der 3. 10. 2024. Bitte seit 1. Januar melden.",
     ["Termin ist der 3. 10. 2024.", "Bitte seit 1. Januar melden."]),
    ("Das dauerte vom 10. – 16. Jahrhundert. Dann nicht mehr.",
     ["Das dauerte vom 10. – 16. Jahrhundert.", "Dann nicht mehr."]),
    # a number that ends a sentence: after a verb, a year, a list item's number
    ("Der Wert ist 5. Danach endet es. Das war 2024. Stufe 10. Teil der Serie.",
     ["Der Wert ist 5.", "Danach endet es.", "Das war 2024.", "Stufe 10.",
      "Teil der Serie."]),
    ("1. Installieren Sie das Paket.", ["Installieren Sie das Paket."]),
    # German abbreviations a name or a noun follows
    ("Sie ist geb. Müller. Es kostet zzgl. Versand. Frag Dr. Weber.",
     ["Sie ist geb. Müller.", "Es kostet zzgl. Versand.", "Frag Dr. Weber."]),
])
def test_german_ordinals_and_abbreviations_do_not_end_a_sentence(text, sentences):
    assert segment_text(text, language="de").sentences == sentences


@pytest.mark.parametrize("language, text, sentences", [
    ("fr", "Il a parlé avec M. Dupont hier. Ensuite il est parti.",
     ["Il a parlé avec M. Dupont hier.", "Ensuite il est parti."]),
    ("fr", "Des villes, p. ex. Paris. Puis Lyon.", ["Des villes, p. ex. Paris.", "Puis Lyon."]),
    ("es", "Habló con la Sra. García y el Sr. López. Luego, p. ej. Madrid. Fin.",
     ["Habló con la Sra. García y el Sr. López.", "Luego, p. ej. Madrid.", "Fin."]),
    ("it", "Ho visto il Sig. Rossi e il Dott. Bianchi. Poi, ad es. Roma. Fine.",
     ["Ho visto il Sig. Rossi e il Dott. Bianchi.", "Poi, ad es. Roma.", "Fine."]),
    ("pt", "Falei com a Sra. Silva. Depois, p. ex. Lisboa. Fim.",
     ["Falei com a Sra. Silva.", "Depois, p. ex. Lisboa.", "Fim."]),
    ("nl", "Neem bijv. Amsterdam of dhr. Jansen. Dat is alles.",
     ["Neem bijv. Amsterdam of dhr. Jansen.", "Dat is alles."]),
    # Danish nouns and months are lower-case: a number's period before a capital ends one
    ("da", "Vi så f.eks. København. Det var 2. Det er slut.",
     ["Vi så f.eks. København.", "Det var 2.", "Det er slut."]),
    # Swedish "hon" (she) is a word that ends sentences, not an English title
    ("sv", "Jag vet inte, sa hon. Sedan köpte hon t.ex. Volvo.",
     ["Jag vet inte, sa hon.", "Sedan köpte hon t.ex. Volvo."]),
    # a date's periods, but not a number's before another number that is no month
    ("cs", "Od (1. 1. 1970 UTC). Jinak 0. 2, pokud ne.",
     ["Od (1. 1. 1970 UTC).", "Jinak 0.", "2, pokud ne."]),
    # a region or script subtag reads as its language
    ("de-AT", GERMAN, ["Die Messe beginnt am 3. Oktober in Berlin.", "Sie dauert drei Tage."]),
    ("pt_BR", "Falei com a Sra. Silva. Fim.", ["Falei com a Sra. Silva.", "Fim."]),
])
def test_each_language_has_its_own_abbreviations(language, text, sentences):
    assert segment_text(text, language=language).sentences == sentences


@pytest.mark.parametrize("language", [None, "en", "xx"])
def test_english_and_an_unknown_language_keep_the_rules_for_any_text(language):
    """No language (source "auto" before detection), English, a language without rules of its
    own: the rules as they were, so a German ordinal still ends a sentence there, and the
    German abbreviations among them still hold."""
    assert segment_text(GERMAN, language=language).sentences == [
        "Die Messe beginnt am 3.", "Oktober in Berlin.", "Sie dauert drei Tage."]
    assert segment_text("Das sind z. B. Äpfel, bzw. Birnen. Ja.", language=language
                        ).sentences == ["Das sind z. B. Äpfel, bzw. Birnen.", "Ja."]
    assert segment(GERMAN, "html", language=language).sentences == segment_text(
        GERMAN, language=language).sentences


def test_html_is_split_with_the_language_rules():
    assert segment(f"<p>{GERMAN}</p>", "html", language="de").sentences == [
        "Die Messe beginnt am 3. Oktober in Berlin.", "Sie dauert drei Tage."]


def test_a_sentence_end_is_judged_from_the_words_around_it_not_the_whole_text():
    """Each period's check reads a window: copying the text before and after every one made a
    paragraph of thousands of periods cost their square (a hostile request's time)."""
    import tracemalloc

    from app.text import segment as segmenting

    text = "The a. " * 150_000  # a megabyte
    end = next(segmenting._SENTENCE_END.finditer(text, len(text) // 2))
    tracemalloc.start()
    segmenting._ends_sentence(text, end, cased=True)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 10_000, peak  # bytes: a window's copy, not half a megabyte


def test_rejoin_strips_engine_whitespace_and_checks_count():
    seg = segment("One. Two.")
    assert seg.rejoin([" 1. ", "2.\n"]) == "1. 2."
    with pytest.raises(ValueError):
        seg.rejoin(["only one"])


def test_pieces_without_letters_are_kept():
    seg = segment("42\n---\nHello.")
    assert seg.sentences == ["Hello."]
    assert seg.rejoin(["Hallo."]) == "42\n---\nHallo."


def test_long_sentences_are_cut_at_boundaries():
    text = ", ".join(["word"] * 200)
    seg = segment(text)
    assert len(seg.sentences) > 1
    assert "".join(seg.parts) == text


def test_a_hard_cut_does_not_split_a_mask_or_placeholder():
    # no space or clause break in the first MAX_SENTENCE_CHARS: the cut falls between spans
    text = "{1}" + "ab{582}" * 150
    seg = segment(text)
    assert len(seg.sentences) > 1 and "".join(seg.parts) == text
    for sentence in seg.sentences:
        assert re.fullmatch(r"(?:\{1\}|ab|\{582\})+", sentence), sentence


HTML = (
    '<p class="x">Hello <b>world</b>. Tom &amp; Jerry.</p>\n'
    '<script>var a = "no translation.";</script><style>p { color: red }</style>'
    "<code>x = 1</code><!-- a comment --><br/>"
    '<div translate="no">Keep me.</div><pre>keep\n  this</pre>Tail text.'
)


def test_html_translates_text_nodes_only():
    seg = segment(HTML, "html")
    assert "".join(seg.parts) == HTML
    assert seg.sentences == ["Hello", "world", "Tom & Jerry.", "Tail text."]
    out = seg.rejoin([s.upper() for s in seg.sentences])
    assert out == HTML.replace("Hello", "HELLO").replace("world", "WORLD").replace(
        "Tom &amp; Jerry.", "TOM &amp; JERRY."
    ).replace("Tail text.", "TAIL TEXT.")


def test_html_after_a_void_element_marked_translate_no_is_translated():
    seg = segment('<p>One here.</p><img translate="no" src="a.png"><br class="notranslate">'
                  "<p>Two here.</p>", "html")
    assert seg.sentences == ["One here.", "Two here."]


def test_html_escapes_translations():
    seg = segment("<p>a &lt; b</p>", "html")
    assert seg.sentences == ["a < b"]
    assert seg.rejoin(["x < y & z"]) == "<p>x &lt; y &amp; z</p>"


def test_refine_cuts_sentences_that_do_not_fit_keeping_whitespace():
    text = "  one two three  four five six.\n\nShort."
    seg = segment(text)
    seg.refine(lambda s: len(s.split()) <= 2)
    assert "".join(seg.parts) == text
    assert seg.sentences == ["one two", "three  four", "five six.", "Short."]
    assert seg.rejoin(["A", "B", "C", "D"]) == "  A B C\n\nD"


def test_refine_in_html_counts_decoded_text():
    seg = segment("<p>a &amp; b c</p>", "html")
    seg.refine(lambda s: len(s) <= 5)
    assert seg.sentences == ["a & b", "c"]
    assert "".join(seg.parts) == "<p>a &amp; b c</p>"


def test_translate_fitting_cuts_only_what_does_not_fit_and_puts_it_back():
    sent: list[list[str]] = []

    def upper(texts: list[str]) -> list[str]:
        sent.append(list(texts))
        return [text.upper() for text in texts]

    def fits(text: str) -> bool:
        return len(text.split()) <= 2

    assert translate_fitting(["a b", "c"], fits, upper) == ["A B", "C"]
    assert sent[-1] == ["a b", "c"]
    assert translate_fitting(["a b c  d e", "f"], fits, upper) == ["A B C  D E", "F"]
    assert sent[-1] == ["a b", "c  d", "e", "f"]  # greedy runs, the gap kept as it was
    assert translate_fitting(["a b c"], None, upper) == ["A B C"]


def test_a_wrapped_sentence_goes_to_the_engine_on_one_line():
    text = ("Search, diagnostics and autocompletion\nmay be limited until the project is\n"
            "loaded. Done.\n")
    seg = segment(text)
    assert seg.sentences == ["Search, diagnostics and autocompletion may be limited until the "
                             "project is loaded.", "Done."]
    out = seg.rejoin(["Suche, Diagnose und Vervollständigung sind bis zum Laden des Projekts "
                      "begrenzt.", "Fertig."])
    # as many breaks as the source, each at the space nearest its relative place
    assert out == ("Suche, Diagnose und Vervollständigung\nsind bis zum Laden des Projekts\n"
                   "begrenzt. Fertig.\n")


LINE = "Open the file that you want to change"  # 38 characters


@pytest.mark.parametrize(
    ("before", "after", "width", "joined"),
    [
        (LINE, "and save it.", 40, True),
        ("- " + LINE, "  and save it", 42, True),  # under the item's text
        ("1. " + LINE, "   and save it", 42, True),
        (LINE, "and save it.", 60, False),  # "and" would have fit: a line of its own
        (LINE, "And save it.", 40, False),  # a capital: a new line, a name, an item
        ("open the file", "save the file", 13, False),  # short lines: a list
        ("Options for the command line program:", "verbose output", 40, False),  # a label
        ("a) the first of two choices to make", "b) the second", 36, False),  # letter items
        ("  --verbose  print every step it takes", "      be verbose", 40, False),  # deeper
        (LINE, "", 40, False),
    ],
)
def test_soft_wrap_rule(before, after, width, joined):
    assert soft_wrap(before, after, width) is joined
    assert always(before, after, width)


def test_a_list_of_lowercase_lines_is_not_joined():
    # short lines, and lines after which the next word would have fit (the longest is 42)
    text = ("open the file\nsave it\na small cat sits in the old tree\nopen the file and save "
            "it\nthe red car sees a dog and the green house\n")
    assert segment(text).sentences == text.split("\n")[:-1]


def test_subtitle_lines_join_unless_a_speaker_turn_starts():
    seg = segment_text("I don't know if\nI can do it.", subtitle_wrap)
    assert seg.sentences == ["I don't know if I can do it."]
    assert segment_text("- Hi there.\n- Hello.", subtitle_wrap).sentences == [
        "- Hi there.", "- Hello."]


def test_line_breaks_are_found_as_the_pattern_searched_for_them_finds_them():
    # a line break with the whitespace around it: searched for from every space of a run
    # without one to the run's end, the square of the run; tried only where a run begins now
    from app.text import segment

    searched = re.compile(r"\s*\n\s*")
    rng = random.Random(11)
    pieces = [" ", "\t", "\n", "\r\n", "a", "b c", "\u00a0", "\u2028", "."]
    for _ in range(20000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        assert ([m.span() for m in segment._LINE_BREAKS.finditer(text)]
                == [m.span() for m in searched.finditer(text)]), repr(text)
        assert segment._LINE_BREAKS.sub(" ", text) == searched.sub(" ", text)


def test_rewrap_keeps_order_and_drops_a_break_with_no_space_left():
    assert rewrap("one\ntwo", "eins zwei") == "eins\nzwei"
    assert rewrap("a b\n  c d\ne f", "1 2 3 4 5 6") == "1 2\n  3 4\n5 6"
    assert rewrap("a\nb\nc", "abc def") == "abc\ndef"  # one space for two breaks
    assert rewrap("a\nb", "abc") == "abc"
    assert rewrap("no break", "kein Umbruch") == "kein Umbruch"


def test_each_break_takes_the_space_a_scan_of_every_space_left_took():
    # each break took the nearest of all the spaces after the last one used: a scan of them
    # all per break, the square of a sentence's lines (a page of one-word lines)
    from app.text.segment import _nearest

    rng = random.Random(13)
    for _ in range(20000):
        spaces = sorted(rng.sample(range(60), rng.randint(1, 12)))
        first = rng.randrange(len(spaces))
        place = rng.choice([rng.uniform(-5, 65), float(rng.randint(0, 60)), rng.randint(0, 60)
                            + 0.5])
        scanned = min(range(first, len(spaces)), key=lambda i: abs(spaces[i] - place))
        assert _nearest(spaces, place, first) == scanned, (spaces, place, first)


def test_html_text_joins_every_break():
    seg = segment("<p>Open the\n   File menu.</p>", "html")
    assert seg.sentences == ["Open the File menu."]
