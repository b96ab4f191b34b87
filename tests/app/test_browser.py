"""A person's view: headless Chromium loads the page and /docs from a real server on the tiny
bundle, translates a sentence and an uploaded document (a /v1/documents job) through the page,
and screenshots land in tests/artifacts/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.app.browser import Browser, find_chromium

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"


@pytest.fixture(scope="module")
def browser():
    binary = find_chromium()
    if binary is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium chromium-driver)")
    b = Browser(binary)
    yield b
    b.close()


def test_page_translates_and_docs_render(browser, real_server, tiny_sentences):
    url = real_server.url
    sentence = tiny_sentences[0]
    browser.navigate(f"{url}/")
    browser.wait_for("!document.getElementById('translate').disabled")
    assert "en → de" in browser.evaluate("document.getElementById('pair').textContent")
    browser.evaluate(
        f"document.getElementById('source-text').value = {json.dumps(sentence)};"
        "document.getElementById('translate').click(); true"
    )
    status = browser.wait_for(
        "document.getElementById('status').textContent.startsWith('Translated') &&"
        " document.getElementById('status').textContent"
    )
    assert " ms" in status
    output = browser.evaluate("document.getElementById('output').textContent")
    assert output.strip()
    browser.screenshot(ARTIFACTS / "web_page.png")

    browser.navigate(f"{url}/docs")
    title = browser.wait_for(
        "(document.querySelector('.swagger-ui .info .title') || {}).textContent"
    )
    assert "nmt-service" in title
    assert browser.wait_for("document.querySelectorAll('.opblock').length") >= 4
    browser.screenshot(ARTIFACTS / "docs.png")

    outside = [u for u in browser.requests
               if not u.startswith((url, "data:", "about:"))]
    assert not outside, f"the pages reached outside the server: {outside}"


def test_page_uploads_a_document_and_offers_the_result(browser, real_server):
    from tests.app.test_translate_file import SRT, srt_shape

    browser.navigate(f"{real_server.url}/")
    browser.wait_for("!document.getElementById('doc-upload').disabled")
    # a file chosen as a person would: the input's FileList, then the button
    browser.evaluate(
        "const dt = new DataTransfer();"
        f"dt.items.add(new File([{json.dumps(SRT)}], 'film.srt', {{type: 'text/plain'}}));"
        "document.getElementById('doc-file').files = dt.files;"
        "document.getElementById('doc-upload').click(); true"
    )
    status = browser.wait_for(
        "!document.getElementById('doc-download').hidden &&"
        " document.getElementById('doc-status').textContent", timeout=60,
    )
    assert status == "film.srt: done, 2 sentences."  # the first subtitle: one, over two lines
    assert browser.evaluate("document.getElementById('doc-progress').value") == 2
    link = browser.evaluate("document.getElementById('doc-download').download")
    assert link == "film.srt"
    downloaded = browser.evaluate(
        "fetch(document.getElementById('doc-download').href).then(r => r.text())"
    )
    assert srt_shape(downloaded.encode()) == srt_shape(SRT.encode())
    assert downloaded != SRT
    browser.screenshot(ARTIFACTS / "web_documents.png")
