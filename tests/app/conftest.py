"""Real servers on the tiny exported bundle (tests/conftest.py's tiny_bundle)."""

from __future__ import annotations

import gc

import pytest

from app.config import Settings
from app.http.app import create_app
from tests.app.fakes import running

# one ONNX Runtime thread: the test machine's cores are shared
REAL = {"threads": 1, "max_wait_ms": 2}


def real_settings(tiny_bundle, **overrides) -> Settings:
    return Settings(models_dir=tiny_bundle, **{**REAL, **overrides})


@pytest.fixture(scope="session")
def real_server(tiny_bundle, tmp_path_factory):
    """One uvicorn server (thread, loopback, free port) on the tiny bundle for the session."""
    app = create_app(real_settings(tiny_bundle, max_texts_per_request=8, max_chars_per_text=400,
                                   max_total_chars=800, max_body_bytes=20_000,
                                   files_dir=tmp_path_factory.mktemp("files")))
    with running(app) as server:
        yield server


@pytest.fixture()
def collector_off():
    """Automatic garbage collection off for the test (as it effectively is for a long-lived
    server process's old objects), so that what is left in reference cycles stays visible."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
        gc.collect()
