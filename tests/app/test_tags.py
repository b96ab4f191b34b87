"""app.text.tags: inline tag pairs carried over a translation of the plain sentence."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app import documents
from app.engine.types import Result
from app.text import tags
from app.text.protect import mask, unmask
from app.text.tags import TagMarks, TagPlan, tag_marks

SHIPPED = Path(__file__).resolve().parents[2] / "bundles" / "en-de"
PAIR = (("{1}", "{2}"),)


def test_the_model_gets_the_plain_sentence_and_the_wrapped_text():
    plan = TagPlan.of("Open the {1}file{2}.", PAIR)
    assert plan.texts == ("Open the file.", "file")
    assert plan.apply(["Öffnen Sie die Datei.", "Datei"]) == "Öffnen Sie die {1}Datei{2}."


def test_the_pair_wraps_the_words_that_read_like_its_translation_wherever_they_went():
    plan = TagPlan.of("Click {1}Save{2} to keep your changes.", PAIR)
    assert plan.texts == ("Click Save to keep your changes.", "Save")
    out = plan.apply(["Klicken Sie auf Speichern, um Ihre Änderungen zu behalten.",
                      "Speichern"])
    assert out == "Klicken Sie auf {1}Speichern{2}, um Ihre Änderungen zu behalten."
    # moved to the other end of the sentence
    plan = TagPlan.of("{1}Warning{2} the disk is full", PAIR)
    assert plan.apply(["Die Festplatte ist voll, Warnung", "Warnung"]) == \
        "Die Festplatte ist voll, {1}Warnung{2}"


def test_punctuation_stays_outside_unless_the_pair_held_it():
    plan = TagPlan.of("See the {1}manual.{2}", PAIR)
    assert plan.apply(["Siehe das Handbuch.", "Handbuch."]) == "Siehe das {1}Handbuch.{2}"
    plan = TagPlan.of("See the {1}manual{2}.", PAIR)
    assert plan.apply(["Siehe das Handbuch.", "Handbuch"]) == "Siehe das {1}Handbuch{2}."


def test_a_pair_keeps_as_much_edge_punctuation_as_it_held():
    # it held a closing quote: the period and parenthesis after it came in too
    plan = TagPlan.of("(see {1}Section 7.6, “Sandbox”{2}).", PAIR)
    assert plan.apply(["(siehe Abschnitt 7.6, „Sandkasten“).", "Abschnitt 7.6, „Sandkasten“"]
                      ) == "(siehe {1}Abschnitt 7.6, „Sandkasten“{2})."
    # a mask's braces are no punctuation: the comma after a link's address came in
    plan = TagPlan.of("Write to {1}{3}{2}, then wait.", PAIR)
    assert plan.apply(["Schreiben Sie an {3}, dann warten."]) == (
        "Schreiben Sie an {1}{3}{2}, dann warten.")
    # a mask glued to the word before is a word of its own: the pair cut "]{3}" apart
    plan = TagPlan.of("[{1}Preprocessors{2}]{3} alter the source.", PAIR)
    assert plan.apply(["[Präprozessoren]{3} ändern die Quelle.", "Präprozessoren"]) == (
        "[{1}Präprozessoren{2}]{3} ändern die Quelle.")
    # and counts as one in the size of the window (it was one short per glued mask)
    plan = TagPlan.of("{1}Read [the guide]{3} and [the docs]{4} today.{2} Then rest.", PAIR)
    wrapped = "Lies [die Anleitung]{3} und [die Doku]{4} heute."
    assert plan.apply([f"{wrapped} Dann ruhe.", wrapped]) == "{1}" + wrapped + "{2} Dann ruhe."


def test_a_pair_glued_to_more_of_its_word_wraps_only_its_part():
    # "[Sphinx](url)-style": the plain sentence's word is "Sphinx-style", and the link took it all
    plan = TagPlan.of("creating {1}Sphinx{2}-style anchor links", PAIR)
    assert plan.apply(["Erstellen von Sphinx-Stil Ankerlinks", "Sphinx"]) == (
        "Erstellen von {1}Sphinx{2}-Stil Ankerlinks")
    plan = TagPlan.of("({1}Jira{2}/Confluence wiki markup)", PAIR)
    assert plan.apply(["(Jira/Confluence Wiki-Markup)", "Jira"]) == (
        "({1}Jira{2}/Confluence Wiki-Markup)")


def test_pairs_inside_one_word_keep_it_one_word_and_share_it():
    # a space came in where each tag had been: the model read "Water is H 2 O" and "x 2 +y 2";
    # then two pairs in one word took a window each, so one of them wrapped another word
    pairs = (("{1}", "{2}"), ("{3}", "{4}"))
    plan = TagPlan.of("Water is H{1}2{2}O here.", PAIR)
    assert plan.texts == ("Water is H2O here.",)
    assert plan.apply(["Wasser ist hier H2O."]) == "Wasser ist hier H{1}2{2}O."
    plan = TagPlan.of("It is x{1}2{2}+y{3}2{4} now.", pairs)
    assert plan.texts == ("It is x2+y2 now.",)
    assert plan.apply(["Es ist jetzt x2+y2."]) == "Es ist jetzt x{1}2{2}+y{3}2{4}."
    plan = TagPlan.of("Install {1}GNU{2}/{3}Linux{4} on it.", pairs)
    assert plan.texts == ("Install GNU/Linux on it.", "GNU", "Linux")
    assert plan.apply(["Installiere GNU/Linux darauf.", "GNU", "Linux"]) == (
        "Installiere {1}GNU{2}/{3}Linux{4} darauf.")
    plan = TagPlan.of("Use {1}bold{2}{3}italic{4} text.", pairs)
    assert plan.texts[0] == "Use bolditalic text."
    assert plan.apply(["Nutze fettkursiv Text.", "fett", "kursiv"]) == (
        "Nutze {1}fett{2}{3}kursiv{4} Text.")
    # found in the translation itself: "ß" case-folds to two letters, and the places after it
    # in a folded copy were one off
    plan = TagPlan.of("The street has H{1}2{2}O here.", PAIR)
    assert plan.apply(["Die Straße hat hier H2O."]) == "Die Straße hat hier H{1}2{2}O."
    # a space at the edge where two pairs meet parts two words
    plan = TagPlan.of("It is {1}bold{2}{3} now{4} here.", pairs)
    assert plan.apply(["Es ist fett jetzt hier.", "fett", "jetzt"]) == (
        "Es ist {1}fett{2} {3}jetzt{4} hier.")
    # a tag standing alone between two words still leaves a space: two words, also where
    # pairs' tags stand beside it
    assert TagPlan.of("Save the file{1}and close it.", (), ["{1}"]).texts[0] == (
        "Save the file and close it.")
    assert TagPlan.of("{1}Underline on{2}{5}{3}Underline off{4}", pairs, ["{5}"]).texts[0] == (
        "Underline on Underline off")


def test_a_pair_around_a_symbol_wraps_that_symbol_not_a_word():
    # a period in a run of its own format (.docx), a permalink's pilcrow (Sphinx's HTML), a
    # footnote's back arrow: each wrapped the word nearest its place
    pairs = (("{1}", "{2}"), ("{3}", "{4}"))
    plan = TagPlan.of("{1}Text with{2} character style{3}.{4}", pairs)
    assert plan.apply(["Text mit Zeichenformat.", "Text mit"]) == (
        "{1}Text mit{2} Zeichenformat{3}.{4}")
    plan = TagPlan.of("Installing Python{1}¶{2}", PAIR)
    assert plan.texts == ("Installing Python¶",)
    assert plan.apply(["Python installieren¶"]) == "Python installieren{1}¶{2}"
    # the translation lost it: it goes back at the word boundary nearest its place
    assert plan.apply(["Python installieren"]) == "Python installieren{1}¶{2}"
    plan = TagPlan.of("A {1}({2}small{3}){4} note.", (("{1}", "{2}"), ("{3}", "{4}")))
    assert plan.apply(["Eine (kleine) Notiz."]) == "Eine {1}({2}kleine{3}){4} Notiz."
    # glued to the word of another pair: that pair's window leaves it out
    plan = TagPlan.of("Header {1}B{2}{3}¶{4}", pairs)
    assert plan.apply(["Kopfzeile B¶", "B"]) == "Kopfzeile {1}B{2}{3}¶{4}"


def test_a_symbol_nested_at_the_end_of_its_parent_stays_inside_it_once():
    # a footnote mark linked inside an emphasis (an EPUB's poem line): the parent's window left
    # the mark out at its edge, so the mark was not found inside it and came back a second time
    # (`<b>Read the book<a>*</a></b>*`)
    pairs = (("{1}", "{4}"), ("{2}", "{3}"))
    plan = TagPlan.of("{1}Read the book{2}*{3}{4} now.", pairs)
    assert plan.apply(["Lies das Buch* jetzt.", "Lies das Buch*"]) == (
        "{1}Lies das Buch{2}*{3}{4} jetzt.")
    for segment in ['<span>Shantih shantih<a href="#n">*</a></span>',
                    '<b>Read the book<a href="#n">*</a></b> now.']:
        assert documents.translate_segments([segment], lambda t: t, True) == [segment]


def test_a_footnote_number_glued_to_its_word_stays_on_it():
    # `valued<sup>3</sup> in 1900` (a book's note reference): the number has no letters, so it
    # is not translated, and the pair went by relative place onto the next word
    # ('valued3 <sup>in</sup> 1900')
    plan = TagPlan.of("The forests were valued{1}3{2} in 1900.", PAIR)
    assert plan.texts == ("The forests were valued3 in 1900.",)
    assert plan.apply(["Die Wälder wurden 1900 auf3 geschätzt."]) == (
        "Die Wälder wurden 1900 auf{1}3{2} geschätzt.")
    for segment in ["The forests were valued<sup>3</sup> in 1900 at",
                    "Savannah<sup>12</sup> was formerly part of it."]:
        assert documents.translate_segments([segment], lambda t: t, True) == [segment]


def test_a_pair_around_part_of_a_word_stays_on_that_word():
    # a book's drop cap (`<span class="initial">L</span>'histoire`) and an ordinal's letters
    # (`XVI<sup>e</sup>`): the pair went to a word further on that read like the letter alone
    # ('dans <span>la</span> nuit')
    for segment in ["<span class=\"initial\">L</span>'histoire se perd dans la nuit des temps.",
                    "<span>O</span>fficiellement, la région a une spécificité.",
                    "Jusqu'au XVI<sup>e</sup>\xa0s., qui marqua l'apogée de la viticulture.",
                    "On the 1<sup>st</sup> of May the first stone was set."]:
        assert documents.translate_segments([segment], lambda t: t, True) == [segment]


def test_punctuation_the_pair_held_as_a_word_of_its_own_stays_inside():
    # `“<strong>dh_auto_configure --</strong>”`, `<strong>debmake -t …</strong>`: the window
    # took the words only, and the pair closed before the dashes ('configure</strong> --”')
    for segment in ["Replace it with “<strong>dh_auto_configure --</strong>” in the file.",
                    "Use the “<strong>debmake -t …</strong>” command.",
                    "Type <b>-- all</b> to see it."]:
        assert documents.translate_segments([segment], lambda t: t, True) == [segment]


def test_punctuation_before_a_no_break_space_stays_inside_the_pair_as_before_a_space():
    # DocBook's `<strong>debian/rules (template file):&#160;</strong>`: the no-break space
    # hid the colon at the pair's end, and the pair closed before it ('(template file</b>):')
    for space in ("\xa0", "\u202f"):
        assert documents.translate_segments([f"<b>Note:{space}</b>Read it."], lambda t: t,
                                            True) == [f"<b>Note:</b>{space}Read it."]
        assert documents.translate_segments([f"<b>See (the file):{space}</b>"], lambda t: t,
                                            True) == ["<b>See (the file):</b>"]


def test_a_pair_around_the_whole_sentence_needs_no_second_translation():
    plan = TagPlan.of("{1}Save all files{2}.", PAIR)
    assert plan.texts == ("Save all files.",)
    assert plan.apply(["Alle Dateien speichern."]) == "{1}Alle Dateien speichern{2}."


def test_a_source_word_found_inside_a_target_word_counts():
    # the wrapped word's own translation is useless here, but the word itself is in the output
    plan = TagPlan.of("cannot use internal {1}rev{2} list", PAIR)
    assert plan.apply(["Interne Rev-Liste kann nicht verwendet werden", "Wiederholen"]) == \
        "Interne {1}Rev-Liste{2} kann nicht verwendet werden"


def test_without_a_match_the_pair_goes_by_relative_position():
    plan = TagPlan.of("one two {1}three{2} four five", PAIR)
    assert plan.apply(["ab cd gf ij kl", "zzzzzz"]) == "ab cd {1}gf{2} ij kl"


def test_two_pairs_take_different_words():
    pairs = (("{1}", "{2}"), ("{3}", "{4}"))
    plan = TagPlan.of("Choose {1}File{2} - {3}Open{4}.", pairs)
    assert plan.texts == ("Choose File - Open.", "File", "Open")
    assert plan.apply(["Wählen Sie Datei – Öffnen.", "Datei", "Öffnen"]) == \
        "Wählen Sie {1}Datei{2} – {3}Öffnen{4}."


def test_pairs_directly_around_each_other_move_as_one():
    pairs = (("{1}", "{4}"), ("{2}", "{3}"))
    plan = TagPlan.of("Press {1}{2}Enter{3}{4} now", pairs)
    assert plan.texts == ("Press Enter now", "Enter")
    assert plan.apply(["Drücken Sie jetzt Eingabe", "Eingabe"]) == \
        "Drücken Sie jetzt {1}{2}Eingabe{3}{4}"


def test_a_pair_nested_with_other_text_is_placed_inside_its_parent():
    pairs = (("{1}", "{4}"), ("{2}", "{3}"))
    plan = TagPlan.of("Read {1}the {2}short{3} guide{4} first", pairs)
    assert plan.texts == ("Read the short guide first", "the short guide", "short")
    assert plan.apply(["Lies zuerst die kurze Anleitung", "die kurze Anleitung", "kurze"]) == \
        "Lies zuerst {1}die {2}kurze{3} Anleitung{4}"
    # the child's match outside its parent's window does not count: "kurze" at the end is
    # outside, so the child goes by its relative place inside the parent
    assert plan.apply(["Lies die lange Anleitung, kurze", "die lange Anleitung", "kurze"]) == \
        "Lies {1}die {2}lange{3} Anleitung{4}, kurze"


def test_pairs_two_levels_deep_or_crossing_keep_their_masks():
    pairs = (("{1}", "{6}"), ("{2}", "{5}"), ("{3}", "{4}"))
    plan = TagPlan.of("x {1}a {2}b {3}c{4} d{5} e{6} y", pairs)
    assert plan.texts == ("x a b {3}c{4} d e y", "a b {3}c{4} d e", "b {3}c{4} d")
    crossing = (("{1}", "{3}"), ("{2}", "{4}"))
    plan = TagPlan.of("x {1}a {2}b{3} c{4} y", crossing)
    assert plan.texts == ("x a {2}b c{4} y", "a {2}b")


def test_a_pair_around_a_placeholder_wraps_it_as_it_is():
    plan = TagPlan.of("error: unbalanced parenthesis: {1}%s{2}", PAIR)
    assert plan.texts == ("error: unbalanced parenthesis: %s",)  # nothing to translate
    assert plan.apply(["Fehler: Klammer nicht ausgeglichen: %s"]) == \
        "Fehler: Klammer nicht ausgeglichen: {1}%s{2}"


def test_sentences_without_pairs_go_as_they_are():
    assert TagPlan.of("Line one{1}line two", ()) is None
    assert TagPlan.of("Line one{1}line two", PAIR) is None  # a self-closing tag's mask
    plans, texts = tags.plan(["a {1}b{2} c", "d"], [TagMarks(PAIR), None])
    assert texts == ["a b c", "b", "d"]
    assert tags.carried(plans, ["A B C", "B", "D"]) == ["A {1}B{2} C", "D"]


def test_results_keep_their_score_and_carry_tags_into_alternatives():
    plans, texts = tags.plan(["Open the {1}file{2}."], [TagMarks(PAIR)])
    results = [Result("Öffnen Sie die Datei.", -1.5, ["Die Datei öffnen."]), Result("Datei")]
    out = tags.carried_results(plans, results)
    assert out == [Result("Öffnen Sie die {1}Datei{2}.", -1.5, ["Die {1}Datei{2} öffnen."])]


def test_documents_carry_inline_tags_with_a_dictionary_translator():
    words = {"Open": "Öffnen", "the": "die", "file": "Datei", "now": "jetzt"}

    def translate(texts: list[str]) -> list[str]:
        assert not any("{" in t for t in texts), texts  # no masks reach the model
        return [" ".join(words.get(w.strip("."), w) + ("." if w.endswith(".") else "")
                         for w in t.split()) for t in texts]

    out = documents.translate_segments(["Open the <b>file</b> now."], translate, markup=True)
    assert out == ["Öffnen die <b>Datei</b> jetzt."]


@pytest.mark.skipif(not SHIPPED.exists(), reason="the shipped bundle is not here")
def test_the_shipped_model_keeps_every_word_of_a_tagged_sentence():
    """With its masks in the sentence the model dropped words ("Open the <b>file</b>." came
    back as "Öffnen <b>Datei</b>."); now the text around the tags is the plain sentence's
    translation, word for word."""
    from app.engine.translator import Translator
    from app.engine.types import TranslationOptions

    engine = Translator.from_dir(SHIPPED, variant="fp32", workers=1)
    options = TranslationOptions(beam_size=1)

    def translate(texts: list[str]) -> list[str]:
        return [r.text for r in engine.translate_batch(texts, options)]

    tagged = ["Open the <b>file</b>.", 'Click <a href="#s">Save</a> to keep your changes.',
              "The <i>default printer</i> is used when no other printer is selected."]
    masked = [mask(t) for t in tagged]
    plans, texts = tags.plan([m.text for m in masked], [tag_marks(m) for m in masked])
    out = [unmask(m, t) for m, t in zip(masked, tags.carried(plans, translate(texts)),
                                        strict=True)]
    plain = translate([re.sub(r"<[^>]+>", "", t) for t in tagged])
    for source, text, reference in zip(tagged, out, plain, strict=True):
        opening = re.search(r"<[a-z][^>]*>", source).group()
        closing = re.search(r"</[a-z]+>", source).group()
        assert text.count(opening) == 1 and text.count(closing) == 1, text
        assert text.index(opening) < text.index(closing), text
        assert re.sub(r"<[^>]+>", "", text) == reference, (text, reference)
    assert "<b>Datei</b>" in out[0], out[0]


def test_the_service_sends_no_tag_masks_and_returns_the_tags():
    import httpx

    from app.config import Settings
    from app.http.app import create_app
    from tests.app.fakes import FakeTranslator, fake_model, running

    engine = FakeTranslator()  # reverses the order of the words
    app = create_app(Settings(max_wait_ms=1), loader=lambda s: [fake_model(engine)])
    text = "Press <b>Save all</b> now, then <i>quit</i>."
    with running(app) as srv:
        r = httpx.post(f"{srv.url}/v1/translate", timeout=10,
                       json={"text": text, "source": "en", "target": "de",
                             "options": {"alternatives": 1}})
        assert r.status_code == 200, r.text
        sent = [t for batch, _ in engine.batches for t in batch]
        assert sorted(sent) == ["Press Save all now, then quit.", "Save all", "quit"]
        translation = r.json()["translations"][0]
        assert translation["text"] == "<i>quit</i>. then now, <b>all Save</b> Press"
        assert translation["alternatives"] == [
            "<i>quit</i>. then now, <b>all Save</b> Press (1)"]


@pytest.mark.skipif(not SHIPPED.exists(), reason="the shipped bundle is not here")
def test_html_sentences_keep_their_inline_tags_and_words_through_the_server():
    """format "html" translated each text node apart ("Open the ", "file", " menu."); now a
    block's sentence goes whole, its inline tags carried over, other markup verbatim."""
    import httpx

    from app.config import Settings
    from app.http.app import create_app
    from tests.app.fakes import running

    app = create_app(Settings(models_dir=SHIPPED, variant="fp32", threads=1, max_wait_ms=1))
    html = ('<h1>Files</h1><p>Open the <b>file</b> menu and choose <a href="#s">Save</a>.</p>'
            "<pre>keep <b>me</b></pre>")
    with running(app) as srv:
        r = httpx.post(f"{srv.url}/translate", timeout=60,
                       data={"q": html, "source": "en", "target": "de", "format": "html"})
        assert r.status_code == 200, r.text
        out = r.json()["translatedText"]
        r = httpx.post(f"{srv.url}/translate", timeout=60, data={
            "q": "Open the file menu and choose Save.", "source": "en", "target": "de"})
        plain = r.json()["translatedText"]
    assert out.startswith("<h1>") and out.endswith("</p><pre>keep <b>me</b></pre>"), out
    paragraph = out[out.index("<p>") + 3 : out.index("</p>")]
    for tag in ("<b>", "</b>", '<a href="#s">', "</a>"):
        assert paragraph.count(tag) == 1, paragraph
    assert paragraph.index("<b>") < paragraph.index("</b>")
    assert paragraph.index("<a") < paragraph.index("</a>")
    assert re.sub(r"<[^>]+>", "", paragraph) == plain, (paragraph, plain)


