"""How the document readers and writers, and the text path, scale with the size of their input.

    python -m bench.scaling [--scale 1.0] [--only TEXT] [--repeat 1] [--json out.json]
        [--against REV]

Each case builds a synthetic input at two sizes, N and 4N, along one dimension that can grow
(paragraphs, formatting runs in a paragraph, links in a sentence, table rows, slides, chapters,
catalog entries, cues, masks in a text, ...), and times each phase of its path in CPU seconds
(time.process_time): for a document, reading it (app.documents.extract), translating its
segments (app.documents.translate_segments: sentences, masks, inline tags; the translator is
bench.documents_wild's fake, which reverses the letters of each word, and sentences are cut
where a stand-in for the model's token count says they do not fit) and writing it again
(app.documents.rebuild); for the text path, app.text.protect's mask and unmask,
app.text.segment and app.text.tags through translate_segments, and the service's own layout
and assembly (TranslationService._run with a fake batcher). It prints T(4N)/T(N) per phase:
about 4 where the cost is linear, about 16 where it grows with the square; a ratio above
FLAGGED (where the larger run took at least NOTICED seconds: below that the timer's noise
decides) is flagged with "!!", once a second run of the case (the faster time of the two kept
for each phase and size) says so too.

N is what a large upload holds (within app.documents.Limits: 20 MB, 50,000 segments, 5M
characters); `--scale` multiplies every N (the test runs the cases at a tiny scale),
`--only` runs the cases whose name holds that text, `--repeat` takes the fastest of that many
runs of each size. With `--against REV` the same cases also run on app/ as it is at that git
revision (in a process of its own, with this checkout's bench/), and the table shows both
ratios and whether the outputs (the rebuilt files' and texts' digests) are the same."""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import types
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from app import documents
from app.engine.types import Result
from app.text.protect import mask, unmask
from bench.documents_wild import reverse

FLAGGED = 7.0  # T(4N)/T(N) above it: more than linear (n log n stays well under it)
NOTICED = 0.05  # seconds: a larger run quicker than this is not flagged
_PIECE = re.compile(r"\w{1,4}|[^\w\s]")  # about what a SentencePiece piece covers
MAX_TOKENS = 128


def fits(sentence: str) -> bool:
    """The stand-in for the model's limit: a token count that costs what tokenizing does
    (a pass over the sentence), about a piece per four letters."""
    return len(_PIECE.findall(sentence)) <= MAX_TOKENS


@dataclass(frozen=True)
class Case:
    """`build(n)`: the input of size n; `run(input)`: its phases' CPU seconds and a digest of
    its output."""

    name: str
    n: int
    build: Callable[[int], object]
    run: Callable[[object], tuple[dict[str, float], str]]


class _Clock:
    """The phases of one run, each timed in CPU seconds."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}

    def __call__(self, phase: str, fn: Callable, *args, **kwargs):
        gc.collect()  # (the phase before's garbage is not this phase's to collect)
        start = time.process_time()
        out = fn(*args, **kwargs)
        self.phases[phase] = self.phases.get(phase, 0.0) + time.process_time() - start
        return out


def _digest(*parts: bytes | str) -> str:
    """A digest of the outputs; of a zip (a rebuilt .docx ...), of its entries' names and
    contents (a library's writer stamps them with the time)."""
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, bytes) and part.startswith(b"PK"):
            part = b"".join(name.encode() + b"\0" + data for name, data in _unzip(part).items())
        h.update(part.encode("utf-8", "surrogatepass") if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:16]


# ---- the paths timed -----------------------------------------------------------------------

def _document(fmt: str) -> Callable[[object], tuple[dict[str, float], str]]:
    """A document's whole path: read, translate its segments, write."""

    def run(data: object) -> tuple[dict[str, float], str]:
        clock = _Clock()
        doc = clock("read", documents.extract, data, fmt, documents.Limits(), "en")
        out = clock("translate", documents.translate_segments, doc.segments, reverse,
                    doc.markup, fits=fits, wraps=doc.wraps, language="en")
        written = clock("write", documents.rebuild, doc, out, "de")
        return clock.phases, _digest(written)

    return run


def _masks(text: object) -> tuple[dict[str, float], str]:
    """app.text.protect alone: mask, then unmask a translation that kept every mask."""
    clock = _Clock()
    masked = clock("mask", mask, text)
    out = clock("unmask", unmask, masked, reverse([masked.text])[0])
    return clock.phases, _digest(masked.text, out)


def _dropped(text: object) -> tuple[dict[str, float], str]:
    """unmask of a translation that lost every mask: each goes back by its place."""
    clock = _Clock()
    masked = clock("mask", mask, text)
    lost = re.sub(r"\{\d+\}", "", masked.text)
    out = clock("unmask", unmask, masked, reverse([lost])[0])
    return clock.phases, _digest(masked.text, out)


def _spaced(text: object) -> tuple[dict[str, float], str]:
    """unmask of a translation that put a space inside each tag pair ("{1} word {2}"), where
    the source had none: each such space goes."""
    clock = _Clock()
    masked = clock("mask", mask, text)
    spaced = re.sub(r"(\{\d+\})(\w+)(\{\d+\})", r"\1 \2 \3", masked.text)
    out = clock("unmask", unmask, masked, spaced)
    return clock.phases, _digest(masked.text, out)


