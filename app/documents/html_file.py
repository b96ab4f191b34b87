"""HTML (.html, .htm): each block's text, inline tags included, is a segment.

app.text.segment's splitter cuts text at every tag; here inline elements (<b>, <a href>, <span> ...)
stay inside their block's segment, so a sentence with a link is translated as one sentence and
app.text.protect keeps the tags. Inline code (<code>, <kbd>, <samp>, <tt>, <var>) and MathML
formulas (<math>) stay in their sentence too, as one protected span (app.text.protect masks the
element whole, as Markdown's `code`): the model reads "Run {1} to build the program." and the
element comes back byte for byte; cut there, "Run" and "to build the program." were translated
apart. So does an inline
element marked translate="no" (any case) or notranslate: a brand name in a sentence
(`Sign in to <span translate="no">Acme Cloud</span> ...`) is one mask in it, copied whole
(translate="yes" inside one too). A block without letters (`&nbsp;`) is no segment. The
attributes people read (alt, title, placeholder, aria-label) are segments of their own, written
back into their tags; the live API's format html reads and writes them the same way (blocks,
written: app.translation.service). Everything else (block tags, other attributes, comments,
script, style, pre, code or a kept inline element that is a block's whole text, translate="no"
blocks and Sphinx's API signatures) is copied byte for byte."""

from __future__ import annotations

import bisect
import functools
import html
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass

from app.documents import Budget, Document, charset
from app.documents.txt_file import replaced
from app.text.protect import (
    INLINE_CODE_TAGS,
    INLINE_TAGS,
    LINE_BREAK_TAGS,
    WHOLE_ELEMENT_RE,
    has_words,
    join_breaks,
)
from app.text.segment import _HtmlSplitter, always

# attributes whose values people read (shown, or spoken by a screen reader), quoted
_READ_ATTRS = re.compile(
    r"""(\s(?:alt|title|placeholder|aria-label)\s*=\s*)(?:"([^"]*)"|'([^']*)')""", re.IGNORECASE)


class _BlockSplitter(_HtmlSplitter):
    """Marks inline tags outside verbatim elements as part of the text around them, and
    inline elements outside them that are verbatim whole (code: app.text.protect.INLINE_CODE_TAGS;
    translate="no" or class notranslate) as part of it too: app.text.protect masks such an
    element as one span (WHOLE_ELEMENT_RE), so the sentence around it goes to the model whole
    with one mask where the element stood (cut there, each piece was translated alone); one the
    pattern does not read whole (nested in one of its own name too deep) stays verbatim. A line
    break (app.text.protect.LINE_BREAK_TAGS) stays markup, so the text on each side of it is
    translated apart, unless a sentence runs on over it (app.text.protect.join_breaks).
    `tags`: (offset, text) of each start tag outside verbatim elements with an attribute
    people read."""

    def __init__(self, source: str) -> None:
        super().__init__(source)
        self.tags: list[tuple[int, str]] = []
        self.whole_from: int | None = None  # the event that opened a verbatim inline element

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        outside = not self.skip
        super().handle_starttag(tag, attrs)
        # inline code (a MathML formula too), or a kept inline element
        if outside and self.skip and (tag in INLINE_TAGS or tag in INLINE_CODE_TAGS):
            self.whole_from = len(self.events) - 1
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
        # skip: this tag's translate="no" too; tag_kept: a void element's own
        if not self.skip and not self.tag_kept and _READ_ATTRS.search(text):
            self.tags.append((self.events[-1][0], text))

    def handle_endtag(self, tag: str) -> None:
        super().handle_endtag(tag)
        if self.skip:
            return
        if self.whole_from is not None:
            self._whole_in_text()
        elif tag in INLINE_TAGS and tag not in LINE_BREAK_TAGS:
            self.events[-1] = (self.events[-1][0], True)

    def _whole_in_text(self) -> None:
        """The verbatim inline element that just closed becomes part of the text, where
        app.text.protect masks it whole (an element it reads otherwise, nested in one of its
        own name too deep, stays verbatim: its content would reach the model)."""
        start, at = self.events[self.whole_from][0], self.events[-1][0]
        if WHOLE_ELEMENT_RE.fullmatch(self.source, start, self.source.find(">", at) + 1):
            self.events[self.whole_from :] = [(off, True) for off, _ in
                                              self.events[self.whole_from :]]
        self.whole_from = None


