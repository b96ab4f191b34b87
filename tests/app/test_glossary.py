"""Glossaries (app.text.glossary), per-text language detection and confidences: the matching
rules, server glossary files, and both APIs on a real server (loopback) with fake engines that
translate word by word, so every expected output is known exactly."""

from __future__ import annotations

import json
import math
import os
import re
import time

import httpx
import pytest

from app.config import Settings
from app.engine.types import Result, TranslationOptions
from app.http.app import create_app
from app.text.glossary import Glossary, GlossaryFiles
from tests.app.fakes import FakeTranslator, fake_model, running

# ---------------------------------------------------------------- matching rules


def test_whole_words_case_rules_and_longest_term_first():
    g = Glossary.of({"file": "Datei", "file manager": "Dateiverwaltung", "Apple": "Apple Inc.",
                     "c++": "C++"})
    found = [(s, e, t) for s, e, t in g.find("A FILE in the profile, File\nManager; apple "
                                              "Apple, c++ code")]
    text = "A FILE in the profile, File\nManager; apple Apple, c++ code"
    assert [(text[s:e], t) for s, e, t in found] == [
        ("FILE", "Datei"),  # a lowercase term matches in any case
        # "profile" holds "file" but is another word; the longer term wins where both start,
        # across a line break
        ("File\nManager", "Dateiverwaltung"),
        ("Apple", "Apple Inc."),  # a term with a capital matches only exactly: not "apple"
        ("c++", "C++"),  # a non-word edge needs no boundary
    ]


def test_later_entries_win_and_overlaps_resolve_left_to_right():
    g = Glossary.of([("File", "A"), ("file", "B"), ("file", "C")])
    assert dict(g.entries) == {"File": "A", "file": "C"}
    g = Glossary.of({"new file": "neue Datei", "file name": "Dateiname"})
    m = g.mask("a new file name")
    assert (m.text, m.targets) == ("a {1} name", {"{1}": "neue Datei"})  # the leftmost wins


def test_masks_skip_the_texts_own_numbers_and_restore_capitalises_sentence_starts():
    g = Glossary.of({"save": "speichern"})
    m = g.mask("Save {1} and {3} now. Save.")
    assert m.text == "{4} {1} and {3} now. {4}."
    out = m.restore("{4} {1} und {3} jetzt. Dann {4}. «{4}»")
    assert out == "Speichern {1} und {3} jetzt. Dann speichern. «Speichern»"


def test_markup_terms_are_found_in_text_only_and_written_escaped():
    g = Glossary.of({"file": "Datei", "r&d": "F&E"})
    m = g.mask('<a title="file">file</a> R&amp;D', markup=True)
    assert m.text == '<a title="file">{1}</a> {2}'
    assert m.restore(m.text) == '<a title="file">Datei</a> F&amp;E'


def test_markup_terms_are_not_looked_for_in_a_tag_whose_value_holds_a_closing_bracket():
    g = Glossary.of({"file": "Datei"})
    m = g.mask('<a title="a > file" href="file.html">file</a>', markup=True)
    assert m.text == '<a title="a > file" href="file.html">{1}</a>'
    assert m.restore(m.text) == '<a title="a > file" href="file.html">Datei</a>'


def test_markup_terms_are_found_within_the_stretches_given_and_written_for_their_place():
    """Only the stretches given are searched (an HTML text's text and the values of the
    attributes people read); a target in a value has its quotes escaped and starts a sentence
    where the value does."""
    g = Glossary.of({"file": 'datei "neu"'})
    text = '<img alt="file it" src="file.png"><code>file</code> <b>a file</b>'
    within = [(10, 17), (len(text) - 14, len(text))]  # the alt value, the last <b>...</b>
    m = g.mask(text, markup=True, within=within)
    assert m.text == '<img alt="{1} it" src="file.png"><code>file</code> <b>a {1}</b>'
    assert m.restore('<img alt="{1} es" src="file.png"><code>file</code> <b>eine {1}</b>') == (
        '<img alt="Datei &quot;neu&quot; es" src="file.png"><code>file</code> '
        '<b>eine datei "neu"</b>')