def test_a_line_break_tag_ends_a_sentence_or_stands_alone_in_one():
    """With the <br> mask inside the sentence the model lost words ("Save the file<br>and close
    the window." -> "Speichert die Datei<br>and das Fenster."), and cut there each half lost the
    other. A <br> after a sentence's end, or before a capital, ends the sentence: the text on
    each side goes to the model apart, the tag stays between. A <br> inside a sentence (the
    text after it starts lowercase, the text before ends no sentence) stands alone in it: the
    model gets the sentence whole without it (the words on each side kept apart by a space),
    and the tag goes back by its relative place (text, html and documents)."""
    import httpx

    from app.config import Settings
    from app.documents import html_file
    from app.http.app import create_app
    from tests.app.fakes import FakeTranslator, fake_model, running

    engine = FakeTranslator()  # reverses the order of the words
    app = create_app(Settings(max_wait_ms=1), loader=lambda s: [fake_model(engine)])
    with running(app) as srv:
        for fmt, text, expected, sent_whole in [
            ("text", "Save the file.<br>Close it.", "file. the Save<br>it. Close",
             ["Close it.", "Save the file."]),
            ("html", "<p>Save the file<br/>Close <b>it</b>.</p>",
             "<p>file the Save<br/><b>it</b>. Close</p>", ["Close it.", "Save the file"]),
            ("text", "Save the file<br>and close it.", "it. close and <br> file the Save",
             ["Save the file and close it."]),
            ("html", "<p>Save the file<br/>and close <b>it</b>.</p>",
             "<p><b>it</b>. close <br/> and file the Save</p>",
             ["Save the file and close it."]),
        ]:
            engine.batches.clear()
            r = httpx.post(f"{srv.url}/v1/translate", timeout=10, json={
                "text": text, "source": "en", "target": "de", "format": fmt})
            assert r.json()["translations"][0]["text"] == expected
            sent = sorted(t for batch, _ in engine.batches for t in batch)
            assert sent[:len(sent_whole)] == sent_whole, sent
    doc = html_file.extract(b"<p>Save the file<br>Close <b>it</b>.</p>")
    assert doc.segments == ["Save the file", "Close <b>it</b>."]
    doc = html_file.extract(b"<p>Save the file<br>and close <b>it</b>.</p>")
    assert doc.segments == ["Save the file<br>and close <b>it</b>."]


