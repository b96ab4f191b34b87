"""The HTTP API on a real uvicorn server (loopback, free port) with a fake engine: both APIs,
every error code, API keys, rate limits, readiness, metrics and client disconnects."""

from __future__ import annotations

import dataclasses
import socket
import threading

import httpx
import pytest

from app.config import Settings
from app.engine.types import Result, TranslationOptions
from app.http.app import create_app
from tests.app.fakes import FakeTranslator, fake_model, running, wait_until


def serve(translator: FakeTranslator | None = None, **settings):
    translator = translator or FakeTranslator()
    settings.setdefault("max_wait_ms", 1)
    app = create_app(Settings(**settings), loader=lambda s: [fake_model(translator)])
    return running(app)


@pytest.fixture(scope="module")
def server():
    with serve(max_chars_per_text=100, max_total_chars=150, max_texts_per_request=3,
               max_body_bytes=10_000) as srv:
        yield srv


@pytest.fixture
def client(server):
    with httpx.Client(base_url=server.url, timeout=10) as c:
        yield c


def v1(client, text="Hello world.", **extra):
    return client.post("/v1/translate", json={"text": text, "source": "en", "target": "de",
                                              **extra})


def test_v1_translates_a_string_and_a_list(client):
    r = v1(client, "Hello world. Good day.")
    assert r.status_code == 200
    body = r.json()
    assert body["translations"] == [{"text": "world. Hello day. Good"}]
    assert (body["model"], body["source"], body["target"], body["sentences"]) == (
        "en-de", "en", "de", 2)
    r = v1(client, ["one two", "three four"])
    assert [t["text"] for t in r.json()["translations"]] == ["two one", "four three"]


def test_v1_options_scores_and_alternatives(client):
    r = v1(client, "a b", options={"alternatives": 2, "return_scores": True})
    assert r.status_code == 200
    (t,) = r.json()["translations"]
    assert t == {"text": "b a", "score": -0.5, "alternatives": ["b a (1)", "b a (2)"]}


def test_v1_rerank_option_reaches_the_engine():
    engine = FakeTranslator()
    with serve(engine) as srv, httpx.Client(base_url=srv.url, timeout=10) as c:
        for options, want in (({}, True), ({"rerank": False}, False)):
            engine.batches.clear()
            assert v1(c, "a b", options=options).status_code == 200
            assert [o.rerank for _, o in engine.batches] == [want]
    with serve(engine, rerank=False) as srv, httpx.Client(base_url=srv.url, timeout=10) as c:
        engine.batches.clear()
        assert v1(c, "a b", options={"rerank": True}).status_code == 200
        assert [o.rerank for _, o in engine.batches] == [False]  # the server's setting wins


def test_v1_keeps_whitespace_and_html_markup(client):
    text = "  Hello world.\n\n\tGood day!  \n"
    assert v1(client, text).json()["translations"][0]["text"] == "  world. Hello\n\n\tday! Good  \n"
    html = '<p>Hello <b>big world</b>.</p><code>a b</code>'
    r = v1(client, html, format="html")
    # one sentence, tags and all (the fake reverses its words); the pair wraps the words that
    # read like "big world" reversed (app.text.tags); <code> is kept verbatim
    assert r.json()["translations"][0]["text"] == '<p><b>world. big</b> Hello</p><code>a b</code>'


def test_html_inline_code_stays_in_its_sentence():
    # code cut the sentence it stood in: "Run" and "to build it." went to the engine apart
    engine = FakeTranslator()
    with serve(engine) as srv, httpx.Client(base_url=srv.url, timeout=10) as c:
        r = v1(c, '<p>Run <code class="x">make <i>all</i></code> to build it.</p>',
               format="html")
        assert r.json()["translations"][0]["text"] == (
            '<p>it. build to <code class="x">make <i>all</i></code> Run</p>')
        assert r.json()["sentences"] == 1
        assert [s for batch, _ in engine.batches for s in batch] == ["Run {1} to build it."]


