"""A person's view: headless Chromium loads the page and /docs from real servers on the tiny
bundle and uses every control of the page with mouse clicks and keys: translation with the
source detected, swap, alternatives, the character counter against the server's limit, copy,
a document dropped with upload progress, its download, a cancelled upload, and errors in words.
Screenshots land in tests/artifacts/."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from app.http.app import create_app
from tests.app.browser import Browser, find_chromium
from tests.app.conftest import real_settings
from tests.app.fakes import running

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
LIMIT = 400  # real_server's max_chars_per_text, which the page reads from /frontend/settings
KEY = "page-test-key"  # pair_server's API key


@pytest.fixture(scope="module")
def browser():
    binary = find_chromium()
    if binary is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    b = Browser(binary)
    yield b
    b.close()


@pytest.fixture(autouse=True)
def no_script_errors(browser):
    """Whatever a test does, the page's script throws nothing that it leaves uncaught."""
    before = len(browser.exceptions)
    yield
    browser.evaluate("new Promise(r => setTimeout(() => r(true), 50))")  # late events in
    assert browser.exceptions[before:] == []


@pytest.fixture(scope="module")
def pair_server(tiny_bundle, tmp_path_factory):
    """A server with both directions between en and de, so that swapping has a pair to go to
    and detection has two languages to tell apart, and an API key (KEY). The de -> en model is
    the tiny en -> de one under the reverse name: the page's behaviour is under test here, not
    what it translates."""
    models = tmp_path_factory.mktemp("two-way")
    shutil.copytree(tiny_bundle, models / "en-de")
    reverse = shutil.copytree(tiny_bundle, models / "de-en")
    manifest = json.loads((reverse / "manifest.json").read_text())
    manifest.update(name="de-en", source_lang="de", target_lang="en")
    (reverse / "manifest.json").write_text(json.dumps(manifest))
    app = create_app(real_settings(models, max_chars_per_text=LIMIT, warmup=False, api_keys=[KEY],
                                   files_dir=tmp_path_factory.mktemp("two-way-files")))
    with running(app) as server:
        yield server


def js(expression: str) -> str:
    return json.dumps(expression)


def text_of(browser, element_id: str) -> str:
    return browser.evaluate(f"document.getElementById({js(element_id)}).textContent")


def value_of(browser, element_id: str):
    return browser.evaluate(f"document.getElementById({js(element_id)}).value")


def shown(browser, element_id: str) -> bool:
    """Whether a person sees the element: laid out and visible (the hidden attribute can lose
    to a style rule, so it is not asked)."""
    return browser.evaluate(f"document.getElementById({js(element_id)}).checkVisibility()")


def open_page(browser, server, key: str | None = None) -> None:
    browser.throttle_uploads(-1)
    browser.navigate(f"{server.url}/")
    browser.wait_for("document.getElementById('status').textContent === 'Ready.'")
    if key:
        type_into(browser, "api-key", key)


def type_into(browser, element_id: str, text: str) -> None:
    browser.evaluate(f"document.getElementById({js(element_id)}).value = ''; true")
    browser.click(f"#{element_id}")
    browser.type_text(text)


def translate_by_click(browser) -> str:
    browser.evaluate("document.getElementById('status').textContent = ''; true")
    browser.click("#translate")
    return browser.wait_for(
        "(s => (s.startsWith('Translated') || s.startsWith('Error')) && s)"
        "(document.getElementById('status').textContent)"
    )