def test_closing_tags_that_meet_in_the_translation_close_up():
    # in the source " the file" stood between </em> and </a>; carried over, the two closings
    # meet, and no space is put between them
    m = mask('Click <a href="#">here to <em>download</em> the file</a>.')
    assert m.text == "Click {1}here to {2}download{3} the file{4}."
    out = unmask(m, "Klicken Sie hier, {1}um die Datei zu {2}herunterladen{3}{4}.")
    assert out == 'Klicken Sie hier, <a href="#">um die Datei zu <em>herunterladen</em></a>.'


def test_a_wrapped_text_translated_longer_than_the_whole_sentence():
    plan = TagPlan.of("a {1}b{2} c", PAIR)
    assert plan.apply(["x", "many more words than the sentence has"]) == "{1}x{2}"


def test_any_plan_applies_to_any_translation():
    """Random sentences with random pairs (nested, crossing, empty, at the edges) and random
    translations: apply never fails, and each carried group's masks come back once, opening
    before closing, children inside their parents."""
    import random

    rng = random.Random(7)
    vocab = ["Datei", "öffnen", "die", "x", "Sie", "%s", ".", ",", "Fenster", "a-b", "«q»"]
    for _ in range(400):
        n = rng.randint(0, 12)
        tokens = [rng.choice(["open", "the", "file", "%s", "a", ".", ","]) for _ in range(n)]
        k = rng.randint(1, 4)
        pairs = tuple((f"{{{2 * i + 1}}}", f"{{{2 * i + 2}}}") for i in range(k))
        for opening, closing in pairs:  # insert each pair at random places, in order
            a = rng.randint(0, len(tokens))
            b = rng.randint(a, len(tokens))
            tokens.insert(b, closing)
            tokens.insert(a, opening)
        sentence = "".join(t + rng.choice(["", " "]) for t in tokens)
        plan = TagPlan.of(sentence, pairs)
        if plan is None:
            continue
        translations = [" ".join(rng.choice(vocab) for _ in range(rng.randint(0, 8)))
                        for _ in plan.texts]
        out = plan.apply(translations)
        for g in plan.groups:
            for token in re.findall(r"\{\d+\}", g.opening + g.closing):
                assert out.count(token) == 1, (sentence, translations, out)
            assert out.index(g.opening) <= out.index(g.closing), (sentence, out)
            if g.parent is not None:
                p = plan.groups[g.parent]
                assert out.index(p.opening) <= out.index(g.opening), (sentence, out)
                assert out.index(g.closing) <= out.index(p.closing), (sentence, out)