def test_html_inline_elements_not_to_translate_stay_in_their_sentence():
    # translate="no" (a brand name) cut the sentence it stood in: "Sign in to" and "with your
    # account." went to the engine apart; the title in it stays as written
    engine = FakeTranslator()
    kept = '<span translate="no" title="Our cloud">Acme <i>Cloud</i></span>'
    with serve(engine) as srv, httpx.Client(base_url=srv.url, timeout=10) as c:
        r = v1(c, f"<p>Sign in to {kept} with your account.</p>", format="html")
        assert r.json()["translations"][0]["text"] == f"<p>account. your with {kept} to in Sign</p>"
        assert r.json()["sentences"] == 1
        assert [s for batch, _ in engine.batches for s in batch] == [
            "Sign in to {1} with your account."]


# the attributes people read beside those that stay: href, src, class, value, a value with no
# words, and any tag in translate="no", <code> or <script>
BLOCK = 'Hello <a href="/setup" title="Tom &amp; Jerry">big world</a>.'
ATTRIBUTES = (
    f'<p title="Open the settings">{BLOCK}</p><img src="car.png" alt="A red car" class="photo">'
    '<input placeholder=\'Your name\' value="keep me" aria-label="Say &quot;hi&quot; now">'
    '<div translate="no"><img alt="Brand logo"></div><code title="a b">c d</code>'
    '<script>s = \'<img alt="in a script">\';</script><img alt="" title="42">')
READ = [("Open the settings", "settings the Open"), ("Tom &amp; Jerry", "Jerry &amp; Tom"),
        ("A red car", "car red A"), ("Your name", "name Your"),
        ("Say &quot;hi&quot; now", "now &quot;hi&quot; Say")]  # reversed, as the fake does


@pytest.mark.parametrize(("protect", "block", "alternative"), [
    # one sentence with its link in it (app.text.tags carries the pair over)
    (True, '<a href="/setup" title="Tom &amp; Jerry">world. big</a> Hello',
     '<a href="/setup" title="Tom &amp; Jerry">world. big</a> Hello (1)'),
    # cut at every tag
    (False, 'Hello <a href="/setup" title="Tom &amp; Jerry">world big</a>.',
     'Hello (1) <a href="/setup" title="Tom &amp; Jerry">world big (1)</a>.'),
])
def test_html_attributes_people_read_are_translated_in_their_tags(protect, block, alternative):
    """alt, title, placeholder and aria-label values are sentences of their own (counted, with
    alternatives), written back into their tags with their quotes escaped; with protection off
    the text is cut at every tag, and the values are translated all the same (unmasked)."""
    engine = FakeTranslator()
    with serve(engine, protect_spans=protect) as srv, \
            httpx.Client(base_url=srv.url, timeout=10) as c:
        r = v1(c, ATTRIBUTES, format="html", options={"alternatives": 1})
        (t,) = r.json()["translations"]
        text, other = ATTRIBUTES.replace(BLOCK, block), ATTRIBUTES.replace(BLOCK, alternative)
        for old, new in READ:
            for q in "\"'":
                text = text.replace(f"{q}{old}{q}", f"{q}{new}{q}")
                other = other.replace(f"{q}{old}{q}", f"{q}{new} (1){q}")
        assert (t["text"], t["alternatives"]) == (text, [other])
        assert r.json()["sentences"] == (1 if protect else 2) + len(READ)
        sent = {s for batch, _ in engine.batches for s in batch}
        assert {"A red car", 'Say "hi" now', "Tom & Jerry"} <= sent
        assert not {"Brand logo", "in a script", "a b", "42", "keep me"} & sent
        # LibreTranslate's format html goes the same way
        r = c.post("/translate", json={"q": '<img alt="A red car" src="a b.png">', "source": "en",
                                       "target": "de", "format": "html"})
        assert r.json() == {"translatedText": '<img alt="car red A" src="a b.png">'}