def test_terms_inside_what_the_translation_keeps_stay():
    """A URL, an address, inline code, a tag or a placeholder goes through translation as it
    is: a term inside one is part of it, not a word to replace."""
    g = Glossary.of({"file": "Datei", "id": "Kennung", "g": "Gramm"})
    m = g.mask('See http://example.org/file, file@example.org, `open file`, <g id="1">the '
               'file</g> and {file} for the file.')
    assert m.text == ('See http://example.org/file, file@example.org, `open file`, <g id="1">'
                      'the {1}</g> and {file} for the {1}.')
    m = g.mask('<p>the file at http://example.org/file</p>', markup=True)
    assert m.text == "<p>the {1} at http://example.org/file</p>"
    # HTML's inline code element, read as a whole (its text between its own tags is code too)
    m = g.mask('<p>Open the file with <code class="x"><span>file</span> -i</code>.</p>',
               markup=True)
    assert m.text == '<p>Open the {1} with <code class="x"><span>file</span> -i</code>.</p>'
    # so is an inline element marked not to be translated, its nested tags and all
    m = g.mask('<p>Open <span translate="no">file <b>file</b></span> file</p>', markup=True)
    assert m.text == '<p>Open <span translate="no">file <b>file</b></span> {1}</p>'


def test_found_in_counts_each_term_as_often_as_its_mask():
    m = Glossary.of({"file": "Datei"}).mask("the file and the file")
    assert m.found_in("die Datei und die Datei")
    assert not m.found_in("die Datei und die Akte")
    assert not m.found_in("die Dateien und die Dateien")  # whole words only


def test_server_glossary_files_are_read_again_when_they_change(tmp_path, caplog):
    path = tmp_path / "en-de.tsv"
    path.write_text("# comment\nfile\tDatei\n\nbroken line\nsave\tsichern\n", encoding="utf-8")
    files = GlossaryFiles(tmp_path, max_term_chars=20)
    assert dict(files.get("en", "de").entries) == {"file": "Datei", "save": "sichern"}
    assert "line 4 skipped" in caplog.text
    assert files.get("en", "de") is files.get("en", "de")  # not read again unchanged
    path.write_text("file\tAkte\n", encoding="utf-8")
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert dict(files.get("en", "de").entries) == {"file": "Akte"}
    assert not files.get("de", "en")
    path.unlink()
    assert not files.get("en", "de")


# ---------------------------------------------------------------- the APIs, fake engines

WORDS = {"open": "öffne", "the": "die", "file": "Akte", "manager": "Verwalter", "save": "sichere",
         "and": "und", "close": "schließe", "it": "es", "now": "jetzt"}


class WordTranslator(FakeTranslator):
    """Word by word from WORDS (other words, masks and placeholders as they are); a sentence of
    n words scores -0.1 n (its n tokens and EOS)."""

    def _one(self, text: str, options: TranslationOptions) -> Result:
        out = re.sub(r"[^\W\d_]+", lambda m: WORDS.get(m.group().lower(), m.group()), text)
        n = len(text.split())
        return Result(text=out, score=-0.1 * n if options.return_scores else None,
                      tokens=list(range(n)))


def serve(tmp_path, translators=None, **settings):
    translators = translators or [WordTranslator()]
    settings = Settings(max_wait_ms=1, files_dir=tmp_path / "files", **settings)
    return running(create_app(settings, loader=lambda s: [fake_model(t) for t in translators]))


