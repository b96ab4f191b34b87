"""OpenDocument text (.odt) and presentations (.odp) with odfpy: every paragraph and heading
with text is a segment (in a presentation: on its pages, in their shapes, text boxes, tables
and speaker notes, page by page; its master pages hold the layouts' placeholder prompts and
fields, not content, and are left alone).
Spans (text:span, text:a) become `<g>` groups, nested as they were; other elements inside a
paragraph (text:s spaces, tabs, line breaks, notes, frames, bookmarks, fields) are `<x/>` atoms
put back where the translation has them. Rebuilt spans copy their original's name and
attributes (so their style), one copy for the pieces of the translation that follow each other
in it (a link stays one link), and styles, page layout and metadata are untouched."""

from __future__ import annotations

import io
import threading
import zipfile
from contextlib import contextmanager

from lxml import etree
from odf import element as odf_element
from odf import opendocument
from odf import text as odftext
from odf.element import Element, Node
from odf.element import Text as TextNode
from odf.namespaces import OFFICENS, TEXTNS

from app.documents import Budget, Document, InvalidDocument
from app.documents.inline import Atom, Close, Open, decode, encode

_GROUPS = {(TEXTNS, "span"), (TEXTNS, "a")}
_BREAKS = {(TEXTNS, "line-break"), (TEXTNS, "tab")}  # they part the words on each side
_GROUP_TAGS = {f"{{{ns}}}{name}" for ns, name in _GROUPS}  # as lxml names them


def _text_of(node) -> str:
    if node.nodeType == Node.TEXT_NODE:
        return node.data
    return "".join(_text_of(c) for c in node.childNodes)


def _items(node, nodes: list, items: list) -> None:
    """node's children -> inline items; nodes collects every element by its id."""
    for child in list(node.childNodes):
        if child.nodeType == Node.TEXT_NODE:
            items.append((child.data, None))
            continue
        nodes.append(child)
        k = len(nodes) - 1
        if child.qname in _GROUPS:
            items.append(Open(k))
            _items(child, nodes, items)
            items.append(Close())
        else:
            items.append(Atom(k))


_PRESENTATION = "application/vnd.oasis.opendocument.presentation"
# elements in elements a file may nest: odfpy reads any depth (expat) but writes each level
# in a call of its own, so a file nested about a thousand deep failed when written back
# (RecursionError); real documents (lists in lists in tables in frames) stay far below it
_DEEPEST = 200

# odfpy keeps two registries for the whole process: the prefix of every namespace URI it has
# read (odf.element.nsdict) and the namespaces every written part declares (a dict on the
# Element class). Left alone, one user's namespace URIs were declared in every later file the
# process wrote, both grew with every new URI uploaded, and a write reading them while another
# thread's read added to them could fail. Each read here starts from odfpy's own namespaces
# and keeps what it added with its document; the write puts back just those, as a process that
# had read only this file would have them. All use of odfpy holds the lock.
_ODFPY = threading.Lock()
_OWN_PREFIXES = dict(odf_element.nsdict)


@contextmanager
def _registries(prefixes: dict[str, str], declared: dict[str, str]):
    """odfpy's registries set to these for the block (set in full on entry: a read or write
    stopped in the middle of putting them back leaves nothing behind for the next)."""
    with _ODFPY:
        saved = dict(odf_element.nsdict), dict(Element.namespaces)
        _set(prefixes, declared)
        try:
            yield
        finally:
            _set(*saved)


def _set(prefixes: dict[str, str], declared: dict[str, str]) -> None:
    odf_element.nsdict.clear()
    odf_element.nsdict.update(prefixes)
    Element.namespaces.clear()
    Element.namespaces.update(declared)


def _paragraphs(document) -> list:
    # a text document's master pages (in styles.xml) hold its headers and footers: content
    root = document.body if document.mimetype == _PRESENTATION else document
    found = root.getElementsByType(odftext.P) + root.getElementsByType(odftext.H)
    return [p for p in found if _text_of(p).strip()]


def _probe(data: bytes, probe: Budget) -> None:
    """The paragraphs and headings with text in content.xml's body (as _paragraphs finds them)
    spent from `probe`, with the characters of their own text (what their segments hold at
    least), before odfpy reads the file: odfpy makes an object of every element of every part
    before a paragraph can be looked at, which lxml's parse does not. A file lxml cannot read
    is left to odfpy to judge."""
    paragraphs = (f"{{{TEXTNS}}}p", f"{{{TEXTNS}}}h")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive, archive.open("content.xml") as part:
            root = etree.parse(part, etree.XMLParser(resolve_entities=False, no_network=True))
    except (KeyError, zipfile.BadZipFile, etree.XMLSyntaxError):
        return
    body = root.getroot().find(f"{{{OFFICENS}}}body")
    for p in body.iter(*paragraphs) if body is not None else ():
        if "".join(p.itertext()).strip():
            probe.count(1, _own_text(p))


