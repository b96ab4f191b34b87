"""LibreTranslate's own client libraries against our real server (tiny bundle, loopback): the
Python libretranslatepy (translate, detect, languages) and the npm `libretranslate` package
(its one call, translate, which reads /languages first), run by node."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.error

import httpx
import pytest
from libretranslatepy import LibreTranslateAPI

from app.config import Settings
from app.http.app import create_app
from tests.app.fakes import FakeTranslator, fake_model, running

TEXT = "Open the file."


def v1_text(url: str, text: str) -> str:
    r = httpx.post(f"{url}/v1/translate", json={"text": text, "source": "en", "target": "de"},
                   timeout=60)
    return r.json()["translations"][0]["text"]


def test_libretranslatepy_translate_detect_languages(real_server):
    client = LibreTranslateAPI(real_server.url)
    assert client.translate(TEXT, "en", "de", timeout=60) == v1_text(real_server.url, TEXT)
    assert client.translate(TEXT, "auto", "de", timeout=60) == v1_text(real_server.url, TEXT)
    ranked = client.detect("Where is the station?")
    assert [d["language"] for d in ranked] == ["en", "de"] and ranked[0]["confidence"] > 90
    german = "Wo ist der Bahnhof?"
    assert client.translate(german, "auto", "de", timeout=60) == german  # already German
    assert client.languages() == [{"code": "de", "name": "German", "targets": ["de"]},
                                  {"code": "en", "name": "English", "targets": ["de", "en"]}]
    with pytest.raises(urllib.error.HTTPError) as caught:
        client.translate(TEXT, "en", "fr")
    assert caught.value.code == 400
    assert "fr" in json.loads(caught.value.read())["error"]


def test_libretranslatepy_with_keys_and_two_sources():
    models = [FakeTranslator("en-de", "en", "de"), FakeTranslator("de-en", "de", "en")]
    app = create_app(Settings(max_wait_ms=1, api_keys=["k1"]),
                     loader=lambda s: [fake_model(m) for m in models])
    with running(app) as srv:
        client = LibreTranslateAPI(srv.url, api_key="k1")
        ranked = client.detect("Bitte speichern Sie die Datei, bevor Sie das Fenster schließen.")
        assert [d["language"] for d in ranked] == ["de", "en"] and ranked[0]["confidence"] > 90
        assert client.translate("Hallo Welt", "auto", "en") == "Welt Hallo"
        with pytest.raises(urllib.error.HTTPError) as caught:
            LibreTranslateAPI(srv.url, api_key="wrong").translate("Hallo", "de", "en")
        assert caught.value.code == 403


NODE_SCRIPT = """
const { translate } = require(process.argv[2]);
translate({ query: process.argv[4], source: "en", target: "de", apiurl: process.argv[3] })
  .then(text => console.log(JSON.stringify({ text })))
  .catch(err => { console.error(String(err)); process.exit(1); });
"""


@pytest.fixture(scope="module")
def npm_client(tmp_path_factory):
    """The npm `libretranslate` package installed into a temporary directory."""
    if not (shutil.which("node") and shutil.which("npm")):
        pytest.skip("node and npm are not installed")
    where = tmp_path_factory.mktemp("npm")
    try:
        done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix",
                               str(where), "libretranslate@1"], capture_output=True, text=True,
                              timeout=180)
    except subprocess.TimeoutExpired:
        pytest.skip("npm install libretranslate took over 180 s (no package registry?)")
    if done.returncode != 0:
        pytest.skip(f"npm install libretranslate failed (no package registry?): "
                    f"{done.stderr.strip()[-300:]}")
    return where / "node_modules" / "libretranslate"


@pytest.mark.slow
def test_npm_libretranslate_translates(real_server, npm_client, tmp_path):
    script = tmp_path / "client.js"
    script.write_text(NODE_SCRIPT)
    done = subprocess.run(["node", str(script), str(npm_client), real_server.url, TEXT],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["text"] == v1_text(real_server.url, TEXT)
