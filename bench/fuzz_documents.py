"""Fuzz the document path: small valid files of every format, broken at random, each sent
through app.documents.translate_document in a child process of its own.

Seeds are built here (tests/app/samples.py's builders where they exist, reportlab for PDFs,
literal text for the text formats). Each case takes one seed and one to three mutations, drawn
by a random generator seeded with (--seed, format, case number), so a case comes out the same
on every run:

* bytes, any format: flip bits, insert, delete or duplicate a range, truncate;
* zipped formats (.docx, .odt, .odp, .pptx, .epub), on one member: drop, duplicate or move an
  element, drop, duplicate or blow up an attribute, nest an element thousands deep, swap a
  namespace, put in a broken entity or an entity declaration, declare the wrong encoding,
  break its bytes; or on the archive: delete, add, empty, rename or duplicate a member;
* .pdf, on its objects: a wrong /Length, a broken xref table or startxref, a page its own
  /Parent, a /Kids loop, filters the data is not in, a huge /Count, negative and huge sizes,
  font and encoding (CMap) names that do not exist, a missing /Resources, operators gone wrong;
* text formats (.html, .md, .txt, .srt, .po, .xliff): control characters, lone surrogates and
  broken UTF-8 as bytes, byte order marks, other encodings, mixed line ends, very long lines and
  words, markup nested thousands deep, lines dropped, repeated and moved (and, for .xliff, the
  XML mutations above).

Outcomes: `ok` (the output opens again with the format's library: bench.documents_wild's
checks), `refused` (a DocumentError, its message counted), `crash` (any other exception, or the
child killed by a signal), `timeout` (past --timeout seconds of wall time), `memory` (a
MemoryError under --memory-mb of address space, RLIMIT_AS), `broken` (the input opens with
the format's library, the output does not) and `leak` (after the case, the same child
translates the clean seed again and gets other bytes than a fresh process does: state left
behind by one user's file reaches the next). It prints a table per format and the distinct
problems, each with the command that reproduces it; every problem's input is written under
--out with a note (mutations, traceback).

    python -m bench.fuzz_documents                      # 15 cases per format, seed 0
    python -m bench.fuzz_documents --seed 3 --cases 200 --formats pdf docx --out /tmp/fuzz
    python -m bench.fuzz_documents --replay /tmp/fuzz/pdf/3-17.pdf
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import io
import logging
import multiprocessing
import os
import random
import re
import resource
import signal
import sys
import time
import traceback
import warnings
import zipfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from app import documents
from bench.documents_wild import SHAPES, reverse

FORMATS = ["docx", "odt", "odp", "pptx", "epub", "html", "md", "txt", "srt", "po", "xliff",
           "pdf"]
ZIPPED = {"docx", "odt", "odp", "pptx", "epub"}
OUTCOMES = ["ok", "refused", "crash", "timeout", "memory", "broken", "leak"]
PROBLEMS = {"crash", "timeout", "memory", "broken", "leak"}

# ---------------------------------------------------------------- seeds

HTML = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>The plan</title>
<style>p { color: red }</style><script>var x = "<b>not text</b>";</script></head>
<body><h1 id="top">Quarterly plan</h1>
<p>We ship <b>next <i>week</i></b> &amp; test it.<br>Then we rest.</p>
<p><img src="a.png" alt="A red house"> <a href="https://example.com/x?a=1" title="More">Read
more</a> about it.</p>
<ul><li>First item</li><li>Second <code>make all</code> item</li></ul>
<table><tr><td>Left cell</td><td>Right cell</td></tr></table>
<pre>keep   this</pre><p translate="no">Keep this line.</p>
</body></html>
"""
MARKDOWN = """---
title: The plan
tags: [one, two]
---

# Quarterly plan

We ship **next _week_** and [read more](https://example.com "More").
A wrapped line goes on here.

- First item
  - Nested `make all` item

> A quote here.

| Left | Right |
|------|-------|
| one cell | two cell |

```python
print("keep")
```

Footnote here.[^1] <b>Inline HTML</b> too.

[^1]: The note text.
"""
TXT = "Hello world.\r\n\r\n    Indented line here\nOpen %s now.  Then close it\n\nLast line.\n"
SRT = """1
00:00:01,000 --> 00:00:02,500
Hello <i>there</i>, friend.

2
00:00:03,000 --> 00:00:05,000
A cue of
two lines.

3
00:00:06,000 --> 00:00:07,000
<b>{\\an8}The end.</b>
"""
PO = r"""# A catalog.
msgid ""
msgstr ""
"Project-Id-Version: fuzz 1.0\n"
"Content-Type: text/plain; charset=UTF-8\n"
"Plural-Forms: nplurals=2; plural=(n != 1);\n"

#: src/main.c:10
#, c-format
msgid "Open %s now."
msgstr ""

msgctxt "menu"
msgid "File"
msgstr ""

msgid "One file"
msgid_plural "%d files"
msgstr[0] ""
msgstr[1] ""

msgid ""
"A long message "
"over lines."
msgstr ""

#~ msgid "Old one"
#~ msgstr "Alt"
"""
XLIFF1 = """<?xml version="1.0" encoding="UTF-8"?>
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">
<file source-language="en" target-language="de" datatype="plaintext" original="x">
<body>
<trans-unit id="1"><source>We ship <g id="b">next week</g>.</source></trans-unit>
<trans-unit id="2"><source>Open <x id="ph"/> now.</source><target>alt</target></trans-unit>
<group id="g"><trans-unit id="3"><source>Grouped words.</source></trans-unit></group>
</body></file></xliff>
"""
XLIFF2 = """<?xml version="1.0" encoding="UTF-8"?>
<xliff xmlns="urn:oasis:names:tc:xliff:document:2.0" version="2.0" srcLang="en" trgLang="de">
<file id="f1"><unit id="1"><segment><source>We ship <pc id="1">next week</pc>.</source>
</segment></unit><unit id="2"><segment><source>Open <ph id="2"/> now.</source></segment>
</unit></file></xliff>
"""


