"""`nmt translate`: lines in, one translation per line out."""

from __future__ import annotations

import io
import sys

import pytest

from app.cli import main
from app.engine import TranslationOptions, Translator


@pytest.fixture(scope="module")
def expected(tiny_bundle, tiny_sentences):
    t = Translator.from_dir(tiny_bundle, intra_threads=1)
    greedy = TranslationOptions(beam_size=1)
    return [r.text for r in t.translate_batch(tiny_sentences, greedy)]


def test_stdin_to_stdout(tiny_bundle, tiny_sentences, expected, monkeypatch, capsys):
    lines = [tiny_sentences[0], "", *tiny_sentences[1:]]
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(lines) + "\n"))
    args = ["translate", "--bundle", str(tiny_bundle), "--beam-size", "1", "--batch-size", "3"]
    assert main([*args, "--threads", "1"]) == 0
    assert capsys.readouterr().out.splitlines() == [expected[0], "", *expected[1:]]


def test_file_to_file_with_default_bundle_and_variant(
    tiny_bundle, tiny_sentences, tmp_path, monkeypatch, capsys
):
    (tmp_path / "bundles").mkdir()
    (tmp_path / "bundles" / "en-de").symlink_to(tiny_bundle)
    (tmp_path / "in.txt").write_text("\n".join(tiny_sentences) + "\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    args = ["translate", "-i", "in.txt", "-o", "out.txt", "--variant", "int8", "--beam-size", "2"]
    assert main([*args, "--threads", "1"]) == 0
    out = (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines()
    int8 = Translator.from_dir(tiny_bundle, variant="int8", intra_threads=1)
    assert out == [r.text for r in int8.translate_batch(tiny_sentences, TranslationOptions(2))]
    assert "8/8" in capsys.readouterr().err  # the progress bar


def test_no_bundle_is_a_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "stdin", io.StringIO("hello\n"))
    assert main(["translate"]) == 2
    assert "no bundle found" in capsys.readouterr().err


def test_serve_without_the_service_module(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "app.server", None)  # import fails as if it did not exist
    assert main(["serve", "--port", "1"]) == 2
    assert "nmt serve" in capsys.readouterr().err


def test_import_without_torch_says_what_to_install(monkeypatch, capsys):
    from app import cli

    real = cli.importlib.util.find_spec
    monkeypatch.setattr(
        cli.importlib.util, "find_spec", lambda name: None if name == "torch" else real(name)
    )
    assert main(["import", "some/dir", "--out", "bundles/xx-yy"]) == 2
    err = capsys.readouterr().err
    assert "needs torch" in err and "pip install" in err


def test_import_help_needs_no_torch(monkeypatch, capfd):
    """`nmt --help` points at `nmt import --help`: the importer's options print without torch."""
    from app import cli

    real = cli.importlib.util.find_spec
    monkeypatch.setattr(
        cli.importlib.util, "find_spec", lambda name: None if name == "torch" else real(name)
    )
    assert main(["import", "--help"]) == 0
    out, err = capfd.readouterr()
    assert "--argos-packages" in out and "needs torch" not in err


def test_import_runs_the_importer_and_relays_its_refusal(marian_bundles, tmp_path, capfd):
    """`nmt import` is `python -m export.marian` in a child process (exit code and message
    included); here on a pre-norm model, which the importer refuses before exporting."""
    import json
    import shutil

    hf_dir = shutil.copytree(next(iter(marian_bundles.values()))[0], tmp_path / "hf")
    config = json.loads((hf_dir / "config.json").read_text())
    (hf_dir / "config.json").write_text(json.dumps({**config, "normalize_before": True}))
    assert main(["import", str(hf_dir), "--out", str(tmp_path / "out")]) == 2
    assert "normalize_before" in capfd.readouterr().err
    assert not (tmp_path / "out").exists()