def _own_text(el) -> int:
    """The characters of an element's text outside its children that are atoms (in spans and
    links, which are groups, too)."""
    return len(el.text or "") + sum(
        (_own_text(child) if child.tag in _GROUP_TAGS else 0) + len(child.tail or "")
        for child in el)


def extract(data: bytes, budget: Budget | None = None) -> Document:
    budget = budget or Budget()
    _probe(data, budget.copy())
    with _registries(_OWN_PREFIXES, {}):
        document = opendocument.load(io.BytesIO(data))
        namespaces = dict(odf_element.nsdict), dict(Element.namespaces)
    if "" in namespaces[1]:
        # odfpy would declare a prefix for it (xmlns:ns42=""), which XML forbids: the file
        # written back would open nowhere
        raise InvalidDocument("the file has elements or attributes in no namespace (ODF "
                              "names each of its own in one); it cannot be written back")
    _check_depth(document.topnode)
    paragraphs = _paragraphs(document)
    segments, states = [], []
    for p in paragraphs:
        nodes, items = [], []
        _items(p, nodes, items)
        segments.append(encode(items))
        states.append(nodes)
    return Document("odp" if document.mimetype == _PRESENTATION else "odt", segments,
                    (document, paragraphs, states, namespaces), markup=True)


def _check_depth(top) -> None:
    """InvalidDocument where elements nest more than _DEEPEST deep (looked at without
    recursion: the file's depth is what is in question)."""
    stack = [(top, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > _DEEPEST:
            raise InvalidDocument(f"the file nests elements more than {_DEEPEST} deep")
        stack.extend((c, depth + 1) for c in node.childNodes if c.nodeType == Node.ELEMENT_NODE)


def _shallow_copy(el):
    return Element(qname=el.qname, qattributes=dict(el.attributes), check_grammar=False)


def rebuild(doc: Document, translations: list[str]) -> bytes:
    document, paragraphs, states, namespaces = doc.state
    with _registries(*namespaces):
        return _rebuild(document, paragraphs, states, translations)


def _rebuild(document, paragraphs: list, states: list, translations: list[str]) -> bytes:
    for p, nodes, text in zip(paragraphs, states, translations, strict=True):
        # taken out by hand: odfpy's removeChild also takes them (and all inside) out of the
        # document's element caches, which appendChild does not put them back into, so the
        # caption of a frame in an outer paragraph failed next (x not in list)
        for child in p.childNodes:
            child.parentNode = child.previousSibling = child.nextSibling = None
        p.childNodes.clear()
        groups = {k for k, n in enumerate(nodes) if n.qname in _GROUPS}
        atoms = {k for k, n in enumerate(nodes) if n.qname not in _GROUPS}
        # so are the atoms in its spans (two spaces, a frame: a caption inside failed next;
        # and each removeChild searched the document's list of elements of that kind)
        for k in atoms:
            node = nodes[k]
            node.parentNode = node.previousSibling = node.nextSibling = None
        breaks = {k for k in atoms if nodes[k].qname in _BREAKS}
        made = {}  # the copy written for an id: the pieces after it in that span go into it
        for piece in decode(text, atoms, groups, breaks):
            atom = isinstance(piece, Atom)
            parent = p
            # the piece's spans, outermost first, each a fresh copy or the last one
            for g in piece.groups if atom else piece[1]:
                if not parent.childNodes or parent.childNodes[-1] is not made.get(g):
                    made[g] = parent.appendChild(_shallow_copy(nodes[g]))
                parent = made[g]
            parent.appendChild(nodes[piece.id] if atom else TextNode(piece[0]))
    # odfpy's write takes every child of <office:meta> for an element: a meta.xml written with
    # whitespace between them failed on the text ('Text' object has no attribute 'qname')
    meta = document.meta.childNodes
    meta[:] = [c for c in meta if c.nodeType == Node.ELEMENT_NODE]
    document.clear_caches()  # built again from the tree (write reads them)
    document.rebuild_caches()
    out = io.BytesIO()
    document.write(out)
    return out.getvalue()