class FewerAlternatives(FakeTranslator):
    """Scores -0.1 a word; a sentence of one or two words has no alternatives."""

    def _one(self, text: str, options: TranslationOptions) -> Result:
        result = super()._one(text, options)
        n = len(text.split())
        kept = result.alternatives if n > 2 else []
        return dataclasses.replace(result, score=-0.1 * n, alternatives=kept,
                                   alternative_scores=[-1.0] * len(kept))


def test_an_html_attribute_is_scored_and_keeps_its_best_where_it_has_no_alternative():
    with serve(FewerAlternatives()) as srv, httpx.Client(base_url=srv.url, timeout=10) as c:
        r = v1(c, '<p title="Big red logo">Open it</p><img alt="A car">', format="html",
               options={"alternatives": 1, "return_scores": True})
        (t,) = r.json()["translations"]
        assert t["text"] == '<p title="logo red Big">it Open</p><img alt="car A">'
        # the title's own alternative, the best of the others (they have none)
        assert t["alternatives"] == ['<p title="logo red Big (1)">it Open</p><img alt="car A">']
        assert t["score"] == pytest.approx((-0.3 - 0.2 - 0.2) / 3)  # the mean of 3 sentences


def test_a_line_break_inside_a_sentence_does_not_cut_it(client):
    # plain text wrapped at a width: the engine sees the sentence whole (the fake reverses its
    # words) and the break goes back at the nearest space; a break before a capital stays
    r = v1(client, "Open the file you want to change\nand save it.\nClose it.")
    assert r.json()["translations"][0]["text"] == (
        "it. save and change to want you\nfile the Open\nit. Close")
    assert r.json()["sentences"] == 2
    # in HTML every break in a text is a space
    r = v1(client, "<p>Open the\n  File menu.</p>", format="html")
    assert r.json()["translations"][0]["text"] == "<p>menu. File\n  the Open</p>"


def test_auto_source_maps_to_the_only_source(client):
    r = client.post("/v1/translate", json={"text": "a b", "source": "auto", "target": "de"})
    assert r.json()["source"] == "en"


@pytest.mark.parametrize(
    ("payload", "status", "field"),
    [
        ({"text": "x", "source": "en", "target": "fr"}, 400, "target"),
        ({"text": "x", "source": "xx", "target": "de"}, 400, "source"),
        ({"text": "x" * 101, "source": "en", "target": "de"}, 413, "text"),
        ({"text": ["x"] * 4, "source": "en", "target": "de"}, 413, "text"),
        ({"text": ["x" * 100, "y" * 60], "source": "en", "target": "de"}, 413, "text"),
        ({"text": "x", "source": "en", "target": "de", "extra": 1}, 422, "extra"),
        ({"text": "x", "source": "en", "target": "de", "options": {"beam_size": 0}}, 422,
         "options.beam_size"),
        ({"text": "x", "source": "en", "target": "de", "options": {"beam_size": 99}}, 422,
         "options.beam_size"),
        ({"text": "x", "source": "en", "target": "de", "options": {"alternatives": 9}}, 422,
         "options.alternatives"),
        ({"text": "x", "source": "en", "target": "de", "options": {"rerank": "no"}}, 422,
         "options.rerank"),
        ({"source": "en", "target": "de"}, 422, "text"),
    ],
)
def test_v1_errors_name_the_field(client, payload, status, field):
    r = client.post("/v1/translate", json=payload)
    assert r.status_code == status, r.text
    body = r.json()
    assert body["field"] == field
    assert isinstance(body["error"], str) and body["code"]
    if status == 413:
        assert str(body["limit"]) in body["error"]


def test_422_never_echoes_a_huge_input(client):
    r = client.post("/v1/translate", json={"text": {"huge": "x" * 5000}, "source": "en",
                                           "target": "de"})
    assert r.status_code == 422
    assert len(r.text) < 2000


