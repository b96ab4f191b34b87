"""Documents from elsewhere: every file of a folder through the document path, checked.

For each file with an extension app.documents reads (searched recursively, sorted), prints
its format, segments, seconds and whether it came through whole: no crash (a file that cannot be
read must be refused with an error that says why: `refused`), the output opens again with the
format's library, its structure (paragraphs, tables, runs' formats, tags, entries, timings,
code; an EPUB's entries in order with mimetype first and stored, its pages' markup and whether
they are well-formed; a PDF's pages, images and links) is the input's, and each segment's
protected spans (placeholders, tags, code, URLs) are in its translation as often as in its
source. A PDF's text is checked page by page (read back, a page is in the reading order of the
translation's layout: its words, whatever their order). The files come from the caller; nothing
is downloaded.

The translator: `--fake` (default) reverses every run of two or more letters (each place
keeping its case), fast, and since it is its own inverse the output's segments, reversed again,
must be the input's (the text check); `--bundle DIR` translates with the model (the path of
`nmt translate-file`); `--server` starts `python -m app.server` on loopback with --models-dir
and sends each file to /translate_file.

    python -m bench.documents_wild /tmp/wild/files
    python -m bench.documents_wild /tmp/wild/files --bundle bundles/en-de --max-segments 300
    python -m bench.documents_wild /tmp/wild/sample --server --models-dir bundles
"""

from __future__ import annotations

import argparse
import html
import io
import json
import re
import shutil
import subprocess
import tempfile
import time
import traceback
import zipfile
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from html.parser import HTMLParser
from pathlib import Path

from app import documents
from app.config import Settings
from app.documents import _characters, charset, po_file
from app.text.protect import find_spans

_LETTERS = re.compile(r"[^\W\d_]{2,}")


def reverse(texts: list[str]) -> list[str]:
    """The fake translator: every run of two or more letters reversed, but not inside what
    the model is given to copy (placeholders like `%(name)s`)."""
    return [_reversed(t) for t in texts]


def _reversed(text: str) -> str:
    out, pos = [], 0
    for s in find_spans(text):
        out += [_LETTERS.sub(_backwards, text[pos : s.start]), text[s.start : s.end]]
        pos = s.end
    return "".join([*out, _LETTERS.sub(_backwards, text[pos:])])


def _backwards(m: re.Match) -> str:
    """A word's letters reversed, each place keeping its case ("Wege" -> "Egew"): where a
    sentence runs on over a line break is read from the case of the word after it, and the
    translation read back must be cut where the source was. (A word with a letter whose case
    does not swap back and forth, 'ß', 'ς', 'ǅ', is only reversed: the fake stays its own
    inverse.)"""
    word = m.group()
    if not all(_swaps(c) for c in word):
        return word[::-1]
    return "".join(c.swapcase() if c != c.swapcase() and k != k.swapcase()
                   and c.isupper() != k.isupper() else c
                   for c, k in zip(word[::-1], word, strict=True))


def _swaps(c: str) -> bool:
    other = c.swapcase()
    return c == other or (len(other) == 1 and other.swapcase() == c
                          and c.isupper() != other.isupper())


@dataclass
class Row:
    file: str
    format: str
    bytes: int
    segments: int | None = None
    seconds: float | None = None
    status: str = "ok"  # ok, refused (a clear error), skipped, problem
    detail: str = ""


# ---- each format's shape: what translation must not change --------------------------------

_NS_DECL = re.compile(r'\s+xmlns(?::\w+)?="[^"]*"')
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_DOCX_KEPT = ["p", "tbl", "tr", "tc", "sectPr", "drawing", "pict", "object", "fldChar",
              "instrText", "fldSimple", "hyperlink", "footnoteReference", "endnoteReference",
              "commentReference", "bookmarkStart", "bookmarkEnd", "br", "cr", "tab", "sym",
              "footnote", "endnote", "comment", "sdt", "ins", "del", "txbxContent"]


