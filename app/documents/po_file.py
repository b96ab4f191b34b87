"""gettext catalogs (.po, .pot) with polib: each entry's msgid (and msgid_plural) is a segment;
the translation goes to msgstr (msgstr[0] and the other plural forms). The header, msgctxt,
flags, comments, references and obsolete entries stay as they were, and so do entries already
translated (not fuzzy): a translator's msgstr is not replaced by the model's."""

from __future__ import annotations

import polib

from app.documents import Document
from app.documents.txt_file import decode_text


def extract(data: bytes) -> Document:
    text, _ = decode_text(data)
    catalog = polib.pofile(text)
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
    return str(catalog).encode(catalog.encoding or "utf-8")