def test_page_translates_and_docs_render(browser, real_server, tiny_sentences):
    url = real_server.url
    open_page(browser, real_server)
    # the server's defaults: its one source language, and that language's target
    assert value_of(browser, "source") == "en"
    assert value_of(browser, "target") == "de"
    type_into(browser, "source-text", tiny_sentences[0])
    status = translate_by_click(browser)
    assert status.startswith("Translated 1 sentence from English to German with en-de")
    assert " ms" in status
    assert text_of(browser, "output").strip()
    assert browser.evaluate("document.activeElement.id") == "translate"  # kept through the wait
    # de -> en is not served here: no swap to offer, and the button says why
    assert browser.evaluate("document.getElementById('swap').disabled")
    assert browser.evaluate("document.getElementById('swap').title") == (
        "German → English is not served here")
    browser.screenshot(ARTIFACTS / "web_page.png")

    browser.navigate(f"{url}/docs")
    title = browser.wait_for(
        "(document.querySelector('.swagger-ui .info .title') || {}).textContent"
    )
    assert "nmt-service" in title
    assert browser.wait_for("document.querySelectorAll('.opblock').length") >= 4
    browser.screenshot(ARTIFACTS / "docs.png")

    outside = [u for u in browser.requests
               if not u.startswith((url, "data:", "about:", "blob:"))]
    assert not outside, f"the pages reached outside the server: {outside}"


def test_the_sentences_of_a_text_are_counted_in_words(browser, real_server, tiny_sentences):
    """"1 sentence", "2 sentences": not "sentence(s)"."""
    open_page(browser, real_server)
    type_into(browser, "source-text", f"{tiny_sentences[0]}. {tiny_sentences[1]}.")
    status = translate_by_click(browser)
    assert status.startswith("Translated 2 sentences from English to German"), status
    type_into(browser, "source-text", tiny_sentences[0])
    status = translate_by_click(browser)
    assert status.startswith("Translated 1 sentence from English to German"), status


def test_auto_detects_the_source_and_swap_turns_the_pair_around(browser, pair_server,
                                                                 tiny_sentences):
    open_page(browser, pair_server, KEY)
    # two source languages: the server's default is "auto"
    assert value_of(browser, "source") == "auto"
    assert browser.evaluate("document.getElementById('swap').disabled")  # nothing detected yet
    browser.evaluate("document.getElementById('target').value = 'de'; true")
    sentence = tiny_sentences[0]
    type_into(browser, "source-text", sentence)
    status = translate_by_click(browser)
    assert status.startswith("Translated 1 sentence from English to German"), status
    assert text_of(browser, "detected") == "Detected: English"
    translation = text_of(browser, "output")
    assert translation.strip() and translation != sentence

    browser.click("#swap")
    assert value_of(browser, "source") == "de"
    assert value_of(browser, "target") == "en"
    assert value_of(browser, "source-text") == translation
    assert text_of(browser, "output") == sentence
    assert text_of(browser, "detected") == ""
    assert text_of(browser, "status") == "Now German → English."
    status = translate_by_click(browser)
    assert status.startswith("Translated 1 sentence from German to English with de-en"), status
    browser.click("#swap")  # and back
    assert (value_of(browser, "source"), value_of(browser, "target")) == ("en", "de")


def test_an_error_for_new_text_clears_the_language_detected_in_the_old(browser, pair_server,
                                                                         tiny_sentences):
    """"Detected: English" describes the text it was found in: an error for another text takes
    it away (and the swap it allowed), one for the same text leaves it."""
    open_page(browser, pair_server, KEY)
    assert value_of(browser, "source") == "auto"
    browser.evaluate("document.getElementById('target').value = 'de'; true")
    type_into(browser, "source-text", tiny_sentences[0])
    assert translate_by_click(browser).startswith("Translated")
    assert text_of(browser, "detected") == "Detected: English"
    browser.evaluate("document.getElementById('alternative-count').value = '3'; true")
    type_into(browser, "beam", "2")
    assert translate_by_click(browser).startswith("Error 422")
    assert text_of(browser, "detected") == "Detected: English"
    type_into(browser, "source-text", tiny_sentences[1])
    assert translate_by_click(browser).startswith("Error 422")
    assert text_of(browser, "detected") == ""
    assert browser.evaluate("document.getElementById('swap').disabled")
    assert browser.evaluate("document.getElementById('swap').title") == (
        "Translate once so the source language is known, then swap")