def test_415_400_and_413_on_the_body(client):
    r = client.post("/v1/translate", content="hi", headers={"Content-Type": "text/plain"})
    assert (r.status_code, r.json()["field"]) == (415, "Content-Type")
    r = client.post("/v1/translate", content="{oops", headers={"Content-Type": "application/json"})
    assert (r.status_code, r.json()["code"]) == (400, "bad_request")
    big = b'{"text": "' + b"x" * 20_000 + b'", "source": "en", "target": "de"}'
    r = client.post("/v1/translate", content=big, headers={"Content-Type": "application/json"})
    assert (r.status_code, r.json()["limit"]) == (413, 10_000)

    def chunks():  # no Content-Length: counted while streaming
        for _ in range(20):
            yield b"x" * 1000

    r = client.post("/v1/translate", content=chunks(), headers={"Content-Type": "application/json"})
    assert (r.status_code, r.json()["code"]) == (413, "body_too_large")
    assert v1(client).status_code == 200  # and the server keeps serving


def test_libretranslate_json_form_and_multipart(client):
    r = client.post("/translate", json={"q": "Hello there", "source": "en", "target": "de"})
    assert r.json() == {"translatedText": "there Hello"}
    r = client.post("/translate", data={"q": "Hello there", "source": "en", "target": "de",
                                        "format": "text"})
    assert r.json() == {"translatedText": "there Hello"}
    r = client.post("/translate", files={"q": (None, "a b"), "source": (None, "en"),
                                         "target": (None, "de")})
    assert r.json() == {"translatedText": "b a"}
    # a multipart field without a charset is UTF-8 (not ASCII, with U+FFFD for the rest)
    r = client.post("/translate", files={"q": (None, "Grüße aus Köln"),
                                         "source": (None, "en"), "target": (None, "de")})
    assert r.json() == {"translatedText": "Köln aus Grüße"}
    r = client.post("/translate", json={"q": ["a b", "c d"], "source": "auto", "target": "de",
                                        "alternatives": 1})
    body = r.json()
    assert body["translatedText"] == ["b a", "d c"]
    assert body["alternatives"] == [["b a (1)"], ["d c (1)"]]
    assert body["detectedLanguage"][0]["language"] == "en"
    r = client.post("/translate", json={"q": "<i>a b</i>", "source": "en", "target": "de",
                                        "format": "html"})
    assert r.json() == {"translatedText": "<i>b a</i>"}


def test_libretranslate_errors_use_its_shape_and_codes(client):
    cases = [
        ({"source": "en", "target": "de"}, 400),  # missing q
        ({"q": "x", "source": "en", "target": "fr"}, 400),
        ({"q": "x" * 101, "source": "en", "target": "de"}, 400),  # text limit: 400 there
    ]
    for payload, status in cases:
        r = client.post("/translate", json=payload)
        assert r.status_code == status
        assert isinstance(r.json()["error"], str)
    r = client.post("/translate", content="q=x", headers={"Content-Type": "text/plain"})
    assert r.status_code == 400


def test_a_language_to_itself_comes_back_as_it_is():
    engine = FakeTranslator()
    with serve(engine) as srv, httpx.Client(base_url=srv.url, timeout=10) as client:
        for source in ("en", "auto"):
            r = client.post("/translate", json={"q": ["Hello world", "Bye"], "source": source,
                                                "target": "en"})
            assert r.status_code == 200, r.text
            assert r.json()["translatedText"] == ["Hello world", "Bye"]
        body = client.post("/v1/translate", json={"text": "Guten Tag", "source": "de",
                                                  "target": "de"}).json()
        assert body["translations"][0]["text"] == "Guten Tag"
        assert (body["model"], body["source"], body["target"], body.get("pivot")) == (
            "identity", "de", "de", None)
        assert engine.batches == []  # nothing went to the engine
        options = {"alternatives": 2, "beam_size": 2}
        r = client.post("/v1/translate", json={"text": "Guten Tag", "source": "de",
                                               "target": "de", "options": options})
        assert r.status_code == 422 and r.json()["field"] == "options.beam_size"
        r = client.post("/translate", json={"q": "Hello", "source": "fr", "target": "fr"})
        assert r.status_code == 400 and "fr" in r.json()["error"]  # not a served language


