"""export.symbols: which symbols a bundle's model does not copy, recorded for the engine."""

from __future__ import annotations

import json
import shutil

from app.engine import Translator
from app.engine.tokenizer import is_symbol
from export import symbols


def test_candidates_are_the_vocabularys_symbols(tiny_bundle):
    t = Translator.from_dir(tiny_bundle, intra_threads=1)
    found = symbols.candidates(t)
    pieces = {t.tokenizer.sp.id_to_piece(i).lstrip("\u2581") for i in range(t.tokenizer.vocab_size)}
    assert found == sorted(c for c in pieces if len(c) == 1 and is_symbol(c))


class Out:
    def __init__(self, text: str) -> None:
        self.text = text


def test_a_symbol_lost_in_a_frame_is_named(tiny_bundle, monkeypatch):
    t = Translator.from_dir(tiny_bundle, intra_threads=1)
    kept_once = symbols.FRAMES[0].format("±")  # "★" kept by every frame, "±" by the first

    def translate(texts):
        return [Out(text if "★" in text or text == kept_once else "x") for text in texts]

    monkeypatch.setattr(t, "translate_batch", translate)
    assert symbols.uncopied(t, ["★", "±"]) == ["±"]


def test_record_writes_them_into_the_manifest_and_card(tiny_bundle, tmp_path, monkeypatch):
    copy = tmp_path / "b"
    shutil.copytree(tiny_bundle, copy)
    monkeypatch.setattr(symbols, "candidates", lambda t: ["±", "★"])
    monkeypatch.setattr(symbols, "uncopied", lambda t, chars: ["±"])
    assert symbols.main([str(copy), "--record"]) == 0
    assert json.loads((copy / "manifest.json").read_text())["masked_symbols"] == "±"
    assert "(`masked_symbols`): ±" in (copy / "MODEL_CARD.md").read_text()
    assert Translator.from_dir(copy, intra_threads=1).masked_symbols == {"±"}