def test_swap_waits_for_a_running_translation(browser, pair_server, tiny_sentences):
    """A swap while a translation runs would put the old translation in the text and then have
    the answer overwrite the result with a translation of neither: swap is off until it ends."""
    open_page(browser, pair_server, KEY)
    browser.evaluate("document.getElementById('source').value = 'en';"
                     " document.getElementById('source').dispatchEvent(new Event('change'));"
                     " document.getElementById('target').value = 'de'; true")
    type_into(browser, "source-text", tiny_sentences[0])
    assert translate_by_click(browser).startswith("Translated")
    assert not browser.evaluate("document.getElementById('swap').disabled")
    # the server's answer held back until the test lets it through
    browser.evaluate(
        "window.fetch = ((real) => (url, init) => new Promise(r => { window.letThrough ="
        " () => r(real(url, init)); }))(window.fetch); true")
    type_into(browser, "source-text", tiny_sentences[1])
    browser.click("#translate")
    browser.wait_for("typeof window.letThrough === 'function'", timeout=5)
    assert text_of(browser, "status") == "Translating…"
    assert browser.evaluate("document.getElementById('swap').disabled")
    browser.evaluate("window.letThrough(); true")
    browser.wait_for("document.getElementById('status').textContent.startsWith('Translated')")
    assert not browser.evaluate("document.getElementById('swap').disabled")


def test_a_text_already_in_the_target_language_is_said_so(browser, real_server):
    """Detection that finds the target language: the server sends the text back as it is
    (model "identity", no sentences); the page says that, not "Translated 0 sentence(s) from
    German to German with identity"."""
    open_page(browser, real_server)
    browser.evaluate("document.getElementById('source').value = 'auto';"
                     " document.getElementById('source').dispatchEvent(new Event('change'));"
                     " document.getElementById('target').value = 'de'; true")
    text = "Das ist ein kleines Haus und die Katze schläft."
    type_into(browser, "source-text", text)
    browser.evaluate("document.getElementById('status').textContent = ''; true")
    browser.click("#translate")
    status = browser.wait_for(
        "(s => s && s !== 'Translating…' && s)(document.getElementById('status').textContent)")
    assert status == "Already in German: the text is shown as it is.", status
    assert text_of(browser, "output") == text
    assert text_of(browser, "detected") == "Detected: German"


def test_keyboard_alone_translates_with_a_visible_focus(browser, pair_server, tiny_sentences):
    open_page(browser, pair_server, KEY)
    browser.evaluate("document.getElementById('source').value = 'en';"
                     " document.getElementById('source').dispatchEvent(new Event('change'));"
                     " document.getElementById('source').focus(); true")
    order = []
    for _ in range(3):
        browser.press("Tab")
        order.append(browser.evaluate("document.activeElement.id"))
    assert order == ["swap", "target", "source-text"]  # the reading order, swap between the two
    # the focused control has the page's focus ring, not the browser's faint default
    assert browser.evaluate("getComputedStyle(document.activeElement).outlineWidth") == "3px"
    browser.type_text(tiny_sentences[1])
    browser.press("Enter", ctrl=True)
    status = browser.wait_for(
        "(s => s.startsWith('Translated') && s)(document.getElementById('status').textContent)")
    assert "from English to German" in status
    assert value_of(browser, "source-text") == tiny_sentences[1]  # Ctrl+Enter added no newline
    assert text_of(browser, "output").strip()
    # Enter in a one-line field submits too
    browser.evaluate("document.getElementById('status').textContent = ''; true")
    type_into(browser, "beam", "3")
    browser.press("Enter")
    browser.wait_for("document.getElementById('status').textContent.startsWith('Translated')")


def test_alternatives_are_shown_and_one_can_be_used(browser, real_server, tiny_sentences):
    open_page(browser, real_server)
    assert not shown(browser, "alternatives-box")
    browser.evaluate("document.getElementById('alternative-count').value = '2'; true")
    type_into(browser, "source-text", tiny_sentences[2])
    assert translate_by_click(browser).startswith("Translated")
    best = text_of(browser, "output")
    alternatives = browser.evaluate(
        "[...document.querySelectorAll('#alternatives button')].map(b => b.textContent)")
    assert len(alternatives) == 2
    assert shown(browser, "alternatives-box")

    browser.click("#alternatives li:nth-child(2) button")
    assert text_of(browser, "output") == alternatives[1]
    now = browser.evaluate(
        "[...document.querySelectorAll('#alternatives button')].map(b => b.textContent)")
    assert now == [alternatives[0], best]  # the translation took the chosen one's place
    assert text_of(browser, "status") == "Using alternative 2."


