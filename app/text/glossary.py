"""Glossaries: source terms that must come out as given target terms.

A text with terms is translated twice, side by side in the same batches: as it is, and with
each term replaced by a mask, a `{N}` placeholder that the protected-span mechanism
(app.text.protect) keeps as it is: the model copies it, and where it drops one, `unmask` puts it
back, so every mask is in the output exactly once per time it was in the input. After the last
model (through a pivot, after both), the translation made as it is wins when it already has
every target term (`found_in`: the model put the term in a sentence it built around it); else
the masked one, with each term's target written in place of its mask (`restore`). A mask costs
the model the word's meaning (its gender, its case, what it compounds with), so where the model
gets the term right by itself its own sentence reads better: measured by bench/glossary.py.

    g = Glossary.of({"file manager": "Dateiverwaltung", "Apple": "Apple"})
    m = g.mask("Open the File Manager.")
    m.text == "Open the {1}."
    m.restore("Öffnen Sie die {1}.") == "Öffnen Sie die Dateiverwaltung."

Matching rules:
- whole words only: a term is not found inside a longer word ("file" is not in "profile");
  a term edge that is not a letter or digit ("C++", ".NET") needs no boundary there;
- a term written all in lowercase matches in any case ("file" finds "File" and "FILE"); a term
  with a capital letter ("Apple", "NASA") matches only exactly so;
- spaces inside a term match any run of whitespace ("file manager" finds "file\\nmanager");
- scanning goes left to right: the leftmost term wins, and of the terms starting there the
  longest ("file manager" before "file"); matches never overlap;
- the target is written exactly as given, except that a target starting with a lowercase letter
  is capitalised where it lands at the start of a sentence of the output.
Markup (HTML, a document's inline tags): terms are looked for in text only, never inside a tag
(but in the values of the attributes people read, where the caller names them: `mask`'s
`within`), and targets are written HTML-escaped there, in such a value its quotes too.
"""

from __future__ import annotations

import functools
import html
import logging
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from app.text.protect import MARKUP_RE, TAG_BODY, find_spans

log = logging.getLogger("app.glossary")

_SPACE = re.compile(r"\s+")
_WORD = re.compile(r"\w+")  # a run of letters and digits: a term is looked up by its first
_TOKEN_NUMBER = re.compile(r"\{(\d+)\}")
# where a sentence starts in an output: the text's start, after . ! ? … and whitespace, or where
# an attribute's value starts in a tag, with opening quotes, brackets and tags allowed between
_SENTENCE_START = re.compile(
    rf"""(?:^|[.!?…]["'”’»)\]]*\s+|<(?:=\s*"[^"<]*"|=\s*'[^'<]*'|[^<>=])*=\s*)"""
    rf"""(?:["'“„«‚‘(\[]|<{TAG_BODY}>)*$""")


def normalize_term(term: str) -> str:
    """A term as the glossary keeps it: whitespace runs as one space, none at the edges."""
    return _SPACE.sub(" ", term).strip()