def docx_shape(data: bytes) -> dict:
    """Per XML part of word/: the count of each structural element, and per paragraph the
    formats (run properties) of its runs with text."""
    import docx
    from lxml import etree

    docx.Document(io.BytesIO(data))  # opens with python-docx
    shape = {}
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        for name in sorted(z.namelist()):
            if not re.fullmatch(r"word/(document|header\d*|footer\d*|footnotes|endnotes|"
                                r"comments)\.xml", name):
                continue
            root = etree.fromstring(z.read(name))
            counts = Counter(etree.QName(el).localname for el in root.iter(
                *[_W + t for t in _DOCX_KEPT]))
            formats = []
            for p in root.iter(_W + "p"):
                keys = set()
                for r in p.iter(_W + "r"):
                    if "".join(t.text or "" for t in r.iter(_W + "t")).strip():
                        rpr = r.find(_W + "rPr")
                        keys.add("" if rpr is None else re.sub(r">\s+<", "><", _NS_DECL.sub(
                            "", etree.tostring(rpr, encoding="unicode", with_tail=False))))
                formats.append(sorted(keys))
            shape[name] = {"elements": dict(counts), "run formats": formats}
    return shape


_A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"


def pptx_shape(data: bytes) -> dict:
    """The parts in order with their compression; per slide and notes part the count of each
    element outside runs (runs that look alike are written back as one), and per paragraph
    the formats of its runs with text; every other part's bytes."""
    from lxml import etree

    from app.documents.pptx_file import _run_key

    def count(el, counts: Counter) -> Counter:
        for c in el:
            if isinstance(c.tag, str) and c.tag != _A + "r":
                counts[etree.QName(c).localname] += 1
                count(c, counts)
        return counts

    shape: dict = {}
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        shape["parts"] = _entries(z)
        for name in z.namelist():
            if not re.fullmatch(r"ppt/(slides|notesSlides)/[^/]+\.xml", name):
                shape[name] = z.read(name)
                continue
            root = etree.fromstring(z.read(name))
            shape[name] = {"elements": dict(count(root, Counter())), "run formats": [
                sorted({_run_key(r) for r in p.iter(_A + "r") if (r.findtext(_A + "t") or "")
                        .strip()}) for p in root.iter(_A + "p")]}
    return shape


def _entries(z: zipfile.ZipFile) -> list[tuple[str, int]]:
    """A zip's entries in order, each with its compression."""
    return [(i.filename, i.compress_type) for i in z.infolist()]


def epub_shape(data: bytes) -> dict:
    """The entries in order with their compression (mimetype first and stored, where readers
    look for it: `epub_container_problems`); per page the tags and code (as an HTML page's)
    and whether it is well-formed XML; the package document's and the NCX's elements; every
    other entry's bytes."""
    from lxml import etree

    from app.documents import epub_file

    doc = documents.extract(data, "epub")
    pages = {p.name for p in doc.state[1] if isinstance(p, epub_file._Page)}
    texts = {p.name for p in doc.state[1] if not isinstance(p, epub_file._Page)}
    shape: dict = {}
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        shape["entries"] = sorted(
            ((n, zipfile.ZIP_STORED if n == "mimetype" else c) for n, c in _entries(z)),
            key=lambda e: e[0] != "mimetype")
        for name in z.namelist():
            blob = z.read(name)
            if name == "mimetype":  # epub_container_problems
                continue
            if name in pages:
                shape[name] = {**html_shape(blob),
                               "well-formed": epub_file._well_formed(blob, name)}
            elif name in texts:
                root = etree.fromstring(blob, epub_file._parser())
                shape[name] = [etree.QName(el).localname for el in root.iter()
                               if isinstance(el.tag, str)]
            else:
                shape[name] = blob
    return shape


def epub_container_problems(out: bytes) -> list[str]:
    """What a reader that finds a book by its first bytes would refuse: the first entry must be
    mimetype, stored, without extra fields, saying application/epub+zip."""
    with zipfile.ZipFile(io.BytesIO(out)) as z:
        first = z.infolist()[0]
        if (first.filename, first.compress_type, first.extra, z.read(first)) != (
                "mimetype", zipfile.ZIP_STORED, b"", b"application/epub+zip"):
            return [f"the first entry is {first.filename} (compression {first.compress_type}, "
                    f"extra {first.extra!r}), not mimetype stored"]
    return []


