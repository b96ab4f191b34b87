"""Word documents (.docx) with python-docx: every paragraph with text (body, tables, headers,
footers, text boxes) is a segment. Its runs become inline tags (app.documents.inline): the run
format covering most characters is the paragraph's base, other runs are `<g>` groups, runs
without text (tabs, breaks, images, fields) and other inline elements (hyperlinks, bookmarks)
are `<x/>` atoms put back where the translation has them. Rebuilt runs copy their original run's
properties (bold, italic, font, size, colour, style), so formatting survives; paragraph
properties, section and page setup, styles and everything outside paragraphs are untouched.
Spell-check marks (w:proofErr) are dropped."""

from __future__ import annotations

import copy
import io
from collections import Counter

import docx
from docx.oxml.ns import qn
from lxml import etree

from app.documents import Document
from app.documents.inline import Atom, decode, encode

_TEXT_CHILDREN = {qn("w:rPr"), qn("w:t")}


def _paragraphs(document) -> list:
    parts = [document.element.body]
    for section in document.sections:
        for part in (section.header, section.footer, section.first_page_header,
                     section.first_page_footer, section.even_page_header, section.even_page_footer):
            if not part.is_linked_to_previous:
                parts.append(part._element)
    return [p for part in parts for p in part.iter(qn("w:p")) if _text(p).strip()]


def _text(el) -> str:
    return "".join(t.text or "" for t in el.iter(qn("w:t")))


def _is_text_run(el) -> bool:
    return el.tag == qn("w:r") and all(c.tag in _TEXT_CHILDREN for c in el)


def _run_key(run) -> bytes:
    """Runs with equal keys look the same: their run properties serialised."""
    rpr = run.find(qn("w:rPr"))
    return b"" if rpr is None else etree.tostring(rpr)


def _encode(p) -> tuple[str, list]:
    """A paragraph -> (inline markup, its children: runs and atoms by id)."""
    for mark in p.findall(qn("w:proofErr")):
        p.remove(mark)
    children = [c for c in p if c.tag != qn("w:pPr")]
    lengths = Counter()
    for c in children:
        if _is_text_run(c):
            lengths[_run_key(c)] += len(_text(c))
    base = lengths.most_common(1)[0][0] if lengths else None
    items = []
    for k, c in enumerate(children):
        if _is_text_run(c):
            items.append((_text(c), None if _run_key(c) == base else k))
        else:
            items.append(Atom(k))
    base_run = next((c for c in children if _is_text_run(c) and _run_key(c) == base), None)
    return encode(items), [children, base_run]


def extract(data: bytes) -> Document:
    document = docx.Document(io.BytesIO(data))
    paragraphs = _paragraphs(document)
    encoded = [_encode(p) for p in paragraphs]
    return Document("docx", [e[0] for e in encoded],
                    (document, paragraphs, [e[1] for e in encoded]), markup=True)


def _new_run(model, text: str):
    run = copy.deepcopy(model) if model is not None else docx.oxml.OxmlElement("w:r")
    for child in list(run):
        if child.tag != qn("w:rPr"):
            run.remove(child)
    t = docx.oxml.OxmlElement("w:t")
    t.text = text
    t.set("{http://www.w3.org/XML/1998/namespace}space", "preserve")
    run.append(t)
    return run


def rebuild(doc: Document, translations: list[str]) -> bytes:
    document, paragraphs, states = doc.state
    for p, (children, base_run), text in zip(paragraphs, states, translations, strict=True):
        for c in children:
            p.remove(c)
        atoms = [k for k, c in enumerate(children) if not _is_text_run(c)]
        groups = [k for k, c in enumerate(children) if _is_text_run(c)]
        for piece in decode(text, atoms, groups):
            if isinstance(piece, Atom):
                p.append(children[piece.id])
            else:
                words, ids = piece
                p.append(_new_run(children[ids[-1]] if ids else base_run, words))
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()
