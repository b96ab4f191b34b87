"""Security defaults: loopback bind and the exposure warning, API keys compared in constant time,
rate limits per key and per address on both APIs, no model loading from URLs, CORS off by
default, no secrets echoed. (The body cap before reading the body: test_bad_input's
content-length and chunked cases.)"""

from __future__ import annotations

import ast
import contextlib
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from app.config import Settings
from app.errors import Unauthorized
from app.http.app import create_app
from app.http.metrics import Metrics
from app.http.state import AppState
from app.server import serve_main
from tests.app.fakes import fake_model, running

APP_DIR = Path(__file__).resolve().parents[2] / "app"
NETWORK_MODULES = {"urllib.request", "http.client", "requests", "httpx", "aiohttp", "urllib3",
                   "ftplib", "socket", "huggingface_hub", "boto3", "fsspec"}


@pytest.fixture
def clean_env(monkeypatch):
    for key in list(__import__("os").environ):
        if key.startswith("NMT_"):
            monkeypatch.delenv(key)


def test_loopback_by_default(clean_env):
    assert Settings().host == "127.0.0.1" and Settings().is_loopback
    for host in ("127.0.0.1", "127.0.0.5", "localhost", "::1"):
        assert Settings(host=host).is_loopback, host
    for host in ("0.0.0.0", "::", "192.0.2.10", "example.test"):
        assert not Settings(host=host).is_loopback, host


def test_serving_beyond_loopback_without_keys_warns(clean_env, monkeypatch, capsys, tmp_path,
                                                     restore_logging):
    import uvicorn

    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: None)  # never binds
    serve_main(["--host", "0.0.0.0", "--models-dir", str(tmp_path), "--port", "0"])
    assert "without API keys" in capsys.readouterr().err
    serve_main(["--host", "0.0.0.0", "--api-keys", "k", "--models-dir", str(tmp_path),
                "--port", "0"])
    assert "without API keys" not in capsys.readouterr().err


def test_keys_are_compared_in_constant_time(monkeypatch):
    import app.http.access

    calls: list[tuple[int, int]] = []
    real = app.http.access.hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(app.http.access.hmac, "compare_digest", spy)
    state = AppState(settings=Settings(api_keys=["short", "a-much-longer-key-" * 4]),
                     metrics=Metrics())
    for given in ("short", "x", "a-much-longer-key-" * 4, "\ud800"):
        calls.clear()
        with contextlib.suppress(Unauthorized):  # a wrong key: the comparisons are the point
            state.keys.check(given)
        # every configured key is compared, always on equal-length digests: no early exit and
        # nothing that depends on the length of the key given
        assert calls == [(32, 32), (32, 32)], (given, calls)


def serve(**settings):
    app = create_app(Settings(max_wait_ms=1, **settings), loader=lambda s: [fake_model()])
    return running(app)


V1 = {"text": "a b", "source": "en", "target": "de"}
LT = {"q": "a b", "source": "en", "target": "de"}


def test_rate_limits_per_key_on_both_apis():
    with serve(rate_limit=60, rate_limit_burst=2, api_keys=["k1", "k2"]) as srv, \
            httpx.Client(base_url=srv.url) as c:
        assert c.post("/v1/translate", json=V1, headers={"X-API-Key": "k1"}).status_code == 200
        assert c.post("/translate", json={**LT, "api_key": "k1"}).status_code == 200
        limited = c.post("/translate", json={**LT, "api_key": "k1"})  # k1's bucket is empty
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
        assert c.post("/v1/translate", json=V1, headers={"X-API-Key": "k1"}).status_code == 429
        assert c.post("/translate", json={**LT, "api_key": "k2"}).status_code == 200
        # a wrong key is refused as such (401), whatever the state of the buckets
        assert c.post("/v1/translate", json=V1, headers={"X-API-Key": "k3"}).status_code == 401


def test_rate_limits_per_address_cannot_be_dodged_with_made_up_keys():
    with serve(rate_limit=60, rate_limit_burst=2) as srv, httpx.Client(base_url=srv.url) as c:
        assert c.post("/v1/translate", json=V1).status_code == 200
        assert c.post("/translate", json=LT).status_code == 200
        for i in range(3):
            assert c.post("/v1/translate", json=V1,
                          headers={"X-API-Key": f"made-up-{i}"}).status_code == 429
            assert c.post("/translate", json={**LT, "api_key": f"made-up-{i}"}).status_code == 429
        assert c.get("/health/live").status_code == 200  # probes are never limited


def test_wrong_keys_are_not_echoed_back():
    secret = "sk-THIS-IS-A-GUESSED-KEY-0123456789"
    with serve(api_keys=["right"]) as srv, httpx.Client(base_url=srv.url) as c:
        for r in (c.post("/v1/translate", json=V1, headers={"Authorization": f"Bearer {secret}"}),
                  c.post("/translate", json={**LT, "api_key": secret})):
            assert r.status_code in (401, 403) and secret not in r.text


def test_cors_is_off_by_default():
    with serve() as srv, httpx.Client(base_url=srv.url) as c:
        r = c.post("/v1/translate", json=V1, headers={"Origin": "http://elsewhere.test"})
        assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
        pre = c.options("/v1/translate", headers={"Origin": "http://elsewhere.test",
                                                  "Access-Control-Request-Method": "POST"})
        assert "access-control-allow-origin" not in pre.headers


@pytest.mark.parametrize("url", ["https://models.example.test/en-de", "http://127.0.0.1/b",
                                 "s3://bucket/en-de", "file:///srv/bundles", "hf://org/model"])
def test_models_dir_must_be_a_local_path(url, capsys):
    with pytest.raises(ValidationError, match="models_dir must be a local directory"):
        Settings(models_dir=url)
    assert serve_main(["--models-dir", url]) == 2
    err = capsys.readouterr().err
    assert "models_dir must be a local directory, not a URL" in err


# the modules that accept connections (the listener, the hand-over between server processes)
SERVING = {"supervisor.py", "server.py"}
OUTGOING = {"connect", "connect_ex", "create_connection", "open_connection", "getaddrinfo"}


def test_the_service_has_no_code_that_fetches_from_the_network():
    """Models come from models_dir only: app/ imports no network client at all; the modules
    that serve connections import `socket` to accept them and never open one."""
    found = []
    for path in sorted(APP_DIR.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Attribute) and node.attr in OUTGOING
                    and path.name in SERVING
                    and not (isinstance(node.value, ast.Name) and node.value.id == "sqlite3")):
                found.append(f"{path.name}: .{node.attr}")
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):  # from urllib import request: both names
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            found += [f"{path.name}: {n}" for n in names
                      if (n in NETWORK_MODULES or n.split(".")[0] in NETWORK_MODULES)
                      and not (n == "socket" and path.name in SERVING)]
    assert found == []
