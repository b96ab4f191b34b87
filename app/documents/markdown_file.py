"""Markdown (.md), block by block: a paragraph's or list item's text after its block marker (`# `,
`> `, `- `, `1. `, `- [ ] `, a definition's `:   `), with the lines that continue it (no marker
of their own: Markdown reads their line breaks as spaces), is a segment; table cells are
segments (a row needs no pipe at its ends, as GitHub reads tables); fenced and indented code,
link reference definitions, rules and table separators stay verbatim. A list item holds the
blocks indented to its text (CommonMark's rule; Python-Markdown's four spaces are deeper
still): its further paragraphs, fences and nested lists, and its indented code four columns
deeper; so does an admonition (`!!! note "Title"`, `???`, `???+`, `=== "Tab"`), whose keyword
stays and whose title is text, and a definition. The line breaks inside a segment (a quoted
line's after its `>`, a hard break's with its trailing spaces or backslash) go back into its
translation at the nearest spaces (app.text.segment.rewrap). Inline code, link targets and
reference labels are protected spans (app.text.protect), so `[the docs](setup.md)` keeps its
target and `[the docs][setup]` its label (`[setup]` and `[setup][]` are written
`[setup][setup]`: their text is their label); a footnote's reference (`[^1]`) is a tag that
stands alone, and its definition's text (`[^1]: ...`, its paragraphs four columns deeper) is
text. Emphasis (`*x*`, `_x_`, `**x**`, `__x__`, `~~x~~`) travels as inline tag pairs, as <b>
does in HTML (`_emphasis`). Front matter (`---` ... `---` or `+++` ... `+++` at the top), a
setext heading's underline, a heading's closing hashes and attribute list (`{#id}`), HTML
comments and an HTML block (from a line that starts with a block's tag, `<div ...>`, to a blank
line) stay verbatim too: translated, their keys, markers and attributes broke."""

from __future__ import annotations

import re
import unicodedata

from app.documents import Budget, Document, charset
from app.documents.txt_file import replace_stripped, split_lines
from app.text.protect import find_spans
from app.text.segment import always

_MARKER = re.compile(r"^(\s{0,3}(?:#{1,6}\s+|>\s?|[-*+]\s+(?:\[[ xX]\]\s+)?|\d{1,9}[.)]\s+"
                     r"|\[\^[^\]\s]+\]:[ \t]*|:[ \t]+)*)")  # a footnote's ([^1]: ), a definition
_ITEM_MARKER = re.compile(r"(?:[-*+]|\d{1,9}[.)])[ \t]+")  # a list item's, without a task box
# an admonition's marker (Python-Markdown's `!!! note`, pymdownx's collapsible `???` and `???+`
# and tabs `=== "Title"`), up to its title's opening quote: the keyword and classes stay
_NOTE = re.compile(r'[ \t]{0,3}(?:(?:!!!|\?\?\?\+?)(?:[ \t]+[\w-]+)+|===\+?)(?:[ \t]+"|[ \t]*$)')
_TITLE = re.compile(r'(.*?)("?[ \t]*)$')  # its title, then the closing quote
_QUOTE = re.compile(r"[ \t]{0,3}(?:>[ \t]?)+")
_FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})")
_SEPARATOR = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)*\|?\s*$")
_VERBATIM = re.compile(
    r"^(?:\s{4,}|\t)\S"  # indented code
    r"|^\s{0,3}\[(?!\^)[^\]]+\]:\s"  # link reference definition (not a footnote's)
    r"|^\s{0,3}(?:[-*_]\s*){3,}$"  # thematic break
    rf"|{_SEPARATOR.pattern}"  # table separator
    r"|^\s{0,3}=+\s*$"  # setext heading underline
    r"|^\s{0,3}\{[:#.][^{}]*\}\s*$"  # an attribute list on its own line ({: .class})
)
# a heading's text, then its closing hashes and attribute list ({#id}), which stay
_ATTRIBUTES = re.compile(r"(.*?)((?:[ \t]+#+)?(?:[ \t]*\{[:#.][^{}]*\})?[ \t]*)$")
# an HTML block's first line (CommonMark's kinds 1 and 6): it runs to its element's end tag
# (pre, script, style, textarea: their text may have blank lines) or to a blank line
_HTML_BLOCK = re.compile(
    r"^\s{0,3}<(pre|script|style|textarea)(?:[\s>]|$)"
    r"|^\s{0,3}</?(?:address|article|aside|base|basefont|blockquote|body|caption|center|col"
    r"|colgroup|dd|details|dialog|dir|div|dl|dt|fieldset|figcaption|figure|footer|form|frame"
    r"|frameset|h[1-6]|head|header|hr|html|iframe|legend|li|link|main|menu|menuitem|nav"
    r"|noframes|ol|optgroup|option|p|param|picture|search|section|summary|table|tbody|td"
    r"|tfoot|th|thead|title|tr|track|ul)(?:[\s/>]|$)", re.IGNORECASE)