@pytest.fixture(scope="module")
def glossaries(tmp_path_factory):
    root = tmp_path_factory.mktemp("glossaries")
    (root / "en-de.tsv").write_text("save\tspeichern\nclose\tschließen\n", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def client(tmp_path_factory, glossaries):
    with serve(tmp_path_factory.mktemp("srv"), glossary_dir=glossaries, max_glossary_entries=3,
               max_glossary_term_chars=30) as server, \
            httpx.Client(base_url=server.url, timeout=30) as c:
        yield c


def v1(client, text, **extra) -> httpx.Response:
    return client.post("/v1/translate", json={"text": text, "source": "en", "target": "de",
                                              **extra})


def test_v1_glossary_masks_a_term_the_model_misses_and_keeps_one_it_gets(client):
    plain = v1(client, "Open the file manager").json()["translations"][0]["text"]
    assert plain == "öffne die Akte Verwalter"
    body = v1(client, "Open the file manager", glossary={"File Manager": "Dateiverwaltung"})
    assert body.status_code == 200, body.text
    # "File Manager" has capitals: it matches only so, and this text has it in lowercase
    assert body.json()["translations"][0]["text"] == plain
    body = v1(client, "Open the file manager. The file manager",
              glossary={"file manager": "dateiverwaltung"}).json()
    # the model's own translation lacks the term: the masked one is used, the target written
    # where the mask came back, capitalised at a sentence start
    assert body["translations"][0]["text"] == "öffne die dateiverwaltung. die dateiverwaltung"
    body = v1(client, "Open the file", glossary={"file": "Akte"}).json()
    assert body["translations"][0]["text"] == "öffne die Akte"  # its own translation had it


def test_server_glossary_applies_and_the_request_wins(client):
    out = v1(client, "Save and close it now").json()["translations"][0]["text"]
    assert out == "Speichern und schließen es jetzt"  # the server's terms, a sentence start
    out = v1(client, "Save and close it now", glossary={"close": "zumachen"}).json()
    assert out["translations"][0]["text"] == "Speichern und zumachen es jetzt"


def test_html_terms_in_text_and_attributes_people_read_never_in_markup_or_code(client):
    body = v1(client, '<p title="file manager">Open the <b>file manager</b></p><img alt="file '
              'it" src="file.png"><code>file</code><p translate="no">the file</p>',
              format="html", glossary={"file manager": "Dateiverwaltung", "file": 'datei "neu"'})
    # the title is a term alone (no words left for the model); the alt's target is escaped for
    # its attribute and starts its text
    assert body.json()["translations"][0]["text"] == (
        '<p title="Dateiverwaltung">öffne die <b>Dateiverwaltung</b></p><img alt="Datei '
        '&quot;neu&quot; es" src="file.png"><code>file</code><p translate="no">the file</p>')


def test_libretranslate_takes_a_glossary_as_json_or_as_a_form_string(client):
    glossary = {"file manager": "Dateiverwaltung"}
    r = client.post("/translate", json={"q": ["Open the file manager", "Open it"],
                                        "source": "en", "target": "de", "glossary": glossary})
    assert r.json() == {"translatedText": ["öffne die Dateiverwaltung", "öffne es"]}
    r = client.post("/translate", data={"q": "Open the file manager", "source": "en",
                                        "target": "de", "glossary": json.dumps(glossary)})
    assert r.json() == {"translatedText": "öffne die Dateiverwaltung"}


@pytest.mark.parametrize(("glossary", "field", "limit", "status"), [
    ({"a": "1", "b": "2", "c": "3", "d": "4"}, "glossary", 3, 400),
    ({"x" * 31: "y"}, "glossary['" + "x" * 31 + "']", 30, 400),
    ({"file": "z" * 31}, "glossary['file']", 30, 400),
    ({" ": "leer"}, "glossary[' ']", None, 400),
    ({"file": 3}, "glossary.file", None, 422),
])
def test_glossary_limits_are_400s_naming_field_and_limit(client, glossary, field, limit, status):
    r = v1(client, "Open the file", glossary=glossary)
    assert r.status_code == status, r.text
    assert (r.json()["field"], r.json().get("limit")) == (field, limit)
    lt = client.post("/translate", json={"q": "Open the file", "source": "en", "target": "de",
                                         "glossary": glossary})
    assert lt.status_code == 400 and lt.json()["field"] == field
    r = client.post("/translate", data={"q": "x", "source": "en", "target": "de",
                                        "glossary": "[1, 2]"})
    assert r.status_code == 400 and r.json()["field"] == "glossary"


@pytest.mark.parametrize(("path", "status"), [
    ("/translate", 400), ("/translate_file", 400), ("/v1/documents", 422)])
def test_a_form_glossary_nested_too_deeply_to_parse_is_refused_naming_it(client, path, status):
    """The JSON parser gives up on nesting deeper than Python's recursion (RecursionError, no
    ValueError): a form's glossary of 2,000 brackets was a 500."""
    fields = {"q": "Open the file", "source": "en", "target": "de", "glossary": "[" * 2000}
    files = {"file": ("notes.txt", b"Open the file.")} if path != "/translate" else None
    r = client.post(path, data=fields, files=files)
    assert r.status_code == status, r.text
    assert r.json()["field"] == "glossary"
    assert client.post("/translate", data={**fields, "glossary": "{}"}).status_code == 200


def test_documents_use_the_request_and_server_glossaries(client):
    files = {"file": ("notes.txt", b"Open the file manager.\n\nSave it now.\n")}
    r = client.post("/translate_file", files=files, data={
        "source": "en", "target": "de", "glossary": json.dumps({"manager": "Leiter"})})
    assert r.status_code == 200, r.text
    out = client.get(r.json()["translatedFileUrl"]).text
    assert out == "öffne die Akte Leiter.\n\nSpeichern es jetzt.\n"


def run_job(client, name: str, data: bytes, **files) -> str:
    r = client.post("/v1/documents", data={"source": "en", "target": "de"},
                    files={"file": (name, data), **files})
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 30
    while (job := client.get(r.headers["location"]).json())["state"] not in ("done", "failed"):
        assert time.monotonic() < deadline, job
        time.sleep(0.02)
    assert job["state"] == "done", job
    return client.get(job["result"]).text


def test_document_jobs_use_the_server_glossary(client):
    out = run_job(client, "notes.html", b"<p>Save the <b>file</b> now.</p>")
    assert out == "<p>Speichern die <b>Akte</b> jetzt.</p>"


def test_document_glossaries_in_any_script_as_a_field_or_a_file_part(client):
    glossary = json.dumps({"manager": "Geschäftsführer", "close": "zumachen"},
                          ensure_ascii=False)
    text = b"Open the file manager.\n\nClose it now.\n"
    expected = "öffne die Akte Geschäftsführer.\n\nZumachen es jetzt.\n"
    # a multipart text field is UTF-8 where its part names no charset, as clients send it
    r = client.post("/translate_file", files={"file": ("notes.txt", text)}, data={
        "source": "en", "target": "de", "glossary": glossary})
    assert r.status_code == 200, r.text
    assert client.get(r.json()["translatedFileUrl"]).text == expected
    # curl -F glossary=@terms.json: the glossary as a file part
    part = {"glossary": ("terms.json", glossary.encode(), "application/json")}
    assert run_job(client, "notes.txt", text, **part) == expected
    r = client.post("/v1/documents", data={"source": "en", "target": "de"}, files={
        "file": ("notes.txt", text), "glossary": ("terms.json", b"\xff{}")})
    assert (r.status_code, r.json()["field"]) == (422, "glossary")  # not UTF-8


def test_confidence_on_request_from_the_scores_weighted_by_tokens(client):
    body = v1(client, ["Open it. Save the file manager now", "Open"],
              options={"confidence": True}).json()
    first, second = body["translations"]
    # sentences of 2 and 5 words: 3 and 6 tokens (EOS included) at -0.2 and -0.5 each
    assert first["confidence"] == pytest.approx(math.exp((3 * -0.2 + 6 * -0.5) / 9))
    assert second["confidence"] == pytest.approx(math.exp(-0.1))
    assert "score" not in first  # scores only when asked for
    assert "confidence" not in v1(client, "Open it").json()["translations"][0]
    same = client.post("/v1/translate", json={"text": "Open", "source": "de", "target": "de",
                                              "options": {"confidence": True}}).json()
    assert "confidence" not in same["translations"][0]  # no model ran


def test_libretranslate_answer_keeps_its_shape_unless_confidence_is_asked(client):
    r = client.post("/translate", json={"q": "Open it", "source": "en", "target": "de"})
    assert r.json() == {"translatedText": "öffne es"}
    r = client.post("/translate", json={"q": ["Open it", "Open"], "source": "en",
                                        "target": "de", "confidence": True})
    assert r.json()["confidence"] == pytest.approx([math.exp(-0.2), math.exp(-0.1)])
    r = client.post("/translate", data={"q": "Open", "source": "en", "target": "de",
                                        "confidence": "true"})
    assert r.json()["confidence"] == pytest.approx(math.exp(-0.1))


# ---------------------------------------------------------------- per-text detection

ENGLISH = "The weather is very nice today, and we are going for a long walk in the park."
FRENCH = "Le temps est très beau aujourd'hui, et nous allons faire une longue promenade."
GERMAN = "Das Wetter ist heute sehr schön, und wir gehen im Park lange spazieren."


@pytest.fixture(scope="module")
def multi(tmp_path_factory):
    engines = [FakeTranslator("en-de", "en", "de"), FakeTranslator("fr-de", "fr", "de")]
    with serve(tmp_path_factory.mktemp("multi"), engines) as server, \
            httpx.Client(base_url=server.url, timeout=30) as c:
        yield c


def reverse(text: str) -> str:
    return " ".join(reversed(text.split()))


def test_each_text_of_a_list_is_detected_and_routed_on_its_own(multi):
    r = multi.post("/v1/translate", json={"text": [ENGLISH, FRENCH, GERMAN, "Hi"],
                                          "source": "auto", "target": "de"})
    assert r.status_code == 200, r.text
    body = r.json()
    got = [(t["detected"]["language"], t["model"], t["text"]) for t in body["translations"]]
    # the short text takes the language of all texts together (here English: the most)
    together = multi.post("/detect", json={"q": "\n".join([ENGLISH, FRENCH, GERMAN, "Hi"])})
    assert together.json()[0]["language"] == "en"
    assert got == [("en", "en-de", reverse(ENGLISH)), ("fr", "fr-de", reverse(FRENCH)),
                   ("de", "identity", GERMAN), ("en", "en-de", "Hi")]
    assert (body["source"], body["model"]) == ("auto", "en-de, fr-de, identity")
    assert all(t["detected"]["confidence"] > 50 for t in body["translations"][:3])
    lt = multi.post("/translate", json={"q": [ENGLISH, FRENCH], "source": "auto",
                                        "target": "de"}).json()
    assert lt["translatedText"] == [reverse(ENGLISH), reverse(FRENCH)]
    assert [d["language"] for d in lt["detectedLanguage"]] == ["en", "fr"]
    assert set(lt["detectedLanguage"][0]) == {"language", "confidence"}


def test_a_short_text_takes_its_own_language_where_the_detector_is_sure_of_it(multi):
    short = {"en": "This is an English sentence.", "de": "Das ist ein deutscher Satz.",
             "de?": "Vielen Dank!"}  # 28, 27 and 12 characters
    ranked = {key: multi.post("/detect", json={"q": text}).json()[0]
              for key, text in short.items()}
    assert [ranked[key]["language"] for key in short] == ["en", "de", "de"]
    assert ranked["en"]["confidence"] >= 99 and ranked["de"]["confidence"] >= 99
    assert ranked["de?"]["confidence"] < 99  # not sure enough: the list's language
    r = multi.post("/v1/translate", json={"text": [GERMAN, short["en"], short["de?"]],
                                          "source": "auto", "target": "de"})
    got = [(t["detected"]["language"], t["model"], t["text"]) for t in r.json()["translations"]]
    assert got == [("de", "identity", GERMAN), ("en", "en-de", reverse(short["en"])),
                   ("de", "identity", short["de?"])]
    lt = multi.post("/translate", json={"q": [ENGLISH, ENGLISH, short["de"], short["de?"]],
                                        "source": "auto", "target": "de"}).json()
    assert lt["translatedText"] == [reverse(ENGLISH), reverse(ENGLISH), short["de"],
                                    reverse(short["de?"])]
    assert [d["language"] for d in lt["detectedLanguage"]] == ["en", "en", "de", "en"]


def test_a_text_in_the_target_language_already_comes_back_as_it_is(multi):
    """Sent with a named source, German text was translated as if it were English (the shipped
    model made nonsense of it); a text of four words or more that the detector is sure is the
    target language stays as it is, and the answer says so."""
    short = "Das ist gut."  # three words: not judged, translated as the source named
    r = multi.post("/v1/translate", json={"text": [ENGLISH, GERMAN, short, FRENCH],
                                          "source": "en", "target": "de"})
    assert r.status_code == 200, r.text
    body = r.json()
    got = [((t.get("detected") or {}).get("language"), t["model"], t["text"])
           for t in body["translations"]]
    assert got == [(None, "en-de", reverse(ENGLISH)), ("de", "identity", GERMAN),
                   (None, "en-de", reverse(short)), (None, "en-de", reverse(FRENCH))]
    assert (body["source"], body["model"]) == ("en", "en-de, identity")
    one = multi.post("/v1/translate", json={"text": GERMAN, "source": "en",
                                            "target": "de"}).json()
    assert (one["translations"][0]["text"], one["model"], one["source"]) == (
        GERMAN, "identity", "en")
    lt = multi.post("/translate", json={"q": GERMAN, "source": "en", "target": "de"}).json()
    assert lt == {"translatedText": GERMAN}
    asked = multi.post("/v1/translate", json={"text": GERMAN, "source": "en", "target": "de",
                                              "options": {"keep_target_language": False}})
    assert asked.json()["translations"] == [{"text": reverse(GERMAN)}]  # as the source named
    # a source no model reads is refused whatever the text
    refused = multi.post("/v1/translate", json={"text": GERMAN, "source": "xx", "target": "de"})
    assert refused.status_code == 400 and refused.json()["field"] == "source"


def test_one_language_for_every_text_keeps_the_answer_as_before(multi):
    body = multi.post("/v1/translate", json={"text": [FRENCH, FRENCH], "source": "auto",
                                             "target": "de"}).json()
    assert (body["source"], body["model"]) == ("fr", "fr-de")
    lt = multi.post("/translate", json={"q": FRENCH, "source": "auto", "target": "de"}).json()
    assert lt["detectedLanguage"]["language"] == "fr"
