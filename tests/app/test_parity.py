"""LibreTranslate parity beyond /translate: /detect, source "auto", /frontend/settings, /suggest,
on a real uvicorn server (loopback) with two fake pairs (en-de, de-en) so detection decides."""

from __future__ import annotations

import httpx
import pytest

from app.config import Settings
from app.http.app import create_app
from tests.app.fakes import FakeTranslator, fake_model, running

GERMAN = "Die Datei konnte nicht gespeichert werden, weil der Speicher voll ist."
ENGLISH = "The file could not be saved because the disk is full."


def serve(**settings):
    models = [FakeTranslator("en-de", "en", "de"), FakeTranslator("de-en", "de", "en")]
    settings.setdefault("max_wait_ms", 1)
    app = create_app(Settings(**settings), loader=lambda s: [fake_model(m) for m in models])
    return running(app)


@pytest.fixture(scope="module")
def client():
    with serve(max_chars_per_text=200, max_total_chars=400) as srv, \
            httpx.Client(base_url=srv.url, timeout=10) as c:
        yield c


@pytest.mark.parametrize("as_json", [True, False])
def test_detect_ranks_the_served_sources(client, as_json):
    for text, best in [(GERMAN, "de"), (ENGLISH, "en")]:
        kwargs = {"json": {"q": text}} if as_json else {"data": {"q": text}}
        r = client.post("/detect", **kwargs)
        assert r.status_code == 200, r.text
        ranked = r.json()
        assert [d["language"] for d in ranked] == [best, "de" if best == "en" else "en"]
        assert all(0 <= d["confidence"] <= 100 for d in ranked)
        assert ranked[0]["confidence"] > 90
        assert sum(d["confidence"] for d in ranked) == pytest.approx(100, abs=0.2)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"json": {}}, "q"), ({"data": {"q": ""}}, "q"), ({"json": {"q": 3}}, "q"),
     ({"json": {"q": "x" * 201}}, "q")],
)
def test_detect_bad_input_is_a_400_naming_q(client, kwargs, field):
    r = client.post("/detect", **kwargs)
    assert r.status_code == 400
    assert r.json()["field"] == field and r.json()["error"]


def test_auto_source_is_detected_on_both_apis(client):
    r = client.post("/v1/translate", json={"text": GERMAN, "source": "auto", "target": "en"})
    assert r.status_code == 200 and r.json()["source"] == "de"
    r = client.post("/translate", data={"q": ENGLISH, "source": "auto", "target": "de"})
    body = r.json()
    assert body["detectedLanguage"]["language"] == "en"
    assert 90 < body["detectedLanguage"]["confidence"] <= 100
    assert body["translatedText"] == " ".join(reversed(ENGLISH.split()))
    r = client.post("/translate", json={"q": [GERMAN, GERMAN], "source": "auto", "target": "en"})
    assert [d["language"] for d in r.json()["detectedLanguage"]] == ["de", "de"]
    # detected de, but nothing translates de into fr: the target is named
    r = client.post("/translate", json={"q": GERMAN, "source": "auto", "target": "fr"})
    assert r.status_code == 400 and r.json()["field"] == "target"


def test_detect_needs_the_key_when_keys_are_set():
    with serve(api_keys=["k1"]) as srv:
        assert httpx.post(f"{srv.url}/detect", data={"q": GERMAN}).status_code == 400
        r = httpx.post(f"{srv.url}/detect", data={"q": GERMAN, "api_key": "bad"})
        assert r.status_code == 403
        r = httpx.post(f"{srv.url}/detect", data={"q": GERMAN, "api_key": "k1"})
        assert r.status_code == 200 and r.json()[0]["language"] == "de"


