"""XLIFF 1.2 and 2.0 (.xliff, .xlf) with lxml: each <source> (of a trans-unit, or of a 2.0
segment) is a segment, its inline elements (<g>, <x/>, <ph>, <pc> ...) kept as tags; the
translation goes to the <target> beside it (created after <source> when missing, its attributes
kept when present). A translation whose tags do not nest (the model crossed them beyond what
app.text.protect repairs) is written as plain text rather than refused."""

from __future__ import annotations

import html
import re

from lxml import etree

from app.documents import Document

_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, remove_comments=False)
_NS_DECL = re.compile(r'\s+xmlns(?::\w+)?="[^"]*"')


def _local(el) -> str:
    return etree.QName(el).localname


def _inner(el) -> str:
    """The element's content as escaped text with tags, without namespace declarations."""
    children = "".join(etree.tostring(c, encoding="unicode", with_tail=True) for c in el)
    return html.escape(el.text or "", quote=False) + _NS_DECL.sub("", children)


def extract(data: bytes) -> Document:
    root = etree.fromstring(data, _PARSER)
    if _local(root) != "xliff":
        raise ValueError(f"the root element is <{_local(root)}>, not <xliff>")
    sources = [el for el in root.iter("{*}source")
               if _local(el.getparent()) in ("trans-unit", "segment")]
    return Document("xliff", [_inner(s) for s in sources], (root, sources), markup=True)


def _target_content(ns: str | None, text: str):
    wrap = f'<target xmlns="{ns}">{{}}</target>' if ns else "<target>{}</target>"
    try:
        return etree.fromstring(wrap.format(text), _PARSER)
    except etree.XMLSyntaxError:
        plain = html.escape(html.unescape(re.sub(r"<[^<>]*>", "", text)), quote=False)
        return etree.fromstring(wrap.format(plain), _PARSER)


def rebuild(doc: Document, translations: list[str]) -> bytes:
    root, sources = doc.state
    for source, text in zip(sources, translations, strict=True):
        ns = etree.QName(source).namespace
        tag = f"{{{ns}}}target" if ns else "target"
        parsed = _target_content(ns, text)
        target = source.getnext()
        if target is None or target.tag != tag:
            target = etree.Element(tag)
            source.addnext(target)
            target.tail = source.tail
        for child in list(target):
            target.remove(child)
        target.text = parsed.text
        target.extend(list(parsed))
    return etree.tostring(root.getroottree(), xml_declaration=True, encoding="UTF-8")
