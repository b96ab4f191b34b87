"""app/'s packages are layers: each imports only the ones below it (docs/architecture.md), lazy
imports inside functions and TYPE_CHECKING blocks included, so no import runs back up and none
closes a circle."""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parents[2] / "app"
BASE = {"config", "errors"}  # every layer may use these; they use no other part of app
ALLOWED = {
    "engine": {"engine"},
    "text": {"text", "engine"},
    "documents": {"documents", "text", "engine"},
    "translation": {"translation", "documents", "text", "engine"},
    "serving": {"serving", "engine"},
    "http": {"http", "serving", "translation", "documents", "text", "engine"},
}
ENTRY_POINTS = {"cli", "server", "doctor"}  # the top: they may import any layer


def _imported_parts(path: Path) -> set[str]:
    """The app sub-packages (or top-level modules) that the module at path imports."""
    parts = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + ([f"{node.module}.{a.name}" for a in node.names]
                                     if node.module == "app" else [])
        else:
            continue
        parts |= {n.split(".")[1] for n in names if n.startswith("app.")}
    return parts


def _layer(path: Path) -> str:
    rel = path.relative_to(APP)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def test_each_layer_imports_only_the_layers_below_it():
    wrong = []
    for path in sorted(APP.rglob("*.py")):
        layer = _layer(path)
        if layer in ENTRY_POINTS or layer == "__init__":
            continue
        allowed = ALLOWED.get(layer, set()) | (set() if layer in BASE else BASE)
        wrong += [f"{path.relative_to(APP)} imports app.{part}"
                  for part in sorted(_imported_parts(path) - allowed)]
    assert wrong == []


def test_the_top_level_holds_only_entry_points_and_faces():
    modules = {p.stem for p in APP.glob("*.py")}
    assert modules == {"__init__", "cli", "server", "doctor", "config", "errors"}
    assert set(ALLOWED) <= {p.name for p in APP.iterdir() if (p / "__init__.py").is_file()}


def test_the_check_sees_a_wrong_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from app.http.state import AppState\n")
    assert _imported_parts(bad) == {"http"}