def test_counter_follows_the_text_and_warns_over_the_servers_limit(browser, real_server):
    open_page(browser, real_server)
    type_into(browser, "source-text", "a small cat")
    assert text_of(browser, "counter") == f"11 / {LIMIT}"
    browser.type_text("ü" * (LIMIT - 11))  # code points, as the server counts them
    assert text_of(browser, "counter") == f"{LIMIT} / {LIMIT}"
    assert not browser.evaluate("document.getElementById('translate').disabled")
    browser.type_text("🙂")  # one character, two UTF-16 units
    assert text_of(browser, "counter") == f"{LIMIT + 1} / {LIMIT}"
    assert text_of(browser, "limit-note") == f"over the server's limit of {LIMIT} characters"
    assert browser.evaluate("document.getElementById('counter').classList.contains('over')")
    assert browser.evaluate("document.getElementById('translate').disabled")
    browser.click("#clear")
    assert text_of(browser, "counter") == f"0 / {LIMIT}"
    assert text_of(browser, "limit-note") == ""
    assert not browser.evaluate("document.getElementById('translate').disabled")


def test_ctrl_enter_over_the_limit_is_held_back_in_words(browser, real_server):
    """Translate is off over the limit; Ctrl+Enter, which submits the form itself, must not
    send the text anyway: the page says why, as it does for an empty text."""
    open_page(browser, real_server)
    type_into(browser, "source-text", "a" * (LIMIT + 1))
    assert browser.evaluate("document.getElementById('translate').disabled")
    sent_before = len([u for u in browser.requests if u.endswith("/v1/translate")])
    browser.press("Enter", ctrl=True)
    browser.evaluate("new Promise(r => setTimeout(() => r(true), 300))")  # a request's time
    assert len([u for u in browser.requests if u.endswith("/v1/translate")]) == sent_before
    assert text_of(browser, "status") == (
        f"The text has {LIMIT + 1} characters, over the server's limit of {LIMIT}: "
        "shorten it to translate.")
    assert browser.evaluate("document.getElementById('status').classList.contains('error')")
    assert browser.evaluate("document.activeElement.id") == "source-text"


def test_copy_puts_the_translation_on_the_clipboard(browser, real_server, tiny_sentences):
    open_page(browser, real_server)
    browser.send("Browser.grantPermissions", origin=real_server.url,
                 permissions=["clipboardReadWrite", "clipboardSanitizedWrite"])
    assert browser.evaluate("document.getElementById('copy').disabled")  # nothing to copy yet
    type_into(browser, "source-text", tiny_sentences[3])
    translate_by_click(browser)
    browser.click("#copy")
    browser.wait_for("document.getElementById('copied').textContent === 'Copied.'")
    assert browser.evaluate("navigator.clipboard.readText()") == text_of(browser, "output")
    # a page served over plain http from another host has no navigator.clipboard: the older
    # copy command takes over, onto the same clipboard
    browser.evaluate("navigator.clipboard.writeText('something else')")
    assert browser.evaluate("Object.defineProperty(window, 'isSecureContext', {value: false});"
                            " document.getElementById('copied').textContent = '';"
                            " window.isSecureContext") is False
    browser.click("#copy")
    browser.wait_for("document.getElementById('copied').textContent === 'Copied.'")
    assert browser.evaluate("navigator.clipboard.readText()") == text_of(browser, "output")
    assert browser.evaluate("document.activeElement.id") == "copy"  # focus stays on the button