def pdf_shape(data: bytes) -> dict:
    """The page count; per page its size, its images (their size and data) and its links
    (where they point)."""
    from pypdf import PdfReader

    pages = []
    for page in PdfReader(io.BytesIO(data)).pages:
        links = []
        for annot in page.get("/Annots") or []:
            annot = annot.get_object()
            if annot.get("/Subtype") == "/Link":
                action = annot.get("/A")
                target = action.get_object().get("/URI") if action is not None else None
                links.append((str(target or annot.get("/Dest")),
                              [round(float(v)) for v in annot.get("/Rect", [])]))
        pages.append({"size": [round(float(v)) for v in page.mediabox],
                      "images": sorted(_images(page.get("/Resources"))), "links": links})
    return {"pages": len(pages), **{f"page {k + 1}": p for k, p in enumerate(pages)}}


def _images(resources, seen: set | None = None) -> list[tuple]:
    """The image XObjects a page's resources hold, in its form XObjects too: their size and
    the hash of their (still encoded) data."""
    import hashlib

    seen = set() if seen is None else seen
    found = []
    xobjects = resources.get_object().get("/XObject") if resources is not None else None
    for ref in xobjects.get_object().values() if xobjects is not None else []:
        key = getattr(ref, "idnum", id(ref))
        if key in seen:
            continue
        seen.add(key)
        x = ref.get_object()
        if x.get("/Subtype") == "/Image":
            found.append((int(x.get("/Width", 0)), int(x.get("/Height", 0)),
                          hashlib.sha256(x._data).hexdigest()[:12]))
        elif x.get("/Subtype") == "/Form":
            found += _images(x.get("/Resources"), seen)
    return found


def odt_shape(data: bytes) -> dict:
    from odf import opendocument
    from odf.element import Node

    document = opendocument.load(io.BytesIO(data))  # opens with odfpy
    counts: Counter = Counter()
    spans: list[list[str]] = []

    def walk(node, in_p: list[str] | None) -> None:
        for child in node.childNodes:
            if child.nodeType != Node.ELEMENT_NODE:
                continue
            name = child.qname[1]
            if name not in ("span", "a"):
                counts[name] += 1
            if name in ("p", "h"):
                spans.append([])
                walk(child, spans[-1])
            else:
                if in_p is not None and name in ("span", "a"):
                    style = child.attributes.get(
                        ("urn:oasis:names:tc:opendocument:xmlns:text:1.0", "style-name"))
                    if style not in in_p and "".join(_texts(child)).strip():
                        in_p.append(style)
                walk(child, in_p)

    walk(document.body, None)
    return {"elements": dict(counts), "span styles": [sorted(map(str, s)) for s in spans]}


def _texts(node) -> list[str]:
    from odf.element import Node

    if node.nodeType == Node.TEXT_NODE:
        return [node.data]
    return [t for c in node.childNodes for t in _texts(c)]


_READ = {"alt", "title", "placeholder", "aria-label", "lang", "xml:lang"}
_VERBATIM = {"script", "style", "pre", "code"}


class _Tags(HTMLParser):
    """The tags of an HTML file in order (attributes people read left out: they are
    translated), and the text inside script, style, pre and code."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.verbatim: list[str] = []
        self.depth = 0

    def handle_starttag(self, tag, attrs) -> None:
        kept = sorted((k, v) for k, v in attrs if k not in _READ)
        self.tags.append(f"<{tag} {kept}>")
        if tag in _VERBATIM:
            self.depth += 1
            self.verbatim.append("")

    def handle_endtag(self, tag) -> None:
        self.tags.append(f"</{tag}>")
        if tag in _VERBATIM and self.depth:
            self.depth -= 1

    def handle_data(self, data) -> None:
        if self.depth:
            self.verbatim[-1] += data


def _decoded(data: bytes) -> str:
    """A text file's text, as app.documents reads it (an HTML page in the charset it declares)."""
    return charset.decode(data, declared=charset.declared_in_html(data))[0]


def html_shape(data: bytes) -> dict:
    parser = _Tags()
    parser.feed(_decoded(data))
    parser.close()
    return {"tags": parser.tags, "code": parser.verbatim}


