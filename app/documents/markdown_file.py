"""Markdown (.md), line by line: a line's text after its block marker (`# `, `> `, `- `, `1. `,
`- [ ] `) is a segment, table cells are segments, fenced and indented code, link reference
definitions, rules and table separators stay verbatim. Inline code and link targets are
protected spans (app.protect), so `[the docs](setup.md)` keeps its target."""

from __future__ import annotations

import re

from app.documents import Document
from app.documents.txt_file import decode_text, replace_stripped, split_lines

_MARKER = re.compile(r"^(\s{0,3}(?:#{1,6}\s+|>\s?|[-*+]\s+(?:\[[ xX]\]\s+)?|\d{1,9}[.)]\s+)*)")
_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_VERBATIM = re.compile(
    r"^(?:\s{4,}|\t)\S"  # indented code
    r"|^\s{0,3}\[[^\]]+\]:\s"  # link reference definition
    r"|^\s{0,3}(?:[-*_]\s*){3,}$"  # thematic break
    r"|^\s*\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)*\|?\s*$"  # table separator
)
_CELL = re.compile(r"(\|)")


def _pieces(line: str) -> list[str]:
    """A line cut into its marker, then text pieces and separators (even positions after the
    marker are text): a table row is cut at its pipes."""
    marker = _MARKER.match(line).group(1)
    rest = line[len(marker) :]
    return [marker, *(_CELL.split(rest) if rest.lstrip().startswith("|") else [rest])]


def extract(data: bytes) -> Document:
    text, encoding = decode_text(data)
    lines, targets = split_lines(text)
    cells: list[tuple[int, int]] = []  # (line index, piece index)
    fence = None
    for i in targets:
        line = lines[i]
        opened = _FENCE.match(line)
        if fence or opened:
            if opened and (fence is None or opened.group(1) == fence):
                fence = None if fence else opened.group(1)
            continue
        if _VERBATIM.match(line):
            continue
        pieces = _pieces(line)
        cells += [(i, k) for k in range(1, len(pieces), 2 if len(pieces) > 2 else 1)
                  if pieces[k].strip()]
    segments = [_pieces(lines[i])[k].strip() for i, k in cells]
    return Document("md", segments, (lines, cells, encoding))


def rebuild(doc: Document, translations: list[str]) -> bytes:
    lines, cells, encoding = doc.state
    lines = list(lines)
    pieces = {i: _pieces(lines[i]) for i, _ in cells}
    for (i, k), text in zip(cells, translations, strict=True):
        pieces[i][k] = replace_stripped(pieces[i][k], text)
    for i, parts in pieces.items():
        lines[i] = "".join(parts)
    return "".join(lines).encode(encoding)