def _segments(markup: bool) -> Callable[[object], tuple[dict[str, float], str]]:
    """One text through app.documents.translate_segments (sentences, masks, inline tags)."""

    def run(text: object) -> tuple[dict[str, float], str]:
        clock = _Clock()
        out = clock("translate", documents.translate_segments, [text], reverse, markup,
                    fits=fits, language="en")
        return clock.phases, _digest(*out)

    return run


class _Batcher:
    """The service's batcher, with the fake translator for an engine."""

    async def translate(self, engine, texts, options, timeout, priority=None):
        return [Result(t) for t in reverse(texts)]


@cache
def _service():
    from app.config import Settings
    from app.engine.types import TranslationOptions
    from app.translation.service import TranslationService

    engine = types.SimpleNamespace(max_source_tokens=MAX_TOKENS,
                                   count_tokens=lambda s: len(_PIECE.findall(s)))
    model = types.SimpleNamespace(translator=engine, source="en", target="de")
    return TranslationService(None, _Batcher(), Settings()), model, TranslationOptions()


def _service_run(fmt: str) -> Callable[[object], tuple[dict[str, float], str]]:
    """One text through the service's own path (TranslationService._run): layout (masks,
    sentences, blocks of HTML), tags, assembly."""

    def run(text: object) -> tuple[dict[str, float], str]:
        service, model, options = _service()
        clock = _Clock()
        out, _ = clock("translate", asyncio.run,
                       service._run([text], fmt, model, options, 3600.0))
        return clock.phases, _digest(out[0].text)

    return run


# ---- inputs --------------------------------------------------------------------------------

def _zip(parts: dict[str, bytes | str], stored: tuple[str, ...] = ()) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in parts.items():
            entry = zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0))  # the same input each run
            entry.compress_type = zipfile.ZIP_STORED if name in stored else zipfile.ZIP_DEFLATED
            archive.writestr(entry, data)
    return out.getvalue()


