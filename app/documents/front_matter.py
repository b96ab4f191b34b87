"""A Markdown page's front matter (YAML between `---` lines, TOML between `+++` lines, a JSON object
from a `{` line to a `}` line, as Hugo reads them): the values
of the keys that hold text a reader sees (KEYS, in any case, as Hugo reads them) are translated,
at the top level and in lists of such strings; every other key, comment and line stays byte for
byte. Kept whole, a translated page had an English title, description and summary.

A small reader of the simple forms these values take, line by line; a value it does not
understand stays as written:
- YAML: a plain, 'single-quoted' or "double-quoted" scalar on its key's line, a flow sequence of
  them on that line (`[a, "b"]`), a block sequence under the key whose items are such scalars on
  one line each, and a block scalar (`|` or `>`, with or without `-`/`+`), one paragraph (lines
  between blank lines) at a time, where all its lines have the indentation of its first. Not:
  scalars over several lines, anchors, aliases and tags (`&`, `*`, `!`), block scalars with an
  indentation indicator or deeper lines, nested mappings (`params:` with a `description:` in
  it), a list's items that are mappings or lists.
- TOML: before the first table (`[params]`), a "basic" or 'literal' string on its key's line, or
  an array of them on that line. Not: multi-line strings, dotted or quoted keys.
- JSON: a string on its key's line, in the page's object (not in an object or array in it). Not:
  arrays of strings.

A translation is written in its value's style: a quoted value keeps its quotes (a TOML literal
string that now holds a `'` or a control character becomes a basic one); a plain YAML value gets
double quotes where the translation would read as something else unquoted (a `: ` or ` #` in it,
a leading indicator such as `-`, `[`, `*`, `'`, a `,` in a flow sequence, a word such as `yes`
or a number); a block scalar's paragraph gets the lines the translation breaks into, each at the
paragraph's indentation.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from app.documents.txt_file import replace_stripped

KEYS = frozenset({"title", "description", "summary", "subtitle", "caption", "alt"})

_YAML_KEY = re.compile(r"([A-Za-z_][\w-]*)[ \t]*:(?:[ \t]+|$)")
_ITEM = re.compile(r"([ \t]*)-(?:[ \t]+|$)")
# a block scalar's header, without an indentation indicator
_BLOCK = re.compile(r"[|>][-+]?(?:[ \t]+#.*|[ \t]*)$")
_TOML_KEY = re.compile(r"[ \t]*([A-Za-z0-9_-]+)[ \t]*=[ \t]*")
_TABLE = re.compile(r"[ \t]*\[")
_REST = re.compile(r"[ \t]*(?:#.*)?$")  # what may follow a value on its line: a comment
_SINGLE = re.compile(r"'((?:[^'\n]|'')*)'")
_DOUBLE = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
_LITERAL = re.compile(r"'([^'\n]*)'")
_ESCAPE = re.compile(r"\\(?:x([0-9A-Fa-f]{2})|u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|(.))")
_YAML_ESCAPES = {"0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v",
                 "f": "\f", "r": "\r", "e": "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\",
                 "N": "\x85", "_": "\xa0", "L": "\u2028", "P": "\u2029"}
_TOML_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", "e": "\x1b", '"': '"',
                 "\\": "\\"}
# what a double-quoted string (YAML's, TOML's basic) escapes when it is written
_WRITE_ESCAPE = re.compile(r'["\\\x00-\x1f\x7f]')
_SHORT = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
# a line break with the spaces around it, tried only where a run of spaces begins (from each
# space of a run with no break after it, a try read to the run's end)
_LINE_BREAK = re.compile(r"(?:(?<![ \t])[ \t]+)?[\r\n]+[ \t]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # what only a double-quoted string can hold
_PLAIN = re.compile(r".*?(?=[ \t]*(?:[ \t]#|$))")  # up to a comment
_PLAIN_ITEM = re.compile(r"[^,\[\]{}]*?(?=[ \t]*(?:[,\]]|[ \t]#|$))")  # in a flow sequence
# a plain YAML scalar that reads as another type than a string (YAML 1.1's booleans too, as
# Hugo's and Jekyll's readers take them): a boolean, null, a number, a date
_NOT_TEXT = re.compile(r"(?i:true|false|yes|no|on|off|y|n|null|~|[-+]?\.inf|\.nan)"
                       r"|[-+]?(?:0x[0-9a-fA-F_]+|0o[0-7_]+|[\d.][\d._:eE+-]*)"
                       r"|\d{4}-\d\d?-\d\d?(?:[Tt ].*)?")
_INDICATORS = "-?:,[]{}#&*!|>'\"%@`"  # a plain YAML scalar starts with none of them
JSON_MAX = 1 << 16  # characters of a JSON front matter at most
_OPENS = re.compile(r"(?:---|\+\+\+|\{)[ \t]*")
_JSON_KEY = re.compile(r'[ \t]*"([A-Za-z_][\w-]*)"[ \t]*:[ \t]*')
_JSON_REST = re.compile(r"[ \t]*+,?[ \t]*+$")  # (runs kept whole: shared, they cost their square)
_JSON_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')


@dataclass(frozen=True)
class Value:
    """A value to translate: its `text` (escapes read), written on `lines[line]` from `start`
    to `end` (its quotes too) in `style`: "plain", "single", "double" (YAML's, and TOML's basic
    string), "literal" (TOML's) or "block" (a block scalar's paragraph: the lines `block`, each
    at `indent`); `flow`: an item of a flow sequence, where a plain one needs quotes around
    `,[]{}`."""

    text: str
    line: int
    start: int
    end: int
    style: str
    flow: bool = False
    block: tuple[int, ...] = ()
    indent: str = ""


def end(lines: list[str]) -> int | None:
    """The index of the line that closes the front matter lines[0] opens, or None where the
    page has none (`lines`: a document's lines and the line breaks between them, alternating,
    as app.documents.txt_file.split_lines cuts it). YAML's may close with `...`; JSON's is the
    first `}` line where what it closes reads as a JSON object."""
    if not _OPENS.fullmatch(lines[0]) or len(lines) < 3 or not lines[2].strip():
        return None
    first = lines[0].strip()
    for i in range(2, len(lines), 2):
        line = lines[i].strip()
        if first != "{" and (line == first or first == "---" and line == "..."):
            return i
        if first == "{" and line == "}":
            text = "".join(lines[: i + 1])
            if len(text) > JSON_MAX:
                return None  # (each `}` line parses it all again: a front matter is short)
            try:
                return i if isinstance(json.loads(text), dict) else None
            except json.JSONDecodeError as error:
                if error.pos < len(text.rstrip()):
                    return None  # no JSON (else an object in it closed here: read on)
            except RecursionError:
                return None  # nested deeper than any front matter
    return None


def values(lines: list[str], end: int) -> list[Value]:
    """The values to translate in the front matter that lines[0] opens and lines[end] closes,
    in reading order."""
    read = {"+++": _toml, "{": _json}.get(lines[0].strip(), _yaml)
    return [v for v in read(lines, list(range(2, end, 2))) if any(c.isalpha() for c in v.text)]


def write(lines: list[str], found: list[Value], translations: list[str]) -> None:
    """Each value's translation in its place in `lines`, in the value's style."""
    # from the last: a value written before another on its line would move that one
    for value, text in reversed(list(zip(found, translations, strict=True))):
        text = replace_stripped(value.text, text)
        if value.style == "block":
            parts = [value.indent + part.strip() for part in text.splitlines() if part.strip()]
            lines[value.block[0]] = lines[value.block[0] + 1].join(parts)
            for j in value.block[1:]:  # the first line holds them all now
                lines[j - 1] = lines[j] = ""
            continue
        line = lines[value.line]
        lines[value.line] = line[: value.start] + _written(value, text) + line[value.end :]


def _written(value: Value, text: str) -> str:
    """A one-line value's translation as its style writes it."""
    text = _LINE_BREAK.sub(" ", text)
    if value.style == "single":
        return "'" + text.replace("'", "''") + "'"
    if value.style == "literal" and "'" not in text and not _CONTROL.search(text):
        return f"'{text}'"
    if value.style == "plain" and _plain(text, value.flow):
        return text
    return '"' + _WRITE_ESCAPE.sub(lambda m: _SHORT.get(m.group(), f"\\u{ord(m.group()):04x}"),
                                   text) + '"'