def _pdf(ttf: bool) -> bytes:
    """Two pages, uncompressed (so the mutations find the objects and operators): a heading,
    a paragraph, a link and a rectangle; with `ttf`, the text in an embedded subset font
    (its /ToUnicode CMap and font file are then there to break)."""
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.ttfonts import TTFont
    from reportlab.pdfgen import canvas

    font = "Helvetica"
    if ttf:
        import reportlab

        pdfmetrics.registerFont(TTFont("Vera", str(Path(reportlab.__file__).parent / "fonts"
                                                   / "Vera.ttf")))
        font = "Vera"
    out = io.BytesIO()
    c = canvas.Canvas(out, pagesize=(400, 400), pageCompression=0)
    for page in (1, 2):
        c.setFont(font, 16)
        c.drawString(40, 350, f"Chapter {page}: the plan")
        c.setFont(font, 10)
        for k, line in enumerate(["We ship next week and then we", "rest for a while. Open the",
                                  "door now."]):
            c.drawString(40, 320 - 12 * k, line)
        c.rect(35, 250, 200, 90)
        c.linkURL("https://example.com", (40, 200, 140, 215))
        c.drawString(40, 205, "Read more")
        c.showPage()
    c.save()
    return out.getvalue()


@cache
def seeds() -> dict[str, list[bytes]]:
    """The valid files each format's cases start from."""
    from tests.app import samples

    return {
        "docx": [samples.docx_bytes(samples.docx_document())],
        "odt": [samples.odt_file("  and   then")],
        "odp": [samples.odp_file()],
        "pptx": [samples.pptx_file()],
        "epub": [samples.epub_bytes(samples.epub_parts(3)),
                 samples.epub_bytes(samples.epub_parts(2))],
        "html": [HTML.encode()],
        "md": [MARKDOWN.encode()],
        "txt": [TXT.encode()],
        "srt": [SRT.encode()],
        "po": [PO.encode()],
        "xliff": [XLIFF1.encode(), XLIFF2.encode()],
        "pdf": [_pdf(False), _pdf(True)],
    }


# ---------------------------------------------------------------- mutations

Mutation = Callable[[random.Random, bytes], tuple[bytes, str]]
_HOSTILE_BYTES = [b"\x00", b"\xff\xfe", b"\xef\xbb\xbf", b"\xed\xa0\x80", b"\xc3", b"\xc0\xaf",
                  b"\x1b[31m", b"<", b"&", b"]]>", b"%", b"\\", b"\r", b"\x85"]


def _span(rng: random.Random, n: int, most: int = 64) -> tuple[int, int]:
    start = rng.randrange(max(n, 1))
    return start, min(n, start + rng.randint(1, most))