def test_languages_and_models(client):
    assert client.get("/languages").json() == [
        {"code": "de", "name": "German", "targets": ["de"]},
        {"code": "en", "name": "English", "targets": ["de", "en"]},
    ]
    (model,) = client.get("/v1/models").json()["models"]
    assert model["source"] == "en" and model["target"] == "de"
    assert model["variants"] == ["fp32", "int8"]
    assert model["scores"]["bleu"] == 12.3


def test_unknown_route_is_json_404(client):
    r = client.get("/nope")
    assert r.status_code == 404 and r.json()["code"] == "not_found"


def test_web_page_and_docs_are_local(client):
    page = client.get("/")
    assert page.status_code == 200 and "/static/app.js" in page.text
    docs = client.get("/docs")
    assert "/static/swagger-ui-bundle.js" in docs.text
    assert "http://" not in docs.text and "https://" not in docs.text  # nothing from outside
    assert client.get("/static/swagger-ui-bundle.js").status_code == 200
    assert client.get("/openapi.json").json()["paths"]["/v1/translate"]


def test_metrics_count_requests_batches_and_queue(client):
    v1(client, "metrics please")
    text = client.get("/metrics").text
    assert 'nmt_http_requests_total{method="POST",route="/v1/translate",status="200"}' in text
    for name in ("nmt_http_request_duration_seconds_bucket", "nmt_queue_depth",
                 "nmt_batch_size_bucket", "nmt_batch_tokens_bucket", "nmt_tokens_per_second",
                 'nmt_engine_batches_total{model="en-de",outcome="ok"}', "nmt_ready 1.0"):
        assert name in text


def _rejected(client, reason: str) -> float:
    prefix = f'nmt_rejected_requests_total{{reason="{reason}"}} '
    line = next((ln for ln in client.get("/metrics").text.splitlines()
                 if ln.startswith(prefix)), prefix + "0")
    return float(line.split()[-1])


@pytest.mark.parametrize("path, body, reason", [
    ("/v1/translate", {"text": "x" * 101, "source": "en", "target": "de"}, "too_large"),
    ("/translate", {"q": "x" * 101, "source": "en", "target": "de"}, "too_large"),
    ("/v1/translate", {"text": "a", "source": "en", "target": "xx"}, "unsupported_language"),
    ("/translate", {"q": "a", "source": "en", "target": "xx"}, "unsupported_language"),
    ("/translate", {"q": "a", "source": "en", "target": "de", "alternatives": 5},
     "invalid_input"),
])
def test_rejected_requests_are_counted_for_both_apis(client, path, body, reason):
    before = _rejected(client, reason)
    assert client.post(path, json=body).status_code in (400, 413, 422)
    assert _rejected(client, reason) == before + 1


