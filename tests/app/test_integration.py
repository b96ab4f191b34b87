"""The service on the real tiny bundle behind a real uvicorn server: both APIs, HTML,
whitespace, every error code, readiness around warm-up, metrics, API keys."""

from __future__ import annotations

import threading

import httpx
import pytest

from app.engine.translator import Translator
from app.engine.types import TranslationOptions
from app.http.app import create_app
from app.text.segment import segment
from app.translation.registry import bundle_languages, load_models
from tests.app.conftest import real_settings
from tests.app.fakes import running, wait_until


@pytest.fixture
def client(real_server):
    with httpx.Client(base_url=real_server.url, timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def direct(tiny_bundle):
    """The engine called directly, with the bundle's decoding defaults: the reference."""
    translator = Translator.from_dir(tiny_bundle, intra_threads=1)
    from app.engine.bundle import read_manifest

    defaults = read_manifest(tiny_bundle)["decoding"]

    def translate(texts, **options):
        opts = TranslationOptions(**{**defaults, **options})
        return [r.text.strip() for r in translator.translate_batch(list(texts), opts)]

    return translate


def v1(client, text, **extra):
    return client.post("/v1/translate", json={"text": text, "source": "en", "target": "de",
                                              **extra})


def test_v1_matches_the_engine(client, direct, tiny_sentences):
    r = v1(client, tiny_sentences)
    assert r.status_code == 200, r.text
    body = r.json()
    assert [t["text"] for t in body["translations"]] == direct(tiny_sentences)
    assert body["model"] == "en-de" and body["sentences"] == len(tiny_sentences)
    assert any(t["text"] for t in body["translations"])


def test_v1_greedy_scores_and_alternatives(client, direct, tiny_sentences):
    r = v1(client, tiny_sentences[0], options={"beam_size": 1, "return_scores": True})
    (t,) = r.json()["translations"]
    assert t["text"] == direct([tiny_sentences[0]], beam_size=1)[0]
    assert isinstance(t["score"], float) and t["score"] <= 0
    r = v1(client, tiny_sentences[1], options={"beam_size": 4, "alternatives": 2})
    (t,) = r.json()["translations"]
    assert len(t["alternatives"]) == 2


def test_whitespace_and_line_breaks_survive_exactly(client, direct, tiny_sentences):
    a, b, c = tiny_sentences[:3]
    text = f"  {a}.  {b}!\n\n\t{c}?  \r\n"
    out = v1(client, text).json()["translations"][0]["text"]
    seg = segment(text)
    assert seg.sentences == [f"{a}.", f"{b}!", f"{c}?"]
    assert out == seg.rejoin(direct(seg.sentences))
    assert out.startswith("  ") and "\n\n\t" in out and out.endswith("  \r\n")


def test_html_keeps_markup_and_skips_code(client, direct, tiny_sentences):
    a, b = tiny_sentences[:2]
    html = f'<p class="x">{a}.</p>\n<ul><li>{b}</li></ul><code>{a}</code><script>x("{b}")</script>'
    out = v1(client, html, format="html").json()["translations"][0]["text"]
    ta, tb = direct([f"{a}.", b])
    assert out == (f'<p class="x">{ta}</p>\n<ul><li>{tb}</li></ul><code>{a}</code>'
                   f'<script>x("{b}")</script>')


def test_libretranslate_endpoints(client, direct, tiny_sentences):
    a, b = tiny_sentences[:2]
    r = client.post("/translate", json={"q": a, "source": "en", "target": "de"})
    assert r.json() == {"translatedText": direct([a])[0]}
    r = client.post("/translate", data={"q": b, "source": "auto", "target": "de"})
    assert r.json()["translatedText"] == direct([b])[0]
    assert r.json()["detectedLanguage"]["language"] == "en"
    r = client.post("/translate", json={"q": [a, b], "source": "en", "target": "de",
                                        "alternatives": 1})
    assert r.json()["translatedText"] == direct([a, b], beam_size=max(2, 1))
    assert [len(x) for x in r.json()["alternatives"]] == [1, 1]
    r = client.post("/translate", json={"q": f"<b>{a}</b>", "source": "en", "target": "de",
                                        "format": "html"})
    assert r.json()["translatedText"] == f"<b>{direct([a])[0]}</b>"
    assert client.get("/languages").json() == [
        {"code": "de", "name": "German", "targets": ["de"]},
        {"code": "en", "name": "English", "targets": ["de", "en"]},
    ]
    r = client.post("/translate", json={"q": "x", "source": "en", "target": "fr"})
    assert r.status_code == 400 and set(r.json()) >= {"error"}


def test_models_come_from_the_manifest(client, tiny_bundle):
    (m,) = client.get("/v1/models").json()["models"]
    assert (m["name"], m["source"], m["target"]) == ("en-de", "en", "de")
    assert set(m["variants"]) == {"fp32", "int8"}
    assert m["variant"] in m["variants"]
    assert "beam_size" in m["decoding"] and isinstance(m["scores"], dict)


def test_bundle_languages_are_what_the_loaded_registry_serves(client, tiny_bundle, tmp_path):
    """What a supervisor reads from the manifests before its server processes load the bundles
    (their language identification tables) is the loaded registry's languages."""
    served = client.get("/languages").json()
    codes = {lang["code"] for lang in served} | {t for lang in served for t in lang["targets"]}
    assert bundle_languages(tiny_bundle) == sorted(codes)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "manifest.json").write_text("{")
    assert bundle_languages(tmp_path) == [] and bundle_languages(tmp_path / "none") == []


