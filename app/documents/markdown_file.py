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
does in HTML (`_emphasis`). Front matter (`---` ... `---`, `+++` ... `+++` or a JSON object at
the top) but for its title, description and the like (app.documents.front_matter: they come
first), a
setext heading's underline, a heading's closing hashes and attribute list (`{#id}`), HTML
comments and an HTML block (from a line that starts with a block's tag, `<div ...>`, to a blank
line) stay verbatim too: translated, their keys, markers and attributes broke. So do Hugo's
shortcodes and Liquid's tags (`{{< figure >}}`, `{{% note %}}`, `{% include x.html %}`, `{{
page.title }}`): a line of them (with the lines of one left open, and a highlight, raw or
comment block's up to its end tag) is kept, one inside a sentence is a tag that stands alone."""

from __future__ import annotations

import itertools
import re
import unicodedata

from app.documents import Budget, Document, charset, front_matter
from app.documents.txt_file import replace_stripped, split_lines
from app.text.protect import Span, find_spans
from app.text.segment import always

_MARKER = re.compile(r"^(\s{0,3}(?:#{1,6}\s+|>\s?|[-*+]\s+(?:\[[ xX]\]\s+)?|\d{1,9}[.)]\s+"
                     r"|\[\^[^\]\s]+\]:[ \t]*|:[ \t]+)*)")  # a footnote's ([^1]: ), a definition
_ITEM_MARKER = re.compile(r"(?:[-*+]|\d{1,9}[.)])[ \t]+")  # a list item's, without a task box
# an admonition's marker (Python-Markdown's `!!! note`, pymdownx's collapsible `???` and `???+`
# and tabs `=== "Title"`), up to its title's opening quote: the keyword and classes stay
_NOTE = re.compile(r'[ \t]{0,3}(?:(?:!!!|\?\?\?\+?)(?:[ \t]+[\w-]+)+|===\+?)(?:[ \t]+"|[ \t]*$)')
# an admonition's title, then the closing quote, and a heading's text, then its closing hashes
# and attribute list: each end matched in the line read backwards (the text taken a character
# at a time with the end tried from each read a long run of spaces again every time)
_TITLE_END = re.compile(r'[ \t]*"?')
_HEADING_END = re.compile(r"[ \t]*(?:\}[^{}]*[:#.]\{[ \t]*)?(?:#+[ \t]+)?")
_QUOTE = re.compile(r"[ \t]{0,3}(?:>[ \t]?)+")
_FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})")
# (runs taken without giving back: a long run of spaces was shared in every way between two
# \s* side by side before a line that is no separator was given up)
_SEPARATOR = re.compile(r"^\s*+\|?\s*+:?-{3,}+:?\s*+(?:\|\s*+:?-{3,}+:?\s*+)*+\|?\s*+$")
_VERBATIM = re.compile(
    r"^(?:\s{4,}|\t)\S"  # indented code
    r"|^\s{0,3}\[(?!\^)[^\]]+\]:\s"  # link reference definition (not a footnote's)
    r"|^\s{0,3}(?:[-*_]\s*){3,}$"  # thematic break
    rf"|{_SEPARATOR.pattern}"  # table separator
    r"|^\s{0,3}=+\s*$"  # setext heading underline
    r"|^\s{0,3}\{[:#.][^{}]*\}\s*$"  # an attribute list on its own line ({: .class})
)
# an HTML block's first line (CommonMark's kinds 1 and 6): it runs to its element's end tag
# (pre, script, style, textarea: their text may have blank lines) or to a blank line
_HTML_BLOCK = re.compile(
    r"^\s{0,3}<(pre|script|style|textarea)(?:[\s>]|$)"
    r"|^\s{0,3}</?(?:address|article|aside|base|basefont|blockquote|body|caption|center|col"
    r"|colgroup|dd|details|dialog|dir|div|dl|dt|fieldset|figcaption|figure|footer|form|frame"
    r"|frameset|h[1-6]|head|header|hr|html|iframe|legend|li|link|main|menu|menuitem|nav"
    r"|noframes|ol|optgroup|option|p|param|picture|search|section|summary|table|tbody|td"
    r"|tfoot|th|thead|title|tr|track|ul)(?:[\s/>]|$)", re.IGNORECASE)
_CELL = re.compile(r"(\|)")
_INDENTED = re.compile(r"^(?:\s{4,}|\t)\S")
# a run of emphasis delimiters, or a backslash escape (the character after it is no delimiter)
_DELIMITERS = re.compile(r"\\[!-/:-@\[-`{-~]|\*+|_+|~+")
# app.documents.inline's tag pair, and its tag that stands alone (here: a footnote's reference)
_GROUP = re.compile(r'<g id="(\d+)">|</g>|<x id="(\d+)"/>')
_FOOTNOTE = re.compile(r"\[\^[^\]\s]+\](?!:)")  # [^1], a reference to a footnote
_BREAK = re.compile(r"\r\n|\n|\r")
_HARD_BREAK = re.compile(r"(?<!\\)(?:\\\\)*\\$")  # a line's last backslash, itself unescaped
# a Hugo shortcode (`{{< figure >}}`, `{{% note %}}`) or a Liquid tag or output (`{% include
# x.html %}`, `{{ page.title }}`): template code, which stays as written. Its body holds no
# brace, so the search for an unclosed one's end stops at the next brace. A Liquid comment or
# raw tag closed on its line, within 400 characters, is template code up to its end tag: a
# comment's text is never shown, a raw tag's is code (the bound keeps the search for an end
# tag from reading a long line again at each of many tags left open on it)
_TEMPLATE = re.compile(r"\{%-?\s*comment\s*-?%\}.{0,400}?\{%-?\s*endcomment\s*-?%\}"
                       r"|\{%-?\s*raw\s*-?%\}.{0,400}?\{%-?\s*endraw\s*-?%\}"
                       r"|\{\{[^{}\n]*\}\}|\{%[^{}\n]*%\}")
