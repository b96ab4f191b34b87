"""Word documents (.docx) with python-docx: every paragraph with text (body, tables, headers,
footers, text boxes, footnotes, endnotes, comments) is a segment. Its runs become inline tags
(app.documents.inline): the run format covering most characters is the paragraph's base, other
runs are `<g>` groups, runs without text (tabs, breaks, images, fields) and other inline
elements (bookmarks, fields) are `<x/>` atoms put back where the translation has them; a
hyperlink is a group around its runs, written back as one link.
A run holding text and something else (`a<w:br/>b`, `<w:tab/>x`: Word writes these, and so does
python-docx's add_run("a\tb")) is cut into runs of either, so its text is translated too. A
field (a page number: the runs from its w:fldChar begin to its end) is one atom, its shown
result kept: its parts must stay in order, or the text around them becomes part of the field.
Rebuilt runs copy their original run's properties (bold, italic, font, size, colour, style),
and rebuilt links their target, so formatting survives; paragraph
properties, section and page setup, styles and everything outside paragraphs are untouched.
Spell-check marks (w:proofErr) and where the last rendering broke the page
(w:lastRenderedPageBreak, stale once the text changes) are dropped.

Footnotes, endnotes and comments are parts of their own that python-docx reads as bare bytes
(footnotes, endnotes) or as XML (comments, since 1.2): either way their notes' paragraphs are
translated like the body's and the part is written back. Separator notes (a w:type) stay as
they are, and a note's own number (w:footnoteRef, w:endnoteRef, w:annotationRef) at the start
of its paragraph stays there without going to the model, which could move it into the text."""

from __future__ import annotations

import copy
import functools
import io

import docx
from docx.opc.constants import RELATIONSHIP_TYPE as RT
from docx.opc.oxml import serialize_part_xml
from docx.opc.part import XmlPart
from docx.oxml.ns import qn as docx_qn
from docx.oxml.parser import parse_xml
from lxml import etree

from app.documents import Budget, Document, InvalidDocument, check_no_dtd
from app.documents.inline import Atom, Runs, decode, encode

# python-docx's qn splits and formats the name at each call, and reading a paragraph asks it
# for every run and child: the few names used here are worked out once each
qn = functools.cache(docx_qn)

_TEXT_CHILDREN = {qn("w:rPr"), qn("w:t")}
_DROPPED = {qn("w:proofErr"), qn("w:lastRenderedPageBreak")}


def _paragraphs(document) -> list:
    parts = [document.element.body]
    for section in document.sections:
        for part in (section.header, section.footer, section.first_page_header,
                     section.first_page_footer, section.even_page_header, section.even_page_footer):
            if not part.is_linked_to_previous:
                parts.append(part._element)
    return [p for part in parts for p in part.iter(qn("w:p")) if _text(p).strip()]


_NOTES = (RT.FOOTNOTES, RT.ENDNOTES, RT.COMMENTS)  # in this order after the body


def _note_parts(document) -> list:
    """[(part, its root element)] for the document's footnotes, endnotes and comments.
    python-docx keeps a part it has no class for as bytes: that one is parsed here (with its
    own parser: no entities, no network) and written back by rebuild."""
    rels = [r for r in document.part.rels.values() if not r.is_external and r.reltype in _NOTES]
    out = []
    for rel in sorted(rels, key=lambda r: _NOTES.index(r.reltype)):
        part = rel.target_part
        out.append((part, part.element if isinstance(part, XmlPart) else parse_xml(part.blob)))
    return out


def _note_paragraphs(root) -> list:
    """The paragraphs with text of the notes (or comments) of a part; a note with a type
    (separator, continuationSeparator, continuationNotice) is Word's, not the author's."""
    return [p for note in root if note.get(qn("w:type"), "normal") == "normal"
            for p in note.iter(qn("w:p")) if _text(p).strip()]


def _text(el) -> str:
    return "".join(t.text or "" for t in el.iter(qn("w:t")))


def _is(el, tag: str) -> bool:
    """Whether a paragraph child is an element of this tag (a field is a list of them)."""
    return not isinstance(el, list) and el.tag == qn(tag)


