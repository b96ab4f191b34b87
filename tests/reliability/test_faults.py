"""Faults: a missing or corrupted bundle at start (a clear error naming the file; never ready; the
server process exits non-zero), and an engine exception in one batch (only that batch's requests
fail, with a generic 500; the next batch succeeds)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from app.http.app import create_app
from tests.app.conftest import real_settings
from tests.app.fakes import free_port, running, wait_until
from tests.reliability.conftest import EngineDouble, double_loader

ROOT = Path(__file__).resolve().parents[2]


def corrupt_onnx(bundle: Path) -> str:
    path = bundle / "encoder.fp32.onnx"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte in the weights
    path.write_bytes(bytes(data))
    return path.name


def truncate_manifest(bundle: Path) -> str:
    path = bundle / "manifest.json"
    path.write_text(path.read_text()[:100])
    return path.name


def delete_tokenizer(bundle: Path) -> str:
    (bundle / "sentencepiece.model").unlink()
    return "sentencepiece.model"


def wrong_checksum_in_manifest(bundle: Path) -> str:
    path = bundle / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["variants"]["fp32"]["decoder"]["sha256"] = "0" * 64
    path.write_text(json.dumps(manifest))
    return "decoder.fp32.onnx"


def missing_dir(bundle: Path) -> str:
    shutil.rmtree(bundle)
    return bundle.name


BREAKAGES: dict[str, Callable[[Path], str]] = {
    "corrupted-onnx": corrupt_onnx,
    "truncated-manifest": truncate_manifest,
    "missing-tokenizer": delete_tokenizer,
    "wrong-checksum": wrong_checksum_in_manifest,
    "missing-models-dir": missing_dir,
}


@pytest.fixture
def broken_copy(tiny_bundle, tmp_path):
    def make(breakage: Callable[[Path], str]) -> tuple[Path, str]:
        bundle = tmp_path / "en-de"
        shutil.copytree(tiny_bundle, bundle)
        return bundle, breakage(bundle)

    return make


@pytest.mark.parametrize("breakage", list(BREAKAGES), ids=list(BREAKAGES))
def test_a_broken_bundle_is_named_and_never_ready(broken_copy, breakage):
    bundle, culprit = broken_copy(BREAKAGES[breakage])
    app = create_app(real_settings(bundle))
    with running(app, ready=False) as server, httpx.Client(base_url=server.url) as c:
        wait_until(lambda: c.get("/health/live").status_code == 503)  # loading gave up
        ready = c.get("/health/ready")
        assert ready.status_code == 503 and ready.json()["status"] == "failed"
        assert culprit in ready.json()["error"], ready.json()
        r = c.post("/v1/translate", json={"text": "the dog", "source": "en", "target": "de"})
        assert r.status_code == 503 and r.headers["retry-after"]
        assert all(c.get("/health/ready").status_code == 503 for _ in range(5))


def test_the_server_process_exits_non_zero_naming_the_file(broken_copy):
    bundle, culprit = broken_copy(corrupt_onnx)
    proc = subprocess.run(
        [sys.executable, "-m", "app.server", "--models-dir", str(bundle), "--port",
         str(free_port()), "--threads", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert culprit in proc.stderr and "sha256 mismatch" in proc.stderr, proc.stderr[-3000:]


def test_an_engine_exception_fails_only_its_batch(tiny_bundle):
    doubles: list[EngineDouble] = []
    app = create_app(real_settings(tiny_bundle, max_wait_ms=2), loader=double_loader(doubles))
    with running(app) as server, httpx.Client(base_url=server.url, timeout=120) as c:
        engine, batcher = doubles[0], app.state.nmt.batcher
        engine.fail_marker = "boom"
        engine.gate.clear()
        answers: dict[str, httpx.Response] = {}

        def send(name: str, path: str, body: dict) -> threading.Thread:
            def run() -> None:
                with httpx.Client(base_url=server.url, timeout=120) as own:
                    answers[name] = own.post(path, json=body)

            thread = threading.Thread(target=run)
            thread.start()
            return thread

        pair = {"source": "en", "target": "de"}
        threads = [send("plug", "/v1/translate", {"text": "the red car", **pair})]
        wait_until(lambda: engine.entered == 1)  # the engine holds the first batch
        # two requests with the same options share the next batch; it will raise ...
        threads.append(send("boom", "/v1/translate", {"text": "boom the dog", **pair}))
        wait_until(lambda: batcher.depth == 1)
        threads.append(send("neighbour", "/translate", {"q": "the cat sees a tree", **pair}))
        wait_until(lambda: batcher.depth == 2)
        # ... while other options make another batch, which must succeed
        threads.append(send("other", "/v1/translate",
                            {"text": "a small tree", **pair, "options": {"beam_size": 1}}))
        wait_until(lambda: batcher.depth == 3)
        engine.gate.set()
        for t in threads:
            t.join(120)
        assert ["boom the dog", "the cat sees a tree"] in engine.batches  # one batch

        for name in ("boom", "neighbour"):
            r = answers[name]
            assert r.status_code == 500, r.text
            assert r.json() == {"error": "translation failed; see the server log",
                                "code": "internal_error"}
            for secret in ("CUDA", "secret", ".onnx", "Traceback", "Attention"):
                assert secret not in r.text
        assert answers["plug"].status_code == 200 and answers["other"].status_code == 200
        after = c.post("/v1/translate", json={"text": "the dog sees a cat", **pair})
        assert after.status_code == 200 and after.json()["translations"][0]["text"]
        assert c.get("/health/ready").status_code == 200
        assert 'outcome="error"' in c.get("/metrics").text
