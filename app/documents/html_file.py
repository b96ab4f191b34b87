"""HTML (.html, .htm): each block's text, inline tags included, is a segment.

app.text.segment's splitter cuts text at every tag; here inline elements (<b>, <a href>, <span> ...)
stay inside their block's segment, so a sentence with a link is translated as one sentence and
app.text.protect keeps the tags. The attributes people read (alt, title, placeholder, aria-label)
are segments of their own, written back into their tags. Everything else (block tags, other
attributes, comments, script, style, code, translate="no") is copied byte for byte."""

from __future__ import annotations

import html
import re

from app.documents import Document
from app.documents.txt_file import decode_text, replaced
from app.text.protect import INLINE_TAGS, LINE_BREAK_TAGS, has_words, join_breaks
from app.text.segment import _HtmlSplitter, always

# attributes whose values people read (shown, or spoken by a screen reader), quoted
_READ_ATTRS = re.compile(
    r"""(\s(?:alt|title|placeholder|aria-label)\s*=\s*)(?:"([^"]*)"|'([^']*)')""", re.IGNORECASE)


class _BlockSplitter(_HtmlSplitter):
    """Marks inline tags outside verbatim elements as part of the text around them; a line
    break (app.text.protect.LINE_BREAK_TAGS) stays markup, so the text on each side of it is
    translated apart, unless a sentence runs on over it (app.text.protect.join_breaks).
    `tags`: (offset, text) of each start tag outside verbatim elements with an attribute
    people read."""

    def __init__(self, source: str) -> None:
        super().__init__(source)
        self.tags: list[tuple[int, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        super().handle_starttag(tag, attrs)
        self._keep_read_attrs()
        if tag in INLINE_TAGS and tag not in LINE_BREAK_TAGS and not self.skip:
            self.events[-1] = (self.events[-1][0], True)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        super().handle_startendtag(tag, attrs)
        self._keep_read_attrs()
        if tag in INLINE_TAGS and tag not in LINE_BREAK_TAGS and not self.skip:
            self.events[-1] = (self.events[-1][0], True)

    def _keep_read_attrs(self) -> None:
        text = self.get_starttag_text() or ""
        if not self.skip and _READ_ATTRS.search(text):  # skip: this tag's translate="no" too
            self.tags.append((self.events[-1][0], text))

    def handle_endtag(self, tag: str) -> None:
        super().handle_endtag(tag)
        if tag in INLINE_TAGS and tag not in LINE_BREAK_TAGS and not self.skip:
            self.events[-1] = (self.events[-1][0], True)


def chunks(source: str) -> list[tuple[str, bool]]:
    """The source cut into (chunk, translatable) runs whose concatenation is the source."""
    return _split(source)[0]


def _split(source: str) -> tuple[list[tuple[str, bool]], list[tuple[int, str]]]:
    """chunks(source), and the start tags with attributes people read (_BlockSplitter.tags)."""
    splitter = _BlockSplitter(source)
    splitter.feed(source)
    splitter.close()
    events = [(0, False)] + splitter.events + [(len(source), False)]
    out: list[tuple[str, bool]] = []
    for (start, kind), (end, _) in zip(events, events[1:], strict=False):
        if start >= end:
            continue
        if out and out[-1][1] == kind:
            out[-1] = (out[-1][0] + source[start:end], kind)
        else:
            out.append((source[start:end], kind))
    return join_breaks(out), splitter.tags


def extract(data: bytes) -> Document:
    source, encoding = decode_text(data)
    parts, tags = _split(source)
    targets = [i for i, (chunk, kind) in enumerate(parts) if kind and has_words(chunk)]
    segments = [parts[i][0].strip() for i in targets]
    values = []  # (tag offset, tag text, the value's span in it, its quote)
    for offset, text in tags:
        for m in _READ_ATTRS.finditer(text):
            group = 2 if m.group(2) is not None else 3
            if has_words(html.unescape(m.group(group))):
                values.append((offset, text, m.span(group), '"' if group == 2 else "'"))
                segments.append(m.group(group))  # escaped text, as the other segments
    return Document("html", segments, ([c for c, _ in parts], targets, encoding, values),
                    markup=True, wraps=always)  # a line break in HTML text is a space


_HTML_TAG = re.compile(r"<html\b[^>]*>", re.IGNORECASE)
_LANG = re.compile(r"""(\s(?:xml:)?lang\s*=\s*)(?:"[^"]*"|'[^']*'|[^\s>]+)""", re.IGNORECASE)


def rebuild(doc: Document, translations: list[str], target_lang: str | None = None) -> bytes:
    """The parts with their translations (as txt_file's rebuild), the tags with attributes
    people read written with their translated values; with target_lang, the <html> element's
    lang (and xml:lang) say the language it is now in, so that browsers, screen readers and
    search engines read it as such. Other elements' lang stays as written."""
    source, targets, encoding, values = doc.state
    parts = replaced(source, targets, translations[: len(targets)])
    # each tag with a translated attribute value, written anew (values of one tag in order)
    rewritten: dict[tuple[int, str], str] = {}
    for (offset, tag, (a, b), quote), value in zip(
            reversed(values), reversed(translations[len(targets):]), strict=True):
        escaped = value.strip().replace(quote, "&quot;" if quote == '"' else "&#x27;")
        old = rewritten.get((offset, tag), tag)
        rewritten[offset, tag] = old[:a] + escaped + old[b:]  # from the last value back
    if rewritten:
        starts = [0]
        for chunk in source:
            starts.append(starts[-1] + len(chunk))
        translated = set(targets)
        # from the last tag back, so that a part's earlier offsets still hold
        for (offset, tag), new in sorted(rewritten.items(), reverse=True):
            i = next(k for k in range(len(parts)) if starts[k] <= offset < starts[k + 1])
            if i in translated:  # an inline tag: unmask put it back as it was in the source
                parts[i] = parts[i].replace(tag, new)
            else:
                at = offset - starts[i]
                parts[i] = parts[i][:at] + new + parts[i][at + len(tag):]
    text = "".join(parts)
    if not target_lang:
        return text.encode(encoding)
    tag = _HTML_TAG.search(text)
    if tag is None:
        return text.encode(encoding)
    declared = _LANG.sub(lambda m: f'{m.group(1)}"{target_lang}"', tag.group())
    return (text[: tag.start()] + declared + text[tag.end():]).encode(encoding)
