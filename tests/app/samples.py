"""Sample documents the document tests share, built with the libraries that read them."""

from __future__ import annotations

import io

import docx
from odf import opendocument, teletype
from odf import text as odftext
from odf.style import Style, TextProperties


def odt_file(tail: str = "") -> bytes:
    """A heading and a paragraph "We ship <bold span>next week</span>" + tail (added as ODF
    text: a run of spaces in it becomes text:s)."""
    document = opendocument.OpenDocumentText()
    strong = Style(name="Strong", family="text")
    strong.addElement(TextProperties(fontweight="bold"))
    document.automaticstyles.addElement(strong)
    document.text.addElement(odftext.H(outlinelevel=1, text="Quarterly plan"))
    p = odftext.P(text="We ship ")
    p.addElement(odftext.Span(stylename=strong, text="next week"))
    if tail:
        teletype.addTextToElement(p, tail)
    document.text.addElement(p)
    buf = io.BytesIO()
    document.write(buf)
    return buf.getvalue()


def docx_document() -> docx.document.Document:
    """A heading, a bullet with a bold run in it, and a one-row table of two cells."""
    document = docx.Document()
    document.add_heading("Annual results", level=1)
    p = document.add_paragraph("Sales grew ", style="List Bullet")
    p.add_run("very strongly").bold = True
    p.add_run(" this year.")
    table = document.add_table(rows=1, cols=2)
    table.cell(0, 0).text = "Left cell"
    table.cell(0, 1).text = "Right cell"
    return document


def docx_bytes(document: docx.document.Document) -> bytes:
    buf = io.BytesIO()
    document.save(buf)
    return buf.getvalue()