_FRONT_MATTER = re.compile(r"(?:---|\+\+\+)[ \t]*")
_CELL = re.compile(r"(\|)")
_INDENTED = re.compile(r"^(?:\s{4,}|\t)\S")
# a run of emphasis delimiters, or a backslash escape (the character after it is no delimiter)
_DELIMITERS = re.compile(r"\\[!-/:-@\[-`{-~]|\*+|_+|~+")
# app.documents.inline's tag pair, and its tag that stands alone (here: a footnote's reference)
_GROUP = re.compile(r'<g id="(\d+)">|</g>|<x id="(\d+)"/>')
_FOOTNOTE = re.compile(r"\[\^[^\]\s]+\](?!:)")  # [^1], a reference to a footnote
_BREAK = re.compile(r"\r\n|\n|\r")
_HARD_BREAK = re.compile(r"(?<!\\)(?:\\\\)*\\$")  # a line's last backslash, itself unescaped


def _pieces(line: str, kind: str, start: int) -> list[str]:
    """A line cut into its marker (its first `start` characters: indentation, block markers),
    then text pieces and separators (even positions after the marker are text): a table row
    (kind "row", or a line that starts with a pipe) is cut at its pipes, an admonition's title
    (kind "note") before its closing quote, a heading before its closing hashes and attribute
    list."""
    marker, rest = line[:start], line[start:]
    if kind == "note":
        return [marker, *_TITLE.match(rest).groups()]
    if kind == "row" or rest.lstrip().startswith("|"):
        return [marker, *_CELL.split(rest)]
    if "#" in marker and (heading := _ATTRIBUTES.match(rest)).group(2):
        return [marker, *heading.groups()]
    return [marker, rest]


def _rows(lines: list[str]) -> dict[int, str]:
    """The lines of tables (GitHub's: a header row, a separator with a pipe, rows up to a blank
    line), whose rows need no pipe at their ends, as "row"."""
    rows = set()
    for i in range(2, len(lines), 2):
        if "|" in lines[i] and "|" in lines[i - 2] and _SEPARATOR.match(lines[i]):
            rows.add(i - 2)
            j = i + 2
            while j < len(lines) and "|" in lines[j] and lines[j].strip():
                rows.add(j)
                j += 2
    return dict.fromkeys(rows, "row")


def _columns(text: str) -> int:
    """The width of a line's leading text (tabs to the next multiple of four)."""
    return len(text.expandtabs(4))


def _at_column(line: str, column: int) -> int:
    """Where a line's indentation reaches `column` (or ends, if it is less deep)."""
    k = 0
    while k < len(line) and line[k] in " \t" and _columns(line[: k + 1]) <= column:
        k += 1
    return k


def _continuation(line: str, base: int, quotes: int) -> int | None:
    """Where the text of a line right under a paragraph's line begins, if the line goes on with
    that text (Markdown reads the line break as a space): no block marker, table row, fence,
    rule or link definition of its own, at most the `quotes` block quote markers the paragraph
    has (`base`: the column of the paragraph's container). Indented code cannot interrupt a
    paragraph, so an indented line goes on too. A quoted line's text begins after its quote
    markers (they stay), any other's at 0 (its indentation goes with the line break)."""
    s = _at_column(line, base)
    marker = _MARKER.match(line[s:]).group(1)
    body = line[s + len(marker) :]
    if marker.strip(" \t>") or marker.count(">") > quotes:
        return None
    if not body.strip() or body.lstrip().startswith("|") or _FENCE.match(body):
        return None
    if _VERBATIM.match(body) and not _INDENTED.match(body) or _HTML_BLOCK.match(body):
        return None
    return s + len(marker) if ">" in marker else 0


