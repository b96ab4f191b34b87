"""Formatting inside a paragraph as inline tags, and back.

A paragraph is a sequence of text with a formatting reference (a run, a span) and atoms
(anything that is not text: a tab, an image, a field). It becomes one escaped string:

    [("Save ", None), ("now", 1), Atom(2), ("!", None)]  ->  'Save <g id="1">now</g><x id="2"/>!'

`None` is the paragraph's base formatting (bare text). Groups may nest (an .odt span inside a
span). app.text.protect masks the tags, so the model sees `Save %1now%2%3!`, and `decode` turns the
translated string back into the same kind of sequence, each text piece with its innermost group
(or None) and each atom in its new place. Tags the model lost were re-inserted by unmask, so
decoding never fails on a well-formed translation; it also tolerates a stray closing tag and
drops ids it was not given.
"""

from __future__ import annotations

import html
import re
from collections import Counter
from collections.abc import Collection, Hashable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Atom:
    id: int
    groups: tuple[int, ...] = ()  # decode's: the groups open around it, outermost first


@dataclass(frozen=True)
class Open:
    id: int


@dataclass(frozen=True)
class Close:
    pass


Item = tuple[str, "int | None"] | Atom | Open | Close
_TOKEN = re.compile(r'<g id="(\d+)">|</g>|<x id="(\d+)"/>')


def encode(items: list[Item]) -> str:
    """Items -> escaped text with inline tags. Text items are (text, group id or None);
    Open/Close mark a nested group explicitly (text inside them uses group None)."""
    out = []
    for item in items:
        if isinstance(item, Atom):
            out.append(f'<x id="{item.id}"/>')
        elif isinstance(item, Open):
            out.append(f'<g id="{item.id}">')
        elif isinstance(item, Close):
            out.append("</g>")
        else:
            text, group = item
            escaped = html.escape(text, quote=False)
            out.append(escaped if group is None else f'<g id="{group}">{escaped}</g>')
    return "".join(out)


class Runs:
    """A paragraph's items, built in reading order, and `nodes`: the element each id names.
    A text run is told by a key (its formatting): the key covering most of the paragraph's
    characters is its base, whose runs are bare text (`base_run`, the first of them, is the
    model for rebuilt bare text); a run of another key is a group, and joins the group just
    before it when that has its key. Editors split runs that look alike for spell checking and
    editing sessions, often inside a word: apart, the model was asked for 'impor' and 'tant'."""

    def __init__(self, runs: Iterable[tuple[str, Hashable]]) -> None:
        """runs: every text run's (text, key), to choose the base."""
        lengths: Counter = Counter()
        for text, key in runs:
            lengths[key] += len(text)
        self.base = lengths.most_common(1)[0][0] if lengths else None
        self._items: list[Item | list] = []  # a group's text as a list of its runs' texts
        self.nodes: list = []
        self.base_run = None
        self._keys: dict[int, Hashable] = {}  # each group's key

    @property
    def items(self) -> list[Item]:
        """The items so far, each group's runs' texts joined (once: added to the group's
        text one by one, thousands of runs that look alike copied it again each)."""
        return [("".join(item[0]), item[1]) if isinstance(item, list) else item
                for item in self._items]

    def _add(self, node) -> int:
        self.nodes.append(node)
        return len(self.nodes) - 1

    def run(self, node, text: str, key: Hashable) -> None:
        k = self._add(node)
        last = self._items[-1] if self._items else None
        if key == self.base:
            self.base_run = node if self.base_run is None else self.base_run
            self._items.append((text, None))
        elif isinstance(last, list) and self._keys[last[1]] == key:
            last[0].append(text)  # written back as one run
        else:
            self._keys[k] = key
            self._items.append([[text], k])

    def atom(self, node) -> None:
        self._items.append(Atom(self._add(node)))

    def open(self, node) -> None:
        self._items.append(Open(self._add(node)))

    def close(self) -> None:
        self._items.append(Close())


def decode(
    markup: str, atoms: Collection[int], groups: Collection[int], breaks: Collection[int] = ()
) -> list[tuple[str, tuple[int, ...]] | Atom]:
    """Escaped text with inline tags -> pieces: (text, ids of the open groups, outermost
    first) and Atoms (with the groups open around them), in order. Only the given atom and
    group ids count (others are dropped);
    each atom comes once, an atom the markup lost comes at the end; empty texts are dropped.
    `breaks` are atoms that part words themselves (a tab, a line break): the spaces next to
    them go, since a tag put back in a sentence gets a space on each side (app.text.protect),
    which would start the next line with a space."""
    out: list[tuple[str, tuple[int, ...]] | Atom] = []
    stack: list[int] = []
    pos = 0
    for m in _TOKEN.finditer(markup):
        if m.start() > pos:
            out.append((html.unescape(markup[pos : m.start()]), tuple(stack)))
        pos = m.end()
        if m.group(1) is not None:
            stack.append(int(m.group(1)))
        elif m.group(2) is not None:
            out.append(Atom(int(m.group(2)), tuple(stack)))
        elif stack:
            stack.pop()
    if pos < len(markup):
        out.append((html.unescape(markup[pos:]), tuple(stack)))
    seen: set[int] = set()
    pieces: list[tuple[str, tuple[int, ...]] | Atom] = []
    for piece in out:
        if isinstance(piece, Atom):
            if piece.id in atoms and piece.id not in seen:
                seen.add(piece.id)
                pieces.append(Atom(piece.id, tuple(g for g in piece.groups if g in groups)))
        elif piece[0]:
            pieces.append((piece[0], tuple(g for g in piece[1] if g in groups)))
    pieces += [Atom(k) for k in sorted(set(atoms) - seen)]
    if breaks:
        for i, piece in enumerate(pieces):
            if isinstance(piece, Atom) and piece.id in breaks:
                if i and not isinstance(pieces[i - 1], Atom):
                    pieces[i - 1] = (pieces[i - 1][0].rstrip(" "), pieces[i - 1][1])
                if i + 1 < len(pieces) and not isinstance(pieces[i + 1], Atom):
                    pieces[i + 1] = (pieces[i + 1][0].lstrip(" "), pieces[i + 1][1])
        pieces = [p for p in pieces if isinstance(p, Atom) or p[0]]
    return pieces