def test_detect_on_the_real_bundle(real_server):
    """One source language (en), but /detect ranks every served language: German text is
    German, and source "auto" leaves German text bound for German as it is."""
    for text, best in [(GERMAN, "de"), (ENGLISH, "en")]:
        ranked = httpx.post(f"{real_server.url}/detect", json={"q": text}).json()
        assert [d["language"] for d in ranked] == [best, "de" if best == "en" else "en"]
        assert ranked[0]["confidence"] > 90
    r = httpx.post(f"{real_server.url}/translate",
                   json={"q": GERMAN, "source": "auto", "target": "de"}, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["translatedText"] == GERMAN
    assert r.json()["detectedLanguage"]["language"] == "de"


def test_auto_with_one_source_language():
    """A server that reads English only: "auto" takes German (a language it only writes) when
    the detector is sure, and English otherwise, even for English that looks a little German."""
    app = create_app(Settings(max_wait_ms=1), loader=lambda s: [
        fake_model(FakeTranslator("en-de", "en", "de"))])
    with running(app) as srv, httpx.Client(base_url=srv.url, timeout=10) as c:
        r = c.post("/translate", json={"q": GERMAN, "source": "auto", "target": "de"})
        assert r.status_code == 200, r.text
        assert r.json() == {"translatedText": GERMAN, "detectedLanguage": {
            "language": "de", "confidence": r.json()["detectedLanguage"]["confidence"]}}
        assert r.json()["detectedLanguage"]["confidence"] >= 90
        # ranked German first by the detector, at 51-66 (test split): still translated
        for text in ("open album in web browser", "Play Queue in Side Pane"):
            assert c.post("/detect", json={"q": text}).json()[0]["language"] == "de"
            r = c.post("/translate", json={"q": text, "source": "auto", "target": "de"})
            assert r.json()["translatedText"] == " ".join(reversed(text.split()))
            assert r.json()["detectedLanguage"]["language"] == "en"
        # German into English: no model reads German; refused with the reason, not garbled
        r = c.post("/translate", json={"q": GERMAN, "source": "auto", "target": "en"})
        assert r.status_code == 400 and r.json()["field"] == "source"
        assert "'de'" in r.json()["error"] and r.json()["code"] == "unsupported_language"
        r = c.post("/translate", json={"q": ENGLISH, "source": "auto", "target": "de"})
        assert r.json()["translatedText"] == " ".join(reversed(ENGLISH.split()))


def test_frontend_settings_have_libretranslate_fields(client):
    r = client.get("/frontend/settings")
    assert r.status_code == 200
    body = r.json()
    assert body["charLimit"] == 200 and body["frontendTimeout"] == 500
    assert body["apiKeys"] is False and body["keyRequired"] is False
    assert body["suggestions"] is False and body["filesTranslation"] is True
    assert {".txt", ".html", ".docx", ".odt", ".pptx", ".odp", ".srt", ".po", ".xliff",
            ".epub"} <= set(body["supportedFilesFormat"])
    assert body["language"] == {"source": {"code": "auto", "name": "Auto Detect"},
                                "target": {"code": "en", "name": "English"}}


def test_frontend_settings_with_keys_and_without_files():
    with serve(api_keys=["k1"], files_translation=False) as srv:
        body = httpx.get(f"{srv.url}/frontend/settings").json()
        assert body["keyRequired"] is True and body["apiKeys"] is True
        assert body["filesTranslation"] is False and body["supportedFilesFormat"] == []


def test_suggest_is_refused_as_libretranslate_does(client):
    r = client.post("/suggest", data={"q": "a", "s": "b", "source": "en", "target": "de"})
    assert r.status_code == 403
    assert r.json()["error"] == "Suggestions are disabled on this server."


SPANS = ["%s", "{name}", "<b>", "</b>", "https://example.org/a?b=1", "help@example.org"]
PROTECTED = "Open %s for {name}: <b>see</b> https://example.org/a?b=1 or write help@example.org."


def test_placeholders_are_masked_before_the_engine_and_restored():
    engine = FakeTranslator()
    app = create_app(Settings(max_wait_ms=1), loader=lambda s: [fake_model(engine)])
    with running(app) as srv:
        r = httpx.post(f"{srv.url}/v1/translate",
                       json={"text": PROTECTED, "source": "en", "target": "de"})
        seen = " ".join(t for batch, _ in engine.batches for t in batch)
        out = r.json()["translations"][0]["text"]
        assert "https://" not in seen and "<b>" not in seen and "@" not in seen
        assert "%s" in seen and "{name}" in seen  # placeholders are their own masks
        for span in SPANS:
            assert out.count(span) == 1, (span, out)
        assert out.index("<b>") < out.index("</b>")
        r = httpx.post(f"{srv.url}/translate",
                       json={"q": PROTECTED, "source": "en", "target": "de"})
        assert all(r.json()["translatedText"].count(span) == 1 for span in SPANS)


def test_span_protection_can_be_turned_off():
    engine = FakeTranslator()
    app = create_app(Settings(max_wait_ms=1, protect_spans=False),
                     loader=lambda s: [fake_model(engine)])
    with running(app) as srv:
        r = httpx.post(f"{srv.url}/v1/translate",
                       json={"text": PROTECTED, "source": "en", "target": "de"})
        assert engine.batches[-1][0] == [PROTECTED]
        assert r.json()["translations"][0]["text"] == " ".join(reversed(PROTECTED.split()))


def test_spans_survive_the_real_model(real_server):
    r = httpx.post(f"{real_server.url}/v1/translate", timeout=60,
                   json={"text": PROTECTED, "source": "en", "target": "de",
                         "options": {"alternatives": 1}})
    translation = r.json()["translations"][0]
    for text in [translation["text"], *translation["alternatives"]]:
        assert all(text.count(span) == 1 for span in SPANS), text