# a template tag's opening and the end of its closing (a tag left open on its line runs to that
# end, or to a blank line: a `{{` in prose that never closes keeps no more than its paragraph)
_TAG_ENDS = {"{{": r"\}\}", "{%": r"%\}"}
_TEMPLATES = re.compile(rf"[ \t]*(?:(?:{_TEMPLATE.pattern})[ \t]*)+")  # a line of them only
# a tag whose lines up to its end tag are code: Liquid's highlight, raw and comment, Hugo's
# highlight
_CODE_TAG = re.compile(r"\{%-?\s*(highlight|raw|comment)\b|\{\{[<%]\s*(highlight)\b")
# a link's target with template code in it (`({{< ref "setup.md" >}})`, `({{ site.baseurl
# }}/a.png "A title")`), which app.text.protect reads as no target (spaces in it)
_TEMPLATE_TARGET = re.compile(rf"(?<=\])\((?:{_TEMPLATE.pattern}|[^()\s{{}}]|\([^()\s]*\))+"
                              r"""(?:\s+(?:"[^"\n]*"|'[^'\n]*'))?\)""")
# what stands alone in a sentence and comes back as written (`_atoms`)
_ATOM = re.compile(rf"{_FOOTNOTE.pattern}|{_TEMPLATE.pattern}")


def _split_end(text: str, end: re.Pattern) -> tuple[str, str]:
    cut = len(text) - end.match(text[::-1]).end()
    return text[:cut], text[cut:]


def _title_end(rest: str) -> tuple[str, str]:
    return _split_end(rest, _TITLE_END)


def _heading_end(rest: str) -> tuple[str, str]:
    return _split_end(rest, _HEADING_END)


def _pieces(line: str, kind: str, start: int) -> list[str]:
    """A line cut into its marker (its first `start` characters: indentation, block markers),
    then text pieces and separators (even positions after the marker are text): a table row
    (kind "row", or a line that starts with a pipe) is cut at its pipes, an admonition's title
    (kind "note") before its closing quote, a heading before its closing hashes and attribute
    list."""
    marker, rest = line[:start], line[start:]
    if kind == "note":
        return [marker, *_title_end(rest)]
    if kind == "row" or rest.lstrip().startswith("|"):
        return [marker, *_CELL.split(rest)]
    if "#" in marker and (heading := _heading_end(rest))[1]:
        return [marker, *heading]
    return [marker, rest]


def _rows(lines: list[str]) -> dict[int, str]:
    """The lines of tables (GitHub's: a header row, a separator with a pipe, rows up to a blank
    line), whose rows need no pipe at their ends, as "row"."""
    rows = set()
    read = 0  # the line where the last table's rows ended: a separator inside it reads on there
    for i in range(2, len(lines), 2):
        if "|" in lines[i] and "|" in lines[i - 2] and _SEPARATOR.match(lines[i]):
            rows.add(i - 2)
            j = max(i + 2, read)
            while j < len(lines) and "|" in lines[j] and lines[j].strip():
                rows.add(j)
                j += 2
            read = j
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
    if _template(body) is not None:
        return None
    return s + len(marker) if ">" in marker else 0


