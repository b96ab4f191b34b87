"""A person's view: headless Chromium loads the page and /docs from a real server on the tiny
bundle, translates a sentence through the page, and screenshots land in tests/artifacts/."""

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