_FENCE = re.compile(r"^[\s>]*(`{3,}|~{3,})")


def md_shape(data: bytes) -> dict:
    lines = _decoded(data).splitlines()
    code, fence, prose = [], "", []
    for line in lines:
        opened = _FENCE.match(line)
        if fence or opened:
            code.append(line)
            # a fence closes at a run of its character at least as long, alone on its line
            if not fence:
                fence = opened.group(1)
            elif opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(
                    fence) and not line[opened.end() :].strip():
                fence = ""
        else:
            prose.append(line)
    text = "\n".join(prose)
    code_spans = [text[s.start : s.end] for s in find_spans(text) if s.kind == "code"]
    return {"lines": len(lines), "fenced code": code,
            "markers": [m.group() for line in prose
                        if (m := re.match(r"\s*(#{1,6}\s|>\s?|[-*+]\s|\d+[.)]\s|\|)", line))],
            "inline code": sorted(c for c in code_spans if c.startswith("`")),
            "link targets": sorted(c for c in code_spans if c.startswith("("))}


def srt_shape(data: bytes) -> dict:
    import srt

    subs = list(srt.parse(_decoded(data)))
    # (cues without a number get their place)
    return {"cues": [(s.index or k, str(s.start), str(s.end), s.content.count("\n"))
                     for k, s in enumerate(subs, 1)]}


def po_shape(data: bytes) -> dict:
    import polib

    catalog = polib.pofile(po_file._decoded(data))
    # (the charset and plural forms may be declared anew: app.documents.po_file)
    meta = {k: v for k, v in catalog.metadata.items() if k not in ("Content-Type", "Plural-Forms")}
    return {"metadata": meta, "entries": [
        (e.msgctxt, e.msgid, e.msgid_plural, sorted(e.flags), e.occurrences, e.obsolete)
        for e in catalog]}


def xliff_shape(data: bytes) -> dict:
    from lxml import etree

    root = etree.fromstring(data, etree.XMLParser(resolve_entities=False, no_network=True))
    kept = [etree.QName(el).localname for el in root.iter()
            if not any(etree.QName(a).localname == "target"
                       for a in [el, *el.iterancestors()] if isinstance(a.tag, str))
            and isinstance(el.tag, str)]
    return {"elements": dict(Counter(kept))}


def txt_shape(data: bytes) -> dict:
    lines = _decoded(data).splitlines()
    return {"lines": [(len(x) - len(x.lstrip()), not x.strip()) for x in lines]}


SHAPES: dict[str, Callable[[bytes], dict]] = {
    "docx": docx_shape, "odt": odt_shape, "odp": odt_shape, "pptx": pptx_shape,
    "epub": epub_shape, "pdf": pdf_shape,
    "html": html_shape, "htm": html_shape, "md": md_shape, "srt": srt_shape, "po": po_shape,
    "pot": po_shape, "xliff": xliff_shape, "xlf": xliff_shape, "txt": txt_shape}


def differences(before: dict, after: dict) -> list[str]:
    out = []
    for key in before:
        if before[key] != after.get(key):
            out.append(f"{key} differ{_first_difference(before[key], after.get(key))}")
    return out


def _first_difference(a, b) -> str:
    found = _where_differ(a, b)
    return f" ({found})" if found else ""


