"""The core stays light: the engine and the batcher load neither the web framework nor (until a
bundle is opened) ONNX Runtime."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys; print(' '.join(sys.modules))"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout
    return set(out.split())


def test_engine_and_batcher_import_neither_fastapi_nor_onnxruntime() -> None:
    loaded = _modules_after(
        "import app.engine, app.translation.batcher, app.errors, app.translation.registry")
    assert not {"fastapi", "starlette", "onnxruntime"} & loaded


def test_opening_a_bundle_loads_onnxruntime(tiny_bundle) -> None:
    loaded = _modules_after(f"from app.engine import Translator; "
                            f"Translator.from_dir({str(tiny_bundle)!r})")
    assert "onnxruntime" in loaded
