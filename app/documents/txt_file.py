"""Plain text (.txt): every paragraph (lines between blank lines) is a segment, split into
lines and sentences by app.text.segment, where a line break inside a sentence (text wrapped at a
width)
does not cut it; line breaks and indentation stay."""

from __future__ import annotations

import re

from app.documents import Document, charset

_LINE = re.compile(r"(\r\n|\n|\r)")
# a paragraph break; a lone \r is one only where no \n follows (else one Windows line break,
# \r then \n, read as two)
_BLANK_LINES = re.compile(r"((?:\r\n|\n|\r(?!\n))(?:[ \t]*(?:\r\n|\n|\r(?!\n)))+)")


def split_lines(text: str) -> tuple[list[str], list[int]]:
    """Parts (lines and line breaks, in order) and the indices of the parts to translate."""
    parts = _LINE.split(text)
    return parts, [i for i, p in enumerate(parts) if i % 2 == 0 and p.strip()]


def split_paragraphs(text: str) -> tuple[list[str], list[int]]:
    """Parts (paragraphs and the blank lines between them, in order) and the indices of the
    parts to translate."""
    parts = _BLANK_LINES.split(text)
    return parts, [i for i, p in enumerate(parts) if i % 2 == 0 and p.strip()]


def extract(data: bytes, legacy: str | None = "cp1252") -> Document:
    text, encoding = charset.decode(data, legacy)
    parts, targets = split_paragraphs(text)
    return Document("txt", [parts[i].strip() for i in targets], (parts, targets, encoding))


def replace_stripped(original: str, translation: str) -> str:
    """translation with the leading and trailing whitespace of original."""
    lead = original[: len(original) - len(original.lstrip())]
    trail = original[len(original.rstrip()) :]
    return lead + translation.strip() + trail


def replaced(parts: list[str], targets: list[int], translations: list[str]) -> list[str]:
    """parts with each target part replaced by its translation (its outer whitespace kept)."""
    parts = list(parts)
    for i, text in zip(targets, translations, strict=True):
        parts[i] = replace_stripped(parts[i], text)
    return parts


def rebuild(doc: Document, translations: list[str]) -> bytes:
    parts, targets, encoding = doc.state
    return charset.encode("".join(replaced(parts, targets, translations)), encoding)
