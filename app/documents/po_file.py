"""gettext catalogs (.po, .pot) with polib: each entry's msgid (and msgid_plural) is a segment;
the translation goes to msgstr (msgstr[0] and the other plural forms). The header, msgctxt,
flags, comments, references and obsolete entries stay as they were, and so do entries already
translated (not fuzzy): a translator's msgstr is not replaced by the model's.

A catalog is read in the charset its header declares where it is not UTF-8, and written in it
again where that holds the translations; else (ASCII declared and an umlaut translated, or
none declared) in UTF-8, and the header says so. A template's placeholders (charset=CHARSET,
nplurals=INTEGER, as xgettext writes them) become UTF-8 and the two forms written (gettext's
default rule), so that the catalog compiles."""

from __future__ import annotations

import codecs
import re

import polib

from app.documents import Document, charset

_CHARSET = re.compile(r"charset=([\w.:-]+)")
_TWO_FORMS = "nplurals=2; plural=(n != 1);"


def _decoded(data: bytes, legacy: str | None) -> str:
    """The catalog's text: UTF-8, else the charset its header declares, else the legacy code
    page (app.documents.charset)."""
    declared = _CHARSET.search(data[:4096].decode("ascii", "replace"))  # in the header
    try:
        name = codecs.lookup(declared.group(1)).name if declared else None
    except LookupError:  # a template's "CHARSET"
        name = None
    return charset.decode(data, legacy, name)[0]


_KEYWORDS = ("msgctxt", "msgid", "msgid_plural", "msgstr")
# 64 lines of a string only, one after the other (the line breaks str.splitlines cuts at)
_BREAK = "(?:\r\n|[\n\r\v\f\x1c-\x1e\x85\u2028\u2029])"
_MANY_LINES = re.compile(rf'(?:{_BREAK}[ \t]*"[^\n\r\v\f\x1c-\x1e\x85\u2028\u2029]*"[ \t]*){{64}}')
_UNESCAPED_QUOTE = re.compile(r'([^\\]|^)"')  # inside a string: polib refuses it


def _joined(text: str) -> str:
    """The catalog with each string written over several lines (a keyword's line, then lines
    of a string only that go on with it) on its first line, the others left blank: polib adds
    each such line to the string read so far by copying it (a message of thousands of lines
    cost their square), and skips blank lines (its errors name the same lines). A line that
    polib reads otherwise (a quote inside a string, obsolete or previous strings) ends the
    joining, and so does a backslash at a string's end (it would escape what is joined)."""
    if not _MANY_LINES.search(text):
        return text  # (a string over a few lines costs little: the catalog is read as it is)
    lines = text.splitlines(keepends=True)  # as polib cuts it
    contents = [line.splitlines()[0] if line.splitlines() else "" for line in lines]
    first, more = None, []  # the line a string starts on; the strings of the lines after it

    def join() -> None:
        if more:
            contents[first] = contents[first][:-1] + "".join(more) + '"'
            more.clear()

    for k, content in enumerate(contents):
        line = content.strip()
        if (first is not None and len(line) > 1 and line[0] == line[-1] == '"'
                and not _UNESCAPED_QUOTE.search(line[1:-1])):
            more.append(line[1:-1])
            contents[k] = " "  # blank (empty, a "\r" before it and a "\n" after it would join)
            if line[1:-1].endswith("\\"):
                join()
                first = None
            continue
        if not line:
            continue
        join()
        first = None
        keyword = line.split(None, 1)[0]
        rest = line[len(keyword) :].lstrip()
        if ((keyword in _KEYWORDS or re.fullmatch(r"msgstr\[\d+\]", keyword))
                and len(rest) > 1 and rest[0] == rest[-1] == '"'
                and not _UNESCAPED_QUOTE.search(rest[1:-1]) and not rest[1:-1].endswith("\\")):
            first, contents[k] = k, line
    join()
    return "".join(content + line[len(line.splitlines()[0]) if line.splitlines() else 0 :]
                   for content, line in zip(contents, lines, strict=True))


def extract(data: bytes, legacy: str | None = "cp1252") -> Document:
    catalog = polib.pofile(_joined(_decoded(data, legacy)))
    entries = [e for e in catalog if e.msgid and not e.obsolete and not e.translated()]
    segments = []
    for entry in entries:
        segments.append(entry.msgid)
        if entry.msgid_plural:
            segments.append(entry.msgid_plural)
    return Document("po", segments, (catalog, entries))


def rebuild(doc: Document, translations: list[str]) -> bytes:
    catalog, entries = doc.state
    texts = iter(translations)
    for entry in entries:
        singular = next(texts)
        if entry.msgid_plural:
            plural = next(texts)
            forms = sorted(entry.msgstr_plural) or [0, 1]
            entry.msgstr_plural = {n: singular if n == 0 else plural for n in forms}
        else:
            entry.msgstr = singular
    meta = catalog.metadata
    if any(e.msgid_plural for e in entries) and "INTEGER" in meta.get("Plural-Forms", "INTEGER"):
        meta["Plural-Forms"] = _TWO_FORMS
    declared = _CHARSET.search(meta.get("Content-Type", ""))
    if declared and declared.group(1).upper() != "CHARSET":
        try:
            return str(catalog).encode(declared.group(1))
        except (LookupError, UnicodeEncodeError):
            pass  # the translations have characters it lacks
    if declared:
        meta["Content-Type"] = _CHARSET.sub("charset=UTF-8", meta["Content-Type"])
    elif meta:  # a header without a charset: gettext reads the catalog as ASCII
        meta["Content-Type"] = "text/plain; charset=UTF-8"
    return str(catalog).encode("utf-8")