def _plain(text: str, flow: bool) -> bool:
    """Whether YAML reads text written unquoted as that string."""
    return bool(text) and text == text.strip() and text[0] not in _INDICATORS and not (
        ": " in text or " #" in text or text.endswith(":") or _NOT_TEXT.fullmatch(text)
        or _CONTROL.search(text) or flow and any(c in text for c in ",[]{}"))


def _unescaped(body: str, escapes: dict[str, str]) -> str | None:
    """A double-quoted string's text (None where it has an escape `escapes` does not know, or
    one of a code that is no character: past U+10FFFF, or half a UTF-16 surrogate pair)."""
    out, pos = [], 0
    for m in _ESCAPE.finditer(body):
        code = int(next((c for c in m.groups()[:3] if c), "-1"), 16)
        char = escapes.get(m.group(4)) if code < 0 else (
            chr(code) if code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF else None)
        if char is None:
            return None
        out += [body[pos : m.start()], char]
        pos = m.end()
    return "".join(out) + body[pos:]


def _scalar(line: str, at: int, toml: bool, flow: bool) -> tuple[str, str, int] | None:
    """The scalar that starts at `at` (a YAML one, or a TOML string): (its text, its style, where
    it ends), or None where it is no form this reader knows."""
    if line.startswith(("'''", '"""'), at):
        return None  # a TOML multi-line string (in YAML, an empty string and more)
    if line.startswith('"', at):
        m = _DOUBLE.match(line, at)
        text = m and _unescaped(m.group(1), _TOML_ESCAPES if toml else _YAML_ESCAPES)
        return None if text is None else (text, "double", m.end())
    if line.startswith("'", at):
        m = (_LITERAL if toml else _SINGLE).match(line, at)
        if not m:
            return None
        return (m.group(1), "literal", m.end()) if toml else (
            m.group(1).replace("''", "'"), "single", m.end())
    if toml or at >= len(line) or line[at] in _INDICATORS:
        return None
    m = (_PLAIN_ITEM if flow else _PLAIN).match(line, at)
    text = m.group() if m else ""
    if not text or ": " in text or text.endswith(":") or _NOT_TEXT.fullmatch(text):
        return None
    return text, "plain", m.end()