def test_api_keys_on():
    with serve(api_keys=["s3cret", "other"]) as srv, httpx.Client(base_url=srv.url) as c:
        payload = {"text": "a b", "source": "en", "target": "de"}
        assert c.post("/v1/translate", json=payload).status_code == 401
        r = c.post("/v1/translate", json=payload, headers={"Authorization": "Bearer nope"})
        assert (r.status_code, r.headers["www-authenticate"]) == (401, "Bearer")
        ok = c.post("/v1/translate", json=payload, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        assert c.post("/v1/translate", json=payload, headers={"X-API-Key": "other"}).is_success
        lt = {"q": "a b", "source": "en", "target": "de"}
        assert c.post("/translate", json=lt).status_code == 400  # as LibreTranslate: missing
        assert c.post("/translate", json={**lt, "api_key": "bad"}).status_code == 403
        assert c.post("/translate", json={**lt, "api_key": "s3cret"}).json() == {
            "translatedText": "b a"}
        assert c.get("/health/ready").status_code == 200  # probes stay open


def test_rate_limit_gives_429_per_client():
    with serve(rate_limit=60, rate_limit_burst=2) as srv, httpx.Client(base_url=srv.url) as c:
        payload = {"text": "a b", "source": "en", "target": "de"}
        codes = [c.post("/v1/translate", json=payload).status_code for _ in range(3)]
        assert codes == [200, 200, 429]
        r = c.post("/v1/translate", json=payload)
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        # one word for the refusal: the body's code and the metric's reason
        assert (r.json()["code"], r.json()["field"]) == ("rate_limited", "rate_limit")
        assert _rejected(c, "rate_limited") == 2 and _rejected(c, "rate_limit") == 0
        # without configured keys a made-up key is no way around the per-address bucket
        r = c.post("/v1/translate", json=payload, headers={"X-API-Key": "made-up"})
        assert r.status_code == 429
    with serve(rate_limit=60, rate_limit_burst=2, api_keys=["k1", "k2"]) as srv, \
            httpx.Client(base_url=srv.url) as c:
        codes = [c.post("/v1/translate", json=payload, headers={"X-API-Key": "k1"}).status_code
                 for _ in range(3)]
        assert codes == [200, 200, 429]
        keyed = c.post("/v1/translate", json=payload, headers={"X-API-Key": "k2"})
        assert keyed.status_code == 200  # another key, another bucket


def test_a_request_the_direct_route_hands_to_fastapi_is_rate_limited_once():
    """app.http.direct hands an invalid /v1/translate body back to FastAPI before touching the
    rate limiter: FastAPI counts it (its dependencies run before body validation), once."""
    with serve(rate_limit=60, rate_limit_burst=3) as srv, httpx.Client(base_url=srv.url) as c:
        payload = {"text": "a b", "source": "en", "target": "de"}
        invalid = c.post("/v1/translate", json={**payload, "options": {"beam_size": 0}})
        assert invalid.status_code == 422 and invalid.json()["field"] == "options.beam_size"
        not_json = c.post("/v1/translate", content=b"a b", headers={"Content-Type": "text/plain"})
        assert not_json.status_code == 415  # refused before the rate limit, as before
        codes = [c.post("/v1/translate", json=payload).status_code for _ in range(3)]
        assert codes == [200, 200, 429]


def test_engine_failure_is_a_generic_500_and_the_next_request_works():
    engine = FakeTranslator()
    with serve(engine) as srv, httpx.Client(base_url=srv.url) as c:
        engine.fail_next = 1
        r = v1(c, "boom")
        assert r.status_code == 500
        assert "secret" not in r.text and "onnx" not in r.text
        assert v1(c, "a b").json()["translations"][0]["text"] == "b a"


def test_deadline_gives_504():
    engine = FakeTranslator(delay=0.5)
    with serve(engine, request_timeout=0.2) as srv, httpx.Client(base_url=srv.url) as c:
        r = v1(c)
        assert (r.status_code, r.json()["field"]) == (504, "request_timeout")


def test_full_queue_gives_503_with_retry_after():
    engine = FakeTranslator()
    with serve(engine, queue_size=2, max_batch_size=1) as srv:
        engine.release.clear()
        with httpx.Client(base_url=srv.url, timeout=10) as c:
            first = threading.Thread(target=v1, args=(c, "held"))
            first.start()
            wait_until(lambda: engine.entered == 1)  # the worker holds it
            second = threading.Thread(target=v1, args=(c, ["a", "b"]))
            second.start()
            batcher = srv.server.config.app.state.nmt.batcher  # type: ignore[attr-defined]
            wait_until(lambda: batcher.depth == 2)  # two sentences queued: the queue is full
            r = v1(c, "one more")
            assert r.status_code == 503 and r.headers["retry-after"]
            assert r.json()["code"] == "overloaded"
            engine.release.set()
            first.join(), second.join()


def test_readiness_waits_for_warm_up():
    loaded = threading.Event()

    def slow_loader(settings):
        loaded.wait(10)
        return [fake_model()]

    app = create_app(Settings(), loader=slow_loader)
    with running(app, ready=False) as srv, httpx.Client(base_url=srv.url) as c:
        assert c.get("/health/live").status_code == 200
        r = c.get("/health/ready")
        assert (r.status_code, r.json()["status"]) == (503, "loading")
        r = v1(c)
        assert r.status_code == 503 and r.headers["retry-after"]
        loaded.set()
        srv.wait_ready(5)
        assert v1(c).status_code == 200
        app.state.nmt.begin_drain()
        assert c.get("/health/ready").json()["status"] == "draining"
        assert v1(c).status_code == 503


def test_a_failed_load_is_reported():
    def broken(settings):
        raise RuntimeError("manifest.json: sha256 mismatch")

    app = create_app(Settings(), loader=broken)
    with running(app, ready=False) as srv, httpx.Client(base_url=srv.url) as c:
        wait_until(lambda: c.get("/health/live").status_code == 503)
        r = c.get("/health/live")
        assert r.status_code == 503 and "sha256" in r.json()["error"]


def test_a_disconnected_client_frees_its_queued_sentences():
    engine = FakeTranslator()
    with serve(engine, max_batch_size=1) as srv:
        engine.release.clear()
        with httpx.Client(base_url=srv.url, timeout=10) as c:
            held = threading.Thread(target=v1, args=(c, "held"))
            held.start()
            wait_until(lambda: engine.entered == 1)
            body = b'{"text": ["gone one", "gone two"], "source": "en", "target": "de"}'
            raw = socket.create_connection(("127.0.0.1", srv.port))
            raw.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: "
                        b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            batcher = srv.server.config.app.state.nmt.batcher  # type: ignore[attr-defined]
            wait_until(lambda: batcher.depth == 2)
            raw.close()
            wait_until(lambda: batcher.depth == 0)  # the client is gone: its sentences too
            engine.release.set()
            held.join()
    assert all("gone one" not in batch for batch, _ in engine.batches)


def test_cors_origins():
    with serve(cors_origins=["http://example.test"]) as srv, httpx.Client(base_url=srv.url) as c:
        r = c.options("/v1/translate", headers={"Origin": "http://example.test",
                                                "Access-Control-Request-Method": "POST"})
        assert r.headers["access-control-allow-origin"] == "http://example.test"


@pytest.mark.parametrize("path, content_type", [
    ("/v1/translate", "application/json"),
    ("/translate", "application/json"),
    ("/translate", "application/x-www-form-urlencoded"),
    ("/detect", "application/json"),
    ("/translate_file", "multipart/form-data; boundary=b"),
    ("/v1/documents", "multipart/form-data; boundary=b"),
])
def test_a_client_that_leaves_while_sending_its_body_is_no_server_error(
        tmp_path, caplog, path, content_type):
    # the client went away (499, as when it leaves while its sentences wait): not an error of
    # the server's, which 5xx alerts would count, nor one logged with a traceback
    with serve(files_dir=tmp_path) as srv:
        raw = socket.create_connection(("127.0.0.1", srv.port))
        raw.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nContent-Length: 100"
                    b"\r\n\r\n{\"te" % (path.encode(), content_type.encode()))
        raw.close()
        label = f'route="{path}",status='

        def counted() -> str:
            return next((line for line in httpx.get(f"{srv.url}/metrics").text.splitlines()
                         if line.startswith("nmt_http_requests_total") and label in line), "")

        wait_until(lambda: counted() != "")
        assert f'{label}"499"' in counted()
        assert httpx.get(f"{srv.url}/health/live").status_code == 200
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text