def _where_differ(a, b) -> str:
    """Where two shapes first differ: the keys down through the dicts (a page's tags), then
    the first item that differs."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if a.get(k) != b.get(k):
                inner = _where_differ(a.get(k), b.get(k))
                return f"{k}: {inner or f'{_short(a.get(k))} -> {_short(b.get(k))}'}"
    if isinstance(a, list) and isinstance(b, list):
        counts = f"{len(a)} -> {len(b)}, " if len(a) != len(b) else ""
        k = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                 min(len(a), len(b)))
        x, y = (_short(v[k]) if k < len(v) else "nothing" for v in (a, b))
        return f"{counts}#{k}: {x} -> {y}"
    return ""


def _short(value) -> str:
    text = repr(value)
    return text if len(text) < 160 else text[:157] + "..."


# ---- what each segment's translation must keep --------------------------------------------

def translated_pairs(fmt: str, data: bytes, out: bytes) -> list[tuple[str, str]]:
    """(source segment, its translation as the output file has it), for the text checks."""
    if fmt in ("po", "pot"):
        import polib

        before, after = polib.pofile(po_file._decoded(data)), polib.pofile(po_file._decoded(out))
        pairs = []
        for old, new in zip(before, after, strict=True):
            if old.msgid and not old.obsolete and not old.translated():
                if old.msgid_plural:
                    forms = new.msgstr_plural
                    pairs += [(old.msgid, forms.get(0, "")), (old.msgid_plural, forms.get(1, ""))]
                else:
                    pairs.append((old.msgid, new.msgstr))
        return pairs
    if fmt in ("xliff", "xlf"):
        from app.documents import xliff_file

        doc = documents.extract(data, fmt)
        parsed = xliff_file.etree.fromstring(out, xliff_file._PARSER)
        targets = []
        for src in parsed.iter("{*}source"):
            nxt = src.getnext()
            if xliff_file._local(src.getparent()) in ("trans-unit", "segment"):
                targets.append((xliff_file._inner(src),
                                xliff_file._inner(nxt) if nxt is not None
                                and xliff_file._local(nxt) == "target" else ""))
        by_source = dict(targets)
        return [(s, by_source.get(s, "")) for s in doc.segments]
    if fmt == "pdf":
        before, after = _pdf_pages(data), _pdf_pages(out)
        return [(before.get(k, ""), after.get(k, "")) for k in sorted(set(before) | set(after))]
    before, after = documents.extract(data, fmt), documents.extract(out, fmt)
    if len(before.segments) != len(after.segments):
        raise AssertionError(f"{len(before.segments)} segments read, {len(after.segments)} "
                             "read back")
    return list(zip(before.segments, after.segments, strict=True))


def _pdf_pages(data: bytes) -> dict[int, str]:
    """A PDF's text page by page: the segments read from each, joined (a block's translation
    is drawn in the block's place, so a page's text read back is its translation)."""
    doc = documents.extract(data, "pdf")
    pages: dict[int, list[str]] = {}
    for segment, block in zip(doc.segments, doc.state[1], strict=False):
        pages.setdefault(block.page, []).append(segment)
    return {k: " ".join(texts) for k, texts in pages.items()}


_INLINE_ID = re.compile(r'(<(?:g|x) id=")\d+')
_GROUP_TAG = re.compile(r'<g id="\d+">|</g>')
# the values of the attributes people read, translated in an HTML tag
_READ_VALUE = re.compile(r"""(\s(?:alt|title|placeholder|aria-label)\s*=\s*)(?:"[^"]*"|'[^']*')""",
                         re.IGNORECASE)


def spans(text: str, renumbered: bool = False, markup: bool = False) -> Counter:
    """The protected spans of a text; renumbered: app.documents.inline's groups and the ids of
    its atoms left out (a .docx, .odt or .pptx read back numbers its runs anew); markup: character
    references read as characters (the translation writes them so)."""
    text = _characters(text) if markup else text
    found = (_READ_VALUE.sub(r"\1", text[s.start : s.end]) for s in find_spans(text))
    # (read back, a paragraph's runs are grouped anew: the format that covers most characters
    # may be another; the run formats are compared by the shape)
    return Counter(_INLINE_ID.sub(r"\1", f) for f in found if not (
        renumbered and _GROUP_TAG.fullmatch(f)))


def words(text: str, markup: bool, undo: bool) -> str:
    """The text without its protected spans, unescaped, whitespace collapsed; with undo, the
    fake's reversal undone."""
    text = _characters(text) if markup else text
    pieces, pos = [], 0
    for s in find_spans(text):
        pieces += [text[pos : s.start], " "]
        pos = s.end
    plain = "".join([*pieces, text[pos:]])
    plain = html.unescape(plain) if markup else plain
    plain = _LETTERS.sub(_backwards, plain) if undo else plain
    return " ".join(plain.split())