def _is_text_run(el) -> bool:
    return _is(el, "w:r") and all(c.tag in _TEXT_CHILDREN for c in el)


_HOLDERS = {qn("w:p"), qn("w:hyperlink"), qn("w:r")}


def _split_run(run) -> None:
    """A run with text and other content (w:br, w:tab, w:sym ...) -> runs of text and runs of
    one other element each, in the same place and with the same properties."""
    content = [c for c in run if c.tag != qn("w:rPr")]
    if all(c.tag == qn("w:t") for c in content) or not any(c.tag == qn("w:t") for c in content):
        return
    rpr = run.find(qn("w:rPr"))
    pieces: list[list] = []
    for c in content:
        if c.tag == qn("w:t") and pieces and pieces[-1][0].tag == qn("w:t"):
            pieces[-1].append(c)
        else:
            pieces.append([c])
    at = run
    for piece in pieces:
        new = etree.Element(run.tag, attrib=dict(run.attrib))
        if rpr is not None:
            new.append(copy.deepcopy(rpr))
        new.extend(piece)
        at.addnext(new)
        at = new
    run.getparent().remove(run)


def _fields(children: list) -> list:
    """children with each complex field that begins and ends among them (the runs from its
    w:fldChar begin to its end, nested fields inside) as one list of elements."""
    out: list = []
    depth, field = 0, []
    for c in children:
        kinds = [f.get(qn("w:fldCharType")) for f in c.iterchildren(qn("w:fldChar"))]
        kinds = kinds if c.tag == qn("w:r") else []
        if depth or "begin" in kinds:
            field.append(c)
            depth += kinds.count("begin") - kinds.count("end")
            if depth <= 0:
                out.append(field)
                depth, field = 0, []
        else:
            out.append(c)
    return out + field  # a field that ends in a later paragraph: its runs one by one


_BREAKS = {qn("w:br"), qn("w:cr"), qn("w:tab")}


def _is_break(el) -> bool:
    """A run of a line break or a tab only (the words on each side need no space)."""
    return _is(el, "w:r") and all(
        c.tag in _BREAKS or c.tag == qn("w:rPr") for c in el) and len(el) > 0


_MARKS = {qn("w:footnoteRef"), qn("w:endnoteRef"), qn("w:annotationRef")}


def _is_mark(el) -> bool:
    """A run of a note's own number (or a comment's mark)."""
    return _is(el, "w:r") and any(c.tag in _MARKS for c in el)


def _run_key(run) -> bytes:
    """Runs with equal keys look the same: their run properties serialised."""
    rpr = run.find(qn("w:rPr"))
    return b"" if rpr is None else etree.tostring(rpr)


def _is_link(el) -> bool:
    return _is(el, "w:hyperlink") and all(_is_text_run(c) for c in el)


def _encode(p) -> tuple[str, list]:
    """A paragraph -> (inline markup, [its children, the runs and links inside by id, the
    base run]). A hyperlink made of text runs is a group around its runs."""
    for mark in [el for el in p.iter(*_DROPPED) if el.getparent().tag in _HOLDERS]:
        parent = mark.getparent()
        parent.remove(mark)
        if parent.tag == qn("w:r") and all(c.tag == qn("w:rPr") for c in parent):
            parent.getparent().remove(parent)  # nothing left in it to keep
    for holder in [p, *p.iterchildren(qn("w:hyperlink"))]:
        for run in holder.findall(qn("w:r")):
            _split_run(run)
    children = _fields([c for c in p if c.tag != qn("w:pPr")])
    marks = 0  # stay first: rebuild puts the translation after them
    while marks < len(children) and _is_mark(children[marks]):
        marks += 1
    children = children[marks:]  # (taken off one by one, each moved all the others)
    # each text run's (text, key), worked out once: Runs needs them all to choose its base
    # before the runs are added one by one
    found = {r: (_text(r), _run_key(r)) for c in children
             for r in (c if _is_link(c) else [c]) if _is_text_run(r)}
    runs = Runs(found.values())
    for c in children:
        if _is_link(c):
            runs.open(c)
            for run in c:
                runs.run(run, *found[run])
            runs.close()
        elif _is_text_run(c):
            runs.run(c, *found[c])
        else:
            runs.atom(c)
    return encode(runs.items), [children, runs.nodes, runs.base_run]


