"""bench.lt_package: the stand-in sentence splitter answers in MiniSBD's interface, and the
package has the layout argostranslate reads."""

from __future__ import annotations

import json

import numpy as np

from bench import lt_package


def test_sentence_splitter_marks_sentence_and_token_ends(tmp_path):
    import onnxruntime as ort

    path = lt_package.sentence_splitter(tmp_path / "en.onnx", "en")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    meta = session.get_modelmeta().custom_metadata_map
    vocab = json.loads(meta["vocab"])["_unit2id"]
    assert json.loads(meta["config"])["feat_funcs"] == ["space_before"]
    text = "Save it. Open it! Done"
    units = np.array([[vocab.get(c, vocab["<UNK>"]) for c in text] + [vocab["<PAD>"]]])
    features = (units == vocab[" "]).astype(np.float32)[..., None]  # (1, T, 1)
    [scores] = session.run(None, {"units": units, "features": features})
    assert scores.shape == (1, len(text) + 1, 5)
    classes = scores[0].argmax(-1)
    sentence_ends = [i for i, c in enumerate(classes) if c == 2]
    token_ends = [i for i, c in enumerate(classes) if c == 1]
    assert sentence_ends == [text.index("."), text.index("!")]
    assert token_ends == [text.index("Save") + 3, text.index("Open") + 3]  # before a space
    assert classes[-1] == 0  # the pad


def test_package_layout(tmp_path):
    model = tmp_path / "ct2"
    model.mkdir()
    (model / "model.bin").write_bytes(b"weights")
    (model / "sentencepiece.model").write_bytes(b"sp")
    package = lt_package.write_package(model, model / "sentencepiece.model", tmp_path / "pkg",
                                       "en", "de", "en-de")
    assert sorted(p.name for p in package.iterdir()) == [
        "metadata.json", "minisbd", "model", "sentencepiece.model"]
    assert [p.name for p in (package / "model").iterdir()] == ["model.bin"]
    meta = json.loads((package / "metadata.json").read_text())
    assert (meta["from_code"], meta["to_code"], meta["type"]) == ("en", "de", "translate")
    assert (package / "minisbd" / "en.onnx").is_file()