def text_problems(fmt: str, data: bytes, out: bytes, fake: bool) -> list[str]:
    markup = fmt in ("html", "htm", "docx", "odt", "odp", "pptx", "xliff", "xlf", "epub")
    problems = []
    renumbered = fmt in ("docx", "odt", "odp", "pptx")
    # a PDF's page read back is in the reading order of the translation's layout
    compare = _lost_words if fmt == "pdf" else _word_difference
    for k, (source, target) in enumerate(translated_pairs(fmt, data, out)):
        before = spans(source, renumbered, markup)
        after = spans(target, renumbered, markup)
        if before != after:
            lost, added = before - after, after - before
            problems.append(f"segment {k}: protected spans changed (lost {dict(lost)}, "
                            f"added {dict(added)}): {_short(source)} -> {_short(target)}")
        elif fake and (diff := compare(words(source, markup, False),
                                       words(target, markup, True))):
            problems.append(f"segment {k}: text not translated back ({diff}): "
                            f"{_short(source)} -> {_short(target)}")
        elif source.strip() and not target.strip():
            problems.append(f"segment {k}: no translation: {_short(source)}")
    return problems


def _word_difference(a: str, b: str) -> str:
    """Where two texts' words first differ, with a few words of each from there; "" if equal."""
    x, y = a.split(), b.split()
    k = next((k for k, (p, q) in enumerate(zip(x, y, strict=False)) if p != q), min(len(x), len(y)))
    if x == y:
        return ""
    return f"word {k}: {' '.join(x[k : k + 4])!r} -> {' '.join(y[k : k + 4])!r}"


_TOKEN = re.compile(r"\w+|[^\w\s]")


def _lost_words(a: str, b: str) -> str:
    """The words and marks one text has that the other lacks, whatever their order and
    spacing (pdfminer guesses spaces from the gaps between characters: the dot leaders
    ". . . ." of a drawn translation read back as ".. .."); "" if none."""
    x, y = Counter(_TOKEN.findall(a)), Counter(_TOKEN.findall(b))
    if x == y:
        return ""
    lost, added = " ".join((x - y).elements()), " ".join((y - x).elements())
    return f"lost {_short(lost)}, added {_short(added)}"


def msgfmt_problems(data: bytes, out: bytes) -> list[str]:
    """What gettext's own checker says of the output and not of the input (when it is here)."""
    if shutil.which("msgfmt") is None:
        return []

    def errors(blob: bytes) -> set[str]:
        with tempfile.NamedTemporaryFile(suffix=".po") as f:
            f.write(blob)
            f.flush()
            run = subprocess.run(["msgfmt", "-c", "-o", "/dev/null", f.name],
                                 capture_output=True, text=True)
        return {re.sub(r"^[^:]*:\d+: ", "", line) for line in run.stderr.splitlines()
                if "fatal error" not in line and "msgfmt:" not in line}

    return [f"msgfmt: {e}" for e in sorted(errors(out) - errors(data))][:5]


# ---- the translators ------------------------------------------------------------------------

def through_library(data: bytes, fmt: str, translate, fits, limits, row: Row) -> bytes:
    doc = documents.extract(data, fmt, limits)
    row.segments = len(doc.segments)
    translations = documents.translate_segments(doc.segments, translate, doc.markup, fits=fits,
                                                wraps=doc.wraps)
    return documents.rebuild(doc, translations, "de")


def through_server(url: str, name: str, data: bytes, row: Row) -> bytes:
    import httpx

    r = httpx.post(f"{url}/translate_file", data={"source": "en", "target": "de"},
                   files={"file": (name, data)}, timeout=600)
    if r.status_code >= 500:
        raise RuntimeError(f"{r.status_code} {r.text[:300]}")
    if r.status_code >= 400:
        raise documents.DocumentError(f"{r.status_code} {r.json().get('error')}")
    return httpx.get(r.json()["translatedFileUrl"], timeout=60).content