def test_masks_taken_out_leave_single_spaces():
    pairs = (("{1}", "{4}"), ("{2}", "{3}"))
    plan = TagPlan.of("open {1}{2} file {3} now {4} please", pairs)
    assert plan.texts == ("open file now please", "file now", "file")
    assert TagPlan.of("Open the {1} file {2} now", PAIR).texts == ("Open the file now", "file")


def test_tags_that_stand_alone_leave_the_sentence_and_come_back():
    m = mask('Click the <img src="save.png"/> button, then <b>Close</b><x id="3"/>.')
    marks = tag_marks(m)
    assert marks.pairs == (("{2}", "{3}"),) and marks.atoms == ("{1}", "{4}")
    plan = TagPlan.of(m.text, marks.pairs, marks.atoms)
    assert plan.texts == ("Click the button, then Close.", "Close")
    out = plan.apply(["Klicken Sie auf die Schaltfläche und dann auf Schließen.", "Schließen"])
    assert out == "Klicken Sie auf die Schaltfläche und dann auf {2}Schließen{3}."
    restored = unmask(m, out)  # the atoms go back by their place in the source
    assert restored.count('<img src="save.png"/>') == 1 and restored.count('<x id="3"/>') == 1
    assert "<b>Schließen</b>" in restored
    # atoms alone make a plan too; a closing or opening tag without its partner is no atom
    assert TagPlan.of("a {1} b", (), ("{1}",)).texts == ("a b",)
    assert tag_marks(mask("a <b>b")).atoms == () and tag_marks(mask("a <br> b")).atoms == ("{1}",)