def _closes(line: str, fence: str) -> bool:
    """Whether a line closes a fence opened by the run `fence` (inside quotes too)."""
    return re.fullmatch(rf"[ \t>]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*", line) is not None


def extract(data: bytes, legacy: str | None = "cp1252", budget: Budget | None = None
            ) -> Document:
    text, encoding = charset.decode(data, legacy)
    lines, targets = split_lines(text)
    # (line index, piece index, the indices of the lines that continue that piece's text)
    cells: list[tuple[int, int, list[int]]] = []
    starts: dict[int, int] = {}  # line index -> where its text begins (after its markers)
    # the content columns of the open list items and admonitions: a line indented to one is
    # inside it (its paragraphs, fences and nested lists), four columns deeper it is its code
    containers: list[int] = []
    fence = ""  # the run of backticks or tildes that opened the open fence
    open_text = None  # the line index of a paragraph's or item's last line, while it runs
    quotes = 0  # the open text's block quote markers
    comment = False  # inside an HTML comment
    html = ""  # inside an HTML block: the end tag that ends it, or "\n" (a blank line does)
    previous = -2  # the line index of the last line with text
    kinds = _rows(lines)  # line index -> "row" (of a table) or "note" (an admonition)
    front = _FRONT_MATTER.fullmatch(lines[0]) and len(lines) > 2 and lines[2].strip() and next(
        (i for i in range(2, len(lines), 2) if lines[i].strip() == lines[0].strip()
         or (lines[0].startswith("-") and lines[i].strip() == "...")), None)
    for i in targets:
        line = lines[i]
        blank, previous = i != previous + 2, i  # (whether a blank line comes before it)
        if front and i <= front:
            continue
        if fence:
            fence = "" if _closes(line, fence) else fence
            continue
        if comment or line.lstrip(" \t>").startswith("<!--"):
            comment = "-->" not in line[line.find("<!--") + 4 if not comment else 0 :]
            open_text = None
            continue
        if html and (html != "\n" or not blank):
            html = "" if html != "\n" and html in line.lower() else html
            continue
        html = ""
        base = containers[-1] if containers else 0
        if open_text == i - 2 and i not in kinds and (
                (start := _continuation(line, base, quotes)) is not None):
            cells[-1][2].append(i)
            starts[i] = start
            open_text = i
            continue
        open_text = None
        while containers and _columns(line[: len(line) - len(line.lstrip())]) < containers[-1]:
            containers.pop()
        s = _at_column(line, containers[-1] if containers else 0)
        body = line[s + len(_QUOTE.match(line, s).group()) if _QUOTE.match(line, s) else s :]
        if opened := _FENCE.match(body):
            fence = opened.group(1)
            continue
        if _VERBATIM.match(body) and i not in kinds:
            continue
        if block := _HTML_BLOCK.match(body):
            html = f"</{block.group(1).lower()}>" if block.group(1) else "\n"
            html = "" if html != "\n" and html in line.lower() else html
            continue
        if note := _NOTE.match(body):  # its body is indented four columns
            kinds[i] = "note"
            containers.append(_columns(line[: len(line) - len(body)]) + 4)
        marker = note.group() if note else _MARKER.match(line[s:]).group(1)
        starts[i] = len(line) - len(body) + len(marker) if note else s + len(marker)
        pieces = _pieces(line, kinds.get(i, ""), starts[i])
        cells += [(i, k, []) for k in range(1, len(pieces), 2 if len(pieces) > 2 else 1)
                  if pieces[k].strip()]
        items = list(_ITEM_MARKER.finditer(marker))
        if items and ">" not in marker:
            containers.append(_columns(line[: s + items[-1].end()]))
        elif ">" not in marker and ("[^" in marker or marker.lstrip().startswith(":")):
            # a footnote's or a definition's paragraphs: four columns deeper
            containers.append(_columns(line[: len(line) - len(line.lstrip())]) + 4)
        if len(pieces) == 2 and "#" not in pieces[0] and cells and cells[-1][0] == i:
            open_text = i  # a paragraph or item (not a heading, not a table row) may go on
            quotes = marker.count(">")
    labels = {_label(m.group(1)) for line in lines if (m := _DEFINITION.match(line))}
    # each text spent as it is made (its emphasis and references read): a file past a limit
    # is read no further
    made = (budget or Budget()).each(
        (_emphasis(_references(_text(lines, kinds, starts, i, k, more)[0].strip(), labels))
         for i, k, more in cells), lambda e: e[0])
    segments, markers = zip(*made, strict=True) if made else ((), ())
    return Document("md", list(segments), (lines, cells, encoding, markers, kinds, starts),
                    wraps=always)