def test_server_and_network_errors_are_shown_in_words(browser, real_server, tiny_sentences):
    open_page(browser, real_server)
    type_into(browser, "source-text", tiny_sentences[0])
    # a beam too narrow for the alternatives asked for: the server's own message, verbatim
    browser.evaluate("document.getElementById('alternative-count').value = '3'; true")
    type_into(browser, "beam", "2")
    status = translate_by_click(browser)
    assert status == ("Error 422: options.beam_size (2) must be larger than "
                      "options.alternatives (3)")
    assert browser.evaluate("document.getElementById('status').classList.contains('error')")
    assert browser.evaluate("document.getElementById('status').getAttribute('role')") == "status"
    # the field the server names is marked, and described by the message
    assert browser.evaluate("document.getElementById('beam').getAttribute('aria-invalid')") == (
        "true")
    assert browser.evaluate("document.getElementById('beam').getAttribute('aria-describedby')"
                            ) == "status"
    # the connection refused: the request goes to a port where nothing listens
    browser.evaluate(
        "window.fetch = ((real) => (url, init) => real('http://127.0.0.1:9/', init))"
        "(window.fetch); true")
    browser.evaluate("document.getElementById('beam').value = ''; true")
    browser.click("#translate")
    status = browser.wait_for(
        "(s => s.startsWith('The server could not') && s)"
        "(document.getElementById('status').textContent)")
    assert "Failed to fetch" in status and "try again" in status


def test_an_error_for_new_text_clears_the_translation_of_the_old(browser, real_server,
                                                                 tiny_sentences):
    """The translation shown below an error must not pass for the new text's: an error for
    another text takes the old translation and its alternatives away; an error for the same
    text (other options refused) leaves its translation standing."""
    open_page(browser, real_server)
    browser.evaluate("document.getElementById('alternative-count').value = '2'; true")
    type_into(browser, "source-text", tiny_sentences[0])
    assert translate_by_click(browser).startswith("Translated")
    translation = text_of(browser, "output")
    assert translation.strip() and shown(browser, "alternatives-box")
    # the same text, with a beam too narrow for the alternatives: the translation still is its
    browser.evaluate("document.getElementById('alternative-count').value = '3'; true")
    type_into(browser, "beam", "2")
    assert translate_by_click(browser).startswith("Error 422")
    assert text_of(browser, "output") == translation
    # another text refused: nothing of the old one's translation is left to mistake for it
    type_into(browser, "source-text", tiny_sentences[1])
    assert translate_by_click(browser).startswith("Error 422")
    assert text_of(browser, "output") == ""
    assert not shown(browser, "alternatives-box")
    assert browser.evaluate("document.getElementById('copy').disabled")
    # and so does a text the page holds back itself (over the limit)
    browser.evaluate("document.getElementById('alternative-count').value = '0';"
                     " document.getElementById('beam').value = ''; true")
    assert translate_by_click(browser).startswith("Translated")
    type_into(browser, "source-text", "a" * (LIMIT + 1))
    browser.press("Enter", ctrl=True)
    assert text_of(browser, "status").startswith("The text has")
    assert text_of(browser, "output") == ""


def test_a_server_that_never_answers_is_given_up_on_in_words(browser, real_server,
                                                              tiny_sentences):
    """A request that hangs (a stopped process, a stuck proxy) must not leave the page
    "Translating…" for ever with Translate doing nothing: past the server's own timeout the page
    stops waiting, says so, and the next try goes through."""
    open_page(browser, real_server)
    # the server's timeout, from /frontend/settings, and a margin for its own 504 to come first
    assert browser.evaluate("page.requestTimeoutMs") > 30_000
    browser.evaluate(
        "window.realFetch = window.fetch; page.requestTimeoutMs = 500;"
        "window.fetch = (url, init) => new Promise((_, reject) =>"
        "  init.signal.addEventListener('abort', () => reject(init.signal.reason))); true")
    type_into(browser, "source-text", tiny_sentences[0])
    status = translate_by_click(browser)
    assert status == ("Error: no answer from the server within 0.5 s; it may be overloaded or "
                      "stopped. Try again."), status
    assert browser.evaluate("document.getElementById('status').classList.contains('error')")
    browser.evaluate("window.fetch = window.realFetch; true")
    assert translate_by_click(browser).startswith("Translated")


