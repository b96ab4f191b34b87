"""Schemathesis against the live OpenAPI schema of a real server on 127.0.0.1 (tiny engine):
every check, a fixed seed, a bounded number of cases per operation and a time cap. No 5xx, and
every answer matches the schema (status codes, content types, bodies, headers, methods)."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.http.app import create_app
from tests.app.conftest import real_settings
from tests.app.fakes import running

CONFIG = Path(__file__).with_name("schemathesis.toml")
MAX_EXAMPLES = 30  # per operation and phase
SEED = 8
TIME_CAP_S = 270  # the whole run (under pytest-timeout's 300 s); about a minute when idle


@pytest.fixture(scope="module")
def open_server(tiny_bundle, tmp_path_factory):
    settings = real_settings(tiny_bundle, max_chars_per_text=200, max_total_chars=400,
                             max_texts_per_request=4, max_body_bytes=4000,
                             files_dir=tmp_path_factory.mktemp("files"))
    with running(create_app(settings)) as server:
        yield server


def test_schemathesis_finds_no_5xx_and_no_schema_violation(open_server, tmp_path):
    cmd = [
        sys.executable, "-m", "schemathesis.cli", "--no-color", "--config-file", str(CONFIG),
        "run", f"{open_server.url}/openapi.json", "--checks", "all",
        "--max-examples", str(MAX_EXAMPLES), "--seed", str(SEED), "--workers", "1",
        "--request-timeout", "60", "--report", "json,har", "--report-dir", str(tmp_path),
    ]
    try:  # cwd: Schemathesis keeps its example database there, so every run starts afresh
        proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True,
                              timeout=TIME_CAP_S)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"schemathesis ran past its time cap of {TIME_CAP_S}s:\n{exc.stdout}")
    (report,) = tmp_path.glob("json-*.json")
    (har,) = tmp_path.glob("har-*.json")
    summary = json.loads(report.read_text())
    statuses = collections.Counter(
        entry["response"]["status"] for entry in json.loads(har.read_text())["log"]["entries"])
    generated = summary["test_cases"]["generated"]
    server_errors = sum(n for status, n in statuses.items() if status >= 500)
    print(f"\nschemathesis: {generated} cases, {sum(statuses.values())} requests, "
          f"{server_errors} 5xx, statuses {dict(sorted(statuses.items()))}")
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-2000:]
    assert summary["complete"] and not summary["failures"] and not summary["errors"]
    assert summary["operations"]["tested"] == summary["operations"]["total"] >= 7
    assert server_errors == 0, statuses
    assert generated >= 100