@dataclass(frozen=True)
class Value:
    """The value of an attribute people read, as written in its start tag (HTML-escaped)."""

    tag: str  # the start tag as written
    at: int  # where the tag starts in the source
    span: tuple[int, int]  # where the value is in the tag
    quote: str  # the quote around it, " or '

    @property
    def text(self) -> str:
        return self.tag[self.span[0] : self.span[1]]


def _words(chunk: str) -> bool:
    return has_words(chunk, markup=True)


_STEP = 1 << 16  # characters parsed between two looks at the texts found so far


def blocks(source: str, probe: Budget | None = None,
           words: Callable[[str], bool] = _words) -> tuple[list[tuple[str, bool]], list[Value]]:
    """The source cut into (chunk, translatable) runs whose concatenation is the source, and the
    values of the attributes people read that have words (has_words), in source order.
    `probe`: spent, as the source is parsed, with texts the page surely holds (at most what it
    holds): a page past a limit is parsed no further; `words`: has_words of a chunk (markup)."""
    splitter = _BlockSplitter(source)
    looked = 0  # the events whose texts the probe has had
    step = _STEP if probe else max(len(source), 1)
    for at in range(0, len(source), step):
        splitter.feed(source[at : at + step])
        if probe:
            looked = _probed(splitter, looked, probe, words)
    splitter.close()
    out = _runs(source, [(0, False)] + splitter.events + [(len(source), False)])
    values = []
    for at, tag in splitter.tags:
        for m in _READ_ATTRS.finditer(tag):
            group = 2 if m.group(2) is not None else 3
            if has_words(html.unescape(m.group(group))):
                values.append(Value(tag, at, m.span(group), '"' if group == 2 else "'"))
    return _outside(join_breaks(out)), values


def _runs(source: str, events: list[tuple[int, bool]]) -> list[tuple[str, bool]]:
    """The source between these events as (chunk, translatable) runs, each the longest of its
    kind, each cut from the source once (a run of thousands of tags, grown by a copy of
    itself per tag, cost the square of its size)."""
    out: list[tuple[str, bool]] = []
    kind, start, end, before = None, 0, 0, ""  # the run so far: before, then start:end
    for (a, of), (b, _) in itertools.pairwise(events):
        if a >= b:
            continue
        if of == kind and a == end:  # (a parser's events go forward: one slice of the source)
            end = b
            continue
        if of == kind:
            before += source[start:end]
        elif kind is not None:
            out.append((before + source[start:end], kind))
            before = ""
        kind, start, end = of, a, b
    if kind is not None:
        out.append((before + source[start:end], kind))
    return out


def _probed(splitter: _BlockSplitter, looked: int, probe: Budget,
            words: Callable[[str], bool]) -> int:
    """The texts between the events from `looked` to the last that can no longer change (the
    last one's text may go on; an open inline element read whole may still turn its events into
    text) spent from `probe`, but the first and the last: either may be part of a text that goes
    on beyond these events, so those in between are whole segments of the page or parts of
    one. Returns the event to look from next."""
    events = splitter.events
    end = len(events) - 1 if splitter.whole_from is None else splitter.whole_from
    if end - looked < 2:
        return looked
    texts = [chunk.strip() for chunk, kind in
             _outside(join_breaks(_runs(splitter.source, events[looked : end + 1])))
             if kind and words(chunk)]
    probe.spend(texts[1:-1])
    return end


_CLOSING = re.compile(r"(?:</[^<>]*>)+")  # tags that close at a text's start
_OPENING = re.compile(r"<[^/!<>][^<>]*>")  # a tag that opens