def extract(data: bytes, budget: Budget | None = None) -> Document:
    document = docx.Document(io.BytesIO(data))
    _check_package(document.part.package)
    paragraphs = _paragraphs(document)
    changed = []  # parts kept as bytes whose XML changes
    for part, root in _note_parts(document):
        notes = _note_paragraphs(root)
        paragraphs += notes
        if notes and not isinstance(part, XmlPart):
            changed.append((part, root))
    encoded = (budget or Budget()).each((_encode(p) for p in paragraphs), lambda e: e[0])
    return Document("docx", [e[0] for e in encoded],
                    (document, paragraphs, [e[1] for e in encoded], changed), markup=True)


def _check_package(package) -> None:
    """InvalidDocument where python-docx read what it cannot write back: a relationship without
    an Id, a Type or (pointing outside) a Target, a part without a content type fail only when
    the package is saved, and a part that declares a DTD is saved without it (check_no_dtd)."""
    for part in package.iter_parts():
        if part.content_type is None:
            raise InvalidDocument(f"the part {part.partname} has no content type (in "
                                  "[Content_Types].xml)")
        if (root := getattr(part, "_element", None)) is not None:  # a part python-docx writes
            check_no_dtd(root, part.partname.lstrip("/"))
    for name, rels in [("the package", package.rels),
                       *((f"the part {p.partname}", p.rels) for p in package.iter_parts())]:
        for rel in rels.values():
            for missing, value in (("an Id", rel.rId), ("a Type", rel.reltype),
                                   ("a Target", rel.target_ref)):
                if value is None:
                    raise InvalidDocument(f"{name} has a relationship without {missing}")


def _new_run(model, text: str, template):
    """A run of `text` with the properties of `model` (a run, or None); `template`: an empty
    w:t with xml:space="preserve", copied for the text (lxml's own copy of an element: made by
    python-docx's parser for each run, or through copy.deepcopy's memo, they were a large
    share of the rebuild)."""
    run = model.__deepcopy__(None) if model is not None else docx.oxml.OxmlElement("w:r")
    for child in list(run):
        if child.tag != qn("w:rPr"):
            run.remove(child)
    t = template.__deepcopy__(None)
    t.text = text
    run.append(t)
    return run


def _text_template():
    t = docx.oxml.OxmlElement("w:t")
    t.set("{http://www.w3.org/XML/1998/namespace}space", "preserve")
    return t


def rebuild(doc: Document, translations: list[str]) -> bytes:
    document, paragraphs, states, changed = doc.state
    template = _text_template()
    for p, (children, nodes, base_run), text in zip(
        paragraphs, states, translations, strict=True
    ):
        for c in children:
            for el in c if isinstance(c, list) else [c]:
                p.remove(el)
        links = {k for k, n in enumerate(nodes) if _is_link(n)}  # sets: a paragraph may
        runs = {k for k, n in enumerate(nodes) if _is_text_run(n)}  # have 100,000 runs
        atoms = {k for k in range(len(nodes)) if k not in links and k not in runs}
        breaks = {k for k in atoms if _is_break(nodes[k])}
        made = {}  # the link written for an id: the pieces after it in that link go into it
        for piece in decode(text, atoms, links | runs, breaks):
            if isinstance(piece, Atom):
                node = nodes[piece.id]
                p.extend(node if isinstance(node, list) else [node])
                continue
            words, ids = piece
            parent, model = p, base_run
            for k in ids:
                if k in links:  # a fresh link with the original's target, or the one before
                    # (the last child found from the end: len() counts them all, each time)
                    last = next(parent.iterchildren(reversed=True), None)
                    if last is None or last is not made.get(k):
                        made[k] = etree.SubElement(parent, nodes[k].tag,
                                                   attrib=dict(nodes[k].attrib))
                    parent = made[k]
                else:
                    model = nodes[k]
            parent.append(_new_run(model, words, template))
    for part, root in changed:
        part._blob = serialize_part_xml(root)  # what a bytes part saves; it has no setter
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()
