"""The vocabulary trial: one SentencePiece model per size, pieces per word on dev sets."""

from __future__ import annotations

import json

import pytest

from model import vocab_trial


def _write(prefix, pairs):
    prefix.with_suffix(".en").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    prefix.with_suffix(".de").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")


def test_larger_vocabularies_split_words_less(tmp_path):
    words = ["garden", "river", "castle", "dragon", "forest", "village", "mountain", "window"]
    german = ["Garten", "Fluss", "Burg", "Drache", "Wald", "Dorf", "Berg", "Fenster"]
    pairs = [
        (f"The {a} is near the {b}.", f"Der {x} ist nahe dem {y}.")
        for a, x in zip(words, german, strict=True)
        for b, y in zip(words, german, strict=True)
    ] * 5
    _write(tmp_path / "train", pairs)
    _write(tmp_path / "dev", pairs[:20])
    out = tmp_path / "vocab"
    assert vocab_trial.main(["--corpus", str(tmp_path), "--sizes", "60,120", "--dev", "dev",
                             "--out", str(out)]) == 0
    rows = json.loads((out / "trial.json").read_text(encoding="utf-8"))
    assert [r["size"] for r in rows] == [60, 120]
    small, large = rows
    for key in ("dev_en", "dev_de"):
        assert 1.0 <= large[key] < small[key]
    assert (out / "spm-120.model").is_file()


def test_a_corpus_that_is_not_there_or_sizes_that_are_not_numbers(tmp_path, capsys):
    assert vocab_trial.main(["--corpus", str(tmp_path / "nope"), "--out", str(tmp_path)]) == 1
    assert "nope/train.en" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse's usage error
        vocab_trial.main(["--corpus", str(tmp_path), "--sizes", "16k", "--out", str(tmp_path)])
    assert "not a comma list of whole numbers: '16k'" in capsys.readouterr().err