@pytest.mark.parametrize("path, kinds, required", [
    ("/v1/translate", ["application/json"], {"text", "source", "target"}),
    ("/translate", ["application/json", "application/x-www-form-urlencoded",
                    "multipart/form-data"], {"q", "target"}),
    ("/detect", ["application/json", "application/x-www-form-urlencoded",
                 "multipart/form-data"], {"q"}),
    ("/translate_file", ["multipart/form-data"], {"file", "source", "target"}),
    ("/v1/documents", ["multipart/form-data"], {"file", "target"}),
])
def test_openapi_describes_the_body_each_post_route_reads(client, path, kinds, required):
    # /docs builds its "Try it out" form from this: a route documented without a body can't be
    # tried there, and a client generated from the schema sends none
    spec = client.get("/openapi.json").json()
    body = spec["paths"][path]["post"].get("requestBody")
    assert body and body["required"], f"{path}: no request body documented"
    assert sorted(body["content"]) == sorted(kinds)
    for kind in kinds:
        schema = body["content"][kind]["schema"]
        if "$ref" in schema:
            schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
        assert set(schema["required"]) == required, (path, kind)


@pytest.mark.parametrize("body", [
    {"q": "Hallo", "api_key": 5},
    {"q": "Hallo", "api_key": ["a", "b"]},
    "q=Hallo&api_key=a&api_key=b",
])
def test_detect_refuses_an_api_key_that_is_no_string(client, body):
    # as /translate does (and the schema says): not taken for "no key given"
    r = (client.post("/detect", json=body) if isinstance(body, dict) else
         client.post("/detect", content=body,
                     headers={"Content-Type": "application/x-www-form-urlencoded"}))
    assert r.status_code == 400 and r.json()["field"] == "api_key", r.json()