@pytest.mark.skipif(not SHIPPED.exists(), reason="the shipped bundle is not here")
def test_the_shipped_model_keeps_every_word_beside_an_image():
    from app.engine.translator import Translator
    from app.engine.types import TranslationOptions

    engine = Translator.from_dir(SHIPPED, variant="fp32", workers=1)
    options = TranslationOptions(beam_size=1)

    def translate(texts: list[str]) -> list[str]:
        return [r.text for r in engine.translate_batch(texts, options)]

    source = 'Set text <img src="icon.png"/> layer attribute'
    out = documents.translate_segments([source], translate)[0]
    assert out.count('<img src="icon.png"/>') == 1, out
    plain = translate(["Set text layer attribute"])[0]
    assert re.sub(r" ?<img[^>]*> ?", " ", out).strip() == plain, (out, plain)


def test_a_pair_around_atoms_only_goes_out_and_back_with_them():
    # a span holding only a field (.odt): carried as a pair of no words, it wrapped a word
    plan = TagPlan.of("See page {1}{2}{3} for more.", (("{1}", "{3}"),), ("{2}",))
    assert plan.texts == ("See page for more.",)
    m = mask('See page <g id="0"><x id="1"/></g> for more.')
    out = unmask(m, plan.apply(["Siehe Seite für mehr."]))
    assert '<g id="0"><x id="1"/></g>' in out