def flip(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    out = bytearray(data)
    places = [rng.randrange(len(out)) for _ in range(rng.choice([1, 1, 4, 32]))] if out else []
    for p in places:
        out[p] ^= 1 << rng.randrange(8)
    return bytes(out), f"flip {len(places)} bits"


def insert(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    at = rng.randrange(len(data) + 1)
    chunk = (rng.choice(_HOSTILE_BYTES) * rng.choice([1, 3, 1000]) if rng.random() < 0.5
             else rng.randbytes(rng.randint(1, 64)))
    return data[:at] + chunk + data[at:], f"insert {len(chunk)} bytes at {at}"


def delete(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    start, end = _span(rng, len(data), rng.choice([8, 256]))
    return data[:start] + data[end:], f"delete bytes {start}:{end}"


def duplicate(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    start, end = _span(rng, len(data), rng.choice([16, 512]))
    times = rng.choice([1, 2, 100])
    return data[:end] + data[start:end] * times + data[end:], \
        f"repeat bytes {start}:{end} {times}x"


def truncate(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    at = rng.randrange(len(data) + 1)
    return data[:at], f"truncate at {at}"


BYTES: list[Mutation] = [flip, insert, delete, duplicate, truncate]


# -- XML, one document at a time (a zip member, an .xliff file)

def _tree(data: bytes):
    from lxml import etree

    parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=True)
    return etree.fromstring(data, parser)


def _serialize(root) -> bytes:
    from lxml import etree

    return etree.tostring(root, xml_declaration=True, encoding="UTF-8")


def _elements(root) -> list:
    return [el for el in root.iter() if isinstance(el.tag, str) and el is not root]


def _xml_op(op: Callable[[random.Random, object], str]) -> Mutation:
    """A mutation of the parsed tree: `op(rng, root)` changes it and says how."""

    def mutate(rng: random.Random, data: bytes) -> tuple[bytes, str]:
        try:
            root = _tree(data)
        except Exception:  # already broken by an earlier mutation: break its bytes instead
            return rng.choice(BYTES)(rng, data)
        note = op(rng, root)
        return _serialize(root), note

    mutate.__name__ = op.__name__
    return mutate


def _pick(rng: random.Random, root):
    found = _elements(root)
    return rng.choice(found) if found else None


def _local(el) -> str:
    return el.tag.rsplit("}", 1)[-1]


def drop_element(rng, root) -> str:
    el = _pick(rng, root)
    if el is None:
        return "nothing to drop"
    el.getparent().remove(el)  # (its tail goes with it)
    return f"drop <{_local(el)}>"


def duplicate_element(rng, root) -> str:
    el = _pick(rng, root)
    if el is None:
        return "nothing to duplicate"
    times = rng.choice([1, 1, 50, 2000])
    for _ in range(times):
        el.addnext(copy.deepcopy(el))
    return f"repeat <{_local(el)}> {times}x"


def move_element(rng, root) -> str:
    el, to = _pick(rng, root), _pick(rng, root)
    if el is None or to is None or el is to or el in to.iterancestors():
        return "nothing to move"
    el.getparent().remove(el)
    to.insert(rng.randint(0, len(to)), el)
    return f"move <{_local(el)}> into <{_local(to)}>"


def drop_attribute(rng, root) -> str:
    found = [(el, k) for el in root.iter() if isinstance(el.tag, str) for k in el.attrib]
    if not found:
        return "no attribute to drop"
    el, key = rng.choice(found)
    del el.attrib[key]
    return f"drop @{key.rsplit('}', 1)[-1]} of <{_local(el)}>"


def huge_attribute(rng, root) -> str:
    el = _pick(rng, root)
    if el is None:
        return "no element"
    keys = list(el.attrib) or ["fuzz"]
    key = rng.choice(keys)
    size = rng.choice([10_000, 1_000_000, 8_000_000])
    el.set(key, rng.choice(["x", "1", "-", " ", "#"]) * size)
    return f"@{key.rsplit('}', 1)[-1]} of <{_local(el)}> {size} characters"


def huge_text(rng, root) -> str:
    el = _pick(rng, root)
    if el is None:
        return "no element"
    size = rng.choice([10_000, 200_000, 2_000_000])
    el.text = (el.text or "") + rng.choice(["a", "ab ", "\u0301", ". ", "a\n"]) * size
    return f"text of <{_local(el)}> + {size} pieces"


def nest(rng, root) -> str:
    el = _pick(rng, root)
    if el is None:
        return "no element"
    depth = rng.choice([300, 3000, 30_000])
    wrapper_tag = rng.choice([el.tag, el.getparent().tag])
    parent, at = el.getparent(), el.getparent().index(el)
    parent.remove(el)
    top = inner = None
    for _ in range(depth):
        node = parent.makeelement(wrapper_tag)
        if inner is None:
            top = node
        else:
            inner.append(node)
        inner = node
    inner.append(el)
    parent.insert(at, top)
    return f"<{_local(el)}> nested {depth} deep in <{wrapper_tag.rsplit('}', 1)[-1]}>"


def swap_namespace(rng, root) -> str:
    uris = sorted({el.tag[1:].split("}")[0] for el in root.iter()
                   if isinstance(el.tag, str) and el.tag.startswith("{")})
    if not uris:
        return "no namespace"
    old = rng.choice(uris)
    new = rng.choice([*uris, "urn:fuzz", "http://www.w3.org/1999/xhtml", ""])
    for el in root.iter():
        if isinstance(el.tag, str) and el.tag.startswith("{" + old + "}"):
            el.tag = (f"{{{new}}}" if new else "") + _local(el)
    return f"namespace {old} -> {new or '(none)'}"


XML_TREE: list[Mutation] = [_xml_op(f) for f in (drop_element, duplicate_element, move_element,
                                                  drop_attribute, huge_attribute, huge_text,
                                                  nest, swap_namespace)]
_ENTITIES = ["&bogus;", "&#0;", "&#xD800;", "&#x110000;", "&#99999999999;", "& ", "&amp",
             "&#x1;", "&lt;b&gt;", "&nbsp;"]
_DECLARATION = re.compile(rb"^\s*<\?xml[^>]*\?>")


def _after_a_tag(rng: random.Random, data: bytes) -> int:
    ends = [m.end() for m in re.finditer(rb">", data)]
    return rng.choice(ends) if ends else 0


def broken_entity(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    at, entity = _after_a_tag(rng, data), rng.choice(_ENTITIES)
    return data[:at] + entity.encode() + data[at:], f"{entity} at {at}"


def declared_entity(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """An internal DTD declaring an entity (nested ones: "billion laughs"), used in the text."""
    levels = rng.choice([1, 3, 9])
    decls = '<!ENTITY e0 "lol">' + "".join(
        f'<!ENTITY e{k} "{("&e" + str(k - 1) + ";") * 10}">' for k in range(1, levels))
    body = _DECLARATION.sub(b"", data).lstrip()
    name = re.match(rb"<([\w:.-]+)", body)
    doctype = f"<!DOCTYPE {name.group(1).decode() if name else 'x'} [{decls}]>".encode()
    at = _after_a_tag(rng, body)
    body = body[:at] + f"&e{levels - 1};".encode() + body[at:]
    return b'<?xml version="1.0" encoding="UTF-8"?>' + doctype + body, \
        f"entity declared {levels} deep and used"


def wrong_encoding(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    body = _DECLARATION.sub(b"", data)
    declared = rng.choice(["UTF-16", "ISO-8859-1", "bogus-8", "UTF-32", "cp037", "UTF-8"])
    written = rng.choice(["utf-8", "utf-16", "latin-1"])
    text = body.decode("utf-8", "surrogateescape")
    try:
        body = text.encode(written)
    except UnicodeEncodeError:
        written = "utf-8"
    head = f'<?xml version="1.0" encoding="{declared}"?>'.encode(
        "utf-16" if written == "utf-16" else "ascii")
    return head + body, f"declared {declared}, written {written}"


XML: list[Mutation] = XML_TREE + [broken_entity, declared_entity, wrong_encoding]


# -- zip archives

def _members(data: bytes) -> list[tuple[zipfile.ZipInfo, bytes]]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return [(info, z.read(info)) for info in z.infolist()]


def _zipped(members: list[tuple[zipfile.ZipInfo, bytes]]) -> bytes:
    out = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Duplicate name": wanted here
        with zipfile.ZipFile(out, "w") as z:
            for info, blob in members:
                z.writestr(info, blob)
    return out.getvalue()


def _xmlish(info: zipfile.ZipInfo) -> bool:
    return info.filename.endswith((".xml", ".xhtml", ".opf", ".ncx", ".rels", ".html"))


def zip_mutation(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    try:
        members = _members(data)
    except Exception:  # not a readable archive any more
        return rng.choice(BYTES)(rng, data)
    if not members:
        return rng.choice(BYTES)(rng, data)
    kind = rng.choices(["member", "delete", "add", "empty", "rename", "twice", "compression"],
                       [12, 1, 1, 1, 1, 1, 1])[0]
    xmls = [k for k, (info, _) in enumerate(members) if _xmlish(info)]
    k = rng.choice(xmls) if xmls and rng.random() < 0.9 else rng.randrange(len(members))
    info, blob = members[k]
    name = info.filename
    if kind == "member":
        mutation = rng.choice(XML if _xmlish(info) else BYTES)
        blob, note = mutation(rng, blob)
        members[k] = (info, blob)
        note = f"{name}: {mutation.__name__}: {note}"
    elif kind == "delete":
        del members[k]
        note = f"delete {name}"
    elif kind == "add":
        extra = zipfile.ZipInfo(rng.choice(["word/extra.xml", "../evil.xml", "/abs.xml",
                                            "content.xml", "OEBPS/x.xhtml", "a" * 300]))
        members.insert(rng.randrange(len(members) + 1), (extra, rng.choice(
            [b"<x/>", b"", rng.randbytes(100), blob])))
        note = f"add {extra.filename[:40]}"
    elif kind == "empty":
        members[k] = (info, b"")
        note = f"{name} empty"
    elif kind == "rename":
        info = copy.copy(info)
        info.filename = rng.choice([name.upper(), name + ".bak", name.replace("/", "\\"),
                                    "x/" + name])
        members[k] = (info, blob)
        note = f"rename {name} -> {info.filename}"
    elif kind == "twice":
        members.insert(rng.randrange(len(members) + 1), (info, rng.choice([blob, b"<x/>"])))
        note = f"{name} twice"
    else:
        info = copy.copy(info)
        info.compress_type = (zipfile.ZIP_STORED if info.compress_type else
                              zipfile.ZIP_DEFLATED)
        members[k] = (info, blob)
        note = f"{name} compression {info.compress_type}"
    return _zipped(members), note


# -- PDF

_OBJ = re.compile(rb"(\d+) 0 obj")


def _objects(data: bytes) -> dict[int, tuple[int, int]]:
    """Object number -> the span of its body (between 'N 0 obj' and 'endobj')."""
    found = {}
    for m in _OBJ.finditer(data):
        end = data.find(b"endobj", m.end())
        if end > 0:
            found[int(m.group(1))] = (m.end(), end)
    return found


def _typed(data: bytes, kind: bytes) -> list[int]:
    """Numbers of the objects whose body holds /Type /kind."""
    return [n for n, (s, e) in _objects(data).items()
            if re.search(rb"/Type\s*/" + kind + rb"\b", data[s:e])]


def _sub_one(rng: random.Random, data: bytes, pattern: bytes, repl, what: str
             ) -> tuple[bytes, str]:
    """One match of `pattern`, chosen at random, replaced by repl(match) (bytes)."""
    found = list(re.finditer(pattern, data))
    if not found:
        return rng.choice(BYTES)(rng, data)
    m = rng.choice(found)
    new = repl(m)
    return data[: m.start()] + new + data[m.end() :], \
        f"{what}: {m.group()[:40]!r} -> {new[:40]!r}"


def _in_object(data: bytes, n: int, add: bytes) -> bytes:
    """`add` put into object n's dictionary, just after its '<<'."""
    span = _objects(data).get(n)
    if span is None:
        return data
    at = data.find(b"<<", span[0], span[1])
    return data if at < 0 else data[: at + 2] + add + data[at + 2 :]


def bad_length(rng, data):
    value = rng.choice([b"0", b"-5", b"99999999999", b"7", b"999 0 R", b"1.5", b"/Name"])
    return _sub_one(rng, data, rb"/Length \d+", lambda m: b"/Length " + value, "length")


def broken_xref(rng, data):
    kind = rng.choice(["offset", "startxref", "drop", "size", "prev"])
    if kind == "offset":
        return _sub_one(rng, data, rb"\d{10} \d{5} [nf]",
                        lambda m: f"{rng.randrange(10**10):010d}".encode() + m.group()[10:],
                        "xref offset")
    if kind == "startxref":
        return _sub_one(rng, data, rb"startxref\s+\d+",
                        lambda m: b"startxref\n" + rng.choice([b"0", b"-1", b"99999999", b"12"]),
                        "startxref")
    if kind == "prev":
        return _sub_one(rng, data, rb"trailer\s*<<", lambda m: m.group() + b"/Prev 9 ",
                        "trailer /Prev")
    if kind == "size":
        return _sub_one(rng, data, rb"/Size \d+", lambda m: b"/Size " + rng.choice(
            [b"-1", b"0", b"2147483648"]), "trailer size")
    start = data.rfind(b"xref")
    end = data.find(b"trailer", start)
    if start < 0 or end < 0:
        return truncate(rng, data)
    return data[:start] + data[end:], "xref table gone"


def parent_loop(rng, data):
    pages = _typed(data, b"Page")
    if not pages:
        return flip(rng, data)
    n = rng.choice(pages)
    span = _objects(data)[n]
    body = re.sub(rb"/Parent \d+ 0 R", f"/Parent {n} 0 R".encode(), data[span[0] : span[1]])
    return data[: span[0]] + body + data[span[1] :], f"page {n} its own /Parent"


def kids_loop(rng, data):
    trees = _typed(data, b"Pages")
    if not trees:
        return flip(rng, data)
    n = rng.choice(trees)
    pages = _typed(data, b"Page")
    extra = rng.choice([f"{n} 0 R", *(f"{p} 0 R" for p in pages), "999 0 R", "null", "7"])
    return _sub_one(rng, data, rb"/Kids\s*\[", lambda m: m.group() + extra.encode() + b" ",
                    f"/Kids of {n} + {extra}")


def bad_filter(rng, data):
    name = rng.choice([b"/FlateDecode", b"/LZWDecode", b"/ASCII85Decode", b"/ASCIIHexDecode",
                       b"/RunLengthDecode", b"/CCITTFaxDecode", b"/DCTDecode", b"/JBIG2Decode",
                       b"/JPXDecode", b"/Crypt", b"/Bogus", b"[/FlateDecode /FlateDecode]",
                       b"/FlateDecode /DecodeParms << /Predictor 15 /Columns 99999999 >>"])
    return _sub_one(rng, data, rb"<<\s*/Length \d+", lambda m: m.group() + b" /Filter " + name,
                    "filter")


def huge_count(rng, data):
    return _sub_one(rng, data, rb"/Count \d+", lambda m: b"/Count " + rng.choice(
        [b"2147483647", b"-1", b"100000000000000000000", b"0"]), "count")


def bad_size(rng, data):
    kind = rng.choice(["box", "font", "matrix", "width"])
    if kind == "box":
        return _sub_one(rng, data, rb"/MediaBox\s*\[[^\]]*\]", lambda m: b"/MediaBox " + rng.choice(
            [b"[0 0 -400 -400]", b"[0 0 1e30 1e30]", b"[0 0 0 0]", b"[0 0 400]",
             b"[400 400 0 0]", b"[0 0 99999999999 5]"]), "media box")
    if kind == "font":
        return _sub_one(rng, data, rb"\d+ Tf", lambda m: rng.choice(
            [b"-10 Tf", b"0 Tf", b"1e30 Tf", b"99999 Tf"]), "font size")
    if kind == "matrix":
        return _sub_one(rng, data, rb"1 0 0 1 [\d.]+ [\d.]+ Tm", lambda m: rng.choice(
            [b"0 0 0 0 0 0 Tm", b"1e30 0 0 1e30 0 0 Tm", b"-1 0 0 -1 -5 -5 Tm"]), "text matrix")
    return _sub_one(rng, data, rb"/(FirstChar|LastChar|Width|Height) \d+",
                    lambda m: m.group().split(b" ")[0] + rng.choice([b" -1", b" 99999999"]),
                    "size")


def bad_font(rng, data):
    kind = rng.choice(["encoding", "base", "type0", "tounicode", "widths"])
    if kind == "encoding":
        name = rng.choice([b"/Identity-H", b"/UniJIS-UCS2-H", b"/Bogus-CMap",
                           b"/..#2F..#2F..#2Fetc#2Fpasswd", b"/90ms-RKSJ-V", b"7"])
        fonts = _typed(data, b"Font")
        if not fonts:
            return flip(rng, data)
        n = rng.choice(fonts)
        span = _objects(data)[n]
        body = re.sub(rb"/Encoding\s*(/\w+|\d+ 0 R)", b"", data[span[0] : span[1]])
        data = data[: span[0]] + body + data[span[1] :]
        return _in_object(data, n, b"/Encoding " + name + b" "), f"font {n} /Encoding {name!r}"
    if kind == "base":
        return _sub_one(rng, data, rb"/BaseFont\s*/[\w+-]+", lambda m: b"/BaseFont " + rng.choice(
            [b"/Bogus", b"/", b"/" + b"A" * 5000, b"(str)"]), "base font")
    if kind == "type0":
        return _sub_one(rng, data, rb"/Subtype\s*/(Type1|TrueType)", lambda m: rng.choice(
            [b"/Subtype /Type0", b"/Subtype /Type3", b"/Subtype /CIDFontType2"]), "font type")
    if kind == "tounicode":
        return _sub_one(rng, data, rb"beginbfchar|beginbfrange|begincodespacerange|<[0-9A-Fa-f]+>",
                        lambda m: rng.choice([b"beginbfrange", b"<>", b"<FFFFFFFF>", b"<0000>",
                                              b"<0020> <FFFF> <0000>", b"usecmap /X"]),
                        "cmap")
    return _sub_one(rng, data, rb"/Widths\s*\[", lambda m: rng.choice(
        [b"/Widths 5 /Old [", b"/Widths [ -1e30 (x) "]), "widths")


def no_resources(rng, data):
    return _sub_one(rng, data, rb"/Resources\s*(\d+ 0 R|<<)", lambda m: rng.choice(
        [b"/Resources 999 0 R", b"/Resources null", b"/Resources [", b"/Fuzz <<"]),
        "resources")


def bad_operators(rng, data):
    return _sub_one(rng, data, rb"BT|ET|Tj|TJ|Td|q\n|Q\n|re\n|\) Tj", lambda m: rng.choice(
        [b"", b"BT BT", b"Q Q Q", b"q " * 1000, b"(x) Tj " * 500, b"[(a) -99999 (b)] TJ",
         b"/F99 12 Tf (x) Tj", b"1 0 0 1 0 0 cm " * 100, b"/Im1 Do", b"BI /W 10 /H 10 ID \xff EI",
         b"<00ff> Tj", b"(\\", m.group() * 3]), "operator")


def drop_object(rng, data):
    objects = _objects(data)
    if not objects:
        return truncate(rng, data)
    n = rng.choice(sorted(objects))
    start = data.rfind(b"\n", 0, objects[n][0]) + 1
    end = objects[n][1] + len(b"endobj")
    if rng.random() < 0.5:
        return data[:start] + data[end:], f"object {n} gone"
    return data[:end] + b"\n" + data[start:end] + data[end:], f"object {n} twice"


PDF: list[Mutation] = [bad_length, broken_xref, parent_loop, kids_loop, bad_filter, huge_count,
                       bad_size, bad_font, no_resources, bad_operators, drop_object]


# -- text formats

_CONTROLS = ["\x00", "\x01", "\x08", "\x0b", "\x0c", "\x1b", "\x7f", "\x85", "\u2028", "\u2029",
             "\u202e", "\u200b", "\ufeff", "\ufffe", "\U0010ffff", "\u0301" * 50]


def _text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def _bytes_of(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def control_characters(rng, data):
    text = _text(data)
    for _ in range(rng.choice([1, 5, 50])):
        at = rng.randrange(len(text) + 1)
        text = text[:at] + rng.choice(_CONTROLS) + text[at:]
    return _bytes_of(text), "control characters"


def bad_utf8(rng, data):
    at = rng.randrange(len(data) + 1)
    chunk = rng.choice([b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xff", b"\xc3", b"\xc0\xaf",
                        b"\xf4\x90\x80\x80", b"\xe2\x82"]) * rng.choice([1, 3])
    return data[:at] + chunk + data[at:], f"{chunk!r} at {at}"


def bom(rng, data):
    kind = rng.choice(["utf-8 bom", "utf-16", "utf-16-be", "utf-32", "two boms", "bom alone",
                       "latin-1"])
    text = _text(data)
    if kind == "utf-8 bom":
        return b"\xef\xbb\xbf" + data, kind
    if kind == "two boms":
        return b"\xef\xbb\xbf\xef\xbb\xbf" + data, kind
    if kind == "bom alone":
        return rng.choice([b"\xff\xfe", b"\xfe\xff", b"\xef\xbb\xbf"]) + data, kind
    if kind == "latin-1":
        return text.encode("latin-1", "replace"), kind
    return text.encode(kind, "surrogatepass"), kind


def line_ends(rng, data):
    parts = re.split(rb"(\r\n|\n|\r)", data)
    return b"".join(rng.choice([b"\n", b"\r\n", b"\r", b"\n\r"]) if k % 2 else p
                    for k, p in enumerate(parts)), "mixed line ends"


def long_line(rng, data):
    at = rng.randrange(len(data) + 1)
    chunk = rng.choice([b"word ", b"a", b" ", b"\t", b"-", b"%s ", b"<b>", b"http://x/",
                        b"\xc3\xa9"]) * rng.choice([10_000, 200_000])
    return data[:at] + chunk + data[at:], f"{len(chunk)} bytes in a line at {at}"


def lines(rng, data):
    rows = data.splitlines(keepends=True)
    if len(rows) < 2:
        return duplicate(rng, data)
    kind = rng.choice(["drop", "repeat", "move", "swap"])
    a, b = sorted(rng.sample(range(len(rows)), 2))
    if kind == "drop":
        del rows[a:b]
    elif kind == "repeat":
        rows[b:b] = rows[a:b] * rng.choice([1, 2, 500])
    elif kind == "move":
        rows.insert(rng.randrange(len(rows)), rows.pop(a))
    else:
        rows[a], rows[b] = rows[b], rows[a]
    return b"".join(rows), f"{kind} lines {a}:{b}"


_NESTS = {
    "html": [("<b>", "</b>"), ("<div>", "</div>"), ("<p>", ""), ("<table><tr><td>", ""),
             ("<ul><li>", "</li></ul>"), ("<a href='x'>", "</a>"), ("<!--", "")],
    "md": [("> ", ""), ("*", "*"), ("[", "](x)"), ("  - ", ""), ("**", ""), ("`", ""),
           ("<b>", "</b>"), ("![", "]")],
    "xliff": [('<g id="1">', "</g>"), ('<bpt id="1">', ""), ('<mrk mtype="x">', "</mrk>"),
              ('<pc id="1">', "</pc>")],
    "srt": [("<i>", "</i>"), ("<font color='red'>", ""), ("{\\i1}", "")],
    "txt": [("(", ")"), ("%(", ")s"), ("{", "}"), ("<", ">")],
    "po": [('"', '"\n'), ("%(", ")s"), ("\\", "")],
}


def markup_nesting(fmt: str) -> Mutation:
    def nest_markup(rng, data):
        open_, close = rng.choice(_NESTS[fmt])
        depth = rng.choice([100, 2000, 50_000])
        at = _after_a_tag(rng, data) if fmt in ("html", "xliff") else rng.randrange(len(data) + 1)
        chunk = (open_ * depth + "nested words" + close * depth).encode()
        return data[:at] + chunk + data[at:], f"{open_!r} nested {depth} deep at {at}"

    return nest_markup


TEXT: list[Mutation] = [control_characters, bad_utf8, bom, line_ends, long_line, lines]


def mutations(fmt: str) -> list[tuple[Mutation, int]]:
    """The mutations a format's cases draw from, with their weights."""
    if fmt in ZIPPED:
        return [(zip_mutation, 8), *((m, 1) for m in BYTES)]
    if fmt == "pdf":
        return [*((m, 3) for m in PDF), *((m, 1) for m in BYTES)]
    text = [*((m, 2) for m in TEXT), (markup_nesting(fmt), 2), *((m, 1) for m in BYTES)]
    if fmt in ("xliff", "html"):
        text += [(m, 2) for m in XML]
    return text


@dataclass
class Case:
    fmt: str
    seed: int
    number: int
    data: bytes = b""
    source: int = 0  # which of the format's seeds it started from
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.seed}-{self.number}.{self.fmt}"


def make_case(fmt: str, seed: int, number: int) -> Case:
    """Case `number` of format `fmt` under `seed`: the same bytes on every run."""
    rng = random.Random(f"{seed}:{fmt}:{number}")
    case = Case(fmt, seed, number)
    case.source = rng.randrange(len(seeds()[fmt]))
    data = seeds()[fmt][case.source]
    choices, weights = zip(*mutations(fmt), strict=True)
    for mutation in rng.choices(choices, weights, k=rng.choice([1, 1, 1, 2, 3])):
        data, note = mutation(rng, data)
        case.notes.append(f"{mutation.__name__}: {note}")
    case.data = data
    return case


# ---------------------------------------------------------------- running a case


@dataclass
class Outcome:
    kind: str  # one of OUTCOMES
    detail: str = ""  # the refusal's message, the exception, the signal
    where: str = ""  # a crash's innermost frame in app/ (what tells crashes apart)
    trace: str = ""
    seconds: float = 0.0

    @property
    def key(self) -> str:
        """What tells one problem from another: the kind, the exception's type and where."""
        head = self.detail.split(":", 1)[0] if self.kind == "crash" else ""
        return f"{self.kind} {head} {self.where}".strip()


_STAMPS = re.compile(rb"/(CreationDate|ModDate) *\([^)]*\)|/ID *\[[^\]]*\]")


def digest(data: bytes) -> str:
    """The output's hash, less what holds the time it was written (a zip's entry times, a
    PDF's dates and /ID): the same file written a second later has the same digest."""
    h = hashlib.sha256()
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            for info in z.infolist():
                h.update(f"{info.filename}\0{info.compress_type}\0".encode() + z.read(info))
    except Exception:  # not an archive
        h = hashlib.sha256(_STAMPS.sub(b"", data))
    return h.hexdigest()[:16]


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if f"{os.sep}app{os.sep}" in f.filename] or frames
    return f"{Path(ours[-1].filename).name}:{ours[-1].lineno}" if ours else ""


def _opens(fmt: str, data: bytes) -> bool:
    try:
        SHAPES[fmt](data)
    except documents.DocumentError:
        # a text format's check decodes a file that is not UTF-8 as windows-1252, where the
        # path (given no source language) guessed its code page and wrote it in that: read it
        # as the path reads it
        try:
            documents.extract(data, fmt)
        except documents.DocumentError:
            return False
    except Exception:
        return False
    return True


def _translate(case_data: bytes, fmt: str, translate) -> tuple[Outcome, bytes | None]:
    try:
        out = documents.translate_document(case_data, fmt, translate)
    except documents.DocumentError as exc:
        return Outcome("refused", str(exc)), None
    except MemoryError as exc:
        return Outcome("memory", f"MemoryError: {exc}"[:300], _where(exc),
                       traceback.format_exc()), None
    except Exception as exc:
        return Outcome("crash", f"{type(exc).__name__}: {exc}"[:300], _where(exc),
                       traceback.format_exc()), None
    if not isinstance(out, bytes):
        return Outcome("crash", f"translate_document returned {type(out).__name__}"), None
    return Outcome("ok", digest(out)), out


def _checked(outcome: Outcome, case_data: bytes, fmt: str, out: bytes | None) -> Outcome:
    """`ok` as it was, or `broken` where the output does not open and the input does."""
    if out is not None and not _opens(fmt, out) and _opens(fmt, case_data):
        return Outcome("broken", f"the output ({len(out)} bytes) does not open as .{fmt}; "
                                 "the input does", seconds=outcome.seconds)
    return outcome


def _child(pipe, data: bytes, fmt: str, translate, memory_mb: int, clean: bytes | None,
           checks: bool) -> None:
    """In the child: the case (sent as soon as it is done), then the output opened with the
    format's library (sent again), then (with `clean`) the clean seed's digest after it."""
    if memory_mb:
        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    null = os.open(os.devnull, os.O_WRONLY)  # libraries' warnings, not the report's
    os.dup2(null, 1)
    os.dup2(null, 2)
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    started = time.perf_counter()
    outcome, out = _translate(data, fmt, translate)
    outcome.seconds = time.perf_counter() - started
    pipe.send(outcome)
    if not checks:
        return
    outcome = _checked(outcome, data, fmt, out)
    after = None
    if clean is not None and outcome.kind in ("ok", "refused"):
        again, _ = _translate(clean, fmt, translate)
        after = again.detail if again.kind == "ok" else f"{again.kind}: {again.detail}"
    pipe.send((outcome, after))
    pipe.close()


def _receive(pipe, seconds: float):
    try:
        return pipe.recv() if pipe.poll(seconds) else None
    except (EOFError, OSError):
        return None


def run_case(data: bytes, fmt: str, translate=reverse, timeout: float = 20.0,
             memory_mb: int = 2048, clean: bytes | None = None,
             expected: str | None = None, checks: bool = True) -> Outcome:
    """One case in a child process (forked: it starts with what this process has imported),
    killed past `timeout` seconds. The checks after it (the output opened with the format's
    library; with `clean` and its `expected` output digest, a `leak` when the clean file comes
    out otherwise after the case) get `timeout` seconds of their own (a library slow to open
    the output is not the document path's time); `checks=False` leaves them out."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(send, data, fmt, translate, memory_mb, clean,
                                                   checks), daemon=True)
    started = time.perf_counter()
    child.start()
    send.close()
    done = _receive(receive, timeout)
    elapsed = time.perf_counter() - started
    if done is None and child.is_alive():
        child.kill()
        child.join()
        return Outcome("timeout", f"still running after {timeout:g} s", seconds=elapsed)
    checked = _receive(receive, timeout) if done is not None and checks else None
    child.join(1)
    if child.is_alive():
        child.kill()
        child.join()
    if done is None:
        code = child.exitcode
        name = signal.Signals(-code).name if code is not None and code < 0 else f"exit {code}"
        kind = "memory" if code == -signal.SIGKILL else "crash"
        return Outcome(kind, f"the child died ({name})", name, seconds=elapsed)
    if checked is None:
        done.detail += " (its checks did not finish)" if checks else ""
        return done
    outcome, after = checked
    outcome.seconds = done.seconds
    if expected is not None and after is not None and after != expected:
        return Outcome("leak", f"the clean seed came out as {after}, not {expected}, after "
                               f"this case ({outcome.kind})", seconds=outcome.seconds)
    return outcome


# ---------------------------------------------------------------- the run


@dataclass
class Report:
    counts: dict[str, Counter] = field(default_factory=dict)  # format -> outcome -> cases
    problems: dict[str, list[tuple[Case, Outcome]]] = field(default_factory=dict)  # by key
    refusals: Counter = field(default_factory=Counter)  # (format, message head) -> cases
    slowest: dict[str, float] = field(default_factory=dict)

    def add(self, case: Case, outcome: Outcome) -> None:
        self.counts.setdefault(case.fmt, Counter())[outcome.kind] += 1
        self.slowest[case.fmt] = max(self.slowest.get(case.fmt, 0.0), outcome.seconds)
        if outcome.kind in PROBLEMS:
            self.problems.setdefault(f"{case.fmt}: {outcome.key}", []).append((case, outcome))
        elif outcome.kind == "refused":
            self.refusals[case.fmt, re.sub(r"\d+", "N", outcome.detail)[:90]] += 1

    def table(self) -> str:
        rows = [f"{'format':<7}{'cases':>6}" + "".join(f"{k:>9}" for k in OUTCOMES)
                + f"{'slowest s':>11}"]
        for fmt, counts in self.counts.items():
            rows.append(f"{fmt:<7}{sum(counts.values()):>6}"
                        + "".join(f"{counts[k]:>9}" for k in OUTCOMES)
                        + f"{self.slowest[fmt]:>11.2f}")
        return "\n".join(rows)


def _clean_digests(fmts: list[str], timeout: float, memory_mb: int, translate
                   ) -> dict[tuple[str, int], str]:
    """Each seed's output digest from a fresh child (what a case's child must get again)."""
    found = {}
    for fmt in fmts:
        for k, data in enumerate(seeds()[fmt]):
            outcome = run_case(data, fmt, translate, timeout, memory_mb)
            if outcome.kind != "ok":
                raise RuntimeError(f"seed {k} of .{fmt} is not translated: {outcome.kind} "
                                   f"{outcome.detail}\n{outcome.trace}")
            found[fmt, k] = outcome.detail
    return found


def _save(out: Path, case: Case, outcome: Outcome) -> Path:
    folder = out / case.fmt
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / case.name
    path.write_bytes(case.data)
    path.with_name(case.name + ".txt").write_text(
        f"{outcome.kind}: {outcome.detail}\nseed file {case.source} of .{case.fmt}; mutations:\n"
        + "".join(f"  {n}\n" for n in case.notes)
        + f"reproduce: python -m bench.fuzz_documents --replay {path}\n\n{outcome.trace}")
    return path


def fuzz(fmts: list[str], seed: int, cases: int, timeout: float, memory_mb: int,
         out: Path | None = None, translate=reverse, leaks: bool = True,
         say: Callable[[str], None] = print) -> Report:
    report = Report()
    clean = _clean_digests(fmts, timeout, memory_mb, translate) if leaks else {}
    for fmt in fmts:
        for number in range(cases):
            case = make_case(fmt, seed, number)
            source = seeds()[fmt][case.source]
            outcome = run_case(case.data, fmt, translate, timeout, memory_mb,
                               source if leaks else None, clean.get((fmt, case.source)))
            report.add(case, outcome)
            if outcome.kind in PROBLEMS:
                saved = f" -> {_save(out, case, outcome)}" if out else ""
                say(f"{case.name}: {outcome.kind} {outcome.where} {outcome.detail[:160]} "
                    f"[{' | '.join(case.notes)[:200]}]{saved}")
    return report


def replay(path: Path, timeout: float, memory_mb: int) -> int:
    """One saved input through the path again, in a child, and its traceback printed."""
    fmt = path.suffix.lstrip(".").lower()
    outcome = run_case(path.read_bytes(), fmt, reverse, timeout, memory_mb)
    print(f"{path}: {outcome.kind} in {outcome.seconds:.2f} s: {outcome.detail}")
    if outcome.trace:
        print(outcome.trace)
    return 1 if outcome.kind in PROBLEMS else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.fuzz_documents",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cases", type=int, default=15, help="cases per format")
    p.add_argument("--formats", nargs="+", default=FORMATS, choices=FORMATS)
    p.add_argument("--timeout", type=float, default=20.0, help="seconds of wall time a case")
    p.add_argument("--memory-mb", type=int, default=2048,
                   help="a case's address space (RLIMIT_AS), in MB; 0: no limit")
    p.add_argument("--out", type=Path, help="write each problem's input and note here")
    p.add_argument("--no-leaks", action="store_true",
                   help="do not translate the clean seed again after each case")
    p.add_argument("--refusals", action="store_true", help="list the refusals' messages")
    p.add_argument("--replay", type=Path, nargs="+", help="run these saved inputs again")
    args = p.parse_args(argv)
    if args.replay:
        return max(replay(path, args.timeout, args.memory_mb) for path in args.replay)
    started = time.perf_counter()
    report = fuzz(args.formats, args.seed, args.cases, args.timeout, args.memory_mb, args.out,
                  leaks=not args.no_leaks)
    print(f"\nseed {args.seed}, {args.cases} cases per format, "
          f"{time.perf_counter() - started:.0f} s\n{report.table()}")
    if args.refusals:
        print("\nrefusals:")
        for (fmt, message), n in report.refusals.most_common():
            print(f"{n:>5}  .{fmt}: {message}")
    if report.problems:
        print("\nproblems:")
        for key, found in report.problems.items():
            case, outcome = found[0]
            where = (f"python -m bench.fuzz_documents --replay {args.out / case.fmt / case.name}"
                     if args.out else f"--seed {case.seed}, case {case.number}")
            print(f"{len(found):>5}  {key}: {outcome.detail[:160]}\n       {where}")
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