def drop(browser, name: str, content: str) -> None:
    """A file dropped on the drop zone: the dragenter, dragover and drop a person's drag makes."""
    browser.evaluate(
        "const dt = new DataTransfer();"
        f"dt.items.add(new File([{js(content)}], {js(name)}, {{type: 'text/plain'}}));"
        "const zone = document.getElementById('drop-zone');"
        "for (const type of ['dragenter', 'dragover', 'drop'])"
        "  zone.dispatchEvent(new DragEvent(type, {dataTransfer: dt, bubbles: true,"
        "                                          cancelable: true}));"
        "true"
    )


RECORD_PROGRESS = (
    "window.progressSeen = [];"
    "new MutationObserver(() => window.progressSeen.push("
    "  [document.getElementById('doc-phase').textContent,"
    "   Number(document.getElementById('doc-progress').value)]))"
    ".observe(document.getElementById('doc-progress'), {attributes: true}); true"
)


def test_a_dropped_document_uploads_with_progress_and_downloads(browser, real_server):
    from tests.app.test_translate_file import SRT, srt_shape

    open_page(browser, real_server)
    assert not any(shown(browser, i) for i in ("doc-download", "doc-progress-label", "doc-cancel"))
    drop(browser, "film.srt", SRT)
    assert text_of(browser, "doc-chosen") == f"Chosen: film.srt ({len(SRT)} bytes)"
    browser.evaluate(RECORD_PROGRESS)
    browser.click("#doc-upload")
    status = browser.wait_for(
        "document.getElementById('doc-download').checkVisibility() &&"
        " document.getElementById('doc-status').textContent", timeout=60,
    )
    assert status == "film.srt: done, 2 sentences translated."
    assert shown(browser, "doc-progress-label") and not shown(browser, "doc-cancel")
    # the button pressed gave way to Cancel, and Cancel to the download: the keyboard follows
    assert browser.evaluate("document.activeElement.id") == "doc-download"
    # the phases in order: the upload (its progress events), the job, the result
    phases = [phase.split()[0] for phase, _ in browser.evaluate("window.progressSeen")]
    phases = [p for i, p in enumerate(phases) if i == 0 or phases[i - 1] != p]
    assert phases[0] == "Uploading" and phases[-2:] == ["Downloading", "Done"], phases
    assert set(phases[1:-2]) <= {"Waiting", "Translating"} and phases[1:-2], phases
    assert ["Uploading 100%", 1] in browser.evaluate("window.progressSeen")
    assert browser.evaluate("document.getElementById('doc-download').download") == "film.de.srt"
    downloaded = browser.evaluate(
        "fetch(document.getElementById('doc-download').href).then(r => r.text())"
    )
    assert srt_shape(downloaded.encode()) == srt_shape(SRT.encode())
    assert downloaded != SRT
    browser.screenshot(ARTIFACTS / "web_documents.png")


def test_a_one_sentence_document_is_counted_in_the_singular(browser, real_server,
                                                            tiny_sentences):
    open_page(browser, real_server)
    drop(browser, "one.txt", tiny_sentences[0] + "\n")
    browser.click("#doc-upload")
    status = browser.wait_for(
        "document.getElementById('doc-download').checkVisibility() &&"
        " document.getElementById('doc-status').textContent", timeout=60,
    )
    assert status == "one.txt: done, 1 sentence translated.", status


# large enough for an upload sent in many pieces (on loopback a small body goes in one) and a
# job that runs for seconds on the tiny model
# German for the page's English target: English would come back as it is at once (source
# auto detects the target language), with nothing left to cancel
LONG = "".join(f"Eine kleine Katze sieht das alte Haus {i}.\n" for i in range(20_000))