def _opening_tags(chunk: str, start: int) -> int:
    """Where the run of opening tags that ends the chunk starts (not before `start`; the
    chunk's length where it ends in none), found from the end: the pattern of the run searched
    from the front tried each tag of a run that does not reach the end to its last tag, the
    square of the tags before a text."""
    end = len(chunk)
    while end > start and chunk[end - 1] == ">":
        at = chunk.rfind("<", start, end)
        if at < 0 or not _OPENING.fullmatch(chunk, at, end):
            break
        end = at
    return end


def _outside(parts: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
    """The runs with the tags that close at a text's start, or open at its end, moved out of
    it into the markup beside it: they belong to what verbatim code (or a block) around the text
    holds, and the model moved them over the text's words (into the code)."""
    pieces: list[str] = []
    runs: list[tuple[int, bool]] = []  # where each run's pieces start, and its kind
    for chunk, kind in parts:
        head = _CLOSING.match(chunk) if kind else None
        start = head.end() if head else 0
        end = _opening_tags(chunk, start) if kind else len(chunk)
        for piece, of in ((chunk, kind),) if start == 0 and end == len(chunk) else (
                (chunk[:start], False), (chunk[start:end], kind), (chunk[end:], False)):
            if piece and not (runs and runs[-1][1] == of):
                runs.append((len(pieces), of))
            if piece:
                pieces.append(piece)
    # each run's pieces joined once (as _runs)
    ends = [at for at, _ in runs[1:]] + [len(pieces)] if runs else []
    return [(pieces[at] if end == at + 1 else "".join(pieces[at:end]), kind)
            for (at, kind), end in zip(runs, ends, strict=True)]


def readable(source: str) -> list[tuple[int, int]]:
    """Where the source has text people read, as (start, end): its blocks of text (inline tags
    in them) and the values of blocks()."""
    chunks, values = blocks(source)
    starts = list(itertools.accumulate((len(c) for c, _ in chunks), initial=0))
    return ([(starts[i], starts[i + 1]) for i, (_, kind) in enumerate(chunks) if kind]
            + [(v.at + v.span[0], v.at + v.span[1]) for v in values])


def written(source: list[str], parts: list[str], values: list[Value], texts: list[str]
            ) -> list[str]:
    """`parts`, the chunks of `source` with some translated, with each value's tag written anew
    with its translation from `texts` (stripped, its quote escaped for the attribute): in place
    where the part is as in the source, else wherever the tag is in it but in an element copied
    whole (a translated block, whose inline tags came back as they were in the source:
    app.text.protect.unmask)."""
    rewritten: dict[tuple[int, str], str] = {}  # (at, tag) -> the tag with its new values
    for value, text in zip(reversed(values), reversed(texts), strict=True):  # last value first
        escaped = text.strip().replace(value.quote, "&quot;" if value.quote == '"' else "&#x27;")
        old = rewritten.get((value.at, value.tag), value.tag)
        rewritten[value.at, value.tag] = old[: value.span[0]] + escaped + old[value.span[1] :]
    starts = list(itertools.accumulate(map(len, source), initial=0))
    edits: dict[int, list[tuple[int, str, str]]] = {}  # part -> (offset in it, tag, new)
    for (at, tag), new in sorted(rewritten.items(), reverse=True):  # the last tag first
        i = bisect.bisect_right(starts, at) - 1
        edits.setdefault(i, []).append((at - starts[i], tag, new))
    out = list(parts)
    # each part written once (a gallery's part holds thousands of tags: rewritten once per
    # tag, it cost the square of its size)
    for i, found in edits.items():
        out[i] = (_at_offsets(out[i], found) if out[i] == source[i]
                  else _replaced_outside_whole(out[i], [(tag, new) for _, tag, new in found]))
    return out


def _at_offsets(text: str, edits: list[tuple[int, str, str]]) -> str:
    """text with each (offset, old, new) of `edits` (the last offset first; the olds, tags of
    the text, do not overlap) written in place."""
    pieces, pos = [], 0
    for at, old, new in reversed(edits):
        pieces += [text[pos:at], new]
        pos = at + len(old)
    pieces.append(text[pos:])
    return "".join(pieces)


def _replaced_outside_whole(text: str, rewrites: list[tuple[str, str]]) -> str:
    """text with each (old, new) of `rewrites`, one after the other, replaced outside the
    elements copied whole (code, translate="no": WHOLE_ELEMENT_RE): a tag in one, written as
    one outside, keeps its values. In one pass over text (`_tokens`) where no replacement can
    make or unmake what a later one finds: then each place holding an old tag becomes what
    the rewrites, in turn, make of it."""
    tokens = _tokens(text, rewrites)
    if tokens is None:
        for old, new in rewrites:
            text = _replaced_each(text, old, new)
        return text
    pieces, places = tokens
    for old, new in rewrites:
        for k in places.pop(old, ()):
            pieces[k] = new
            places.setdefault(new, []).append(k)
    return "".join(pieces)


def _replaced_each(text: str, old: str, new: str) -> str:
    pieces, pos = [], 0
    for m in WHOLE_ELEMENT_RE.finditer(text):
        pieces += [text[pos : m.start()].replace(old, new), m.group()]
        pos = m.end()
    pieces.append(text[pos:].replace(old, new))
    return "".join(pieces)


def _tokens(text: str, rewrites: list[tuple[str, str]]
            ) -> tuple[list[str], dict[str, list[int]]] | None:
    """text cut into pieces, each old tag of `rewrites` outside the whole elements a piece of
    its own, and the pieces' places by tag; None where a replacement could make or unmake what
    another finds: a tag (old or new) with a "<" past its start, or one that is another's head
    up to one of its ">" (a tag's quoted value may hold one)."""
    olds = {old for old, _ in rewrites}
    tags = olds | {new for _, new in rewrites}
    if any("<" in tag[1:] for tag in tags) or any(
            tag[: k + 1] in tags for tag in tags for k, c in enumerate(tag[:-1]) if c == ">"):
        return None
    pieces: list[str] = []
    places: dict[str, list[int]] = {}
    pos = 0
    for m in [*WHOLE_ELEMENT_RE.finditer(text), None]:
        end = m.start() if m else len(text)
        # an old tag starts at a "<" and holds no other: from each "<", the text up to each
        # ">" before the next "<" is looked up
        start = text.find("<", pos, end)
        while start >= 0:
            stop = text.find("<", start + 1, end)
            close = text.find(">", start, stop if stop >= 0 else end)
            while close >= 0 and text[start : close + 1] not in olds:
                close = text.find(">", close + 1, stop if stop >= 0 else end)
            if close >= 0:
                pieces += [text[pos:start], text[start : close + 1]]
                places.setdefault(pieces[-1], []).append(len(pieces) - 1)
                pos = close + 1
            start = stop
        pieces.append(text[pos:end])
        if m:
            pieces.append(m.group())
            pos = m.end()
    return pieces, places


def extract(data: bytes, legacy: str | None = "cp1252", budget: Budget | None = None
            ) -> Document:
    """The page's segments, spent from `budget` if given (a book's pages share one)."""
    source, encoding = charset.decode(data, legacy, charset.declared_in_html(data))
    budget = budget or Budget()
    # each text's has_words once: the probe asked it of (almost) every text already
    words = functools.cache(_words)
    parts, values = blocks(source, budget.copy(), words)
    targets = [i for i, (chunk, kind) in enumerate(parts) if kind and words(chunk)]
    # the values as written (escaped), as the other segments
    segments = [parts[i][0].strip() for i in targets] + [v.text for v in values]
    budget.spend(segments)
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
    text = "".join(written(source, parts, values, translations[len(targets) :]))
    if not target_lang:
        return charset.encode(text, encoding, markup=True)
    tag = _HTML_TAG.search(text)
    if tag is None:
        return charset.encode(text, encoding, markup=True)
    declared = _LANG.sub(lambda m: f'{m.group(1)}"{target_lang}"', tag.group())
    return charset.encode(text[: tag.start()] + declared + text[tag.end():], encoding, markup=True)