@pytest.mark.parametrize(
    ("request_kwargs", "status"),
    [
        ({"json": {"text": "a", "source": "en", "target": "xx"}}, 400),
        ({"content": b"{nope", "headers": {"Content-Type": "application/json"}}, 400),
        ({"json": {"text": "a" * 401, "source": "en", "target": "de"}}, 413),
        ({"json": {"text": ["a"] * 9, "source": "en", "target": "de"}}, 413),
        ({"json": {"text": ["a" * 400] * 3, "source": "en", "target": "de"}}, 413),
        ({"content": b"x" * 30_000, "headers": {"Content-Type": "application/json"}}, 413),
        ({"content": b"a", "headers": {"Content-Type": "text/plain"}}, 415),
        ({"json": {"text": "a", "source": "en", "target": "de", "nope": True}}, 422),
        ({"json": {"text": "a", "source": "en", "target": "de",
                   "options": {"beam_size": 2, "alternatives": 3}}}, 422),
    ],
)
def test_error_codes(client, request_kwargs, status):
    r = client.post("/v1/translate", **request_kwargs)
    assert r.status_code == status, r.text
    assert isinstance(r.json()["error"], str)


def test_overload_deadline_and_rate_limit_codes(tiny_bundle, tiny_sentences):
    settings = real_settings(tiny_bundle, queue_size=2, max_wait_ms=2000, rate_limit=6,
                             rate_limit_burst=3)
    app = create_app(settings)
    with running(app) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        results = {}

        def first():
            results["first"] = v1(c, tiny_sentences[:2])

        t = threading.Thread(target=first)
        t.start()
        # two sentences wait out max_wait_ms: the queue is full
        wait_until(lambda: app.state.nmt.batcher.depth == 2, timeout=1.9)
        r = v1(c, tiny_sentences[2])
        assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1
        t.join()
        assert results["first"].status_code == 200
        codes = [v1(c, "a").status_code for _ in range(2)]  # a bucket of 3, 2 used above
        assert codes == [200, 429]
    settings = real_settings(tiny_bundle, request_timeout=0.05, max_wait_ms=200)
    with running(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        r = v1(c, tiny_sentences[0])
        assert r.status_code == 504 and r.json()["field"] == "request_timeout"
        text = c.get("/metrics").text
        assert 'route="/v1/translate",status="504"' in text


def test_api_key_on_and_off(tiny_bundle, client, tiny_sentences):
    assert v1(client, tiny_sentences[0]).status_code == 200  # off: open
    settings = real_settings(tiny_bundle, api_keys=["k3y"])
    with running(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        assert v1(c, tiny_sentences[0]).status_code == 401
        r = c.post("/v1/translate", json={"text": "a", "source": "en", "target": "de"},
                   headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401
        r = c.post("/v1/translate", json={"text": "a", "source": "en", "target": "de"},
                   headers={"Authorization": "Bearer k3y"})
        assert r.status_code == 200
        lt = {"q": "a", "source": "en", "target": "de"}
        assert c.post("/translate", json={**lt, "api_key": "wrong"}).status_code == 403
        assert c.post("/translate", json={**lt, "api_key": "k3y"}).status_code == 200


def test_ready_only_after_warm_up(tiny_bundle, tiny_sentences):
    gate = threading.Event()
    calls = []

    def gated_loader(settings):
        gate.wait(20)
        models = load_models(settings)
        calls.append(len(models))
        return models

    app = create_app(real_settings(tiny_bundle), loader=gated_loader)
    with running(app, ready=False) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        assert c.get("/health/live").status_code == 200
        assert c.get("/health/ready").status_code == 503
        assert v1(c, tiny_sentences[0]).status_code == 503
        gate.set()
        srv.wait_ready(30)
        assert calls == [1]
        assert c.get("/health/ready").json() == {"status": "ready", "models": ["en-de"]}
        assert v1(c, tiny_sentences[0]).status_code == 200


def test_metrics_after_real_translations(client, tiny_sentences):
    v1(client, tiny_sentences)
    text = client.get("/metrics").text
    lines = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
             if line and not line.startswith("#")}
    assert lines['nmt_tokens_total{kind="source"}'] > 0
    assert lines['nmt_tokens_total{kind="output"}'] > 0
    assert lines['nmt_engine_batches_total{model="en-de",outcome="ok"}'] >= 1
    assert lines["nmt_batch_size_count"] >= 1 and lines["nmt_batch_tokens_sum"] > 0
    assert lines["nmt_ready"] == 1.0 and "nmt_queue_depth" in lines
    assert lines['nmt_http_requests_total{method="POST",route="/v1/translate",status="200"}'] >= 1


def test_sentences_longer_than_the_encoder_are_cut_not_truncated(client, tiny_bundle, direct):
    translator = Translator.from_dir(tiny_bundle, intra_threads=1)
    words = " ".join(["the red car sees a dog and"] * 12)  # no sentence end, > 63 tokens
    assert translator.count_tokens(words) > translator.max_source_tokens
    body = v1(client, words).json()
    seg = segment(words)
    seg.refine(lambda s: translator.count_tokens(s) <= translator.max_source_tokens)
    assert body["sentences"] == len(seg.sentences) >= 2
    assert " ".join(seg.sentences) == words  # every word goes to the engine
    assert body["translations"][0]["text"] == seg.rejoin(direct(seg.sentences))


def test_emoji_come_back_and_leave_the_sentence_as_it_was(client, direct, tiny_sentences):
    """Emoji are taken out before the model and put back after (app.text.protect): the
    sentence is translated as it is without them, and each comes back at its line's edge."""
    one, two = tiny_sentences[:2]
    r = client.post("/translate", json={"q": f"👍 {one} 😊\n{two}\n🎉🎂", "source": "en",
                                        "target": "de"})
    assert r.status_code == 200, r.text
    first, second = direct([one, two])
    assert r.json()["translatedText"] == f"👍 {first} 😊\n{second}\n🎉🎂"