def test_upload_progress_shows_and_cancel_aborts_it(browser, pair_server):
    open_page(browser, pair_server, KEY)
    big = LONG
    drop(browser, "long.txt", big)
    browser.evaluate(RECORD_PROGRESS)
    browser.throttle_uploads(len(big) / 2)  # two seconds, unless cancelled
    failed_before = len(browser.failed)
    browser.click("#doc-upload")
    browser.wait_for("window.progressSeen.some(([p, v]) => 0 < v && v < 1)")
    part = browser.evaluate("document.getElementById('doc-phase').textContent")
    assert part.startswith("Uploading ") and part != "Uploading 100%", part
    browser.click("#doc-cancel")
    browser.wait_for("document.getElementById('doc-status').textContent === 'Upload cancelled.'",
                     timeout=5)
    assert not shown(browser, "doc-cancel")
    assert not shown(browser, "doc-download")
    assert not shown(browser, "doc-progress-label")
    assert not browser.evaluate("document.getElementById('doc-upload').disabled")  # try again
    assert browser.evaluate("document.activeElement.id") == "doc-upload"
    # the browser reports the request itself as cancelled, not finished
    browser.wait_for("new Promise(r => setTimeout(() => r(true), 100))")
    cancelled = [f for f in browser.failed[failed_before:] if f.get("canceled")]
    assert cancelled, browser.failed
    browser.throttle_uploads(-1)


def test_cancel_stops_a_running_job(browser, pair_server):
    open_page(browser, pair_server, KEY)
    drop(browser, "long.txt", LONG)
    browser.click("#doc-upload")
    browser.wait_for("document.getElementById('doc-phase').textContent.startsWith('Translating')")
    browser.click("#doc-cancel")
    browser.wait_for("!document.getElementById('doc-status').textContent.startsWith('Cancelling')",
                     timeout=20)
    status = browser.evaluate("document.getElementById('doc-status').textContent")
    assert status == "Cancelled: the server stopped the job.", status
    assert not shown(browser, "doc-download")
    # the server agrees: the job the page polled is cancelled
    job_url = [u for u in browser.requests if "/v1/documents/" in u][-1]
    job = browser.evaluate(f"fetch({js(job_url)}, {{headers: {{Authorization: 'Bearer {KEY}'}}}})"
                           ".then(r => r.json())")
    assert job.get("state") == "cancelled", (job_url, job)
    # stopped before its last segment (a cancel that came before the job counted its segments
    # leaves a total of 0: nothing was done either)
    progress = job["progress"]
    assert progress["done"] < progress["total"] or progress["done"] == progress["total"] == 0, job


# the page's requests for a job (its state, its deletion), held until they are given up on: a
# server that has stopped answering
HOLD_JOB_REQUESTS = (
    "window.held = 0; window.fetch = ((real) => (url, init) => String(url).includes("
    "'/v1/documents/') ? new Promise((_, reject) => { window.held += 1;"
    "  init.signal.addEventListener('abort', () => reject(init.signal.reason)); })"
    " : real(url, init))(window.fetch); true"
)


def test_a_job_whose_server_stops_answering_is_given_up_on_in_words(browser, real_server,
                                                                     tiny_sentences):
    """Polling a job, and deleting it, wait no longer than a translation does (the server's own
    timeout and a margin): past it the page says so and takes a document again; Cancel, pressed
    while the page waits for an answer, stops the wait at once."""
    open_page(browser, real_server)
    browser.evaluate(HOLD_JOB_REQUESTS + "; page.requestTimeoutMs = 500; true")
    drop(browser, "one.txt", tiny_sentences[0] + "\n")
    browser.click("#doc-upload")
    status = browser.wait_for(
        "(s => s.startsWith('Error') && s)(document.getElementById('doc-status').textContent)",
        timeout=10)
    assert status == ("Error: no answer from the server within 0.5 s; it may be overloaded or "
                      "stopped. Try again."), status
    assert browser.evaluate("document.getElementById('doc-status').classList.contains('error')")
    assert not shown(browser, "doc-cancel") and not shown(browser, "doc-progress-label")
    assert not browser.evaluate("document.getElementById('doc-upload').disabled")
    # Cancel while a poll waits: the wait ends at once, and the deletion is bounded as well
    browser.evaluate("page.requestTimeoutMs = 3000; true")
    browser.click("#doc-upload")
    browser.wait_for("window.held >= 2", timeout=5)
    browser.click("#doc-cancel")
    assert text_of(browser, "doc-status") == "Cancelling…"
    browser.wait_for("window.held >= 3", timeout=1)  # the DELETE, sent before the poll's end
    status = browser.wait_for(
        "(s => s.startsWith('Error') && s)(document.getElementById('doc-status').textContent)",
        timeout=10)
    assert status.startswith("Error: no answer from the server within 3 s"), status
    assert not shown(browser, "doc-cancel")