@dataclass(frozen=True)
class Glossary:
    """(source term, target term) entries, each source term once (normalize_term)."""

    entries: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, mapping: Mapping[str, str] | Iterable[tuple[str, str]]) -> Glossary:
        """Entries from a mapping or pairs; a later entry for the same source term (the same
        text, or for a lowercase term the same in any case) replaces an earlier one."""
        pairs = mapping.items() if isinstance(mapping, Mapping) else mapping
        found: dict[str, tuple[str, str]] = {}
        for source, target in pairs:
            source = normalize_term(source)
            if source:
                found.pop(_key(source), None)  # the later one, at the later place
                found[_key(source)] = (source, target)
        return cls(tuple(found.values()))

    def __bool__(self) -> bool:
        return bool(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def merged(self, over: Glossary | None) -> Glossary:
        """This glossary with `over`'s entries added, `over` winning for the same term."""
        if not over:
            return self
        if not self:
            return over
        return Glossary.of([*self.entries, *over.entries])

    @functools.cached_property
    def _index(self) -> tuple[dict[str, list[tuple[str, str]]], list[tuple[str, str]]]:
        """The entries by the casefolded first word of the term
        (longest terms first, exact-case ones before any-case ones of the same length); the
        terms that start with no letter or digit (".NET") apart. Looking up the words of a text
        keeps a large glossary as quick as a small one: one pattern of every term tried them
        all at each position of the text; and a term's pattern is compiled only once a text
        has its first word (_term_pattern)."""
        ordered = sorted(self.entries, key=lambda e: (-len(e[0]), _any_case(e[0])))
        by_word: dict[str, list[tuple[str, str]]] = {}
        others = []
        for source, target in ordered:
            first = _WORD.match(source)
            if first:
                by_word.setdefault(first.group().casefold(), []).append((source, target))
            else:
                others.append((source, target))
        return by_word, others

    @functools.cached_property
    def _escaped(self) -> Glossary:
        """The same terms as they read in HTML-escaped text."""
        return Glossary(tuple((html.escape(s, quote=False), t) for s, t in self.entries))

    def find(self, text: str) -> list[tuple[int, int, str]]:
        """(start, end, target) of each term found in `text`, left to right: at each place
        the longest term that starts there; matches never overlap."""
        if not self.entries:
            return []
        by_word, others = self._index
        found = []  # (start, -length, order, target): the first at a place is its longest
        for word in _WORD.finditer(text):
            for order, (source, target) in enumerate(by_word.get(word.group().casefold(), ())):
                if m := _term_pattern(source).match(text, word.start()):
                    found.append((m.start(), -len(m.group()), order, target))
                    break
        for order, (source, target) in enumerate(others):
            found += [(m.start(), -len(m.group()), order, target)
                      for m in _term_pattern(source).finditer(text)]
        out: list[tuple[int, int, str]] = []
        for start, minus_length, _, target in sorted(found):
            if not out or start >= out[-1][1]:
                out.append((start, start - minus_length, target))
        return out

    def mask(self, text: str, markup: bool = False,
             within: Iterable[tuple[int, int]] | None = None) -> TermMasks:
        """`text` with each term found replaced by its mask (one mask per distinct target,
        numbered past every `{N}` the text has of its own). markup: `text` is HTML-escaped
        text with tags, and only the text between tags is searched. within: the (start, end)
        stretches of `text` to search (by default all of it), each between its tags with
        markup; an HTML text's are app.documents.html_file.readable, with the values of the
        attributes people read. Terms inside what the translation keeps as it is
        (app.text.protect: a URL, an address, inline code, a tag, a placeholder) stay: "file"
        in http://example.org/file is part of the address."""
        if not self.entries:
            return TermMasks(text, {})
        taken = {int(n) for n in _TOKEN_NUMBER.findall(text)}
        number = max(taken, default=0)
        tokens: dict[str, str] = {}  # target -> its mask
        out, pos = [], 0
        # markup: the text between tags is searched as it is, for the terms as they read
        # escaped ("R&D" as "R&amp;D"), so the text keeps its own escaping
        search = self._escaped if markup else self
        stretches = [(0, len(text))] if within is None else within
        if markup:
            stretches = [gap for a, b in stretches for gap in _between_tags(text, a, b)]
        for a, b in sorted(stretches):
            piece = text[a:b]
            kept = find_spans(piece)
            for start, end, target in search.find(piece):
                if any(span.start < end and start < span.end for span in kept):
                    continue
                if target not in tokens:
                    number += 1
                    tokens[target] = f"{{{number}}}"
                out.append(text[pos : a + start])
                out.append(tokens[target])
                pos = a + end
        out.append(text[pos:])
        targets = {token: target for target, token in tokens.items()}
        return TermMasks("".join(out), targets, markup)


def _between_tags(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """The stretches of text[start:end] between its tags (and its inline code elements, whose
    text is code)."""
    for tag in MARKUP_RE.finditer(text, start, end):
        yield start, tag.start()
        start = tag.end()
    yield start, end


@dataclass(frozen=True)
class TermMasks:
    """A text with its terms masked: `targets` maps each mask to its target term."""

    text: str
    targets: dict[str, str]
    markup: bool = False

    def found_in(self, translation: str) -> bool:
        """Whether a translation made without masks already has every target term as many
        times as its mask is in the text (as a whole word, as given or capitalised)."""
        for token, target in self.targets.items():
            written = html.escape(target, quote=False) if self.markup else target
            forms = {written, written[:1].upper() + written[1:]}
            pattern = "|".join(re.escape(f) for f in forms)
            before = r"(?<!\w)" if _is_word(written[:1]) else ""
            after = r"(?!\w)" if _is_word(written[-1:]) else ""
            found = re.findall(f"{before}(?:{pattern}){after}", translation)
            if len(found) < self.text.count(token):
                return False
        return True

    def restore(self, translation: str) -> str:
        """The translation with each mask replaced by its target term (escaped in markup, in an
        attribute's value quotes too; capitalised where it starts a sentence or a value and
        starts with a lowercase letter)."""
        if not self.targets:
            return translation
        out, pos = [], 0
        for m in _TOKEN_NUMBER.finditer(translation):
            target = self.targets.get(m.group())
            if target is None:  # a placeholder of the text's own
                continue
            out.append(translation[pos : m.start()])
            if target[:1].islower() and _SENTENCE_START.search("".join(out)):
                target = target[0].upper() + target[1:]
            if self.markup:
                # in a tag, the mask is in the value of an attribute people read: quotes too
                at = m.start()
                target = html.escape(target, quote=translation.rfind("<", 0, at)
                                     > translation.rfind(">", 0, at))
            out.append(target)
            pos = m.end()
        out.append(translation[pos:])
        return "".join(out)


@functools.lru_cache(maxsize=1 << 16)
def _term_pattern(source: str) -> re.Pattern:
    """A term's pattern (the matching rules in the module doc), compiled once for every
    glossary that has it: a request's glossary merged with the server's holds the server's
    terms again."""
    body = r"\s+".join(re.escape(word) for word in source.split(" "))
    body = f"(?i:{body})" if _any_case(source) else body
    before = r"(?<!\w)" if _is_word(source[0]) else ""
    after = r"(?!\w)" if _is_word(source[-1]) else ""
    return re.compile(before + body + after)


def _key(term: str) -> str:
    return term.casefold() if _any_case(term) else term


def _any_case(term: str) -> bool:
    """A term written without capitals matches in any case."""
    return term == term.lower()


def _is_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


class GlossaryFiles:
    """Server glossaries: `<source>-<target>.tsv` files in one directory, one entry a line
    (`source term<TAB>target term`; blank lines and lines starting with `#` skipped), read
    again when a file's modification time or size changes (one stat a lookup)."""

    def __init__(self, directory: Path, max_term_chars: int) -> None:
        self.directory = directory
        self.max_term_chars = max_term_chars
        self._cache: dict[str, tuple[tuple[int, int], Glossary]] = {}

    def get(self, source: str, target: str) -> Glossary:
        """The pair's glossary; empty when it has no file (or it cannot be read)."""
        name = f"{source}-{target}.tsv"
        path = self.directory / name
        try:
            stat = path.stat()
        except OSError:
            self._cache.pop(name, None)
            return Glossary()
        stamp = (stat.st_mtime_ns, stat.st_size)
        cached = self._cache.get(name)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        try:
            glossary = self._read(path)
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("server glossary %s cannot be read: %s", path, exc)
            return cached[1] if cached is not None else Glossary()
        self._cache[name] = (stamp, glossary)
        log.info("server glossary %s: %d entries", path, len(glossary))
        return glossary

    def _read(self, path: Path) -> Glossary:
        pairs = []
        lines = path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            source, tab, target = line.partition("\t")
            source, target = normalize_term(source), target.strip()
            if not (tab and source and target) or max(len(source), len(target)) > \
                    self.max_term_chars:
                log.warning("server glossary %s line %d skipped: not `source<TAB>target` with "
                            "terms of 1 to %d characters", path, number, self.max_term_chars)
                continue
            pairs.append((source, target))
        return Glossary.of(pairs)
