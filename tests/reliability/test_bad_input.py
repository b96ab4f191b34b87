"""The bad-input catalogue: hostile and malformed requests against both APIs (/v1/translate and
LibreTranslate's POST /translate) of one real server on 127.0.0.1 in front of the tiny engine.

Every case names the status it must get; errors must be JSON naming the problem, and the server
must still be live afterwards. Limits are small so that every case is cheap.
"""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as default
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from app.http.app import create_app
from tests.app.conftest import real_settings
from tests.app.fakes import running
from tests.reliability.conftest import API_KEY, EngineDouble, double_loader

LIMIT = 2048  # characters per text
TOTAL = 4096  # characters per request
TEXTS = 4  # texts per request
BODY = 256_000  # body bytes: a 100k-character text gets past it to the character limit
PATHS = {"v1": "/v1/translate", "lt": "/translate"}
WORDS = "the red car sees a dog. open the file. a small cat and the old tree. "


@pytest.fixture(scope="module")
def catalogue_server(tiny_bundle):
    doubles: list[EngineDouble] = []
    settings = real_settings(tiny_bundle, max_chars_per_text=LIMIT, max_total_chars=TOTAL,
                             max_texts_per_request=TEXTS, max_body_bytes=BODY,
                             api_keys=[API_KEY])
    with running(create_app(settings, loader=double_loader(doubles))) as server, \
            httpx.Client(base_url=server.url, timeout=60) as client:
        server.engine, server.client = doubles[0], client
        yield server


@dataclass(frozen=True)
class Case:
    name: str
    api: str  # "v1", "lt" or "any" (routes and methods)
    status: int
    body: bytes | None = None
    method: str = "POST"
    path: str | None = None
    content_type: str | None = "application/json"
    headers: dict[str, Any] = default(default_factory=dict)
    key: bool = True  # send the valid key as X-API-Key
    send: str = "httpx"  # "httpx", "headers-only" (Content-Length far over) or "chunked"
    field: str | None = None  # the field an error must name
    limit: int | None = None  # the limit an error must name
    check: Callable[[httpx.Response], None] | None = None
    tokenizes: bool = True  # False: rejected before anything reaches the tokenizer

    @property
    def target(self) -> str:
        return self.path or PATHS[self.api]


def payload(api: str, text: Any = "the dog", **extra: Any) -> dict[str, Any]:
    return {"text" if api == "v1" else "q": text, "source": "en", "target": "de", **extra}


def enc(obj: Any) -> bytes:
    """JSON as a client would send it; lone surrogates become \\ud800 escapes, NaN stays NaN."""
    return json.dumps(obj, ensure_ascii=True, allow_nan=True).encode("ascii")


def nested(depth: int) -> str:
    return "[" * depth + '"x"' + "]" * depth


