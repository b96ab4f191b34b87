"""Markdown (.md), block by block: a paragraph's or list item's text after its block marker
(`# `, `> `, `- `, `1. `, `- [ ] `), with the lines that continue it (no marker of their own:
Markdown reads their line breaks as spaces), is a segment; table cells are segments; fenced
and indented code, link reference definitions, rules and table separators stay verbatim. The
line breaks inside a segment go back into its translation at the nearest spaces
(app.text.segment.rewrap). Inline code and link targets are protected spans (app.text.protect), so
`[the docs](setup.md)` keeps its target. Front matter (`---` ... `---` or `+++` ... `+++` at the
top), a setext heading's underline, HTML comments and lines of an HTML block (`<div ...>`) stay
verbatim too: translated, their keys, markers and attributes broke."""

from __future__ import annotations

import re

from app.documents import Document
from app.documents.txt_file import decode_text, replace_stripped, split_lines
from app.text.segment import always

_MARKER = re.compile(r"^(\s{0,3}(?:#{1,6}\s+|>\s?|[-*+]\s+(?:\[[ xX]\]\s+)?|\d{1,9}[.)]\s+)*)")
_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_VERBATIM = re.compile(
    r"^(?:\s{4,}|\t)\S"  # indented code
    r"|^\s{0,3}\[[^\]]+\]:\s"  # link reference definition
    r"|^\s{0,3}(?:[-*_]\s*){3,}$"  # thematic break
    r"|^\s*\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)*\|?\s*$"  # table separator
    r"|^\s{0,3}=+\s*$"  # setext heading underline
    r"|^\s{0,3}</?(?:address|article|aside|blockquote|center|details|dialog|div|dl|figure"
    r"|footer|form|h[1-6]|header|hr|iframe|nav|ol|p|picture|section|summary|table|ul)\b"
)
_FRONT_MATTER = re.compile(r"(?:---|\+\+\+)[ \t]*")
_CELL = re.compile(r"(\|)")
_INDENTED = re.compile(r"^(?:\s{4,}|\t)\S")


def _pieces(line: str) -> list[str]:
    """A line cut into its marker, then text pieces and separators (even positions after the
    marker are text): a table row is cut at its pipes."""
    marker = _MARKER.match(line).group(1)
    rest = line[len(marker) :]
    return [marker, *(_CELL.split(rest) if rest.lstrip().startswith("|") else [rest])]


def _continues(line: str) -> bool:
    """Whether a line right under a paragraph's line goes on with its text: no block marker,
    table row, fence, rule or link definition of its own (indented code cannot interrupt a
    paragraph, so an indented line goes on too)."""
    marker = _MARKER.match(line).group(1)
    if marker.strip() or line.lstrip().startswith("|") or _FENCE.match(line):
        return False
    return not _VERBATIM.match(line) or bool(_INDENTED.match(line))


def extract(data: bytes) -> Document:
    text, encoding = decode_text(data)
    lines, targets = split_lines(text)
    # (line index, piece index, the indices of the lines that continue that piece's text)
    cells: list[tuple[int, int, list[int]]] = []
    fence = None
    open_text = None  # the line index of a paragraph's or item's last line, while it runs
    comment = False  # inside an HTML comment
    front = _FRONT_MATTER.fullmatch(lines[0]) and len(lines) > 2 and lines[2].strip() and next(
        (i for i in range(2, len(lines), 2) if lines[i].strip() == lines[0].strip()
         or (lines[0].startswith("-") and lines[i].strip() == "...")), None)
    for i in targets:
        line = lines[i]
        if front and i <= front:
            continue
        if comment or line.lstrip().startswith("<!--"):
            comment = "-->" not in line[line.find("<!--") + 4 if not comment else 0 :]
            open_text = None
            continue
        if open_text == i - 2 and _continues(line):  # directly under it (lines[i - 1]: break)
            cells[-1][2].append(i)
            open_text = i
            continue
        open_text = None
        opened = _FENCE.match(line)
        if fence or opened:
            if opened and (fence is None or opened.group(1) == fence):
                fence = None if fence else opened.group(1)
            continue
        if _VERBATIM.match(line):
            continue
        pieces = _pieces(line)
        cells += [(i, k, []) for k in range(1, len(pieces), 2 if len(pieces) > 2 else 1)
                  if pieces[k].strip()]
        if len(pieces) == 2 and "#" not in pieces[0] and cells and cells[-1][0] == i:
            open_text = i  # a paragraph or item (not a heading, not a table row) may go on
    segments = [_text(lines, i, k, more).strip() for i, k, more in cells]
    return Document("md", segments, (lines, cells, encoding), wraps=always)


def _text(lines: list[str], i: int, k: int, more: list[int]) -> str:
    """A cell's text with the lines that continue it (and the line breaks between)."""
    return _pieces(lines[i])[k] + "".join(lines[j - 1] + lines[j] for j in more)


def rebuild(doc: Document, translations: list[str]) -> bytes:
    lines, cells, encoding = doc.state
    lines = list(lines)
    pieces = {i: _pieces(lines[i]) for i, _, _ in cells}
    for (i, k, more), text in zip(cells, translations, strict=True):
        pieces[i][k] = replace_stripped(_text(doc.state[0], i, k, more), text)
        for j in more:  # the translation holds their text and line breaks now
            lines[j - 1] = lines[j] = ""
    for i, parts in pieces.items():
        lines[i] = "".join(parts)
    return "".join(lines).encode(encoding)
