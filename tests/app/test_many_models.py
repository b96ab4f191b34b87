"""One real server on a directory holding the shipped en-de bundle and two imported tiny Marian
bundles (fr-en, de-es; tests/marian.py): every pair is listed and translates, and the pairs
without a model of their own (fr -> de through en, en -> es through de) are served by pivoting."""

from __future__ import annotations

import math
from pathlib import Path

import httpx
import pytest

from app.engine.translator import Translator
from app.http.app import create_app
from tests.app.conftest import REAL
from tests.app.fakes import running

SHIPPED = Path(__file__).resolve().parents[2] / "bundles" / "en-de"
TEXTS = {"en": "Open the file.", "fr": "the red car sees a dog", "de": "a small cat"}


@pytest.fixture(scope="module")
def models_dir(marian_bundles, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("models")
    (root / "en-de").symlink_to(SHIPPED, target_is_directory=True)
    for name, (_, bundle) in marian_bundles.items():
        (root / name).symlink_to(bundle, target_is_directory=True)
    return root


@pytest.fixture(scope="module")
def client(models_dir):
    from app.config import Settings

    app = create_app(Settings(models_dir=models_dir, **REAL))
    with running(app) as server, httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def direct(models_dir):
    """Each bundle's engine called directly with its decoding defaults: the reference."""
    engines = {p.name: Translator.from_dir(p, intra_threads=1) for p in models_dir.iterdir()}

    def translate(name: str, text: str) -> str:
        engine = engines[name]
        return engine.translate_batch([text], engine.default_options)[0].text

    return translate


def translate(client, text: str, source: str, target: str) -> dict:
    r = client.post("/v1/translate", json={"text": text, "source": source, "target": target})
    assert r.status_code == 200, r.text
    return r.json()


def test_all_pairs_and_pivots_are_listed(client):
    models = client.get("/v1/models").json()
    assert {(m["name"], m["source"], m["target"]) for m in models["models"]} == {
        ("en-de", "en", "de"), ("fr-en", "fr", "en"), ("de-es", "de", "es")
    }
    assert {(p["source"], p["target"], p["via"]) for p in models["pivots"]} == {
        ("fr", "de", "en"), ("en", "es", "de")
    }
    languages = {x["code"]: x["targets"] for x in client.get("/languages").json()}
    # each language is its own target as well: the text comes back as it is
    assert languages == {"de": ["de", "es"], "en": ["de", "en", "es"], "es": ["es"],
                         "fr": ["de", "en", "fr"]}
    body = translate(client, TEXTS["fr"], "fr", "fr")
    assert body["model"] == "identity" and body["translations"][0]["text"] == TEXTS["fr"]


@pytest.mark.parametrize("pair", ["en-de", "fr-en", "de-es"])
def test_each_direct_pair_translates_with_its_own_bundle(client, direct, pair):
    source, target = pair.split("-")
    body = translate(client, TEXTS[source], source, target)
    assert body["model"] == pair and "pivot" not in body
    assert body["translations"][0]["text"] == direct(pair, TEXTS[source])
    assert body["translations"][0]["text"].strip()


@pytest.mark.parametrize(("source", "pivot", "target"), [("fr", "en", "de"), ("en", "de", "es")])
def test_pairs_without_a_model_pivot_and_say_so(client, direct, source, pivot, target):
    body = translate(client, TEXTS[source], source, target)
    assert body["pivot"] == pivot
    assert body["model"] == f"{source}-{pivot}+{pivot}-{target}"
    assert (body["source"], body["target"]) == (source, target)
    middle = direct(f"{source}-{pivot}", TEXTS[source])
    assert body["translations"][0]["text"] == direct(f"{pivot}-{target}", middle)
    lt = client.post("/translate", json={"q": TEXTS[source], "source": source, "target": target})
    assert lt.status_code == 200 and lt.json()["translatedText"] == body["translations"][0]["text"]


def test_a_pair_out_of_reach_is_a_400_naming_the_target(client):
    r = client.post("/v1/translate", json={"text": "hola", "source": "es", "target": "fr"})
    assert r.status_code == 400
    assert r.json()["field"] == "source"  # es has no model of its own
    r = client.post("/v1/translate", json={"text": "x", "source": "fr", "target": "es"})
    assert r.status_code == 400 and r.json()["field"] == "target"
    assert "['de', 'en']" in r.json()["error"]


# each long enough (app.translation.service.OWN_DETECTION_CHARS) to be detected on its own
LONG = {
    "en": "Open the file manager and save your changes before you close the window.",
    "fr": "Ouvrez le gestionnaire de fichiers et enregistrez vos modifications avant de fermer.",
    "de": "Öffnen Sie die Dateiverwaltung und speichern Sie Ihre Änderungen vor dem Schließen.",
}


def test_auto_detects_each_text_and_routes_it_to_its_own_models(client):
    texts = [LONG["en"], LONG["fr"], LONG["de"]]
    r = client.post("/v1/translate", json={"text": texts, "source": "auto", "target": "de"})
    assert r.status_code == 200, r.text
    got = r.json()["translations"]
    assert [(t["detected"]["language"], t["model"]) for t in got] == [
        ("en", "en-de"), ("fr", "fr-en+en-de"), ("de", "identity")]
    # each text as a request of its own, its language named, gives the same translation
    for t, text, source in zip(got, texts, ["en", "fr", "de"], strict=True):
        assert t["text"] == translate(client, text, source, "de")["translations"][0]["text"]
    lt = client.post("/translate", json={"q": texts, "source": "auto", "target": "de"}).json()
    assert lt["translatedText"] == [t["text"] for t in got]
    assert [d["language"] for d in lt["detectedLanguage"]] == ["en", "fr", "de"]


def test_confidence_is_exp_of_the_score_and_multiplies_over_a_pivot(client):
    def ask(text, source, target):
        # the toy fr-en model's English reads as German: translated all the same
        r = client.post("/v1/translate", json={"text": text, "source": source, "target": target,
                                               "options": {"confidence": True,
                                                           "return_scores": True,
                                                           "keep_target_language": False}})
        return r.json()["translations"][0]

    one = ask(TEXTS["en"], "en", "de")
    assert 0 < one["confidence"] <= 1
    assert one["confidence"] == pytest.approx(math.exp(one["score"]), rel=1e-6)
    through = ask(TEXTS["fr"], "fr", "de")
    first = ask(TEXTS["fr"], "fr", "en")
    second = ask(first["text"], "en", "de")
    assert through["confidence"] == pytest.approx(first["confidence"] * second["confidence"],
                                                  rel=1e-5)


def test_glossary_terms_on_the_shipped_model_and_through_a_pivot(client):
    glossary = {"file manager": "Dateiverwaltung"}
    for text, fmt in [("Open the file manager.", "text"),
                      ("<p>Open the <b>file manager</b>.</p>", "html")]:
        body = client.post("/v1/translate", json={"text": text, "source": "en", "target": "de",
                                                  "format": fmt, "glossary": glossary}).json()
        assert "Dateiverwaltung" in body["translations"][0]["text"]
    r = client.post("/translate", json={"q": TEXTS["fr"], "source": "fr", "target": "de",
                                        "glossary": {"car": "Kraftfahrzeug"}})
    assert "Kraftfahrzeug" in r.json()["translatedText"]


def test_the_shipped_model_keeps_words_of_software_and_writes_numbers_as_german_does(client):
    """Read as words, the model changed them ("config.yaml" -> "Konfiguration.yaml", "@maria"
    -> "@ria") and garbled numbers ("1,234.56" -> "1,234,56"), or left "1,000", one in German;
    on both APIs and in documents (app.text.protect)."""
    text = ("Open config.yaml in ~/Pictures/Holiday, thank @maria and pay 1,234.56 euros for "
            "1,000 users.")
    kept = ["config.yaml", "~/Pictures/Holiday", "@maria", "1.234,56", "1.000"]
    out = translate(client, text, "en", "de")["translations"][0]["text"]
    assert all(word in out for word in kept) and "1,000" not in out, out
    lt = client.post("/translate", json={"q": text, "source": "en", "target": "de"}).json()
    assert lt["translatedText"] == out
    r = client.post("/translate_file", data={"source": "en", "target": "de"},
                    files={"file": ("notes.txt", text.encode())})
    assert r.status_code == 200, r.text
    url = r.json()["translatedFileUrl"]
    document = client.get(url[url.index("/download_file/"):]).text
    assert all(word in document for word in kept), document


def test_the_shipped_model_keeps_command_lines_quantities_times_and_dates(client):
    """Read as words, the model changed command lines ("sudo apt install nginx" -> "sudo apt
    Jungx", "git status" -> "Git-Status"), dropped or changed units ("200 g" -> "200 G"), left
    amounts in English ("$4.99"), times on the 12-hour clock and dates of numbers."""
    text = "Install it with sudo apt install nginx, then mix 200 g of flour. It costs $4.99."
    kept = ["sudo apt install nginx", "200 g", "$4,99"]
    out = translate(client, text, "en", "de")["translations"][0]["text"]
    assert all(word in out for word in kept), out
    lt = client.post("/translate", json={"q": text, "source": "en", "target": "de"}).json()
    assert lt["translatedText"] == out
    # times on the 12-hour clock: "5 p.m." came back as "5 Uhr", five in the morning
    out = translate(client, "Call us between 9 a.m. and 5 p.m.", "en", "de")
    assert "9:00" in out["translations"][0]["text"] and "17:00" in out["translations"][0]["text"]
    # a date of numbers came back garbled ("07/14.2026")
    out = translate(client, "The event takes place on 07/14/2026 in Paris.", "en", "de")
    assert "14.07.2026" in out["translations"][0]["text"]