def words(n: int) -> str:
    return (WORDS * (n // len(WORDS) + 1))[:n]


def translated_as(expected: list[str] | str) -> Callable[[httpx.Response], None]:
    def check(r: httpx.Response) -> None:
        body = r.json()
        if "translations" in body:
            got: list[str] | str = [t["text"] for t in body["translations"]]
            want = expected if isinstance(expected, list) else [expected]
        else:
            got, want = body["translatedText"], expected
        assert got == want, (got, want)

    return check


def translated(r: httpx.Response) -> None:
    body = r.json()
    texts = ([t["text"] for t in body["translations"]] if "translations" in body
             else [body["translatedText"]])
    assert texts and all(isinstance(t, str) and t.strip() for t in texts), body


def error_names(text: str) -> Callable[[httpx.Response], None]:
    def check(r: httpx.Response) -> None:
        assert text in r.json()["error"], r.json()

    return check


def both(name: str, v1: int, lt: int, text: Any = "the dog", raw: bytes | None = None,
         v1_field: str | None = None, lt_field: str | None = None, field: str | None = None,
         extra: dict[str, Any] | None = None, **kw: Any) -> list[Case]:
    """The same hostile input to both APIs; `text` goes in as v1 `text` and LibreTranslate `q`."""
    extra = extra or {}
    out = []
    for api, status, fld in (("v1", v1, v1_field or field), ("lt", lt, lt_field or field)):
        body = raw if raw is not None else enc(payload(api, text, **extra))
        out.append(Case(f"{api}-{name}", api, status, body, field=fld, **kw))
    return out


def v1_options(name: str, raw_options: str, status: int = 422, fld: str | None = None) -> Case:
    body = b'{"text": "the dog", "source": "en", "target": "de", "options": %s}' % (
        raw_options.encode())
    return Case(f"v1-{name}", "v1", status, body, field=fld)


def lt_raw(name: str, raw_fields: str, status: int = 400, fld: str | None = None) -> Case:
    body = b'{"q": "the dog", "source": "en", "target": "de", %s}' % raw_fields.encode()
    return Case(f"lt-{name}", "lt", status, body, field=fld)


def catalogue() -> list[Case]:
    at_limit, over = words(LIMIT), words(LIMIT + 1)
    cases: list[Case] = []
    add = cases.extend
    # ---- missing, empty and wrongly typed fields
    for api, status, fld in (("v1", 422, "text"), ("lt", 400, "q")):
        body = payload(api)
        del body["text" if api == "v1" else "q"]
        cases.append(Case(f"{api}-missing-text", api, status, enc(body), field=fld))
    add(both("empty-text", 200, 200, "", check=translated_as("")))
    add(both("empty-list", 200, 200, [], check=translated_as([])))
    add(both("whitespace-only", 200, 200, " \n\t \r\n", check=translated_as(" \n\t \r\n")))
    add(both("text-number", 422, 400, 5))
    add(both("text-object", 422, 400, {"a": 1}))
    add(both("text-list-of-numbers", 422, 400, [1, 2]))
    add(both("text-null", 422, 400, None))
    add(both("source-number", 422, 400, extra={"source": 5}, v1_field="source",
             lt_field="source"))
    add(both("target-list", 422, 400, extra={"target": ["de"]}, v1_field="target",
             lt_field="target"))
    add(both("format-unknown", 422, 400, extra={"format": "pdf"}, v1_field="format",
             lt_field="format"))
    add(both("body-array", 422, 400, raw=b'["the dog"]'))
    add(both("body-null", 422, 400, raw=b"null"))
    add(both("body-string", 422, 400, raw=b'"the dog"'))
    add(both("body-empty", 422, 400, raw=b""))
    # ---- unknown fields: v1 refuses them, LibreTranslate ignores them (as LibreTranslate does)
    add(both("unknown-field", 422, 200, extra={"colour": "red"}, v1_field="colour"))
    add(both("unknown-field-named-lone-surrogate", 422, 200, extra={"\ud800": 1},
             v1_field="body"))
    cases.append(v1_options("unknown-option", '{"temperature": 0.7}', fld="options.temperature"))
    # ---- sizes: at the limit, one over, far over (before any tokenizing), too many texts
    add(both("text-at-char-limit", 200, 200, at_limit, check=translated))
    add(both("text-one-over-char-limit", 413, 400, over, v1_field="text", lt_field="q",
             limit=LIMIT, tokenizes=False))
    add(both("text-100k-chars", 413, 400, words(100_000), v1_field="text", lt_field="q",
             limit=LIMIT, tokenizes=False))
    add(both("too-many-texts", 413, 400, ["the dog"] * (TEXTS + 1), v1_field="text",
             lt_field="q", limit=TEXTS, tokenizes=False))
    add(both("over-total-chars", 413, 400, [words(LIMIT)] * 3, v1_field="text", lt_field="q",
             limit=TOTAL, tokenizes=False))
    # ---- encodings and awkward Unicode
    for api in ("v1", "lt"):
        good = enc(payload(api, "the dog PLACEHOLDER sees a cat"))
        cases.append(Case(f"{api}-invalid-utf8", api, 400,
                          good.replace(b"PLACEHOLDER", b"\xff\xfe\xc3")))
        cases.append(Case(f"{api}-overlong-utf8", api, 400,
                          good.replace(b"PLACEHOLDER", b"\xc0\xaf")))
        # RFC 8259 lets a parser ignore a byte order mark; Python's json.loads(bytes) does
        cases.append(Case(f"{api}-bom-before-json", api, 200,
                          b"\xef\xbb\xbf" + enc(payload(api)), check=translated))
    add(both("lone-high-surrogate", 422, 400, "\ud800", v1_field="text", lt_field="q",
             tokenizes=False))
    add(both("lone-low-surrogate", 422, 400, "the dog \udfff", v1_field="text", lt_field="q",
             tokenizes=False))
    add(both("reversed-surrogates", 422, 400, "\udc00\ud800 the dog", v1_field="text",
             lt_field="q", tokenizes=False))
    add(both("surrogate-in-second-text", 422, 400, ["the dog", "a\ud800"], v1_field="text[1]",
             lt_field="q[1]", tokenizes=False))
    add(both("surrogate-pair-escapes", 200, 200, "\U0001f600 the dog", check=translated))
    add(both("nul-and-control-chars", 200, 200, "the dog\x00 sees\x01 a\x1b[31m cat\x7f\x9f.",
             check=translated))
    add(both("bidi-override-and-marks", 200, 200,
             "\u202ethe dog\u202c sees \u200fa cat\u200e \u2066the tree\u2069",
             check=translated))
    add(both("emoji-zwj-sequences", 200, 200,
             "\U0001f469\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 the dog sees "
             "\U0001f3f3\ufe0f\u200d\U0001f308 a cat \U0001f9d1\U0001f3fd\u200d\U0001f4bb",
             check=translated))
    add(both("letter-with-2000-combining-marks", 200, 200, "a" + "\u0301" * 2000 + " dog",
             check=translated))
    add(both("bom-and-private-use", 200, 200,
             "\ufeffthe dog \ue000 sees \U000f0000 a cat \U0010fffd", check=translated))
    # ---- hostile HTML (format=html): kept or translated, never an error
    for name, html in {
        "html-600-nested-tags": "<i>" * 600 + "the dog" + "</i>" * 10,
        "html-unclosed-script": "the dog <script>sees a cat",
        "html-unclosed-comment": "the dog <!-- sees a cat",
        "html-odd-entities": "&amp;" * 300 + " the dog &#0; &#x110000; &#xD800; &bogus; &#9999999;",
        "html-angle-soup": "<<<>>> the < dog > sees </ a cat <",
        "html-cdata-and-pi": "<![CDATA[ the dog ]]> <?php the cat ?> <!DOCTYPE x> a tree",
    }.items():
        add(both(name, 200, 200, html, extra={"format": "html"}, check=translated))
    # ---- broken JSON, odd numbers, nesting
    for api in ("v1", "lt"):
        good = enc(payload(api))
        cases.append(Case(f"{api}-truncated-json", api, 400, good[:-1], field="body"))
        cases.append(Case(f"{api}-truncated-in-string", api, 400, good[:12], field="body"))
        cases.append(Case(f"{api}-json-nested-100k-deep", api, 400,
                          b'{"text": %s, "q": %s}' % ((nested(50_000).encode(),) * 2)))
    add(both("json-nested-100-deep", 422, 400, raw=None, text=json.loads(nested(100))))
    cases += [
        v1_options("length-penalty-nan", '{"length_penalty": NaN}', fld="options.length_penalty"),
        v1_options("length-penalty-minus-infinity", '{"length_penalty": -Infinity}',
                   fld="options.length_penalty"),
        v1_options("max-length-ratio-infinity", '{"max_length_ratio": Infinity}',
                   fld="options.max_length_ratio"),
        v1_options("max-length-ratio-1e309", '{"max_length_ratio": 1e309}',
                   fld="options.max_length_ratio"),
        v1_options("beam-size-1e400", '{"beam_size": 1e400}', fld="options.beam_size"),
        v1_options("beam-size-10e30", '{"beam_size": ' + str(10**30) + '}',
                   fld="options.beam_size"),
        v1_options("max-length-minus-1e308", '{"max_length": -1e308}', fld="options.max_length"),
        v1_options("alternatives-nan", '{"alternatives": NaN}', fld="options.alternatives"),
        v1_options("alternatives-10e30", '{"alternatives": ' + str(10**30) + '}',
                   fld="options.alternatives"),
        v1_options("beam-size-string", '{"beam_size": "4"}', fld="options.beam_size"),
        v1_options("beam-size-true", '{"beam_size": true}', fld="options.beam_size"),
        v1_options("return-scores-0", '{"return_scores": 0}', fld="options.return_scores"),
        v1_options("options-not-an-object", '"fast"', fld="options"),
        lt_raw("alternatives-nan", '"alternatives": NaN', fld="alternatives"),
        lt_raw("alternatives-infinity", '"alternatives": Infinity', fld="alternatives"),
        lt_raw("alternatives-10e30", '"alternatives": ' + str(10**30)),
        lt_raw("alternatives-negative", '"alternatives": -1', fld="alternatives"),
        lt_raw("alternatives-false", '"alternatives": false', fld="alternatives"),
        lt_raw("alternatives-string", '"alternatives": "many"', fld="alternatives"),
    ]
    # ---- content types
    add(both("content-type-text-plain", 415, 400, content_type="text/plain",
             v1_field="Content-Type", lt_field="Content-Type"))
    add(both("content-type-xml", 415, 400, content_type="application/xml",
             v1_field="Content-Type", lt_field="Content-Type"))
    add(both("content-type-form-with-json-body", 415, 400,
             content_type="application/x-www-form-urlencoded"))
    # a JSON media type with a suffix is JSON on both APIs (as Flask, and so LibreTranslate,
    # reads it)
    add(both("content-type-vendor-json", 200, 200, content_type="application/vnd.api+json",
             check=translated))
    # a value that is no type/subtype is named as sent (email's parser reads it as text/plain)
    add(both("content-type-no-subtype", 415, 400, content_type="json",
             v1_field="Content-Type", lt_field="Content-Type", check=error_names("'json'")))
    # LibreTranslate takes an untyped body that looks like JSON (as LibreTranslate's clients send)
    add(both("content-type-missing", 415, 200, content_type=None))
    # ---- bodies over the byte limit: 413 before the body is read
    add(both("content-length-1e9-headers-only", 413, 413, send="headers-only", field="body",
             limit=BODY, tokenizes=False))
    add(both("chunked-body-over-limit", 413, 413, send="chunked", field="body", limit=BODY,
             tokenizes=False))
    # ---- languages
    add(both("unknown-target", 400, 400, extra={"target": "xx"}, v1_field="target",
             lt_field="target"))
    add(both("unknown-source", 400, 400, extra={"source": "zz"}, v1_field="source",
             lt_field="source"))
    # a language to itself: the text as it is, as LibreTranslate answers
    add(both("source-equals-target", 200, 200, extra={"target": "en"},
             check=translated_as("the dog")))
    add(both("reverse-pair", 400, 400, extra={"source": "de", "target": "en"},
             v1_field="source", lt_field="source"))
    add(both("empty-target", 400, 400, extra={"target": ""}, v1_field="target",
             lt_field="target"))
    add(both("target-lone-surrogate", 400, 400, extra={"target": "\udc00"}, v1_field="target",
             lt_field="target"))
    add(both("auto-source", 200, 200, extra={"source": "auto"}, check=translated))
    # ---- API keys (LibreTranslate answers as LibreTranslate does: 400 missing, 403 wrong)
    add(both("missing-api-key", 401, 400, key=False, v1_field="api_key", lt_field="api_key"))
    add(both("wrong-api-key", 401, 403, key=False, headers={"X-API-Key": "nope"}))
    add(both("wrong-api-key-same-length", 401, 403, key=False,
             headers={"Authorization": "Bearer " + "x" * len(API_KEY)}))
    add(both("api-key-header-not-ascii", 401, 403, key=False,
             headers={"X-API-Key": b"\xff\xfe" + API_KEY.encode()}))
    add(both("valid-bearer-key", 200, 200, key=False,
             headers={"Authorization": f"Bearer {API_KEY}"}, check=translated))
    cases += [
        Case("lt-valid-key-in-body", "lt", 200, enc(payload("lt", api_key=API_KEY)), key=False,
             check=translated),
        Case("lt-wrong-key-in-body", "lt", 403, enc(payload("lt", api_key="nope")), key=False),
        Case("lt-key-in-body-lone-surrogate", "lt", 403, enc(payload("lt", api_key="\ud800")),
             key=False),
    ]
    # ---- routes and methods
    cases += [
        Case("get-v1-translate", "v1", 405, None, method="GET", content_type=None),
        Case("put-v1-translate", "v1", 405, enc(payload("v1")), method="PUT"),
        Case("get-translate", "lt", 405, None, method="GET", content_type=None),
        Case("delete-translate", "lt", 405, None, method="DELETE", content_type=None),
        Case("post-languages", "any", 405, b"{}", path="/languages"),
        Case("patch-v1-models", "any", 405, b"{}", method="PATCH", path="/v1/models"),
        Case("delete-health-live", "any", 405, None, method="DELETE", path="/health/live",
             content_type=None),
        Case("post-v2-translate", "any", 404, enc(payload("v1")), path="/v2/translate"),
        Case("get-unknown-route", "any", 404, None, method="GET", path="/admin",
             content_type=None),
        Case("static-path-traversal", "any", 404, None, method="GET",
             path="/static/..%2f..%2fconfig.py", content_type=None),
    ]
    return cases


CASES = catalogue()


def send_headers_only(port: int, path: str, key: bool) -> tuple[int, bytes, float]:
    """Announce a 1 GB body, send none of it: the 413 must come back anyway (and fast)."""
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {10**9}\r\n" + (f"X-API-Key: {API_KEY}\r\n" if key else "")
            + "\r\n").encode()
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head)
        reply = _read_reply(sock)
    return _status(reply), reply, time.perf_counter() - started


