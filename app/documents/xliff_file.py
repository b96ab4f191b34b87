"""XLIFF 1.2 and 2.0 (.xliff, .xlf) with lxml: each <source> (of a trans-unit, or of a 2.0
segment) is a segment, its inline elements (<g>, <x/>, <ph>, <pc> ...) kept as tags; the
translation goes to the <target> beside it (created after <source> when missing, its attributes
kept when present). A translation whose tags do not nest (the model crossed them beyond what
app.text.protect repairs) is written as plain text rather than refused.
XLIFF 1.2's <bpt>, <ept>, <ph> and <it> hold the original's native code (`&lt;a href="x"&gt;`), not
text: they go to the model empty, as tags that stand alone, and get their code back in the
target, so it is neither translated nor mixed with the words around it. A unit with
translate="no" (on it or the group or file it is in) is left alone, and so is a translation
already there and marked done (1.2: a target in state translated, final or signed-off; 2.0: a
segment in state translated, reviewed or final)."""

from __future__ import annotations

import collections
import copy
import html
import re

from lxml import etree

from app.documents import Budget, Document
from app.text.protect import ANY_TAG_RE

_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, remove_comments=False)
# starting only where a run of spaces starts, and taking it whole: tried from every space of
# a run, each try to its end, it cost the square of the run (an attribute of spaces)
_NS_DECL = re.compile(r'(?<!\s)\s++xmlns(?::\w+)?="[^"]*"')
_NS12 = "urn:oasis:names:tc:xliff:document:1.2"


_CODE = {f"{{{_NS12}}}{name}" for name in ("bpt", "ept", "ph", "it")}


def _local(el) -> str:
    return etree.QName(el).localname


def _inner(el) -> str:
    """The element's content as escaped text with tags, without namespace declarations; the
    native code inside XLIFF 1.2's code elements left out (`_with_code` puts it back)."""
    if any(True for _ in el.iter(*_CODE)):
        el = copy.deepcopy(el)
        for code in el.iter(*_CODE):
            code.text = None
            for child in list(code):
                code.remove(child)
    children = "".join(etree.tostring(c, encoding="unicode", with_tail=True) for c in el)
    return html.escape(el.text or "", quote=False) + _NS_DECL.sub("", children)


_DONE = {"translated", "final", "signed-off", "reviewed"}


def _translatable(source) -> bool:
    """No translate="no" on the unit or on the group or file around it (the nearest says), and
    no finished translation beside the source."""
    target = source.getnext()
    if target is not None and _local(target) == "target" and "".join(target.itertext()).strip():
        state = target.get("state") if _local(source.getparent()) == "trans-unit" else (
            source.getparent().get("state"))
        if state in _DONE:
            return False
    for el in source.iterancestors():
        if el.get("translate") is not None:
            return el.get("translate") != "no"
    return True


def extract(data: bytes, budget: Budget | None = None) -> Document:
    root = etree.fromstring(data, _PARSER)
    if _local(root) != "xliff":
        raise ValueError(f"the root element is <{_local(root)}>, not <xliff>")
    sources = [el for el in root.iter("{*}source")
               if _local(el.getparent()) in ("trans-unit", "segment") and _translatable(el)]
    segments = (budget or Budget()).each((_inner(s) for s in sources), str)
    return Document("xliff", segments, (root, sources), markup=True)


def _with_code(target, source) -> None:
    """The native code of the source's code elements back into the target's (by element
    and id, in order)."""
    codes: dict[tuple[str, str | None], collections.deque] = {}
    for code in source.iter(*_CODE):
        codes.setdefault((code.tag, code.get("id")), collections.deque()).append(code)
    for code in target.iter(*_CODE):
        found = codes.get((code.tag, code.get("id")))
        if found:  # (a list's first taken off moved the others: many without ids)
            original = found.popleft()
            code.text = original.text
            code.extend(copy.deepcopy(c) for c in original)


def _target_content(ns: str | None, text: str):
    wrap = f'<target xmlns="{ns}">{{}}</target>' if ns else "<target>{}</target>"
    try:
        return etree.fromstring(wrap.format(text), _PARSER)
    except etree.XMLSyntaxError:
        plain = html.escape(html.unescape(ANY_TAG_RE.sub("", text)), quote=False)
        return etree.fromstring(wrap.format(plain), _PARSER)


def rebuild(doc: Document, translations: list[str], target_lang: str | None = None) -> bytes:
    """The targets filled in; with target_lang, the file says it is their language (2.0: the
    root's trgLang, which the standard requires once targets are there; 1.2: target-language
    on each <file> with a translated unit)."""
    root, sources = doc.state
    if target_lang and sources:
        if root.get("version", "").startswith("2"):
            root.set("trgLang", target_lang)
        else:
            for file in {f for s in sources for f in s.iterancestors("{*}file")}:
                file.set("target-language", target_lang)
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
        _with_code(target, source)
    return etree.tostring(root.getroottree(), xml_declaration=True, encoding="UTF-8")
