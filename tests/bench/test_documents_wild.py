"""bench.documents_wild with its fake translator: files of the text formats come through
whole, their shapes read again."""

from __future__ import annotations

import io
import json

import pytest

from bench import documents_wild
from tests.app.samples import epub_bytes, epub_parts


def test_text_formats_come_through_whole(tmp_path):
    # reading a shape back called a decoder the documents package no longer has: every HTML,
    # Markdown, subtitle and text file was a problem
    files = tmp_path / "files"
    files.mkdir()
    (files / "page.html").write_bytes(
        '<html><head><meta charset="windows-1252"></head><body><p>Sign in to <b>Acme</b> '
        'today, caf\xe9 owner.</p></body></html>'.encode("cp1252"))
    (files / "notes.md").write_text("# Notes\n\nRead the `README` first.\n")
    (files / "talk.srt").write_text("1\n00:00:01,000 --> 00:00:02,000\nHello there.\n")
    (files / "plain.txt").write_text("One line of text.\n")
    assert statuses(files) == dict.fromkeys(["notes.md", "page.html", "plain.txt", "talk.srt"],
                                            "ok")


def statuses(files) -> dict[str, str]:
    """Each file's status, the bench run on the folder with the fake (its exit code checked)."""
    out = files.parent / "rows.json"
    code = documents_wild.main([str(files), "--json", str(out)])
    rows = {r["file"]: r["status"] for r in json.loads(out.read_text())}
    assert code == (1 if "problem" in rows.values() else 0)
    return rows


def test_the_fake_keeps_each_places_case_and_is_its_own_inverse():
    # a sentence runs on over a line break where the next word starts in lower case: the
    # fake's "egeW" joined lines the source kept apart, and the file read back had fewer
    # segments than it was read with
    texts = ["Wege zum Chaos", "MIME types, Straße, Σας, ǅemal, İstanbul"]
    assert documents_wild.reverse(texts)[0] == "Egew muz Soahc"
    assert documents_wild.reverse(documents_wild.reverse(texts)) == texts


def test_books_and_pdfs_come_through_whole(tmp_path):
    pytest.importorskip("pypdf")
    from tests.app.test_pdf import two_columns

    files = tmp_path / "files"
    files.mkdir()
    parts = epub_parts()
    (files / "book.epub").write_bytes(epub_bytes(parts))
    # mimetype last, with a line end: written first and without it, as readers look for it,
    # which is no problem
    (files / "late.epub").write_bytes(epub_bytes({**{k: v for k, v in parts.items()
                                                     if k != "mimetype"},
                                                  "mimetype": parts["mimetype"] + b"\n"}))
    (files / "page.pdf").write_bytes(two_columns())
    (files / "poem.html").write_text("<p>Halb Europa ist auf dem<br/>Wege zum Chaos</p>")
    assert statuses(files) == dict.fromkeys(["book.epub", "late.epub", "page.pdf", "poem.html"],
                                            "ok")


def test_the_epub_checks_see_a_changed_page_and_a_misplaced_mimetype():
    parts = epub_parts()
    book = epub_bytes(parts)
    changed = epub_bytes({**parts, "OEBPS/one.xhtml": parts["OEBPS/one.xhtml"].replace(
        b"<em>dark</em>", b"dark")})
    [difference] = documents_wild.differences(documents_wild.epub_shape(book),
                                              documents_wild.epub_shape(changed))
    # (the first tag that differs, not the page's whole list)
    assert difference.startswith("OEBPS/one.xhtml differ (tags: 32 -> 30, #11: '<em []>' -> ")
    late = epub_bytes({**{k: v for k, v in parts.items() if k != "mimetype"},
                       "mimetype": parts["mimetype"]})
    assert documents_wild.epub_container_problems(book) == []
    assert documents_wild.epub_container_problems(late) != []


def test_the_pdf_checks_see_a_lost_link_and_untranslated_text():
    pytest.importorskip("pypdf")
    from pypdf import PdfReader, PdfWriter
    from pypdf.generic import NameObject

    from tests.app.test_pdf import two_columns

    data = two_columns()
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    del writer.pages[0][NameObject("/Annots")]
    unlinked = io.BytesIO()
    writer.write(unlinked)
    assert documents_wild.differences(documents_wild.pdf_shape(data),
                                      documents_wild.pdf_shape(unlinked.getvalue())) == [
        "page 1 differ (links: 1 -> 0, #0: ('https://example.org/', [330, 280, 500, 310]) -> "
        "nothing)"]
    # read back, pdfminer guesses the spaces of a drawn translation anew: not a lost word
    assert documents_wild._lost_words("Contents . . . . 3 for the - admin", "for the "
                                      "Contents .. .. 3 -admin") == ""
    assert documents_wild._lost_words("\u2022 Open it", "Open it") != ""
    # the output's text is the source's, not the fake's translation of it
    problems = documents_wild.text_problems("pdf", data, data, fake=True)
    assert problems and "text not translated back" in problems[0]
