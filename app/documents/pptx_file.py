"""PowerPoint presentations (.pptx), read as the zip of XML parts they are (zipfile, lxml):
the slides in the presentation's order, each followed by its speaker notes. Every DrawingML
paragraph with text (in shapes, text boxes, placeholders, tables, grouped shapes) is a
segment; its runs become inline tags (app.documents.inline.Runs): the run format covering
most characters is the paragraph's base, other runs are `<g>` groups, and runs next to each
other that look alike (the same run properties, spell-check marks aside) are one group.
Line breaks (a:br) and fields (a:fld: a slide number, a date, with their shown text) are
`<x/>` atoms put back where the translation has them. Rebuilt runs copy their original's run
properties (font, size, colour, a hyperlink on the words), so formatting survives; paragraph
properties stay first and the end-of-paragraph properties last.

Slide layouts and masters are left alone: their text is placeholder prompts ("Click to add
title"), not content. So are charts and SmartArt, whose words live in parts of their own next
to a copy that the program draws from (a chart's embedded workbook, SmartArt's drawing), which
a translation of one side only would contradict. Every part but the slides and notes with text
is written back byte for byte, in the same order and with the same compression."""

from __future__ import annotations

import copy
import io
import posixpath
import zipfile

from lxml import etree

from app.documents import Budget, Document, check_no_dtd
from app.documents.inline import Atom, Runs, decode, encode

_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, remove_comments=False)
_A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
_P = "{http://schemas.openxmlformats.org/presentationml/2006/main}"
_R = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"
_RELS = "{http://schemas.openxmlformats.org/package/2006/relationships}"
_KEPT = {f"{_A}pPr", f"{_A}endParaRPr"}  # a paragraph's own properties, not its content
# run properties that say what a spell checker or an editing session found, not how the
# words look: PowerPoint splits a run where they change
_PROOFING = {"err", "dirty", "smtClean", "smtId", "noProof"}


def _relations(archive: zipfile.ZipFile, part: str) -> dict[str, tuple[str, str]]:
    """A part's relationships: id -> (type's last word, the target's name in the zip)."""
    folder, name = posixpath.split(part)
    rels = posixpath.join(folder, "_rels", f"{name}.rels")
    try:
        xml = archive.read(rels)
    except KeyError:  # a part without relationships
        return {}
    out = {}
    for rel in etree.fromstring(xml, _PARSER).iter(f"{_RELS}Relationship"):
        if rel.get("TargetMode") == "External":
            continue
        target = rel.get("Target", "")
        target = target.lstrip("/") if target.startswith("/") else posixpath.normpath(
            posixpath.join(folder, target))
        out[rel.get("Id")] = (rel.get("Type", "").rsplit("/", 1)[-1], target)
    return out


def _content_parts(archive: zipfile.ZipFile) -> list[str]:
    """The slides in the presentation's order, each followed by its notes."""
    main = [t for kind, t in _relations(archive, "").values() if kind == "officeDocument"]
    if not main:
        raise ValueError("no presentation part (_rels/.rels names none)")
    presentation = etree.fromstring(archive.read(main[0]), _PARSER)
    rels = _relations(archive, main[0])
    parts: list[str] = []
    for slide_id in presentation.iter(f"{_P}sldId"):
        kind, slide = rels.get(slide_id.get(f"{_R}id"), ("", ""))
        if kind != "slide":
            continue
        parts.append(slide)
        parts += [t for k, t in _relations(archive, slide).values() if k == "notesSlide"]
    return list(dict.fromkeys(parts))  # a slide listed twice is read once


def _text(el) -> str:
    return "".join(t.text or "" for t in el.iterchildren(f"{_A}t"))


def _is_text_run(el) -> bool:
    return el.tag == f"{_A}r"


def _run_key(run) -> tuple:
    """Runs with equal keys look the same: their run properties, proofing marks aside."""
    rpr = run.find(f"{_A}rPr")
    if rpr is None:
        return ()
    return (tuple(sorted((k, v) for k, v in rpr.attrib.items() if k not in _PROOFING)),
            b"".join(etree.tostring(c) for c in rpr))


def _encode(p) -> tuple[str, list]:
    """A paragraph -> (inline markup, [its content children, the nodes by id, the base run])."""
    children = [c for c in p if c.tag not in _KEPT]
    runs = Runs((_text(c), _run_key(c)) for c in children if _is_text_run(c))
    for c in children:
        if _is_text_run(c):
            runs.run(c, _text(c), _run_key(c))
        else:
            runs.atom(c)  # a line break, a field, a comment, an equation
    return encode(runs.items), [children, runs.nodes, runs.base_run]


def extract(data: bytes, budget: Budget | None = None) -> Document:
    """Slide by slide (each followed by its notes), each paragraph spent from `budget` as it
    is read: a presentation past a limit is read no further."""
    budget = budget or Budget()
    roots, paragraphs, encoded = {}, [], []
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for name in _content_parts(archive):
            roots[name] = root = etree.fromstring(archive.read(name), _PARSER)
            check_no_dtd(root, name)  # (a part written back)
            found = [(name, p) for p in root.iter(f"{_A}p")
                     if "".join(_text(r) for r in p.iterchildren(f"{_A}r")).strip()]
            paragraphs += found
            encoded += budget.each((_encode(p) for _, p in found), lambda e: e[0])
    return Document("pptx", [e[0] for e in encoded],
                    (data, roots, paragraphs, [e[1] for e in encoded]), markup=True)


def _new_run(model, text: str):
    run = etree.Element(f"{_A}r")
    rpr = model.find(f"{_A}rPr") if model is not None else None
    if rpr is not None:
        run.append(copy.deepcopy(rpr))
    etree.SubElement(run, f"{_A}t").text = text
    return run


def rebuild(doc: Document, translations: list[str]) -> bytes:
    data, roots, paragraphs, states = doc.state
    for (_, p), (children, nodes, base_run), text in zip(
            paragraphs, states, translations, strict=True):
        for c in children:
            p.remove(c)
        end = p.find(f"{_A}endParaRPr")
        add = end.addprevious if end is not None else p.append
        runs = {k for k, n in enumerate(nodes) if _is_text_run(n)}
        atoms = set(range(len(nodes))) - runs
        breaks = {k for k in atoms if nodes[k].tag == f"{_A}br"}
        for piece in decode(text, atoms, runs, breaks):
            if isinstance(piece, Atom):
                add(nodes[piece.id])
            else:
                words, ids = piece
                add(_new_run(nodes[ids[-1]] if ids else base_run, words))
    changed = {name for name, _ in paragraphs}
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            body = src.read(info) if info.filename not in changed else etree.tostring(
                roots[info.filename], xml_declaration=True, encoding="UTF-8", standalone=True)
            kept = zipfile.ZipInfo(info.filename, info.date_time)
            kept.compress_type, kept.external_attr = info.compress_type, info.external_attr
            dst.writestr(kept, body)
    return out.getvalue()