@pytest.mark.parametrize("path", ["/translate", "/translate_file", "/v1/documents"])
def test_a_multipart_body_without_its_boundary_is_named_as_such(client, path):
    """curl -H 'Content-Type: multipart/form-data' -d ... drops the boundary; the answer says
    so, not that a field is missing."""
    body = b'--xyz\r\nContent-Disposition: form-data; name="q"\r\n\r\nHello\r\n--xyz--\r\n'
    r = client.post(path, content=body, headers={"Content-Type": "multipart/form-data"})
    assert r.status_code == 400, r.text
    assert r.json()["field"] == "Content-Type" and "boundary" in r.json()["error"]
    # a boundary that never occurs in the body: no parts, said as such
    r = client.post(path, content=body,
                    headers={"Content-Type": "multipart/form-data; boundary=other"})
    assert r.status_code == 400, r.text
    assert r.json()["field"] == "body" and "boundary" in r.json()["error"]


def test_a_german_sentence_with_an_ordinal_reaches_the_engine_whole(tmp_path):
    """Sentences are split by the rules of the model's source language: German writes ordinals
    with a period before a capitalised noun or month, which ends no sentence there. Named or
    "auto" (the only source language), text, HTML or a document, the engine gets it whole."""
    engine = FakeTranslator("de-en", source="de", target="en")
    text = "Die Messe beginnt am 3. Oktober in Berlin. Sie dauert bis zum 5. Oktober."
    whole = ["Die Messe beginnt am 3. Oktober in Berlin.", "Sie dauert bis zum 5. Oktober."]
    with serve(engine, files_dir=tmp_path) as srv, \
            httpx.Client(base_url=srv.url, timeout=10) as c:
        for source, fmt, body in [("de", "text", text), ("auto", "text", text),
                                  ("de", "html", f"<p>{text}</p>")]:
            engine.batches.clear()
            r = c.post("/translate", json={"q": body, "source": source, "target": "en",
                                           "format": fmt})
            assert r.status_code == 200, r.text
            assert sorted(s for batch, _ in engine.batches for s in batch) == whole
        engine.batches.clear()
        r = c.post("/translate_file", data={"source": "de", "target": "en"},
                   files={"file": ("messe.txt", text.encode())})
        assert r.status_code == 200, r.text
        assert sorted(s for batch, _ in engine.batches for s in batch) == whole
