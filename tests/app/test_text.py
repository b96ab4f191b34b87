"""Segmentation keeps every character that is not translated, and rejoin puts translations back."""

from __future__ import annotations

import re

import pytest

from app.text import MAX_SENTENCE_CHARS, segment, translate_fitting

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
