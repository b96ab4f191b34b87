"""bench.fuzz_api: its rules catch what they are for (answers made up here), its shrinker finds
the small request, and a short seeded run against the tiny bundle's real server finds nothing."""

from __future__ import annotations

import json
import logging
import random

import httpx
import pytest

from app.http.app import create_app
from bench import fuzz_api
from bench.fuzz_api import Case, Fuzzer, Server, check
from tests.app.conftest import real_settings
from tests.app.fakes import running

SERVER = Server("en", "de", ["de", "en"], None)


def answer(status: int, body=None, content: bytes | None = None, kind="application/json",
           **headers: str) -> httpx.Response:
    if body is not None:
        content = json.dumps(body).encode()
    return httpx.Response(status, content=content or b"",
                          headers={"content-type": kind, **headers} if kind else headers)


def lt_case(q) -> Case:
    return Case("POST /translate", "POST", "/translate", "", json={"q": q, "target": "de"},
                has_json=True, content_type="application/json")


@pytest.mark.parametrize(("case", "response", "problems"), [
    (lt_case("a"), answer(200, {"translatedText": "b"}), []),
    (lt_case(["a", "b"]), answer(200, {"translatedText": ["c", "d"]}), []),
    (lt_case(["a", "b"]), answer(200, {"translatedText": "c"}),
     ["translatedText does not match q (2)"]),
    (lt_case("a"), answer(500, {"error": "internal server error", "code": "internal_error"}),
     ["500"]),
    (lt_case("a"), answer(503, {"error": "full", "code": "overloaded"}, **{"retry-after": "1"}),
     []),
    (lt_case("a"), answer(503, {"error": "full", "code": "overloaded"}), ["503"]),
    (lt_case("a"), answer(504, {"error": "slow", "code": "timeout"}), []),
    (lt_case("a"), answer(400, content=b"<html>bad</html>", kind="text/html"),
     ["not JSON (text/html)"]),
    (lt_case("a"), answer(400, {"error": "bad", "code": "invalid_input"}),
     ["400 invalid_input names no field"]),
    (lt_case("a"), answer(413, {"error": "big", "code": "too_large", "field": "q"}),
     ["413 too_large names no limit"]),
    (lt_case("a"), answer(400, {"error": "big", "code": "too_large", "field": "q", "limit": 5}),
     []),
    (lt_case("a"), answer(404, {"error": "no", "code": "not_found"}), []),
    (Case("GET /metrics", "GET", "/metrics", ""), answer(200, content=b"x 1",
                                                           kind="text/plain"), []),
    (Case("GET /languages", "GET", "/languages", ""), answer(200, {"code": "en"}),
     ["/languages: not a list of {code, name, targets}"]),
])
def test_the_rules(case, response, problems):
    assert check(case, response) == problems


def test_a_violation_is_shrunk_to_the_part_that_breaks_the_rule():
    """A made-up server that fails on a key "bad" anywhere in the body: the reproduction keeps
    that key alone, its value cut short."""

    def server(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/translate" and b'"bad"' in request.content:
            return answer(500, {"error": "internal server error", "code": "internal_error"})
        return answer(200, {"translatedText": "x"})

    fuzzer = Fuzzer("http://fuzz", SERVER, transport=httpx.MockTransport(server))
    case = Case("POST /translate", "POST", "/translate", "", has_json=True,
                json={"q": ["one", "two", "three"], "source": "en", "target": "de",
                      "bad": "x" * 1000}, headers={"X-Fuzz": "y" * 500})
    fuzzer.probe_s = 0.0
    problems, status, _, _ = fuzzer.problems(case)
    assert (problems, status) == (["500"], 500)
    shrunk = fuzzer.shrink(fuzz_api.Violation(case, problems, status, ""), 100, float("inf"))
    assert (shrunk.json, shrunk.headers) == ({"bad": "x"}, {})
    assert fuzz_api.reproduction(shrunk, "http://fuzz") == (
        "httpx.request('POST', 'http://fuzz/translate', content=b'{\"bad\": \"x\"}')")


def test_generated_requests_can_all_be_sent():
    """Lone surrogates, NUL, bytes in headers: every request the generators make encodes."""
    rng = random.Random(5)
    for case, _ in zip(fuzz_api.cases(rng, SERVER), range(2000), strict=False):
        case.body(), case.url(), case.wire_headers(), fuzz_api.reproduction(case, "http://x")


class Tracebacks(logging.Handler):
    """What the in-thread server logs with a traceback, for Fuzzer's `log`."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        self.text = ""

    def emit(self, record: logging.LogRecord) -> None:
        self.text += self.format(record) + "\n"

    def __call__(self) -> str:
        text, self.text = self.text, ""
        return text


def test_a_short_seeded_run_on_the_real_server_finds_nothing(tiny_bundle, tmp_path):
    settings = real_settings(tiny_bundle, api_keys=[fuzz_api.API_KEY], files_dir=tmp_path)
    logged = Tracebacks()
    logging.getLogger().addHandler(logged)
    try:
        with running(create_app(settings)) as srv:
            server = fuzz_api.server_facts(srv.url, fuzz_api.API_KEY)
            fuzzer = Fuzzer(srv.url, server, log=logged)
            report = fuzzer.run(random.Random(11), count=40, seconds=25, shrink=5)
            fuzzer.close()
    finally:
        logging.getLogger().removeHandler(logged)
    assert report.violations == []
    assert report.requests == 40
    assert len({route for route, _ in report.outcomes}) >= 8
    assert "POST /translate" in report.table()
