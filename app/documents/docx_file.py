"""Word documents (.docx) with python-docx: every paragraph with text (body, tables, headers,
footers, text boxes) is a segment. Its runs become inline tags (app.documents.inline): the run
format covering most characters is the paragraph's base, other runs are `<g>` groups, runs
without text (tabs, breaks, images, fields) and other inline elements (bookmarks, fields) are
`<x/>` atoms put back where the translation has them; a hyperlink is a group around its runs.
Rebuilt runs copy their original run's properties (bold, italic, font, size, colour, style),
and rebuilt links their target, so formatting survives; paragraph
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
from app.documents.inline import Atom, Close, Open, decode, encode

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


def _is_link(el) -> bool:
    return el.tag == qn("w:hyperlink") and all(_is_text_run(c) for c in el)


def _encode(p) -> tuple[str, list]:
    """A paragraph -> (inline markup, [its children, the runs and links inside by id, the
    base run]). A hyperlink made of text runs is a group around its runs."""
    for mark in p.findall(qn("w:proofErr")):
        p.remove(mark)
    children = [c for c in p if c.tag != qn("w:pPr")]
    nodes: list = []  # every element an id can name
    lengths = Counter()
    for c in children:
        for run in c if _is_link(c) else [c]:
            if _is_text_run(run):
                lengths[_run_key(run)] += len(_text(run))
    base = lengths.most_common(1)[0][0] if lengths else None
    base_run = None
    items = []

    def add_run(run) -> None:
        nonlocal base_run
        nodes.append(run)
        plain = _run_key(run) == base
        base_run = run if plain and base_run is None else base_run
        items.append((_text(run), None if plain else len(nodes) - 1))

    for c in children:
        if _is_link(c):
            nodes.append(c)
            items.append(Open(len(nodes) - 1))
            for run in c:
                add_run(run)
            items.append(Close())
        elif _is_text_run(c):
            add_run(c)
        else:
            nodes.append(c)
            items.append(Atom(len(nodes) - 1))
    return encode(items), [children, nodes, base_run]


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
    for p, (children, nodes, base_run), text in zip(
        paragraphs, states, translations, strict=True
    ):
        for c in children:
            p.remove(c)
        links = {k for k, n in enumerate(nodes) if _is_link(n)}  # sets: a paragraph may
        runs = {k for k, n in enumerate(nodes) if _is_text_run(n)}  # have 100,000 runs
        atoms = {k for k in range(len(nodes)) if k not in links and k not in runs}
        for piece in decode(text, atoms, links | runs):
            if isinstance(piece, Atom):
                p.append(nodes[piece.id])
                continue
            words, ids = piece
            parent, model = p, base_run
            for k in ids:
                if k in links:  # a fresh link with the original's target
                    link = etree.SubElement(parent, nodes[k].tag, attrib=dict(nodes[k].attrib))
                    parent = link
                else:
                    model = nodes[k]
            parent.append(_new_run(model, words))
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()