def _unzip(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def _words(k: int) -> str:
    return f"Sentence {k} has a few words in it."


_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_RELS = "http://schemas.openxmlformats.org/package/2006/relationships"
_OFFICE_RELS = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"


@cache
def _docx_template() -> dict[str, bytes]:
    import docx

    out = io.BytesIO()
    docx.Document().save(out)
    return _unzip(out.getvalue())


def _docx(body: str, notes: dict[str, str] | None = None) -> bytes:
    """A .docx whose body is `body` (w:p and w:tbl elements); `notes`: "footnotes" or
    "comments" -> the part's XML inside its root."""
    parts = dict(_docx_template())
    parts["word/document.xml"] = (f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
                                  f'<w:document xmlns:w="{_W}" xmlns:r="{_OFFICE_RELS}">'
                                  f"<w:body>{body}</w:body></w:document>")
    for k, (name, xml) in enumerate((notes or {}).items()):
        parts[f"word/{name}.xml"] = (f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
                                     f'<w:{name} xmlns:w="{_W}">{xml}</w:{name}>')
        rels = parts["word/_rels/document.xml.rels"].decode()
        parts["word/_rels/document.xml.rels"] = rels.replace(
            "</Relationships>", f'<Relationship Id="rIdScaling{k}" Type="{_OFFICE_RELS}/'
            f'{name}" Target="{name}.xml"/></Relationships>')
        types_xml = parts["[Content_Types].xml"].decode()
        parts["[Content_Types].xml"] = types_xml.replace(
            "</Types>", f'<Override PartName="/word/{name}.xml" ContentType="application/'
            f'vnd.openxmlformats-officedocument.wordprocessingml.{name}+xml"/></Types>')
    return _zip(parts)


def _run(text: str, bold: bool = False, italic: bool = False) -> str:
    props = ("<w:b/>" if bold else "") + ("<w:i/>" if italic else "")
    rpr = f"<w:rPr>{props}</w:rPr>" if props else ""
    return f'<w:r>{rpr}<w:t xml:space="preserve">{text}</w:t></w:r>'


def docx_paragraphs(n: int) -> bytes:
    return _docx("".join(f"<w:p>{_run(f'Paragraph {k} has a ')}{_run('bold', bold=True)}"
                         f"{_run(' word. It goes on.')}</w:p>" for k in range(n)))


def docx_runs(n: int) -> bytes:
    """One paragraph of n runs, every second one bold."""
    return _docx("<w:p>" + "".join(_run(f"word{k % 10} ", bold=k % 2 == 1) for k in range(n))
                 + "</w:p>")


def docx_alike_runs(n: int) -> bytes:
    """One paragraph: a plain run longer than the rest, then n italic runs (alike: one group)."""
    return _docx("<w:p>" + _run("plain words " * (n // 5 + 1))
                 + "".join(_run("ab", italic=True) for _ in range(n)) + "</w:p>")


def docx_links(n: int) -> bytes:
    """One paragraph of n hyperlinks between plain runs."""
    return _docx("<w:p>" + "".join(
        f'{_run("see ")}<w:hyperlink r:id="rId{k}">{_run(f"link {k}")}</w:hyperlink>'
        f"{_run(' and ')}" for k in range(n)) + "</w:p>")


def docx_fields(n: int) -> bytes:
    """One paragraph of n page-number fields between words."""
    field = ('<w:r><w:fldChar w:fldCharType="begin"/></w:r><w:r><w:instrText> PAGE '
             '</w:instrText></w:r><w:r><w:fldChar w:fldCharType="separate"/></w:r>'
             '<w:r><w:t>7</w:t></w:r><w:r><w:fldChar w:fldCharType="end"/></w:r>')
    return _docx("<w:p>" + "".join(f"{_run(f'page {k} of ')}{field}" for k in range(n))
                 + "</w:p>")


def docx_table(n: int) -> bytes:
    """A table of n rows of ten cells."""
    cell = "<w:tc><w:p>{}</w:p></w:tc>"
    rows = "".join("<w:tr>" + "".join(cell.format(_run(f"Cell {r} {c} words.")) for c in
                                      range(10)) + "</w:tr>" for r in range(n))
    return _docx(f"<w:tbl>{rows}</w:tbl><w:p/>")


def docx_footnotes(n: int) -> bytes:
    body = "".join(f'<w:p>{_run(_words(k))}<w:r><w:footnoteReference w:id="{k + 1}"/></w:r>'
                   "</w:p>" for k in range(n))
    notes = "".join(f'<w:footnote w:id="{k + 1}"><w:p><w:r><w:footnoteRef/></w:r>'
                    f"{_run(' Note ' + str(k) + ' says a few words.')}</w:p></w:footnote>"
                    for k in range(n))
    return _docx(body, {"footnotes": notes})


def docx_comments(n: int) -> bytes:
    body = "".join(f'<w:p><w:commentRangeStart w:id="{k}"/>{_run(_words(k))}'
                   f'<w:commentRangeEnd w:id="{k}"/><w:r><w:commentReference w:id="{k}"/>'
                   "</w:r></w:p>" for k in range(n))
    notes = "".join(f'<w:comment w:id="{k}" w:author="A"><w:p><w:r><w:annotationRef/></w:r>'
                    f"{_run('Comment ' + str(k) + ' on it.')}</w:p></w:comment>"
                    for k in range(n))
    return _docx(body, {"comments": notes})


def docx_marks(n: int) -> bytes:
    """A paragraph that starts with n note marks (w:footnoteRef runs), then words."""
    return _docx("<w:p>" + "<w:r><w:footnoteRef/></w:r>" * n + _run("Words after them.")
                 + "</w:p>")


_A = "http://schemas.openxmlformats.org/drawingml/2006/main"
_P = "http://schemas.openxmlformats.org/presentationml/2006/main"


def _pptx(slides: list[str]) -> bytes:
    """A presentation of these slides (each its shapes' XML)."""
    rel = '<Relationship Id="{}" Type="{}/{}" Target="{}"/>'
    parts: dict[str, bytes | str] = {
        "[Content_Types].xml": '<Types xmlns="http://schemas.openxmlformats.org/package/2006/'
                               'content-types"/>',
        "_rels/.rels": f'<Relationships xmlns="{_RELS}">'
                       + rel.format("rId1", _OFFICE_RELS, "officeDocument",
                                    "ppt/presentation.xml") + "</Relationships>",
        "ppt/presentation.xml": f'<p:presentation xmlns:p="{_P}" xmlns:r="{_OFFICE_RELS}">'
                                "<p:sldIdLst>" + "".join(
                                    f'<p:sldId id="{256 + k}" r:id="rId{k + 1}"/>'
                                    for k in range(len(slides)))
                                + "</p:sldIdLst></p:presentation>",
        "ppt/_rels/presentation.xml.rels": f'<Relationships xmlns="{_RELS}">' + "".join(
            rel.format(f"rId{k + 1}", _OFFICE_RELS, "slide", f"slides/slide{k + 1}.xml")
            for k in range(len(slides))) + "</Relationships>",
    }
    for k, shapes in enumerate(slides):
        parts[f"ppt/slides/slide{k + 1}.xml"] = (
            f'<p:sld xmlns:a="{_A}" xmlns:p="{_P}"><p:cSld><p:spTree>{shapes}</p:spTree>'
            "</p:cSld></p:sld>")
    return _zip(parts)


def _shape(*paragraphs: str) -> str:
    return "<p:sp><p:txBody>" + "".join(f"<a:p>{p}</a:p>" for p in paragraphs) + \
        "</p:txBody></p:sp>"


def _arun(text: str, bold: bool = False) -> str:
    rpr = '<a:rPr b="1"/>' if bold else ""
    return f"<a:r>{rpr}<a:t>{text}</a:t></a:r>"


def pptx_slides(n: int) -> bytes:
    return _pptx([_shape(_arun(f"Slide {k} title"), _arun(_words(k)) + _arun(" bold", True))
                  for k in range(n)])


def pptx_shapes(n: int) -> bytes:
    return _pptx(["".join(_shape(_arun(_words(k)) + _arun(" bold", True)) for k in range(n))])


def pptx_runs(n: int) -> bytes:
    return _pptx([_shape("".join(_arun(f"word{k % 10} ", k % 2 == 1) for k in range(n)))])


def pptx_breaks(n: int) -> bytes:
    return _pptx([_shape("".join(_arun(f"line {k} of it") + "<a:br/>" for k in range(n)))])


_TEXT_NS = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"


@cache
def _odt_template() -> dict[str, bytes]:
    from odf.opendocument import OpenDocumentText

    out = io.BytesIO()
    OpenDocumentText().write(out)
    return _unzip(out.getvalue())


def _odt(body: str) -> bytes:
    parts = dict(_odt_template())
    parts["content.xml"] = (
        '<?xml version="1.0" encoding="UTF-8"?><office:document-content xmlns:office='
        f'"urn:oasis:names:tc:opendocument:xmlns:office:1.0" xmlns:text="{_TEXT_NS}" '
        'office:version="1.2"><office:body><office:text>'
        f"{body}</office:text></office:body></office:document-content>")
    return _zip({"mimetype": parts.pop("mimetype"), **parts}, stored=("mimetype",))


def odt_paragraphs(n: int) -> bytes:
    return _odt("".join(f'<text:p>Paragraph {k} has a <text:span text:style-name="B">bold'
                        "</text:span> word.</text:p>" for k in range(n)))


def odt_spans(n: int) -> bytes:
    return _odt("<text:p>" + "".join(f'<text:span text:style-name="B">word{k % 10}</text:span> '
                                     for k in range(n)) + "</text:p>")


def odt_nested_atoms(n: int) -> bytes:
    """n paragraphs, each with a span holding a space element (text:s), as LibreOffice writes
    two spaces."""
    return _odt("".join(f'<text:p>Paragraph {k} has <text:span text:style-name="B">two<text:s/>'
                        "spaces</text:span> in it.</text:p>" for k in range(n)))


def odt_depth(n: int) -> bytes:
    """One paragraph of spans nested n deep, each with a word."""
    return _odt("<text:p>" + "".join(f'<text:span text:style-name="S{k}">w{k % 10} '
                                     for k in range(n)) + "</text:span>" * n + "</text:p>")


def _epub(chapters: list[str], toc: int = 0) -> bytes:
    """A book of these chapters (each its body's XHTML), with a table of contents (NCX) of
    `toc` entries (one per chapter at least)."""
    toc = max(toc, len(chapters))
    items = "".join(f'<item id="c{k}" href="c{k}.xhtml" media-type="application/xhtml+xml"/>'
                    for k in range(len(chapters)))
    spine = "".join(f'<itemref idref="c{k}"/>' for k in range(len(chapters)))
    points = "".join(f'<navPoint id="n{k}" playOrder="{k + 1}"><navLabel><text>Chapter {k}'
                     f'</text></navLabel><content src="c{k % len(chapters)}.xhtml"/></navPoint>'
                     for k in range(toc))
    parts: dict[str, bytes | str] = {
        "mimetype": "application/epub+zip",
        "META-INF/container.xml": '<?xml version="1.0"?><container version="1.0" xmlns="urn:'
                                  'oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
                                  '<rootfile full-path="OEBPS/content.opf" media-type="application'
                                  '/oebps-package+xml"/></rootfiles></container>',
        "OEBPS/content.opf": '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" '
                             'version="2.0" unique-identifier="id"><metadata xmlns:dc="http://purl'
                             '.org/dc/elements/1.1/"><dc:title>A book of many words</dc:title>'
                             '<dc:language>en</dc:language></metadata><manifest><item id="ncx" '
                             'href="toc.ncx" media-type="application/x-dtbncx+xml"/>'
                             f'{items}</manifest><spine toc="ncx">{spine}</spine></package>',
        "OEBPS/toc.ncx": '<?xml version="1.0"?><ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" '
                         'version="2005-1"><docTitle><text>A book</text></docTitle><navMap>'
                         f"{points}</navMap></ncx>",
    }
    for k, body in enumerate(chapters):
        parts[f"OEBPS/c{k}.xhtml"] = ('<?xml version="1.0" encoding="UTF-8"?><html xmlns="http://'
                                      f'www.w3.org/1999/xhtml"><head><title>Chapter {k}</title>'
                                      f"</head><body>{body}</body></html>")
    return _zip(parts, stored=("mimetype",))


def _html_paragraph(k: int) -> str:
    return (f'<p>Paragraph {k} has a <b>bold</b> word and <a href="p{k}.html">a link</a>. '
            "It goes on.</p>\n")


def epub_chapters(n: int) -> bytes:
    return _epub(["".join(_html_paragraph(k) for k in range(5)) for _ in range(n)])


def epub_paragraphs(n: int) -> bytes:
    return _epub(["".join(_html_paragraph(k) for k in range(n))])


def epub_toc(n: int) -> bytes:
    return _epub([_html_paragraph(0)], toc=n)


def _html(body: str) -> bytes:
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>A page</title>'
            f"</head><body>\n{body}</body></html>\n").encode()


def html_paragraphs(n: int) -> bytes:
    return _html("".join(_html_paragraph(k) for k in range(n)))


def html_tags(n: int) -> bytes:
    """One paragraph of n inline elements, bold words and links in turn."""
    return _html("<p>" + "".join(f"<b>word{k % 10}</b> " if k % 2 else
                                 f'<a href="p{k}.html">link</a> ' for k in range(n)) + "</p>")


def html_breaks(n: int) -> bytes:
    """One paragraph of n lines, a sentence running on over each <br>."""
    return _html("<p>" + "".join(f"the line {k} of the poem goes<br>" for k in range(n))
                 + "on.</p>")


def html_breaks_code(n: int) -> bytes:
    """As html_breaks, the paragraph opening with inline code written with backticks."""
    return _html("<p>`make` " + "".join(f"the line {k} of the poem goes<br>" for k in range(n))
                 + "on.</p>")


def html_breaks_spans(n: int) -> bytes:
    """A paragraph opening with n URLs before its first word, then n short lines over <br>,
    each with an address in it (a head read whole at each break: join_breaks's bound)."""
    return _html("<p>" + " ".join(f"http://x{k}.org" for k in range(n)) + " word<br>"
                 + "".join(f"see www.e{k}.org and more<br>" for k in range(n)) + "on.</p>")


def html_depth(n: int) -> bytes:
    """Spans nested n deep, each with a word."""
    return _html("<p>" + "".join(f"<span>w{k % 10} " for k in range(n)) + "</span>" * n
                 + "</p>")


def html_table(n: int) -> bytes:
    rows = "".join("<tr>" + "".join(f"<td>Cell {r} {c} words.</td>" for c in range(10)) + "</tr>\n"
                   for r in range(n))
    return _html(f"<table>{rows}</table>")


def html_empty(n: int) -> bytes:
    """n elements without text, with no space between (a minified page, an inline drawing)."""
    return _html('<div class="icon"></div>' * n + "<p>Some words.</p>")


def html_attributes(n: int) -> bytes:
    return _html("<p>" + "".join(f'<img src="i{k}.png" alt="Picture {k} of a cat"> '
                                 for k in range(n)) + "words</p>")


def html_script(n: int) -> bytes:
    """A script of n lines, then a paragraph."""
    return _html("<script>\n" + "".join(f"var x{k} = {k};\n" for k in range(n))
                 + "</script><p>Some words.</p>")


def html_code(n: int) -> bytes:
    return _html("<p>" + "".join(f"Run <code>make {k}</code> now. " for k in range(n)) + "</p>")


def html_stray_tags(n: int) -> bytes:
    """One paragraph of n void tags not closed (<img>), then n end tags without a start."""
    return _html("<p>" + "".join(f'word <img src="{k}.png"> ' for k in range(n))
                 + "".join("word </b> " for _ in range(n)) + "end</p>")


def md_paragraphs(n: int) -> bytes:
    return "".join(f"Paragraph {k} has **bold** words and [a link](p{k}.md). It goes on.\n\n"
                   for k in range(n)).encode()


def md_items(n: int) -> bytes:
    return "".join(f"- Item {k} has *a few* words.\n" for k in range(n)).encode()


def md_depth(n: int) -> bytes:
    """A paragraph quoted n deep."""
    return ("> " * n + "Words quoted deep.\n" + "> " * n + "and more of them.\n").encode()


def md_rows(n: int) -> bytes:
    return ("| A | B | C | D | E |\n|---|---|---|---|---|\n" + "".join(
        f"| Cell {k} a | Cell {k} b | Cell {k} c | Cell {k} d | Cell {k} e |\n"
        for k in range(n))).encode()


def md_cells(n: int) -> bytes:
    """A table of three rows of n cells."""
    def row(k: int) -> str:
        return "|" + "|".join(f" Cell {k} {c} " for c in range(n)) + "|\n"

    return (row(0) + "|" + "---|" * n + "\n" + row(1) + row(2)).encode()


def md_separators(n: int) -> bytes:
    """A table whose every other line reads as a separator."""
    return ("| A | B |\n|---|---|\n" * n).encode()


def md_references(n: int) -> bytes:
    return ("".join(f"See [the page {k}] and [note {k}][] here.\n\n" for k in range(n))
            + "".join(f"[the page {k}]: p{k}.md\n[note {k}]: n{k}.md\n"
                      for k in range(n))).encode()


def md_links_and_emphasis(n: int) -> bytes:
    """One paragraph of n links and n bold words."""
    return ("".join(f"See [page {k}](p{k}.md) and **bold {k}** words. " for k in range(n))
            + "\n").encode()


def md_front_matter(n: int) -> bytes:
    keys = "".join(f"key_{k}: value {k}\n" for k in range(n))
    tags = "".join(f"  - tag {k}\n" for k in range(n))
    return (f"---\ntitle: A page of many keys\n{keys}tags:\n{tags}description: Its words.\n"
            "---\n\nSome words.\n").encode()


def md_footnotes(n: int) -> bytes:
    return ("".join(f"Words with a note[^{k}] in them.\n\n" for k in range(n))
            + "".join(f"[^{k}]: The note {k} says a few words.\n" for k in range(n))).encode()


def md_wrapped(n: int) -> bytes:
    """One paragraph of n lines, wrapped."""
    return "".join(f"the line {k} of a long paragraph wrapped at a width goes on\n"
                   for k in range(n)).encode()


def md_shortcodes(n: int) -> bytes:
    return ("".join(f'Words {{{{< ref "p{k}.md" >}}}} and {{{{ page.title }}}} here. '
                    for k in range(n)) + "\n").encode()


_PO_HEADER = ('msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n'
              '"Plural-Forms: nplurals=2; plural=(n != 1);\\n"\n\n')


def po_entries(n: int) -> bytes:
    return (_PO_HEADER + "".join(f'#: file.c:{k}\nmsgid "Entry {k} has %s words."\nmsgstr ""\n\n'
                                 for k in range(n))).encode()


def po_plurals(n: int) -> bytes:
    return (_PO_HEADER + "".join(f'msgid "One file {k}"\nmsgid_plural "%d files {k}"\n'
                                 'msgstr[0] ""\nmsgstr[1] ""\n\n' for k in range(n))).encode()


def po_lines(n: int) -> bytes:
    """One entry whose msgid is written over n lines."""
    return (_PO_HEADER + 'msgid ""\n' + "".join(f'"line {k} of the message. "\n'
                                                for k in range(n)) + 'msgstr ""\n').encode()


def _xliff(units: str, version: str = "1.2") -> bytes:
    if version == "2.0":
        return ('<?xml version="1.0"?><xliff version="2.0" xmlns="urn:oasis:names:tc:xliff:'
                'document:2.0" srcLang="en"><file id="f">' + units + "</file></xliff>").encode()
    return ('<?xml version="1.0"?><xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:'
            '1.2"><file source-language="en" datatype="plaintext" original="x"><body>'
            + units + "</body></file></xliff>").encode()


def xliff_units(n: int) -> bytes:
    return _xliff("".join(f'<trans-unit id="{k}"><source>{_words(k)} <g id="1">Bold</g> it.'
                          "</source></trans-unit>" for k in range(n)))


def xliff_units2(n: int) -> bytes:
    return _xliff("".join(f'<unit id="u{k}"><segment><source>{_words(k)} <pc id="1">Bold</pc>'
                          "</source></segment></unit>" for k in range(n)), "2.0")


def xliff_codes(n: int) -> bytes:
    """One unit of n inline elements: groups, placeholders and native code in turn."""
    codes = [lambda k: f'<g id="{k}">word</g> ', lambda k: f'<x id="{k}"/> ',
             lambda k: f'<ph id="{k}">&lt;br/&gt;</ph> ']
    return _xliff('<trans-unit id="1"><source>' + "".join(codes[k % 3](k) for k in range(n))
                  + "end</source></trans-unit>")


def xliff_same_codes(n: int) -> bytes:
    """One unit of n native-code placeholders without ids."""
    return _xliff('<trans-unit id="1"><source>' + "word <ph>&lt;br/&gt;</ph> " * n
                  + "end</source></trans-unit>")


def srt_cues(n: int) -> bytes:
    return "".join(f"{k + 1}\n00:{k // 3600 % 60:02d}:{k % 60:02d},000 --> "
                   f"00:{k // 3600 % 60:02d}:{k % 60:02d},500\n{_words(k)}\n- And a reply.\n\n"
                   for k in range(n)).encode()


def srt_lines(n: int) -> bytes:
    return ("1\n00:00:01,000 --> 00:00:02,000\n"
            + "".join(f"the line {k} of a cue\n" for k in range(n)) + "\n").encode()


def txt_paragraphs(n: int) -> bytes:
    return "".join(f"{_words(k)} It goes on.\n\n" for k in range(n)).encode()


def txt_wrapped(n: int) -> bytes:
    return md_wrapped(n)


def txt_numbers(n: int) -> bytes:
    """One paragraph of n lines without letters (a table of numbers)."""
    return b"Numbers:\n" + "".join(f"{k} {k * 7} {k % 13}\n" for k in range(n)).encode()


def txt_long_line(n: int) -> bytes:
    return " ".join(_words(k) for k in range(n)).encode()


def txt_long_word(n: int) -> bytes:
    return ("abcdefghij" * (n // 10 + 1))[:n].encode()


def txt_legacy(n: int) -> bytes:
    """A windows-1252 file (not UTF-8) of n lines, its code page guessed."""
    return "".join(f"Der Bär {k} läuft über die Straße.\n\n" for k in range(n)).encode("cp1252")


def text_urls(n: int) -> str:
    return " ".join(f"See https://example.org/p{k} and" for k in range(n))


def text_placeholders(n: int) -> str:
    return " ".join(f"File %s {{name}} number %{k % 9 + 1}" for k in range(n))


def text_emoji(n: int) -> str:
    return " ".join("Great 🎉 work 👍🏽" for _ in range(n))


def text_tags(n: int) -> str:
    return " ".join(f"the <b>word{k % 10}</b> here" for k in range(n))


def text_atoms(n: int) -> str:
    return " ".join(f'the word{k % 10}<x id="{k}"/> here' for k in range(n))


def text_sentences(n: int) -> str:
    return " ".join(_words(k) for k in range(n))


def text_no_end(n: int) -> str:
    return " ".join(f"word{k % 10}" for k in range(n))


def text_breaks(n: int) -> str:
    return "".join(f"the line {k} goes<br>" for k in range(n)) + "on."


def _document_case(fmt: str, name: str, n: int, build: Callable[[int], bytes]) -> Case:
    return Case(f"{fmt}: {name}", n, build, _document(fmt))


CASES = [
    _document_case("txt", "paragraphs", 8000, txt_paragraphs),
    _document_case("txt", "lines of a wrapped paragraph", 4000, txt_wrapped),
    _document_case("txt", "lines without letters", 8000, txt_numbers),
    _document_case("txt", "sentences in a line", 4000, txt_long_line),
    _document_case("txt", "letters in a word", 40000, txt_long_word),
    Case("txt: lines in windows-1252 (guessed)", 4000, txt_legacy,
         lambda data: _legacy(data)),
    _document_case("md", "paragraphs", 3000, md_paragraphs),
    _document_case("md", "list items", 4000, md_items),
    _document_case("md", "quotes nested", 2000, md_depth),
    _document_case("md", "table rows", 2000, md_rows),
    _document_case("md", "table cells in a row", 1000, md_cells),
    _document_case("md", "separator lines in a table", 2000, md_separators),
    _document_case("md", "link references", 2000, md_references),
    _document_case("md", "links and emphasis in a paragraph", 500, md_links_and_emphasis),
    _document_case("md", "front matter keys", 4000, md_front_matter),
    _document_case("md", "footnotes", 3000, md_footnotes),
    _document_case("md", "lines of a wrapped paragraph", 4000, md_wrapped),
    _document_case("md", "shortcodes in a paragraph", 1000, md_shortcodes),
    _document_case("html", "paragraphs", 3000, html_paragraphs),
    _document_case("html", "inline tags in a paragraph", 3000, html_tags),
    _document_case("html", "line breaks in a paragraph", 2000, html_breaks),
    _document_case("html", "line breaks after a backtick", 1000, html_breaks_code),
    _document_case("html", "line breaks after URLs", 1000, html_breaks_spans),
    _document_case("html", "nesting depth", 2000, html_depth),
    _document_case("html", "table rows", 500, html_table),
    _document_case("html", "elements without text", 20000, html_empty),
    _document_case("html", "attributes people read", 2000, html_attributes),
    _document_case("html", "script lines", 20000, html_script),
    _document_case("html", "inline code in a paragraph", 2000, html_code),
    _document_case("html", "stray end tags", 1000, html_stray_tags),
    _document_case("docx", "paragraphs", 2000, docx_paragraphs),
    _document_case("docx", "runs in a paragraph", 10000, docx_runs),
    _document_case("docx", "alike runs after a plain one", 10000, docx_alike_runs),
    _document_case("docx", "links in a paragraph", 2000, docx_links),
    _document_case("docx", "fields in a paragraph", 2000, docx_fields),
    _document_case("docx", "table rows (ten cells)", 200, docx_table),
    _document_case("docx", "footnotes", 1000, docx_footnotes),
    _document_case("docx", "comments", 1000, docx_comments),
    _document_case("docx", "note marks opening a paragraph", 20000, docx_marks),
    _document_case("pptx", "slides", 300, pptx_slides),
    _document_case("pptx", "shapes on a slide", 1000, pptx_shapes),
    _document_case("pptx", "runs in a paragraph", 10000, pptx_runs),
    _document_case("pptx", "line breaks in a paragraph", 3000, pptx_breaks),
    _document_case("odt", "paragraphs", 2000, odt_paragraphs),
    _document_case("odt", "spans in a paragraph", 5000, odt_spans),
    _document_case("odt", "spaces in spans", 2000, odt_nested_atoms),
    # (4N and the document's own levels stay under the depth the .odt reader refuses)
    _document_case("odt", "nesting depth", 40, odt_depth),
    _document_case("epub", "chapters", 200, epub_chapters),
    _document_case("epub", "paragraphs in a chapter", 2000, epub_paragraphs),
    _document_case("epub", "table of contents entries", 2000, epub_toc),
    _document_case("po", "entries", 4000, po_entries),
    _document_case("po", "plural entries", 3000, po_plurals),
    _document_case("po", "lines of an entry", 3000, po_lines),
    _document_case("xliff", "units", 3000, xliff_units),
    _document_case("xliff", "units (2.0)", 3000, xliff_units2),
    _document_case("xliff", "inline codes in a unit", 3000, xliff_codes),
    _document_case("xliff", "codes without ids", 5000, xliff_same_codes),
    _document_case("srt", "cues", 5000, srt_cues),
    _document_case("srt", "lines of a cue", 3000, srt_lines),
    Case("protect: URLs in a text", 3000, text_urls, _masks),
    Case("protect: placeholders in a text", 3000, text_placeholders, _masks),
    Case("protect: emoji in a text", 3000, text_emoji, _masks),
    Case("protect: masks the model dropped", 2000, text_urls, _dropped),
    Case("protect: tag pairs the model spaced", 1000, text_tags, _spaced),
    Case("segment: sentences in a text", 5000, text_sentences, _segments(False)),
    Case("segment: words without a sentence end", 20000, text_no_end, _segments(False)),
    Case("tags: pairs in a text", 3000, text_tags, _segments(True)),
    Case("tags: tags alone in a text", 3000, text_atoms, _segments(True)),
    Case("service: text with URLs", 2000, text_urls, _service_run("text")),
    Case("service: text with line breaks", 2000, text_breaks, _service_run("text")),
    Case("service: html with inline tags", 2000, lambda n: text_tags(n), _service_run("html")),
]


def _legacy(data: object) -> tuple[dict[str, float], str]:
    """A .txt file read with the source "auto": its code page guessed from its bytes."""
    clock = _Clock()
    doc = clock("read", documents.extract, data, "txt", documents.Limits(), "auto")
    written = clock("write", documents.rebuild, doc, doc.segments)
    return clock.phases, _digest(written)


# ---- measuring -----------------------------------------------------------------------------

def measure(case: Case, scale: float, repeat: int) -> dict:
    """The case at N and 4N: each phase's fastest CPU seconds, the ratio, the output digests."""
    n = max(1, round(case.n * scale))
    sizes, seconds, digests = (n, 4 * n), [], []
    for size in sizes:
        data = case.build(size)
        best: dict[str, float] = {}
        for _ in range(repeat):
            gc.collect()
            phases, digest = case.run(data)
            best = {k: min(v, best.get(k, v)) for k, v in phases.items()}
        seconds.append(best)
        digests.append(digest)
    return _row(n, {p: [seconds[0][p], seconds[1][p]] for p in seconds[0]}, digests)


def _row(n: int, seconds: dict[str, list[float]], digests: list[str]) -> dict:
    ratios = {phase: large / small if small > 0 else float("inf")
              for phase, (small, large) in seconds.items()}
    return {"n": n, "seconds": seconds, "ratio": ratios, "digests": digests}


def _faster(row: dict, again: dict) -> dict:
    """Two measurements of a case, each phase's faster time at each size kept."""
    seconds = {p: [min(a, b) for a, b in zip(row["seconds"][p], again["seconds"][p],
                                               strict=True)] for p in row["seconds"]}
    return _row(row["n"], seconds, row["digests"])


def flagged(row: dict, phase: str) -> bool:
    return row["ratio"][phase] > FLAGGED and row["seconds"][phase][1] >= NOTICED


def run_cases(names: list[str], scale: float, repeat: int, out=None) -> dict[str, dict]:
    report = {}
    for case in CASES:
        if case.name not in names:
            continue
        row = measure(case, scale, repeat)
        if any(flagged(row, phase) for phase in row["ratio"]):  # once more: a busy moment
            row = _faster(row, measure(case, scale, repeat))  # under one run is no trend
        report[case.name] = row
        for phase, (small, large) in row["seconds"].items():
            mark = "!!" if flagged(row, phase) else ""
            print(f"{case.name:45} {row['n']:>7} {phase:9} {small:8.3f} {large:8.3f} "
                  f"{row['ratio'][phase]:6.1f} {mark}", file=out, flush=True)
    return report


def against(rev: str, args: list[str]) -> dict[str, dict]:
    """The cases run on app/ as it is at git revision `rev`, with this checkout's bench/, in a
    process of their own."""
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(root), "archive", rev, "app"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        for lib in (root / "app").rglob("*.so*"):  # native libraries, not in git
            target = Path(tmp) / lib.relative_to(root)
            if target.parent.is_dir() and not target.exists():
                shutil.copy2(lib, target)
        shutil.copytree(root / "bench", Path(tmp) / "bench",
                        ignore=shutil.ignore_patterns("__pycache__"))
        report = Path(tmp) / "report.json"
        env = {**os.environ, "PYTHONPATH": tmp}
        subprocess.run([sys.executable, "-m", "bench.scaling", *args, "--json", str(report)],
                       cwd=tmp, env=env, check=True, stdout=subprocess.DEVNULL)
        return json.loads(report.read_text())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies every case's N")
    ap.add_argument("--only", default="", help="the cases whose name holds this text")
    ap.add_argument("--repeat", type=int, default=1, help="the fastest of this many runs")
    ap.add_argument("--against", metavar="REV", help="also run app/ as it is at this revision")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    names = [c.name for c in CASES if args.only in c.name]
    print(f"{'case':45} {'N':>7} {'phase':9} {'T(N) s':>8} {'T(4N) s':>8} {'ratio':>6}",
          flush=True)
    report = run_cases(names, args.scale, args.repeat)
    result: dict = {"cases": report}
    if args.against:
        old = against(args.against, ["--scale", str(args.scale), "--only", args.only,
                                     "--repeat", str(args.repeat)])["cases"]
        print(f"\nagainst {args.against} (ratios, and T(4N) in seconds):\n{'case':45} "
              f"{'phase':9} {'old':>6} {'new':>6} {'old s':>8} {'new s':>8} same")
        for name, row in report.items():
            same = row["digests"] == old[name]["digests"]
            for phase in row["ratio"]:
                print(f"{name:45} {phase:9} {old[name]['ratio'][phase]:6.1f} "
                      f"{row['ratio'][phase]:6.1f} {old[name]['seconds'][phase][1]:8.3f} "
                      f"{row['seconds'][phase][1]:8.3f} {'yes' if same else 'NO'}")
        result["against"] = {"revision": args.against, "cases": old}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
