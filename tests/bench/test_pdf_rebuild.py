"""bench.pdf_rebuild: today's PDF code against a git revision's, on the same files; a file
whose translated PDF differs in a byte is named and fails the run."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("pypdf")
pytest.importorskip("pdfminer")
pytest.importorskip("reportlab")

from app.documents import pdf_file  # noqa: E402
from bench import pdf_rebuild  # noqa: E402
from tests.app.test_pdf import two_columns  # noqa: E402

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="the base code comes from git")


@needs_git
def test_the_same_code_gives_the_same_pdf(tmp_path, capsys):
    (tmp_path / "page.pdf").write_bytes(two_columns())
    assert pdf_rebuild.main([str(tmp_path), "--base", "HEAD", "--repeat", "1"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines()
               if line.startswith("page.pdf"))
    assert row.endswith("| yes")


@needs_git
def test_a_byte_changed_in_the_translated_pdf_fails_the_run(tmp_path, capsys, monkeypatch):
    (tmp_path / "page.pdf").write_bytes(two_columns())
    rebuild = pdf_file.rebuild
    monkeypatch.setattr(pdf_file, "rebuild", lambda doc, texts: rebuild(doc, texts) + b"\n")
    assert pdf_rebuild.main([str(tmp_path), "--base", "HEAD", "--repeat", "1"]) == 1
    assert "different output: page.pdf" in capsys.readouterr().out
