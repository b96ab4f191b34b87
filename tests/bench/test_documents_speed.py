"""bench.documents_speed: today's document code against a git revision's, on the same files;
a file whose translated output differs in a byte is named and fails the run."""

from __future__ import annotations

import shutil
import sys

import pytest

from app.documents import txt_file
from bench import documents_speed

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="the base code comes from git")


def _row(out: str, name: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(name))


@needs_git
def test_the_same_code_gives_the_same_files(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("One paragraph here.\n\nAnother one.\n")
    (tmp_path / "b.md").write_text("# Title\n\nSome **bold** text.\n")
    (tmp_path / "c.pdf").write_bytes(b"%PDF-1.4 not read here")
    assert documents_speed.main([str(tmp_path), "--base", "HEAD", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert _row(out, "a.txt").endswith("| yes") and _row(out, "b.md").endswith("| yes")
    assert "c.pdf" not in out


@needs_git
def test_a_byte_changed_in_the_translated_file_fails_the_run(tmp_path, capsys, monkeypatch):
    (tmp_path / "a.txt").write_text("One paragraph here.\n")
    rebuild = txt_file.rebuild
    monkeypatch.setattr(txt_file, "rebuild", lambda doc, texts: rebuild(doc, texts) + b"\n")
    assert documents_speed.main([str(tmp_path), "--base", "HEAD", "--repeat", "1"]) == 1
    assert "different output: a.txt" in capsys.readouterr().out


@needs_git
def test_the_base_code_is_the_revision_s_and_today_s_stays_imported():
    import app.documents

    base = documents_speed.base_code("HEAD", ["txt"])
    assert base["app.documents"] is not app.documents
    assert base["app.documents.txt_file"].__file__ != txt_file.__file__
    assert sys.modules["app.documents"] is app.documents