def _text(lines: list[str], kinds: dict[int, str], starts: dict[int, int], i: int, k: int,
          more: list[int]) -> tuple[str, list[tuple[str, str]]]:
    """A cell's text with the lines that continue it and the line breaks between, and what
    stays at each break (`_rejoined`): the backslash of a hard break before it, a quoted
    line's quote markers after it."""
    texts = [_pieces(lines[i], kinds.get(i, ""), starts[i])[k]]
    texts += [lines[j][starts[j] :] for j in more]
    joins = []
    for n, j in enumerate(more):
        hard = _HARD_BREAK.search(texts[n]) is not None
        texts[n] = texts[n][:-1] if hard else texts[n]
        joins.append(("\\" if hard else "", lines[j][: starts[j]]))
    return texts[0] + "".join(lines[j - 1] + t for j, t in zip(more, texts[1:], strict=True)), joins


def _rejoined(text: str, joins: list[tuple[str, str]]) -> str:
    """A translation with what stays at each line break back in place, in order: a hard
    break's backslash before it (sent to the model, it moved to another word, mid-line, where
    it breaks nothing), a quoted line's `> ` after it (a break that rewrap dropped joined its
    line to the one before)."""
    if not any(before or after for before, after in joins):
        return text
    rest = iter(joins)
    return _BREAK.sub(lambda m: "{0}{2}{1}".format(*next(rest, ("", "")), m.group()), text)


_DEFINITION = re.compile(r"^\s{0,3}\[((?!\^)[^\]]+)\]:\s")  # [label]: target
_REFERENCE = re.compile(r"(?<![\]\\])\[([^\[\]\n]+)\](?:\[\])?(?![(\[:])")  # [label], [label][]


def _label(text: str) -> str:
    """A link label as CommonMark matches it to its definition."""
    return " ".join(text.split()).casefold()


def _references(text: str, labels: set[str]) -> str:
    """text with each shortcut or collapsed reference link of a defined label ([label],
    [label][]) written as a full one ([label][label]), outside code: its text is translated
    and its label, protected (app.text.protect), stays the key of its definition; translated,
    the label matched no definition and the link broke."""
    if not labels or "[" not in text:
        return text
    inside = _inside(text, find_spans(text))
    return _REFERENCE.sub(lambda m: f"[{m.group(1)}][{m.group(1)}]" if _label(m.group(1))
                          in labels and not inside[m.start()] else m.group(), text)


def _inside(text: str, spans: list) -> list[bool]:
    """For each position of text (and one past its end), whether a protected span holds it."""
    inside = [False] * (len(text) + 1)
    for span in spans:
        inside[span.start : span.end] = [True] * (span.end - span.start)
    return inside


def _punctuation(c: str) -> bool:
    return unicodedata.category(c)[0] in "PS"