def test_an_atom_between_two_words_with_no_space_leaves_one():
    plan = TagPlan.of("Save the file{1}and close it.", (), ("{1}",))
    assert plan.texts == ("Save the file and close it.",)  # two words, not "fileand"
    plan = TagPlan.of("Save the file {1} and close it.", (), ("{1}",))
    assert plan.texts == ("Save the file and close it.",)
    plan = TagPlan.of("Done.{1}", (), ("{1}",))
    assert plan.texts == ("Done.",)
    plan = TagPlan.of("Name:{1}John Smith", (), ("{1}",))
    assert plan.texts == ("Name: John Smith",)
    # after a closing bracket too: "save(name)This" was one word, and a line break between
    # them (an .odt's) went back after "This"
    plan = TagPlan.of("save(name){1}This method", (), ("{1}",))
    assert plan.texts == ("save(name) This method",)
    # a word an opening bracket or quote holds stays held: "(bold)", not "( bold)"
    plan = TagPlan.of('See ({1}bold{2}) and "{3}this{4}" here.', (("{1}", "{2}"), ("{3}", "{4}")))
    assert plan.texts[0] == 'See (bold) and "this" here.'


def test_a_sentence_of_a_text_with_many_tags_gets_only_its_own():
    """TagMarks.within: a paragraph of hundreds of formatting runs is cut into sentences, and
    each sentence's plan is the one it had with all of the paragraph's marks."""
    text = " ".join(f"Word <b>bold{i}</b> and <i>it{i}</i> end." for i in range(100))
    masked = mask(text)
    whole = tag_marks(masked)
    assert len(whole.pairs) == 200
    sentences = [s for s in re.split(r"(?<=\.) ", masked.text) if s]
    for sentence in sentences:
        own = whole.within(sentence)
        assert len(own.pairs) == 2
        assert TagPlan.of(sentence, own.pairs, own.atoms) == TagPlan.of(
            sentence, whole.pairs, whole.atoms)
    few = tag_marks(mask("Open the <b>file</b> now."))
    assert few.within("Open the") is few  # few marks: kept whole, nothing to gain