def test_a_job_that_never_moves_is_given_up_on_and_cancelled(browser, real_server,
                                                              tiny_sentences):
    """A running job whose progress stays the same for the page's bound (a stuck server) is not
    polled for ever: the page stops, deletes the job on the server and says why. A queued job
    waits its turn however long (the test's queued polls come first and outlast the bound)."""
    open_page(browser, real_server)
    assert browser.evaluate("page.jobStallMs") == 10 * 60_000
    # the job's state as the page polls it, frozen; its deletion goes through to the server
    browser.evaluate(
        "page.jobStallMs = 1000; window.realFetch = window.fetch; window.polls = 0;"
        "window.fetch = ((real) => (url, init) => String(url).includes('/v1/documents/')"
        "  && !String(url).endsWith('/result') && !init?.method"
        "  ? Promise.resolve(new Response(JSON.stringify({"
        "      state: ++window.polls <= 6 ? 'queued' : 'running', filename: 'one.txt',"
        "      progress: {done: 0, total: 1}})))"
        "  : real(url, init))(window.fetch); true")
    drop(browser, "one.txt", tiny_sentences[0] + "\n")
    browser.click("#doc-upload")
    status = browser.wait_for(
        "(s => s.startsWith('No progress') && s)"
        "(document.getElementById('doc-status').textContent)", timeout=10)
    assert status.startswith("No progress for 1 s (the server may be stuck), so the page "
                             "stopped waiting. Cancelled: "), status
    assert browser.evaluate("window.polls") > 6  # 2.4 s queued outlasted the bound of 1 s
    assert browser.evaluate("document.getElementById('doc-status').classList.contains('error')")
    assert not shown(browser, "doc-cancel")
    # the server agrees: the job is cancelled, or gone if it had finished meanwhile
    job_url = [u for u in browser.requests if "/v1/documents/" in u][-1]
    answer = browser.evaluate(
        f"realFetch({js(job_url)}).then(async r => [r.status, await r.json()])")
    assert answer[0] == 404 or answer[1]["state"] == "cancelled", answer


def test_a_refused_document_is_explained(browser, real_server):
    open_page(browser, real_server)
    drop(browser, "notes.exe", "MZ")
    browser.click("#doc-upload")
    status = browser.wait_for(
        "(s => s.startsWith('Error') && s)(document.getElementById('doc-status').textContent)")
    assert status.startswith("Error 415: unsupported file format .exe; supported: ")
    assert browser.evaluate("document.getElementById('doc-status').classList.contains('error')")



def test_a_server_that_needs_a_key_asks_for_it(browser, pair_server, tiny_sentences):
    open_page(browser, pair_server)
    assert text_of(browser, "api-key-label") == "API key (required)"
    browser.evaluate("document.getElementById('source').value = 'en';"
                     " document.getElementById('source').dispatchEvent(new Event('change')); true")
    type_into(browser, "source-text", tiny_sentences[0])
    browser.click("#translate")
    # the browser's own check stops the form and takes the person to the empty field
    assert browser.evaluate("document.activeElement.id") == "api-key"
    assert browser.evaluate("document.getElementById('api-key').validity.valueMissing")
    assert text_of(browser, "status") == "Ready."
    type_into(browser, "api-key", "wrong")
    assert translate_by_click(browser) == "Error 401: invalid API key"
    type_into(browser, "api-key", KEY)
    assert translate_by_click(browser).startswith("Translated 1 sentence from English")