def _emphasis(text: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """text with each emphasis pair's markers and each link's brackets replaced by an inline
    tag pair (`<g id="N">`, `</g>`), and the (opening, closing) markers by id (from 1). The
    model moved or lost markers it saw as characters ("Click **Save** ..." came back with "**"
    and "*", a badge's "[![CI](badge.svg)](actions)" with its brackets anywhere); as tags,
    app.text.tags carries them over the translation of the plain sentence like an HTML <b>.

    Emphasis as CommonMark and GitHub read it: a run of `*` or `_` (or exactly `~~`) that opens
    stands before a word (`2 * 3`, a `* ` bullet: none), `_` never inside a word
    (snake_case_names), the rule of three; delimiters in protected spans (code, link targets,
    URLs, tags) or escaped (`\\*`) do not count. A link (or image) is a `[` (`![`) and the `]`
    with the target or label right after it (`](setup.md)`, `][setup]`); emphasis that crosses
    one stays text. A text with tags of that shape of its own is left as it is: rebuild could
    not tell them apart."""
    if _GROUP.search(text) or not (any(c in text for c in "*_~[") or "](" in text):
        return text, ()
    text, notes = _footnotes(text)
    spans = find_spans(text)
    inside = _inside(text, spans)
    links = _links(text, spans, inside)
    pairs = []  # (opening marker's start, end, closing marker's start, end)
    stack = []  # runs that may still open: [index, char, start, chars left, length, can close]
    bottom: dict[tuple[str, bool, int], int] = {}  # below it, no opener for such a closer
    for index, m in enumerate(_DELIMITERS.finditer(text)):
        run, start, end = m.group(), m.start(), m.end()
        if run[0] == "\\" or inside[start] or (run[0] == "~" and len(run) != 2):
            continue
        before, after = text[start - 1 : start] or " ", text[end : end + 1] or " "
        left = not after.isspace() and (
            not _punctuation(after) or before.isspace() or _punctuation(before))
        right = not before.isspace() and (
            not _punctuation(before) or after.isspace() or _punctuation(after))
        opens, closes = left, right
        if run[0] == "_":  # not inside a word
            opens, closes = left and (not right or _punctuation(before)), right and (
                not left or _punctuation(after))
        length, key = len(run), (run[0], opens, len(run) % 3)
        while closes and length:
            k = next((k for k in reversed(range(len(stack)))
                      if stack[k][0] < bottom.get(key, 0) or _matches(stack[k], run, opens)),
                     None)
            if k is None or stack[k][0] < bottom.get(key, 0):
                bottom[key] = index  # no opener for it: the next such closer looks no lower
                break
            opener = stack[k]
            use = 2 if opener[3] >= 2 and length >= 2 else 1
            at = end - length  # a closer is used from its start, an opener from its end
            pairs.append((opener[2] + opener[3] - use, opener[2] + opener[3], at, at + use))
            opener[3] -= use
            length -= use
            del stack[k + 1 :]  # delimiters between the two stay text
            if not opener[3]:
                stack.pop()
        if length and opens:
            stack.append([index, run[0], start, length, len(run), closes])
    pairs = [p for p in pairs if not any(_cross(p, link) for link in links)] + links
    if not pairs:
        return text, notes
    pairs.sort()
    edits = sorted([(a, b, f'<g id="{n}">') for n, (a, b, _, _) in enumerate(pairs, 1 + len(notes))]
                   + [(c, d, "</g>") for _, _, c, d in pairs])
    out, pos = [], 0
    for a, b, tag in edits:
        out += [text[pos:a], tag]
        pos = b
    out.append(text[pos:])
    return "".join(out), notes + tuple((text[a:b], text[c:d]) for a, b, c, d in pairs)


def _footnotes(text: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """text with each footnote reference (`[^1]`, outside code) replaced by a tag that stands
    alone (`<x id="N"/>`, from 1), and the references by id: its label is the key of its
    definition, and read as a reference link it took the next word as its text."""
    if "[^" not in text:
        return text, ()
    # a [^2] right after a [^1] is a span of its own (a reference link's label): not code
    inside = _inside(text, [s for s in find_spans(text) if not text.startswith("[^", s.start)])
    notes: list[tuple[str, str]] = []

    def atom(m: re.Match) -> str:
        if inside[m.start()]:
            return m.group()
        notes.append((m.group(), ""))
        return f'<x id="{len(notes)}"/>'

    return _FOOTNOTE.sub(atom, text), tuple(notes)


def _links(text: str, spans: list, inside: list[bool]) -> list[tuple[int, int, int, int]]:
    """Each link's and image's pair of markers (`_emphasis`): its `[` or `![`, and its `]`
    with the target or label (a protected span) right after it."""
    if "](" not in text and "][" not in text:
        return []
    targets = {s.start: s.end for s in spans
               if s.kind == "code" and text[s.start] in "([" and text[s.start - 1 : s.start] == "]"}
    pairs, opened = [], []
    for i, c in enumerate(text):
        if inside[i] or text[i - 1 : i] == "\\":
            continue
        if c == "[":
            opened.append(i)
        elif c == "]" and opened:
            start = opened.pop()
            if i + 1 in targets:
                bang = text[start - 1 : start] == "!"
                pairs.append((start - bang, start + 1, i, targets[i + 1]))
    return pairs


def _cross(p: tuple[int, int, int, int], q: tuple[int, int, int, int]) -> bool:
    """Whether two pairs of markers cross (neither is inside the other, nor apart)."""
    return not (p[3] <= q[0] or q[3] <= p[0] or (p[1] <= q[0] and q[3] <= p[2])
                or (q[1] <= p[0] and p[3] <= q[2]))


def _matches(opener: list, run: str, opens: bool) -> bool:
    """Whether an opener's run (`_emphasis`'s stack entry) pairs with a closing run: the same
    character and, where either run could both open and close, lengths whose sum is no multiple
    of three unless both are (CommonMark's rule of three: `*foo**bar*` is one emphasis)."""
    total = opener[4] + len(run)
    return opener[1] == run[0] and not (
        (opens or opener[5]) and total % 3 == 0 and (opener[4] % 3 or len(run) % 3))


def _markers(text: str, markers: tuple[tuple[str, str], ...]) -> str:
    """A translation's tag pairs back to their markers (emphasis, a link's brackets);
    app.text.protect's unmask put back every tag once, each pair's opening tag before its
    closing one, so the markers pair up again (a closing tag closes the innermost open pair)."""
    if not markers:
        return text
    closing: list[str] = []

    def marker(m: re.Match) -> str:
        if m.group(2) is not None:
            return markers[int(m.group(2)) - 1][0]
        if m.group(1) is None:
            return closing.pop() if closing else ""
        opening, close = markers[int(m.group(1)) - 1]
        closing.append(close)
        return opening

    return _GROUP.sub(marker, text)


# what begins a block at a line's start: a heading, a quote, a list item
_BLOCK_START = re.compile(r"^([ \t]*)(#{1,6}|[-*+>]|\d{1,9}(?=[.)]))(?=[.)]?(?:[ \t]|$))",
                          re.MULTILINE)


def _escaped(text: str) -> str:
    """A paragraph's translation with what would begin a block at a line's start escaped: the
    model wrote "Jul 7, 2017: ..." as "7. 2017: ...", a list item, and a line break put back
    before a "-" or "#" starts a list or a heading."""
    return _BLOCK_START.sub(lambda m: m.group(1) + (
        m.group(2) + "\\" if m.group(2)[0].isdigit() else "\\" + m.group(2)), text)


def rebuild(doc: Document, translations: list[str]) -> bytes:
    source, cells, encoding, markers, kinds, starts = doc.state
    lines = list(source)
    pieces = {i: _pieces(lines[i], kinds.get(i, ""), starts[i]) for i, _, _ in cells}
    for (i, k, more), text, marks in zip(cells, translations, markers, strict=True):
        original, joins = _text(source, kinds, starts, i, k, more)
        text = _markers(text, marks)
        if len(pieces[i]) == 2 and not _BLOCK_START.search(original):  # not a table cell
            text = _escaped(text)  # (nor a text whose lines hold a nested list)
        text = replace_stripped(original, text)
        pieces[i][k] = _rejoined(text, joins)
        for j in more:  # the translation holds their text and line breaks now
            lines[j - 1] = lines[j] = ""
    for i, parts in pieces.items():
        lines[i] = "".join(parts)
    return charset.encode("".join(lines), encoding)