def test_each_pair_compares_a_bounded_number_of_windows(monkeypatch):
    """A pair's best window is the one nearest its place that reads most like it; windows so
    far away that their distance alone puts them below the best found need no comparison.
    Comparing every window of the translation for every pair made a paragraph packed with
    pairs cost the square of its pairs: the comparisons must grow with the pairs, not faster."""
    compared = []
    similarity = tags._Goal.similarity
    monkeypatch.setattr(tags._Goal, "similarity",
                        lambda goal, window: compared.append(window) or similarity(goal, window))

    def comparisons(n: int) -> int:
        words = [f"word{k}" for k in range(n)]
        sentence = " ".join(f"{{{2 * k + 1}}}{w}{{{2 * k + 2}}}" for k, w in enumerate(words))
        pairs = tuple((f"{{{2 * k + 1}}}", f"{{{2 * k + 2}}}") for k in range(n))
        plan = TagPlan.of(sentence, pairs)
        compared.clear()
        assert plan.apply([" ".join(words), *words]) == sentence  # names come through as they are
        return len(compared)

    few, many = comparisons(25), comparisons(100)
    assert many <= 8 * 100, many  # a few windows a pair
    assert many <= 5 * few, (few, many)  # four times the pairs, about four times the work


def test_a_tag_that_stands_alone_after_a_word_follows_that_word_into_the_translation():
    """A footnote reference glued to the end of a word ("manual<x/>") went back at the word
    boundary nearest its relative place in the whole paragraph (counted with every mask in
    it): in front of "Handbuch", one word off, spaced; in a paragraph of two sentences, as
    far off as the other sentence moved it; and nowhere near the word once the translation
    put the word elsewhere. It now stays glued to the translation of its word, found as a
    pair's wrapped text is."""
    ref = '<x id="1"/>'
    german = {"See the manual for details.": "Siehe das Handbuch für Details.",
              "See the manual.": "Siehe das Handbuch.",
              "Details are in the manual, chapter two.":
                  "Einzelheiten finden Sie im Handbuch, Kapitel zwei.",
              "It covers the installation of every module.":
                  "Es behandelt die Installation jedes einzelnen Moduls.",
              "For details, see the manual.": "Einzelheiten finden Sie im Handbuch.",
              "manual": "Handbuch", "the manual": "das Handbuch"}
    sent: list[str] = []

    def translate(texts: list[str]) -> list[str]:
        sent.extend(texts)
        return [german[t] for t in texts]

    for source, expected in [
        (f"See the manual{ref} for details.", f"Siehe das Handbuch{ref} für Details."),
        (f"See the manual{ref}.", f"Siehe das Handbuch{ref}."),
        (f"Details are in the manual{ref}, chapter two.",
         f"Einzelheiten finden Sie im Handbuch{ref}, Kapitel zwei."),
        (f"It covers the installation of every module. See the manual{ref} for details.",
         f"Es behandelt die Installation jedes einzelnen Moduls. Siehe das Handbuch{ref} "
         "für Details."),
        (f"For details, see the manual{ref}.", f"Einzelheiten finden Sie im Handbuch{ref}."),
        (f'See <g id="2">the manual</g>{ref} for details.',  # next to a pair: goes with it
         f'Siehe <g id="2">das Handbuch</g>{ref} für Details.'),
    ]:
        sent.clear()
        assert documents.translate_segments([source], translate, markup=True) == [expected]
        assert not any("{" in t for t in sent), sent  # no mask reaches the model