def audit(path: Path, root: Path, send: Callable[[bytes, str, Row], bytes], fake: bool,
          max_segments: int | None, limits: documents.Limits) -> Row:
    data = path.read_bytes()
    row = Row(str(path.relative_to(root)), path.suffix.lower().lstrip("."), len(data))
    fmt = row.format
    if max_segments is not None:
        row.segments = _segments(data, fmt, limits)
        if row.segments is not None and row.segments > max_segments:
            row.status, row.detail = "skipped", f"over {max_segments} segments"
            return row
    started = time.perf_counter()
    try:
        out = send(data, fmt, row)
    except documents.DocumentError as exc:
        row.status, row.detail = "refused", str(exc)
        return row
    except Exception as exc:
        row.status = "problem"
        row.detail = f"crash: {type(exc).__name__}: {exc} | {_where(exc)}"
        return row
    finally:
        row.seconds = round(time.perf_counter() - started, 2)
    problems = []
    try:
        problems += differences(SHAPES[fmt](data), SHAPES[fmt](out))
        problems += text_problems(fmt, data, out, fake)
        if fmt in ("po", "pot"):
            problems += msgfmt_problems(data, out)
        if fmt == "epub":
            problems += epub_container_problems(out)
    except Exception as exc:
        problems.append(f"output does not read back: {type(exc).__name__}: {exc} | "
                        f"{_where(exc)}")
    if problems:
        row.status = "problem"
        row.detail = f"{len(problems)}: " + " || ".join(problems[:3])
    return row


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "/app/" in f.filename] or frames
    return f"{Path(ours[-1].filename).name}:{ours[-1].lineno}" if ours else ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.documents_wild",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path)
    p.add_argument("--bundle", type=Path, help="translate with this bundle (default: --fake)")
    p.add_argument("--server", action="store_true",
                   help="through python -m app.server's /translate_file (with --models-dir)")
    p.add_argument("--models-dir", default="bundles")
    p.add_argument("--variant", default="int8")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-segments", type=int, help="skip files with more segments")
    p.add_argument("--json", type=Path, help="also write the rows here")
    args = p.parse_args(argv)
    settings = Settings()
    limits = documents.Limits(max_bytes=settings.max_file_bytes,
                              max_segments=settings.max_file_segments,
                              max_chars=settings.max_file_chars)
    files = sorted(f for f in args.folder.rglob("*") if f.is_file()
                   and f.suffix.lower().lstrip(".") in documents.FORMATS)
    fake = not (args.bundle or args.server)
    proc = None
    if args.server:
        from bench.service import start_server, stop_server

        proc, url = start_server(args.models_dir, ["--variant", args.variant], args.threads)

        def send(data: bytes, fmt: str, row: Row) -> bytes:
            row.segments = row.segments or _segments(data, fmt, limits)
            return through_server(url, Path(row.file).name, data, row)
    else:
        translate, fits = reverse, None
        if args.bundle:
            from app.engine import Translator
            from app.text.segment import fits_engine

            translator = Translator.from_dir(args.bundle, variant=args.variant,
                                             intra_threads=args.threads, max_batch_size=32)
            fits = fits_engine(translator)

            def translate(texts: list[str]) -> list[str]:
                return [r.text for r in translator.translate_batch(texts)]

        def send(data: bytes, fmt: str, row: Row) -> bytes:
            return through_library(data, fmt, translate, fits, limits, row)

    rows = []
    try:
        print(f"{'file':<60} {'format':<6} {'bytes':>9} {'segments':>8} {'seconds':>8}  status")
        for path in files:
            row = audit(path, args.folder, send, fake, args.max_segments, limits)
            rows.append(row)
            print(f"{row.file[-60:]:<60} {row.format:<6} {row.bytes:>9} "
                  f"{row.segments if row.segments is not None else '-':>8} "
                  f"{row.seconds if row.seconds is not None else '-':>8}  {row.status}"
                  f"{': ' + row.detail if row.detail else ''}", flush=True)
    finally:
        if proc is not None:
            stop_server(proc)
    counts = Counter(r.status for r in rows)
    print(f"{len(rows)} files: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 1 if counts["problem"] else 0


def _segments(data: bytes, fmt: str, limits: documents.Limits) -> int | None:
    try:
        return len(documents.extract(data, fmt, limits).segments)
    except documents.DocumentError:
        return None


if __name__ == "__main__":
    raise SystemExit(main())