def _template(body: str) -> str | None:
    """What ends the template code (`_TEMPLATE`) a line's text (`body`: after its container's
    indentation and quote markers) is made of, as a pattern: "" where the line ends it itself,
    a tag's closing braces where the line leaves one open (a shortcode's parameters over
    several lines; `_TAG_ENDS`), a code tag's end tag (`{% endhighlight %}`; `_CODE_TAG`);
    None where the line holds anything else."""
    if not body.lstrip().startswith(("{{", "{%")):
        return None
    whole = _TEMPLATES.match(body)
    rest = body[whole.end() :] if whole else body
    if rest[:2] in _TAG_ENDS and "}}" not in rest and "%}" not in rest:
        return _TAG_ENDS[rest[:2]]
    if rest:
        return None
    if code := _CODE_TAG.search(body):
        end = (rf"\{{%-?\s*end{code.group(1)}\b" if code.group(1)
               else rf"\{{\{{[<%]\s*/{code.group(2)}\b")
        return "" if re.compile(end).search(body, code.end()) else end
    return ""


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
    template = ""  # inside template code over several lines: the pattern of its last line
    previous = -2  # the line index of the last line with text
    kinds = _rows(lines)  # line index -> "row" (of a table) or "note" (an admonition)
    front = front_matter.end(lines)
    for i in targets:
        line = lines[i]
        blank, previous = i != previous + 2, i  # (whether a blank line comes before it)
        if front and i <= front:
            continue
        if fence:
            fence = "" if _closes(line, fence) else fence
            continue
        if template and not (blank and template in _TAG_ENDS.values()):
            template = "" if re.search(template, line) else template
            continue
        template = ""
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
        if (template := _template(body)) is not None:
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
    head = front_matter.values(lines, front) if front else []
    labels = {_label(m.group(1)) for line in lines if (m := _DEFINITION.match(line))}
    cut = _Cut(lines, kinds, starts)
    # each text spent as it is made (its emphasis and references read): a file past a limit
    # is read no further
    texts = itertools.chain(
        (value.text for value in head),
        (_references(_text(lines, cut(i)[k], starts, more)[0].strip(), labels)
         for i, k, more in cells))
    made = (budget or Budget()).each(map(_emphasis, texts), lambda e: e[0])
    segments, markers = zip(*made, strict=True) if made else ((), ())
    return Document("md", list(segments),
                    (lines, head, cells, encoding, markers, kinds, starts), wraps=always)


class _Cut:
    """Each line's `_pieces`, cut once (a row of thousands of cells was cut again for each
    of its cells)."""

    def __init__(self, lines: list[str], kinds: dict[int, str], starts: dict[int, int]) -> None:
        self.lines, self.kinds, self.starts = lines, kinds, starts
        self.cut: dict[int, list[str]] = {}

    def __call__(self, i: int) -> list[str]:
        if i not in self.cut:
            self.cut[i] = _pieces(self.lines[i], self.kinds.get(i, ""), self.starts[i])
        return self.cut[i]


def _text(lines: list[str], first: str, starts: dict[int, int], more: list[int]
          ) -> tuple[str, list[tuple[str, str]]]:
    """A cell's text (`first`: its piece of its line) with the lines that continue it and the
    line breaks between, and what stays at each break (`_rejoined`): the backslash of a hard
    break before it, a quoted line's quote markers after it."""
    texts = [first]
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
# [label], [label][]; a label may be wrapped over two lines
_REFERENCE = re.compile(r"(?<![\]\\])\[([^\[\]\n]+(?:\n[^\[\]\n]+)?)\](?:\[\])?(?![(\[:])")


def _label(text: str) -> str:
    """A link label as CommonMark matches it to its definition."""
    return " ".join(text.split()).casefold()


def _references(text: str, labels: set[str]) -> str:
    """text with each shortcut or collapsed reference link of a defined label ([label],
    [label][]) written as a full one ([label][label]), outside code: its text is translated
    and its label, protected (app.text.protect), stays the key of its definition; translated,
    the label matched no definition and the link broke. A label wrapped over two lines is
    written on one in the copy (`[user\nguide][user guide]`, the same key): the paragraph keeps
    the line breaks it had, each with what stays at it (a quoted line's `>`)."""
    if not labels or "[" not in text:
        return text
    inside = _inside(text, find_spans(text))

    def full(m: re.Match) -> str:
        label = m.group(1)
        if _label(label) not in labels or inside[m.start()]:
            return m.group()
        key = " ".join(label.split()) if "\n" in label else label
        return f"[{label}][{key}]"

    return _REFERENCE.sub(full, text)