def test_an_atom_glued_to_a_mark_goes_back_glued_to_it():
    # a field before a period or comma (a page number in a .docx or .pptx): the model read
    # "See page ." and the field came back spaced from the period ("SEE PAGE <x/> ."), or after it
    texts = ['See page <x id="1"/>. Then go.', 'Total: <x id="2"/>, done.',
             'Page <x id="1"/> of <x id="2"/>.', '(<x id="3"/> pages) are here.']
    sent = []

    def upper(batch):
        sent.extend(batch)
        return [t.upper() for t in batch]

    assert documents.translate_segments(texts, upper, markup=True) == [
        'SEE PAGE <x id="1"/>. THEN GO.', 'TOTAL: <x id="2"/>, DONE.',
        'PAGE <x id="1"/> OF <x id="2"/>.', '(<x id="3"/> PAGES) ARE HERE.']
    assert "See page." in sent and "Total:, done." in sent


def test_the_word_an_atom_was_glued_to_is_found_as_the_pattern_searched_for_it_found_it():
    # searched for with `\S+$` in the text before the atom, each character of a long word
    # earlier in the sentence began a try to that word's end: the square of the word
    import random

    searched = re.compile(r"\S+$")
    rng = random.Random(3)
    pieces = [" ", "\t", "\n", "a", "bc", "\u00a0", ".", "<", "é"]
    for _ in range(20000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 12))) + "x"
        at = rng.randint(1, len(text))
        if not text[:at].rstrip() or text[at - 1].isspace():
            continue  # (the caller's text ends in a word)
        assert tags._LAST_WORD.search(text, 0, at).span() == searched.search(text[:at]).span()


def test_an_atom_after_a_sentence_with_a_long_word_is_planned_in_linear_time():
    import subprocess
    import sys

    code = ("from app.text.tags import TagPlan\n"
            "TagPlan.of('a' * 200_000 + ' manual<x/>. More', [], ['<x/>'])")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30,
                   cwd=Path(__file__).resolve().parents[2])