def _scalars(line: str, i: int, at: int, toml: bool) -> list[Value]:
    """The values on line `i` from `at`, where its key's value begins: one scalar, or a flow
    sequence (a TOML array) of them, with nothing after them but a comment; [] where the
    reader does not know their form."""
    if not line.startswith("[", at):
        one = _scalar(line, at, toml, flow=False)
        if not one or not _REST.match(line, one[2]):
            return []
        return [Value(one[0], i, at, one[2], one[1])]
    found, pos = [], at + 1
    while True:
        pos = _spaces(line, pos)
        if line.startswith("]", pos):
            break  # an empty sequence, or a comma after the last item
        one = _scalar(line, pos, toml, flow=True)
        if not one:
            return []
        found.append(Value(one[0], i, pos, one[2], one[1], flow=True))
        pos = _spaces(line, one[2])
        if line.startswith(",", pos):
            pos += 1
        elif not line.startswith("]", pos):
            return []
    return found if _REST.match(line, pos + 1) else []


def _spaces(line: str, pos: int) -> int:
    while pos < len(line) and line[pos] in " \t":
        pos += 1
    return pos


def _depth(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _deeper(lines: list[str], body: list[int], n: int, column: int) -> bool:
    """Whether the first line after body's n-th that is neither blank nor a comment is
    indented deeper than `column` (the value on the n-th goes on there, or holds what is
    there)."""
    for k in range(n + 1, len(body)):  # (not a slice of body per line: it may be long)
        line = lines[body[k]]
        if line.strip() and not line.lstrip().startswith("#"):
            return _depth(line) > column
    return False


def _yaml(lines: list[str], body: list[int]) -> list[Value]:
    found: list[Value] = []
    listed: int | None = None  # a listed key's block sequence: its items' column, -1 before one
    n = 0
    while n < len(body):
        i = body[n]
        line = lines[i]
        n += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        item = _ITEM.match(line)
        if listed == -1 and not item:
            listed = None  # what is under the key is no sequence (a mapping)
        if listed is not None and item and listed in (-1, len(item.group(1))):
            listed = len(item.group(1))
            if not _deeper(lines, body, n - 1, listed) and not line.startswith("[", item.end()):
                found += _scalars(line, i, item.end(), toml=False)
            continue
        if _depth(line):
            continue  # inside another key's value
        listed = None
        key = _YAML_KEY.match(line)
        if not key or key.group(1).lower() not in KEYS:
            continue
        if _REST.match(line, key.end()):
            listed = -1  # its value comes under it: a block sequence is read
        elif _BLOCK.match(line, key.end()):
            block, n = _block(lines, body, n)
            found += block
        elif not _deeper(lines, body, n - 1, 0):
            found += _scalars(line, i, key.end(), toml=False)
    return found


def _block(lines: list[str], body: list[int], n: int) -> tuple[list[Value], int]:
    """A top-level block scalar's paragraphs, from the n-th line of body: one value each, where
    all its lines have one indentation (else none); and where the lines after it begin."""
    end = n
    while end < len(body) and (not lines[body[end]].strip() or _depth(lines[body[end]])):
        end += 1
    filled = [i for i in body[n:end] if lines[i].strip()]
    if not filled:
        return [], end
    indent = lines[filled[0]][: _depth(lines[filled[0]])]
    if any(_depth(lines[i]) != len(indent) for i in filled):
        return [], end
    paragraphs: list[list[int]] = []
    for i in filled:
        if paragraphs and paragraphs[-1][-1] == i - 2:
            paragraphs[-1].append(i)
        else:
            paragraphs.append([i])
    return [Value("\n".join(lines[i][len(indent) :] for i in run), run[0], 0, 0, "block",
                  block=tuple(run), indent=indent) for run in paragraphs], end


def _toml(lines: list[str], body: list[int]) -> list[Value]:
    found: list[Value] = []
    multiline = False  # inside another key's multi-line string
    for i in body:
        line = lines[i]
        if (line.count('"""') + line.count("'''")) % 2:
            multiline = not multiline
            continue
        if multiline:
            continue
        if _TABLE.match(line):
            break  # the top level ends at the first table
        key = _TOML_KEY.match(line)
        if key and key.group(1).lower() in KEYS:
            found += _scalars(line, i, key.end(), toml=True)
    return found


def _json(lines: list[str], body: list[int]) -> list[Value]:
    found: list[Value] = []
    depth = 0  # of objects and arrays in the page's object, at the start of each line
    for i in body:
        line = lines[i]
        key = _JSON_KEY.match(line) if depth == 0 else None
        if key and key.group(1).lower() in KEYS and line.startswith('"', key.end()):
            one = _scalar(line, key.end(), toml=False, flow=False)
            if one and _JSON_REST.match(line, one[2]):
                found.append(Value(one[0], i, key.end(), one[2], "double"))
        bare = _JSON_STRING.sub("", line)
        depth += sum(map(bare.count, "{[")) - sum(map(bare.count, "}]"))
    return found
