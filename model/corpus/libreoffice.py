"""Align LibreOffice help pages (English vs German) by paragraph id.

The Debian packages ``libreoffice-help-en-us`` and ``libreoffice-help-de``
ship the same set of pre-rendered HTML pages under
``usr/share/libreoffice/help/<lang>/text/...``.  Every translatable paragraph
or heading carries an id such as ``par_id3145669`` or ``hd_id3154788``, which
comes from the .xhp sources and is identical in every language.  Paragraphs are
paired by (relative path, id, occurrence) so embedded sections that repeat an id
inside one page stay aligned.  Platform switches (``<span hidden="true"
class="MAC">``) keep only the default variant.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

ID_RE = re.compile(r"^(?:par|hd)_id\w+$")
VOID = {"br", "img", "input", "meta", "link", "hr", "base", "wbr", "col", "area", "source"}
SKIP_TAGS = {"script", "style", "code", "pre", "nav"}


class _HelpParser(HTMLParser):
    """Collect the text of id-carrying paragraphs and headings of one page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, bool, bool]] = []  # (tag, is_capture_root, skips)
        self.buffer: list[str] | None = None
        self.current_id = ""
        self.items: list[tuple[str, str]] = []
        self.skip_depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = dict(attrs)
        if tag in VOID:
            if tag == "br" and self.buffer is not None:
                self.buffer.append(" ")
            return
        root = False
        elem_id = attr.get("id") or ""
        if self.buffer is None and ID_RE.match(elem_id):
            self.buffer, self.current_id, root = [], elem_id, True
        skips = (
            tag in SKIP_TAGS
            or ("hidden" in attr and not elem_id.startswith("default"))
            or attr.get("class") == "bug"
        )
        self.skip_depth += skips
        self.stack.append((tag, root, skips))

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID or not any(entry[0] == tag for entry in self.stack):
            return
        while self.stack:
            name, root, skips = self.stack.pop()
            self.skip_depth -= skips
            if root and self.buffer is not None:
                self.items.append((self.current_id, "".join(self.buffer)))
                self.buffer = None
            if name == tag:
                break

    def handle_data(self, data: str) -> None:
        if self.buffer is not None and self.skip_depth == 0:
            self.buffer.append(data)


def page_paragraphs(text: str) -> dict[tuple[str, int], str]:
    """Map (id, occurrence) to the raw text of each id-carrying element of a page."""
    parser = _HelpParser()
    parser.feed(text)
    parser.close()
    seen: dict[str, int] = {}
    out = {}
    for elem_id, body in parser.items:
        n = seen.get(elem_id, 0)
        seen[elem_id] = n + 1
        out[(elem_id, n)] = body
    return out


def help_root(unpacked: Path, lang: str) -> Path:
    """The ``help/<lang>`` directory inside an unpacked help package."""
    return unpacked / "usr" / "share" / "libreoffice" / "help" / lang


def align_pages(en_page: str, de_page: str) -> list[tuple[str, str]]:
    """Pair the paragraphs of an English page with those of its German twin."""
    en, de = page_paragraphs(en_page), page_paragraphs(de_page)
    return [(en[key], de[key]) for key in en if key in de]


def align_help(en_root: Path, de_root: Path) -> Iterator[tuple[str, str]]:
    """Yield raw (English, German) paragraph pairs for every page present in both trees."""
    for en_file in sorted(en_root.rglob("*.html")):
        rel = en_file.relative_to(en_root)
        de_file = de_root / rel
        if not de_file.is_file():
            continue
        en_text = en_file.read_text(encoding="utf-8", errors="replace")
        de_text = de_file.read_text(encoding="utf-8", errors="replace")
        yield from align_pages(en_text, de_text)