def send_chunked(port: int, path: str, key: bool) -> tuple[int, bytes, float]:
    """Stream a chunked body past the limit (at most twice the limit, stopping once the server
    has answered)."""
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n" + (f"X-API-Key: {API_KEY}\r\n" if key else "")
            + "\r\n").encode()
    def chunk(data: bytes) -> bytes:
        return b"%x\r\n%s\r\n" % (len(data), data)

    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head + chunk(b'{"text": "the dog", "pad": "'))
        try:
            for _ in range(2 * BODY // 16_384):
                if select.select([sock], [], [], 0)[0]:
                    break  # the answer is there already
                sock.sendall(chunk(b" " * 16_384))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server stopped reading: fine, its answer is waiting
        reply = _read_reply(sock)
    return _status(reply), reply, time.perf_counter() - started


def _read_reply(sock: socket.socket) -> bytes:
    data = b""
    deadline = time.monotonic() + 10
    while b"\r\n\r\n" not in data and time.monotonic() < deadline:
        try:
            part = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not part:
            break
        data += part
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(rest) < length and time.monotonic() < deadline:
        part = sock.recv(65536)
        if not part:
            break
        rest += part
    return head + b"\r\n\r\n" + rest


def _status(reply: bytes) -> int:
    line = reply.split(b"\r\n", 1)[0].split()
    return int(line[1]) if len(line) > 1 else 0


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input(catalogue_server, case: Case) -> None:
    engine = catalogue_server.engine
    tokenized_before = engine.tokenized
    if case.send == "headers-only":
        status, reply, seconds = send_headers_only(catalogue_server.port, case.target, case.key)
        assert seconds < 5, "the 413 must not wait for a body that never comes"
        body = json.loads(reply.partition(b"\r\n\r\n")[2])
    elif case.send == "chunked":
        status, reply, _ = send_chunked(catalogue_server.port, case.target, case.key)
        body = json.loads(reply.partition(b"\r\n\r\n")[2])
    else:
        headers = dict(case.headers)
        if case.content_type:
            headers["Content-Type"] = case.content_type
        if case.key:
            headers["X-API-Key"] = API_KEY
        r = catalogue_server.client.request(case.method, case.target, content=case.body,
                                            headers=headers)
        status, body = r.status_code, r.json()
        if case.check is not None and status == case.status:
            case.check(r)
        if status == 405:
            assert r.headers.get("allow"), "405 must list the allowed methods"
    assert status == case.status, body
    if status >= 400:
        assert isinstance(body.get("error"), str) and body["error"], body
        assert isinstance(body.get("code"), str), body
        assert len(json.dumps(body)) < 2000, "errors never echo a whole input back"
        if case.field is not None:
            assert body.get("field") == case.field, body
        if case.limit is not None:
            assert body.get("limit") == case.limit and str(case.limit) in body["error"], body
    if not case.tokenizes:
        assert engine.tokenized == tokenized_before, "rejected only after tokenizing"
    assert catalogue_server.client.get("/health/live").status_code == 200  # still serving
    assert catalogue_server.client.get("/health/ready").status_code == 200


def test_catalogue_covers_both_apis() -> None:
    apis = {c.api for c in CASES}
    assert {"v1", "lt"} <= apis
    assert len(CASES) >= 100
    print(f"\nbad-input catalogue: {len(CASES)} cases")


# ---------------------------------------------------------------- the generated sweep
# Every field of every route, in JSON and form bodies, gets each hostile value: numbers of any
# size, non-finite numbers, strings where numbers belong, wrong types, deep nesting, the key twice.
# A value the field cannot take must be refused with a 4xx naming that field; any other value
# may pass (a string for a text), but nothing may answer 5xx.

HUGE = "9" * 5000  # past the 4300 digits Python's int() converts
JSON_VALUES = {
    "huge-int": HUGE, "huge-negative-int": "-" + HUGE, "1e400": "1e400", "NaN": "NaN",
    "Infinity": "Infinity", "minus-Infinity": "-Infinity", "string-number": '"4"',
    "string-word": '"abc"', "true": "true", "null": "null", "nested-200": nested(200),
    "object": '{"a": 1}',
}
FORM_VALUES = {
    "huge-int": HUGE, "1e400": "1e400", "NaN": "NaN", "Infinity": "Infinity", "minus-one": "-1",
    "word": "abc", "empty": "",
}
VALID = {  # a value each field takes, for the rest of the body and for duplicated keys
    "text": '"the dog"', "q": '"the dog"', "source": '"en"', "target": '"de"',
    "format": '"text"', "options": "{}", "beam_size": "1", "length_penalty": "1.0",
    "max_length": "20", "max_length_ratio": "1.5", "alternatives": "0",
    "return_scores": "false", "api_key": json.dumps(API_KEY),
}
V1_FIELDS = ["text", "source", "target", "format", "options", *(
    f"options.{name}" for name in ("beam_size", "length_penalty", "max_length",
                                   "max_length_ratio", "alternatives", "return_scores"))]
OPTIONAL_NUMBERS = ("beam_size", "length_penalty", "max_length", "max_length_ratio")  # null: unset
LT_FIELDS = ["q", "source", "target", "format", "alternatives", "api_key"]


@dataclass(frozen=True)
class Sweep:
    name: str
    path: str
    body: bytes
    content_type: str
    field: str
    may_pass: bool  # the value is one the field takes


def _json_body(fields: list[str], target: str, raw: str, twice: bool) -> bytes:
    top = [f for f in fields if "." not in f and f != "options"]
    parts = [f'"{f}": {raw if f == target else VALID[f]}' for f in top]
    if twice and "." not in target:
        parts.append(f'"{target}": {VALID[target]}')
    if fields is V1_FIELDS:
        if target == "options":
            parts.append(f'"options": {raw}')
        elif target.startswith("options."):
            name = target.split(".", 1)[1]
            inner = f'"{name}": {raw}' + (f', "{name}": {VALID[name]}' if twice else "")
            parts.append('"options": {' + inner + "}")
    return ("{" + ", ".join(parts) + "}").encode()


def sweep() -> list[Sweep]:
    out = []
    for api, fields in (("v1", V1_FIELDS), ("lt", LT_FIELDS)):
        for target in fields:
            leaf = target.split(".")[-1]
            for name, raw in {**JSON_VALUES, "duplicate-key": VALID[leaf]}.items():
                may_pass = (
                    (leaf in ("text", "q") and raw.startswith('"'))
                    or (raw == "null" and leaf in ("api_key", *OPTIONAL_NUMBERS))
                    or (leaf == "return_scores" and raw == "true"))
                out.append(Sweep(f"{api}-json-{target}-{name}", PATHS[api],
                                 _json_body(fields, target, raw, name == "duplicate-key"),
                                 "application/json", target, may_pass))
    for target in LT_FIELDS:
        base = {f: json.loads(VALID[f]) for f in LT_FIELDS}
        for name, value in {**FORM_VALUES, "duplicate-key": None}.items():
            pairs = list(base.items()) + ([(target, base[target])] if value is None else [])
            if value is not None:
                pairs = [(k, value if k == target else v) for k, v in pairs]
            may_pass = target == "q" or (target == "api_key" and value == "")
            out.append(Sweep(f"lt-form-{target}-{name}", PATHS["lt"],
                             urlencode(pairs).encode(), "application/x-www-form-urlencoded",
                             target, may_pass))
    return out


SWEEP = sweep()


@pytest.mark.parametrize("case", SWEEP, ids=[c.name for c in SWEEP])
def test_generated_sweep_never_answers_5xx(catalogue_server, case: Sweep) -> None:
    r = catalogue_server.client.post(case.path, content=case.body, headers={
        "Content-Type": case.content_type, "X-API-Key": API_KEY})
    body = r.json()
    assert r.status_code < 500, body
    if not case.may_pass:
        assert 400 <= r.status_code < 500, body
    if r.status_code >= 400:
        assert isinstance(body.get("error"), str) and isinstance(body.get("code"), str), body
        assert len(json.dumps(body)) < 2000, "errors never echo a whole input back"
        named = body.get("field") or ""
        assert named == case.field or named.startswith((case.field + "[", case.field + ".")), body
    assert catalogue_server.client.get("/health/live").status_code == 200


def test_sweep_covers_every_field_of_every_route() -> None:
    covered = {(c.path, c.content_type, c.field) for c in SWEEP}
    assert len(covered) == len(V1_FIELDS) + 2 * len(LT_FIELDS)
    print(f"\ngenerated sweep: {len(SWEEP)} cases")