def _inside(text: str, spans: list) -> list[bool]:
    """For each position of text (and one past its end), whether a protected span holds it."""
    inside = [False] * (len(text) + 1)
    for span in spans:
        inside[span.start : span.end] = [True] * (span.end - span.start)
    return inside


def _spans(text: str) -> list[Span]:
    """The protected spans of text (app.text.protect), and the links' targets with template
    code in them (`_TEMPLATE_TARGET`) as code: a link's target whole, as the others."""
    spans = find_spans(text)
    if "](" not in text or "{" not in text:
        return spans
    starts = {span.start for span in spans}
    spans += [Span(m.start(), m.end(), "code") for m in _TEMPLATE_TARGET.finditer(text)
              if "{" in m.group() and m.start() not in starts]
    return sorted(spans, key=lambda span: span.start)


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
    if _GROUP.search(text) or not (any(c in text for c in "*_~[{") or "](" in text):
        return text, ()
    text, notes = _atoms(text)
    spans = _spans(text)
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
    pairs = [p for p, crossed in zip(pairs, _crossing(pairs, links), strict=True)
             if not crossed] + links
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


def _atoms(text: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """text with each footnote reference (`[^1]`) and template tag (`_TEMPLATE`), outside
    code, replaced by a tag that stands alone (`<x id="N"/>`, from 1), and what they stand for
    by id: a footnote's label is the key of its definition, and read as a reference link it
    took the next word as its text; a template's tag is code the model translated."""
    if "[^" not in text and "{" not in text:
        return text, ()
    # a [^2] right after a [^1] is a span of its own (a reference link's label), {{name}} a
    # placeholder: neither is code
    inside = _inside(text, [s for s in _spans(text)
                            if s.kind != "placeholder" and not text.startswith("[^", s.start)])
    notes: list[tuple[str, str]] = []

    def atom(m: re.Match) -> str:
        if inside[m.start()]:
            return m.group()
        notes.append((m.group(), ""))
        return f'<x id="{len(notes)}"/>'

    return _ATOM.sub(atom, text), tuple(notes)


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


def _crossing(pairs: list[tuple[int, int, int, int]], links: list[tuple[int, int, int, int]]
              ) -> list[bool]:
    """For each pair of emphasis markers (start and end of its opening marker, of its closing
    one), whether a link's pair of markers crosses it (neither is inside the other, nor
    apart). Markers never overlap and links nest (brackets), so a link crosses a pair where it
    holds one of the pair's content's ends but not the other: where the innermost link
    around its start is not the one around its end. Found in one sweep over the links by
    their starts (compared with every link, each pair cost the paragraph the product of its
    pairs and links)."""
    if not links:
        return [False] * len(pairs)
    order = sorted(range(len(links)), key=lambda k: links[k][0])
    around: dict[int, int | None] = {}  # a place -> the innermost link around it, by index
    open_: list[int] = []  # the links around the place swept to, outermost first
    k = 0
    for at in sorted({x for _, b, c, _ in pairs for x in (b, c)}):
        while k < len(order) and links[order[k]][0] < at:
            while open_ and links[open_[-1]][3] <= links[order[k]][0]:
                open_.pop()
            open_.append(order[k])
            k += 1
        while open_ and links[open_[-1]][3] <= at:
            open_.pop()
        around[at] = open_[-1] if open_ else None
    return [around[b] != around[c] for _, b, c, _ in pairs]


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
    source, head, cells, encoding, markers, kinds, starts = doc.state
    lines = list(source)
    n = len(head)  # the front matter's values come first
    front_matter.write(lines, head, [_markers(text, marks) for text, marks in zip(
        translations[:n], markers[:n], strict=True)])
    translations, markers = translations[n:], markers[n:]
    cut = _Cut(source, kinds, starts)
    pieces = {i: list(cut(i)) for i in dict.fromkeys(i for i, _, _ in cells)}
    for (i, k, more), text, marks in zip(cells, translations, markers, strict=True):
        original, joins = _text(source, cut(i)[k], starts, more)
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
