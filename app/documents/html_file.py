"""HTML (.html, .htm): each block's text, inline tags included, is a segment.

app.text.segment's splitter cuts text at every tag; here inline elements (<b>, <a href>, <span> ...)
stay inside their block's segment, so a sentence with a link is translated as one sentence and
app.text.protect keeps the tags. Everything else (block tags, attributes, comments, script, style,
code, translate="no") is copied byte for byte."""

from __future__ import annotations

import re

from app.documents import Document, txt_file
from app.documents.txt_file import decode_text
from app.text.protect import INLINE_TAGS, LINE_BREAK_TAGS, has_words, join_breaks
from app.text.segment import _HtmlSplitter, always


class _BlockSplitter(_HtmlSplitter):
    """Marks inline tags outside verbatim elements as part of the text around them; a line
    break (app.text.protect.LINE_BREAK_TAGS) stays markup, so the text on each side of it is
    translated apart, unless a sentence runs on over it (app.text.protect.join_breaks)."""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        super().handle_starttag(tag, attrs)
        if tag in INLINE_TAGS and tag not in LINE_BREAK_TAGS and not self.skip:
            self.events[-1] = (self.events[-1][0], True)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        super().handle_startendtag(tag, attrs)
        if tag in INLINE_TAGS and tag not in LINE_BREAK_TAGS and not self.skip:
            self.events[-1] = (self.events[-1][0], True)

    def handle_endtag(self, tag: str) -> None:
        super().handle_endtag(tag)
        if tag in INLINE_TAGS and tag not in LINE_BREAK_TAGS and not self.skip:
            self.events[-1] = (self.events[-1][0], True)


def chunks(source: str) -> list[tuple[str, bool]]:
    """The source cut into (chunk, translatable) runs whose concatenation is the source."""
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
    return join_breaks(out)


def extract(data: bytes) -> Document:
    source, encoding = decode_text(data)
    parts = chunks(source)
    targets = [i for i, (chunk, kind) in enumerate(parts) if kind and has_words(chunk)]
    segments = [parts[i][0].strip() for i in targets]
    return Document("html", segments, ([c for c, _ in parts], targets, encoding), markup=True,
                    wraps=always)  # a line break in HTML text is a space


_HTML_TAG = re.compile(r"<html\b[^>]*>", re.IGNORECASE)
_LANG = re.compile(r"""(\s(?:xml:)?lang\s*=\s*)(?:"[^"]*"|'[^']*'|[^\s>]+)""", re.IGNORECASE)


def rebuild(doc: Document, translations: list[str], target_lang: str | None = None) -> bytes:
    """txt_file's rebuild (the same state: parts, translated part indices, encoding); with
    target_lang, the <html> element's lang (and xml:lang) say the language it is now in, so
    that browsers, screen readers and search engines read it as such. Other elements' lang
    stays as written."""
    data = txt_file.rebuild(doc, translations)
    if not target_lang:
        return data
    encoding = doc.state[2]
    text = data.decode(encoding)
    tag = _HTML_TAG.search(text)
    if tag is None:
        return data
    declared = _LANG.sub(lambda m: f'{m.group(1)}"{target_lang}"', tag.group())
    return (text[: tag.start()] + declared + text[tag.end():]).encode(encoding)
