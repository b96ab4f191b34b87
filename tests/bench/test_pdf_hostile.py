"""bench.pdf_hostile: the hostile pages it builds read as one block a string (its rows of
strings as the words of one box), and it prints a row of seconds, memory and ratios for each
page and size, the codes' output compared."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("pypdf")
pytest.importorskip("pdfminer")
pytest.importorskip("reportlab")

from app.documents import pdf_file  # noqa: E402
from bench import pdf_hostile  # noqa: E402


@pytest.mark.parametrize("page", ["grid", "piled"])
def test_each_string_of_a_hostile_page_is_a_block(page):
    doc = pdf_file.extract(pdf_hostile.PAGES[page](130))
    assert sorted(doc.segments) == sorted(f"word{i}" for i in range(130))


def test_the_rows_of_strings_are_read_as_one_box():
    (text,) = pdf_file.extract(pdf_hostile.rows_page(130)).segments
    assert sorted(text.replace(" ", "")) == sorted("".join(f"word{i}" for i in range(130)))


@pytest.mark.skipif(shutil.which("git") is None, reason="the base code comes from git")
def test_a_row_for_each_page_and_size_the_same_code_reading_and_writing_the_same(capsys):
    assert pdf_hostile.main(["--sizes", "20", "--base", "HEAD"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [row.split()[:3] for row in rows] == [
        ["grid", "20", "20"], ["piled", "20", "20"], ["rows", "20", "1"]]
    assert all(row.endswith("| yes") for row in rows)


def test_past_the_base_s_largest_size_only_today_s_code_runs(capsys):
    assert pdf_hostile.main(["--pages", "grid", "--sizes", "20", "--base-up-to", "10"]) == 0
    (row,) = capsys.readouterr().out.splitlines()[1:]
    _, extract, rebuild, read_memory, write_memory, same = row.split("|")
    for cell in (extract, rebuild, read_memory, write_memory):
        assert cell.split()[0] == "-" and float(cell.split()[1]) >= 0  # no base, today's
    assert same.strip() == "-"
