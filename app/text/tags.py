"""Inline tag pairs carried over a translation of the plain sentence.

A sentence with a tag pair in it (`Open the <b>file</b>.`, masked by app.text.protect to
`Open the {1}file{2}.`) used to go to the model with its masks, and the model, which never saw
markup in training, lost words around them (`Öffnen {1}Datei{2}.`): on test sentences with a
few words wrapped in `<b>` (`python -m bench.inline_tags`; BENCHMARKS.md) the scores fell far
below those of the same sentences without tags.
So the pair's masks are taken out: the model translates the plain sentence (`Open the file.`)
and, in the same batch, the text the pair wrapped (`file`); the pair then wraps the words of the
sentence's translation that read most like the wrapped text's translation
(`Öffnen Sie die {1}Datei{2}.`), and app.text.protect's unmask puts the tags back as for any mask.
Measured the same way: the scores of the sentences without tags, every pair kept.

Which words: windows of whole words, about as many as the wrapped text's translation has,
scored by character similarity (difflib's ratio, case-folded, edge punctuation aside) to that
translation or to the wrapped source text itself (names, numbers and placeholders come through
as they are; a source word of three letters or more found inside a window, or part of a
word found at a window's edge (a drop cap, a note's number glued to its word), counts as
COPIED_SIMILARITY), less a penalty for lying far from where the wrapped text stood in the source
(relative position) and for a size other than the translation's. A window below MIN_SIMILARITY
is not trusted: the pair then wraps as many words as the wrapped text's translation has at that
relative position. Pairs are placed best match first, never overlapping, but pairs inside one
word of the source (`H<sub>2</sub>O`, `<a>GNU</a>/<a>Linux</a>`: their tags leave no space in
the plain sentence) take that word's window together, each its own part of it. Edge
punctuation of the window stays outside the pair, but for as much as the wrapped source text had
there (a mask's braces are no punctuation, and a mask is a word of its own: `[{1}x{2}]{3}`).
A pair around the whole sentence wraps the whole translation, and one around text without
letters (`<b>%s</b>`) is matched by that text itself; neither asks the model for a second
translation. A pair around a symbol, text without a letter or digit (a period in a run of its
own format, a permalink's `¶`), wraps that symbol where the translation has it nearest its
relative place, not a word (another pair's window leaves it out at its edges:
`<em>B</em><a>¶</a>` read "B¶"); where the translation lost it, the pair brings it back at the
nearest word boundary.

A pair directly around another (`<a><b>this</b></a>`) moves with it as one; a pair nested in
another with other text around it (`<a>read the <b>short</b> guide</a>`) is translated and
placed the same way, among the words of its parent's window only.

A tag that stands alone (`<img/>`, XLIFF `<x/>`, a .docx footnote reference: `TagMarks.atoms`)
leaves the sentence too (a line break, `<br>`, ends the sentence before it gets here, unless the
sentence runs on: app.translation.service._layout). One glued to a word on one side only (`the
manual<x/> for details`, `the <x/>Save button`) goes back glued to the same side of the window
that reads most like that word's translation, found as a pair's window is (the word is asked
for in the same batch): put back by its relative place in the paragraph instead, it landed in
front of `Handbuch` (a longer word than `manual`), and far from the word once the translation
moved it. One at an edge of the sentence goes to that edge. app.text.protect's unmask puts
back the others: next to a pair's mask they stood next to, or, spaced on both sides (`the
<img/> button`) or glued to both (`file<br>and`), at the word boundary nearest their relative
place in the source: nothing in the sentence says which word they belong with. A pair around
such tags only (an .odt span holding a field) leaves and comes back with them.

Left to the masks as before: pairs that cross, pairs nested two levels deep, a pair split over
two sentences, empty pairs, and the other masks (URLs, addresses, code)."""

from __future__ import annotations

import bisect
import collections
import difflib
import functools
import heapq
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

from app.engine.types import Result
from app.text.protect import Masked, has_words

MIN_SIMILARITY = 0.5  # below it a window is not a match: the pair goes by relative position
COPIED_SIMILARITY = 0.8  # a source word found as it is inside a window
DISTANCE_WEIGHT = 0.25  # similarity given up per unit of relative distance (0..1)
SIZE_WEIGHT = 0.05  # and per word more or less than the wrapped text's translation has
_WORD = re.compile(r"\{\d+\}|(?:[^\s{]|\{(?!\d+\}))+")  # a mask ("{3}") is a word of its own
# the last word of a text that ends in one: a try begins only where a word does (from each
# character of a long word earlier in the text, a try read to that word's end)
_LAST_WORD = re.compile(r"(?<!\S)\S+$")
_BRACE_MASK = re.compile(r"\{\d+\}")  # a numbered mask of app.text.protect's default style
_MANY_MARKS = 64  # marks in a text beyond which each sentence gets only its own (`within`)
_PUNCT = "\"'.,;:!?()[]{}«»„“”‘’‚‹›¡¿…-–—/"


@dataclass(frozen=True)
class TagMarks:
    """A masked text's tags, by their masks: pairs (opening, closing), and atoms: tags that
    stand alone (`<img .../>`, XLIFF `<x id="1"/>`), which leave the sentence before the model
    and which app.text.protect's unmask puts back where they stood (relative to the text, or next to
    a neighbouring mask): with their masks in the sentence the model lost words (test sentences
    with one such tag at a random place, `python -m bench.inline_tags`: lower scores than with
    the tags taken out, which score as without the tag)."""

    pairs: tuple[tuple[str, str], ...] = ()
    atoms: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.pairs or self.atoms)

    def within(self, sentence: str) -> TagMarks:
        """The marks whose masks (all of them, or the opening one of a pair) are in `sentence`,
        one of the text's sentences: TagPlan.of looks for every mark in its sentence, so a
        paragraph of 100,000 formatting runs cut into hundreds of sentences cost the square.
        Numbered brace masks ("{12}") are found by their shape in one scan and looked up in
        an index of the marks (going through all of the text's marks for each sentence cost
        the square again); other masks, which do not come in such numbers, are kept as they
        are."""
        if len(self.pairs) + len(self.atoms) <= _MANY_MARKS or not self._braced:
            return self
        pairs, atoms = self._by_mask
        present = set(_BRACE_MASK.findall(sentence))
        return TagMarks(tuple(self.pairs[k] for k in sorted(k for m in present
                                                              for k in pairs.get(m, ()))),
                        tuple(self.atoms[k] for k in sorted(k for m in present
                                                            for k in atoms.get(m, ()))))

    @functools.cached_property
    def _by_mask(self) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
        """The places in `pairs` and in `atoms` of the marks, by their (opening) mask."""
        pairs: dict[str, list[int]] = {}
        atoms: dict[str, list[int]] = {}
        for k, pair in enumerate(self.pairs):
            pairs.setdefault(pair[0], []).append(k)
        for k, atom in enumerate(self.atoms):
            atoms.setdefault(atom, []).append(k)
        return pairs, atoms

    @functools.cached_property
    def _braced(self) -> bool:
        return all(_BRACE_MASK.fullmatch(m) for pair in self.pairs for m in pair) and all(
            _BRACE_MASK.fullmatch(a) for a in self.atoms)


_VOID_TAGS = re.compile(r"<(?:img|wbr|br)\b", re.IGNORECASE)


def tag_marks(masked: Masked) -> TagMarks:
    """The tag pairs and atoms of a masked text."""
    paired = {i for pair in masked.pairs for i in pair}
    atoms = tuple(m for i, (m, o) in enumerate(zip(masked.masks, masked.originals, strict=True))
                  if i not in paired and o.startswith("<") and not o.startswith("</")
                  and (o.endswith("/>") or _VOID_TAGS.match(o)))
    return TagMarks(tuple((masked.masks[a], masked.masks[b]) for a, b in masked.pairs), atoms)


@dataclass(frozen=True)
class _Group:
    opening: str  # the masks that open it, in source order ("{1}{2}" for two nested pairs)
    closing: str
    start: int  # where the wrapped text is in the plain sentence
    end: int
    edges: tuple[str, str]  # punctuation at the wrapped text's two ends
    translated: bool  # its translation is asked for: it has letters, and is not `whole`
    whole: bool  # it is the whole sentence (punctuation aside): it wraps the whole translation
    parent: int | None  # the group it is nested in (with other text around it), by index
    symbol: str = ""  # what it wraps, when that has no letter or digit ("." "¶" "("): not words


@dataclass(frozen=True)
class _Atom:
    """Tags that stand alone together (masks with at most spaces between them), put back by
    TagPlan.apply: at the edge of the sentence they stood at, or beside the word they are
    glued to."""

    masks: str  # as they stood in the sentence
    # "start", "end": at that edge of the sentence; "after", "before": glued to the end of the
    # word before them or to the start of the word after them (the `anchor`), not to the
    # other side
    place: str
    neighbours: tuple[str, str]  # the characters just before and after them ("" at an edge)
    anchor: tuple[int, int] = (0, 0)  # that word in the plain sentence, edge punctuation aside
    outside: bool = False  # punctuation stood between the word and them ("manual,<x/>")
    translated: bool = False  # the word's translation is asked for: it has letters

    def at_edge(self, text: str) -> str:
        """The masks with the space they need at their edge of the translation `text` (which
        has words): glued to the text as unmask glues a mask it puts back at an edge, to a
        letter or digit, or to the same character."""
        if self.place == "start":
            right = self.neighbours[1]
            glued = right.isalnum() or (right.strip() != "" and text.lstrip()[:1] == right)
            return self.masks + ("" if glued else " ")
        left = self.neighbours[0]
        glued = left.isalnum() or (left.strip() != "" and text.rstrip()[-1:] == left)
        return ("" if glued else " ") + self.masks

    def insertion(self, text: str, words: list[tuple[int, int]], plain: str,
                  piece: str) -> tuple[int, str]:
        """(where in the translation `text`, the masks) for atoms glued to a word; piece is
        the word's translation."""
        first, last = _windows([(*self.anchor, piece)], plain, (0, len(plain)), text, words,
                               (0, len(words)))[0]
        start, end = words[first][0], words[last - 1][1]
        window = text[start:end]
        if self.place == "after":
            trail = len(window) - len(window.rstrip(_PUNCT))
            return end if self.outside or trail == len(window) else end - trail, self.masks
        lead = len(window) - len(window.lstrip(_PUNCT))
        return start if self.outside or lead == len(window) else start + lead, self.masks


@dataclass(frozen=True)
class TagPlan:
    """How one sentence goes to the model: `texts` are the plain sentence, then each
    translated group's wrapped text, then each word that atoms are glued to (when it has
    letters); `apply` takes their translations (in that order) and returns the sentence's
    translation with the groups' masks and those atoms' masks in it."""

    texts: tuple[str, ...]
    groups: tuple[_Group, ...]  # parents before their children
    atoms: tuple[_Atom, ...] = ()  # in source order

    @classmethod
    def of(cls, sentence: str, pairs: Iterable[tuple[str, str]],
           atoms: Iterable[str] = ()) -> TagPlan | None:
        """The plan for sentence, or None where no pair of it is carried over and no atom
        taken out (the sentence then goes to the model as it is)."""
        found, atoms = [], list(atoms)
        masks: set[tuple[int, int]] = set()  # where the pairs' masks are
        for opening, closing in pairs:
            a, b = sentence.find(opening), sentence.find(closing)
            valid = a >= 0 and b >= a + len(opening) and sentence.count(opening) == 1
            if valid and not functools.reduce(lambda t, atom: t.replace(atom, ""), atoms,
                                              sentence[a + len(opening):b]).strip():
                atoms += [opening, closing]  # around atoms only: out and back with them
                continue
            masks |= {(x, x + len(m)) for x, m in ((a, opening), (b, closing)) if x >= 0}
            if valid:
                found.append((a, a + len(opening), b, b + len(closing)))
        groups = _groups(sentence, sorted(found))
        alone = [(a, a + len(atom)) for atom in atoms
                 if (a := sentence.find(atom)) >= 0 and sentence.count(atom) == 1]
        if not groups and not alone:
            return None
        removed = sorted([r for g, _ in groups for a, b, c, d in g for r in ((a, b), (c, d))]
                         + alone)
        plain, moved = _without(sentence, removed, set(alone))
        tops = sum(parent is None for _, parent in groups)
        out = []
        for g, parent in groups:
            start, end = moved(g[-1][1]), moved(g[-1][2])
            inner = plain[start:end]
            # (a no-break space is a space: "Note:\xa0" holds its colon at its end)
            lead, trail = _punctuation(inner, _PUNCT + " \xa0\u202f")
            edges = (inner[:lead], inner[len(inner) - trail:])
            whole = tops == 1 and parent is None and not (
                plain[:start] + plain[end:]).strip(_PUNCT + " ")
            symbol = not whole and not any(c.isalnum() for c in _unmasked(inner))
            out.append(_Group("".join(sentence[a:b] for a, b, _, _ in g),
                              "".join(sentence[c:d] for _, _, c, d in reversed(g)),
                              start, end, (edges[0].strip(), edges[1].strip()),
                              not whole and has_words(inner), whole,
                              parent, inner.strip() if symbol else ""))
        parents = {g.parent for g in out}  # a symbol with a group inside goes as words do
        out = [replace(g, symbol="") if i in parents else g for i, g in enumerate(out)]
        # atoms next to any mask (a pair's, or one that stays in the sentence: code, a URL)
        # go back beside it (unmask)
        placed = _atoms(sentence, plain, moved, sorted(alone),
                        masks | {m.span() for m in _BRACE_MASK.finditer(sentence)})
        texts = ([plain] + [plain[g.start:g.end].strip() for g in out if g.translated]
                 + [plain[slice(*a.anchor)] for a in placed if a.translated])
        return cls(tuple(texts), tuple(out), placed)

    def apply(self, translations: Sequence[str]) -> str:
        plain = self.texts[0]
        text, asked = translations[0], iter(translations[1:])
        if not self.groups and not self.atoms:  # unmask puts the atoms back
            return text
        pieces = [next(asked) if g.translated else "" for g in self.groups]
        anchors = [next(asked) if a.translated else "" for a in self.atoms]
        words = [m.span() for m in _WORD.finditer(text)]
        if not words:  # nothing to wrap: the pairs go empty around what there is (and
            # unmask puts the atoms back)
            return ("".join(g.opening for g in self.groups) + text
                    + "".join(g.closing for g in reversed(self.groups)))
        edges = {place: "".join(a.at_edge(text) for a in self.atoms if a.place == place)
                 for place in ("start", "end")}
        # the other atoms' (place in text, masks), by place, then source order
        atoms = _Inserted(text, sorted(
            (*a.insertion(text, words, plain, piece), k)
            for k, (a, piece) in enumerate(zip(self.atoms, anchors, strict=True))
            if a.place not in edges))
        if not self.groups:
            return _edged(atoms.text(0, len(text), through=True), **edges)
        spans: dict[int, tuple[int, int]] = {}
        tops = [i for i, g in enumerate(self.groups) if g.parent is None and not g.symbol]

        words_of: dict[int, list[int]] = {}  # a group -> the groups in its source word

        def place(which: list[int], source: tuple[int, int], within: tuple[int, int]) -> None:
            # pairs in one word of the source ("<a>GNU</a>/<a>Linux</a>", "x<sup>2</sup>+y
            # <sup>2</sup>") take one window, that word's, and share it (a window each would
            # put one of them on another word)
            clusters: list[list[int]] = []
            for i in sorted(which, key=lambda i: self.groups[i].start):
                last = self.groups[clusters[-1][-1]] if clusters else None
                # one word: no space between the two, nor at the edges they meet at
                if last and not any(c.isspace()
                                    for c in plain[last.end - 1:self.groups[i].start + 1]):
                    clusters[-1].append(i)
                else:
                    clusters.append([i])
            targets = []
            for cluster in clusters:
                first, last = self.groups[cluster[0]], self.groups[cluster[-1]]
                piece, pos = [], first.start  # the word with each pair's text translated
                for i in cluster:
                    g = self.groups[i]
                    piece += [plain[pos:g.start], pieces[i] or plain[g.start:g.end]]
                    pos = g.end
                targets.append((first.start, last.end, "".join(piece) if len(cluster) > 1
                                else pieces[cluster[0]]))
                words_of.update(dict.fromkeys(cluster, cluster))
            for cluster, span in zip(clusters, _windows(targets, plain, source, text, words,
                                                        within), strict=True):
                spans.update(dict.fromkeys(cluster, span))

        if self.groups[0].whole:
            spans[0] = (0, len(words))
        else:
            place(tops, (0, len(plain)), (0, len(words)))
        for parent in tops:  # groups nested in it, inside its window
            children = [i for i, g in enumerate(self.groups)
                        if g.parent == parent and not g.symbol]
            if children:
                p = self.groups[parent]
                place(children, (p.start, p.end), spans[parent])
        ranges: dict[int, tuple[int, int]] = {}
        lost = set()  # symbols the translation does not have: they go back in
        for i, g in enumerate(self.groups):  # parents first
            if g.symbol:
                ranges[i] = self._symbol(i, text, words, ranges)
                lost |= {i} if ranges[i][0] == ranges[i][1] else set()
                continue
            first, last = spans[i]
            start, end = words[first][0], words[last - 1][1]
            # left out at a window's edges: the symbols of other pairs, not of those nested in
            # it (found inside its range only, one left out came back a second time)
            edge = _PUNCT + "".join(o.symbol for o in self.groups if o.parent != i)
            # edge punctuation the pair held as a word of its own (`<b>configure --</b>`) is
            # no word of the window: taken in where the translation has it right next to it
            head, tail = text[:start].rstrip(" "), text[end:].lstrip(" ")
            if g.edges[0] and head.endswith(g.edges[0]) and len(head) < start:
                start = len(head) - len(g.edges[0])
            if g.edges[1] and tail.startswith(g.edges[1]) and len(tail) < len(text) - end:
                end = len(text) - len(tail) + len(g.edges[1])
            # the window's edge punctuation stays outside, but as much as the source had inside
            lead, trail = _punctuation(text[start:end], edge)
            lead, trail = lead - len(g.edges[0]), trail - len(g.edges[1])
            if 0 < lead < end - start:
                start += lead
            if 0 < trail < end - start:
                end -= trail
            if _in_word(plain, g.start, g.end):
                cluster = words_of.get(i, [i])  # after the pair before it in its word
                before = cluster[cluster.index(i) - 1] if cluster.index(i) else None
                start, end = _part(text, start, end, (pieces[i], plain[g.start:g.end]),
                                   _glued(plain, g.start, g.end),
                                   ranges[before][1] if before in ranges else start)
            ranges[i] = (start, end)
        children: dict[int | None, list[int]] = {}
        for i, g in enumerate(self.groups):
            children.setdefault(g.parent, []).append(i)

        def render(members: list[int], lo: int, hi: int, top: bool = False) -> str:
            """text[lo:hi] with the groups `members` (and theirs) around their ranges, each
            kept inside [lo, hi) and after the one before (so the result is well-formed even
            where windows touch or a parent's edge punctuation was left out), and the atoms
            placed in it: one placed where a group's range starts or ends goes outside it
            (it stood next to none of the group's masks, or unmask would put it back)."""
            out, pos = [], lo
            for i in sorted(members, key=lambda i: (ranges[i][0], i)):
                start = min(max(ranges[i][0], pos), hi)
                end = min(max(ranges[i][1], start), hi)
                g = self.groups[i]
                inner = g.symbol if i in lost else render(children.get(i, []), start, end)
                out += [atoms.text(pos, start, through=True), g.opening, inner, g.closing]
                pos = end
            out.append(atoms.text(pos, hi, through=top))
            return "".join(out)

        return _edged(render(children[None], 0, len(text), top=True), **edges)

    def _symbol(self, i: int, text: str, words: list[tuple[int, int]],
                ranges: dict[int, tuple[int, int]]) -> tuple[int, int]:
        """Where group i, a symbol, is in the translation (inside its parent's range): the
        place of that symbol nearest its relative place in the source, not inside another
        group's range where there is one; where the translation lost it, an empty range at
        the word boundary nearest that place."""
        g = self.groups[i]
        lo, hi = ranges[g.parent] if g.parent is not None else (0, len(text))
        parent = self.groups[g.parent] if g.parent is not None else None
        s_lo, s_hi = (parent.start, parent.end) if parent else (0, len(self.texts[0]))
        where = ((g.start + g.end) / 2 - s_lo) / max(1, s_hi - s_lo)

        def distance(at: int) -> float:
            return abs((at - lo) / max(1, hi - lo) - where)

        found = [m.start() for m in re.finditer(re.escape(g.symbol), text[lo:hi])]
        found = [lo + a for a in found]
        others = [ranges[k] for k, o in enumerate(self.groups[:i]) if o.parent == g.parent
                  and not o.symbol]
        free = [a for a in found if not any(a < e and s < a + len(g.symbol) for s, e in others)]
        if free or found:
            at = min(free or found, key=lambda a: distance(a + len(g.symbol) / 2))
            return at, at + len(g.symbol)
        edges = [lo, hi, *(x for word in words for x in word if lo <= x <= hi)]
        at = min(edges, key=distance)
        return at, at

def plan(sentences: Sequence[str], marks: Sequence[TagMarks | None]
         ) -> tuple[list[TagPlan | None], list[str]]:
    """Each sentence's plan (marks[i]: its text's `tag_marks`, or None) and the texts for the
    model: a planned sentence's `texts` in its place, the others as they are."""
    plans = [TagPlan.of(s, m.pairs, m.atoms) if m else None
             for s, m in zip(sentences, marks, strict=True)]
    texts = [t for s, p in zip(sentences, plans, strict=True) for t in (p.texts if p else (s,))]
    return plans, texts


def carried(plans: Sequence[TagPlan | None], outputs: Sequence[str]) -> list[str]:
    """The translations of `plan`'s texts -> one per sentence, tags carried over."""
    return [r.text for r in carried_results(plans, [Result(o) for o in outputs])]


def carried_results(plans: Sequence[TagPlan | None], results: Sequence[Result]
                    ) -> list[Result]:
    """As `carried`, for the engine's results: a planned sentence's result is its plain
    sentence's (score, alternatives), each text with the tags carried over."""
    out, pos = [], 0
    for p in plans:
        r = results[pos]
        if p is not None:
            pieces = [x.text for x in results[pos + 1:pos + len(p.texts)]]
            r = replace(r, text=p.apply([r.text, *pieces]),
                        alternatives=[p.apply([a, *pieces]) for a in r.alternatives])
        out.append(r)
        pos += len(p.texts) if p else 1
    return out


def _windows(targets: Sequence[tuple[int, int, str]], plain: str, source: tuple[int, int],
             text: str, words: list[tuple[int, int]], within: tuple[int, int]
             ) -> list[tuple[int, int]]:
    """Windows (first word, last + 1) for the targets (start, end: a wrapped text
    plain[start:end] of the plain sentence; its translation), one each, never overlapping,
    among the words `within` (first, last + 1) of the translation, which stand for
    plain[source[0]:source[1]].

    The targets take their windows best option first, as if every window of every target
    were scored and sorted; but a target's windows are compared nearest first, and one
    further away than the best options found so far is never compared: its similarity
    is at most 1, so its distance alone puts it below them. So a paragraph packed with
    pairs costs each pair the few windows around its place, not every window of the
    translation."""
    lo, hi = within
    t_lo, t_hi = words[lo][0], words[hi - 1][1]
    t_len, s_len = max(1, t_hi - t_lo), max(1, source[1] - source[0])
    centers: dict[int, list[float]] = {}  # window length -> the windows' relative centers

    def centered(length: int) -> list[float]:
        if length not in centers:
            centers[length] = [((words[f][0] + words[f + length - 1][1]) / 2 - t_lo) / t_len
                               for f in range(lo, hi - length + 1)]
        return centers[length]

    # a min-heap of options (-score, target, -first, -last), in the order of the options
    # sorted best first, and of each target's next window to compare (-the best score it
    # and every window further away could have, -inf, target): it comes out before any
    # option that such a window could beat or tie
    heap: list[tuple] = []
    goals, wanted, nearest, pending = {}, {}, {}, {}
    which = range(len(targets))

    def queue_next(i: int) -> None:
        pending[i] = next(nearest[i], None)
        if pending[i] is not None:
            heapq.heappush(heap, (-(1.0 - DISTANCE_WEIGHT * pending[i][0]), -math.inf, i))

    for i in which:
        start, end, piece = targets[i]
        # the wrapped text's translation, or the text itself (names, numbers and
        # placeholders come through as they are)
        part = _in_word(plain, start, end)  # found at a window's edge
        goals[i] = [_Goal(x.strip(_PUNCT + " ").casefold(), copied, copied and part)
                    for x, copied in ((piece, False), (plain[start:end], True))
                    if x.strip(_PUNCT + " ")]
        size = min(hi - lo, max(1, len(_WORD.findall(goals[i][0].text)) if goals[i] else 1))
        where = ((start + end) / 2 - source[0]) / s_len
        wanted[i] = (size, where)
        nearest[i] = _nearest(centered, where, range(max(1, size - 1), size + 2), lo)
        queue_next(i)
    taken: dict[int, tuple[int, int]] = {}
    used: set[int] = set()
    while heap and len(taken) < len(which):
        _, rank, *rest = heapq.heappop(heap)
        if rank != -math.inf:  # the best option left
            i, first, last = rank, -rest[0], -rest[1]
            if i not in taken and used.isdisjoint(range(first, last)):
                taken[i] = (first, last)
                used.update(range(first, last))
            continue
        i = rest[0]  # a target whose windows further away may beat what is left
        if i in taken:
            continue
        distance, length, first = pending[i]  # its nearest window not compared yet
        last = first + length
        window = text[words[first][0]:words[last - 1][1]].strip(_PUNCT)
        similarity = max((goal.similarity(window.casefold()) for goal in goals[i]),
                         default=0.0)
        if similarity >= MIN_SIMILARITY:
            size = wanted[i][0]
            score = (similarity - DISTANCE_WEIGHT * distance
                     - SIZE_WEIGHT * abs(length - size))
            heapq.heappush(heap, (-score, i, -first, -last))
        queue_next(i)
    for i in which:
        if i in taken:
            continue
        size, where = wanted[i]
        free = [(abs(((words[f][0] + words[f + size - 1][1]) / 2 - t_lo) / t_len - where), f)
                for f in range(lo, max(lo + 1, hi - size + 1))
                if used.isdisjoint(range(f, min(hi, f + size)))]
        first = min(free)[1] if free else lo
        taken[i] = (first, min(hi, first + size))
        used.update(range(*taken[i]))
    return [taken[i] for i in which]


class _Goal:
    """What a window of the translation should read like (case-folded): the wrapped text's
    translation, or (copied) the wrapped source text itself; `part`: that text is part of a
    word of the source (a drop cap, `L` of `L'histoire`; a note's number, `valued3`)."""

    def __init__(self, text: str, copied: bool, part: bool = False) -> None:
        self.text, self.copied, self.part = text, copied, part
        self.matcher = difflib.SequenceMatcher(None, autojunk=False)
        self.matcher.set_seq2(text)  # difflib caches what it learns of the second sequence

    def similarity(self, window: str) -> float:
        """difflib's ratio (0 where its quick upper bound is below MIN_SIMILARITY); a source
        text of three letters or more found inside the window (`rev` in `Rev-Liste`), or part
        of a word found at its start or end (`valued<sup>3</sup>`, `<span>L</span>'histoire`:
        the pair went to a word further on, `in`, `la`), counts as COPIED_SIMILARITY at
        least."""
        copied = self.copied and (
            (len(self.text) >= 3 and self.text in window)
            or (self.part and (window.startswith(self.text) or window.endswith(self.text))))
        self.matcher.set_seq1(window)
        ratio = (self.matcher.ratio() if self.matcher.quick_ratio() >= MIN_SIMILARITY
                 else 0.0)
        return max(ratio, COPIED_SIMILARITY) if copied else ratio


def _nearest(centered: Callable[[int], list[float]], where: float, lengths: Iterable[int],
             lo: int) -> Iterator[tuple[float, int, int]]:
    """The windows of these lengths as (distance of their center from `where`, length, first
    word), nearest first; centered(length) holds the relative centers of that length's windows
    from word lo on, in order, so the windows on either side of `where` go away from it one by
    one."""
    sides = []
    for length in lengths:
        centers = centered(length)
        k = bisect.bisect_left(centers, where)
        sides += [_side(centers, where, length, lo, range(k, len(centers))),
                  _side(centers, where, length, lo, range(k - 1, -1, -1))]
    return heapq.merge(*sides)


def _side(centers: list[float], where: float, length: int, lo: int, order: range
          ) -> Iterator[tuple[float, int, int]]:
    for j in order:
        yield abs(centers[j] - where), length, lo + j


def _atoms(sentence: str, plain: str, moved: Callable[[int], int],
           alone: list[tuple[int, int]], masks: set[tuple[int, int]]) -> tuple[_Atom, ...]:
    """The atoms (their places in sentence, in order) that TagPlan.apply puts back, those with
    at most spaces between them together; left to unmask (which puts an atom next to a mask it
    stood next to): those next to one of `masks` (a pair's mask, or one that stays in the
    sentence: read as the word they were glued to, an inline code element's mask led them
    away from it)."""
    runs: list[list[int]] = []
    for a, b in alone:
        if runs and not sentence[runs[-1][1]:a].strip():
            runs[-1][1] = b
        else:
            runs.append([a, b])
    ends, starts = {b for _, b in masks}, {a for a, _ in masks}
    out: list[_Atom | None] = []
    for a, b in runs:
        before, after = sentence[:a], sentence[b:]
        if len(before.rstrip()) in ends or len(sentence) - len(after.lstrip()) in starts:
            continue
        at = len(plain[:moved(b)].rstrip())  # in plain: the end of the text before them
        neighbours = (before[-1:], after[:1])
        glued = (neighbours[0].strip() != "", neighbours[1].strip() != "")
        if not plain[:at].strip():
            out.append(_Atom(sentence[a:b], "start", neighbours))
        elif not plain[at:].strip():
            out.append(_Atom(sentence[a:b], "end", neighbours))
        elif glued[0] and not neighbours[1].isalnum():  # "manual<x/> for", "manual<x/>."
            out.append(_anchored(sentence[a:b], "after", neighbours, plain,
                                 _LAST_WORD.search(plain, 0, at).span()))
        elif glued[1] and not glued[0]:  # "the <x/>Save button"
            out.append(_anchored(sentence[a:b], "before", neighbours, plain,
                                 _WORD.search(plain, at).span()))
        # left to unmask: spaced on both sides ("the <img/> button"), or glued to both
        # ("file<br>and", "Name:<x/>John"), nothing tells which word they go with
    return tuple(a for a in out if a is not None)


def _anchored(masks: str, place: str, neighbours: tuple[str, str], plain: str,
              token: tuple[int, int]) -> _Atom | None:
    """Atoms glued to the word (a run of non-blanks) at `token` in the plain sentence."""
    start, end = token
    word = plain[start:end]
    lead, trail = len(word) - len(word.lstrip(_PUNCT)), len(word) - len(word.rstrip(_PUNCT))
    if lead == len(word):  # punctuation only: no word to follow (unmask puts them back)
        return None
    anchor = (start + lead, end - trail)
    return _Atom(masks, place, neighbours, anchor, bool(trail if place == "after" else lead),
                 has_words(plain[slice(*anchor)]))


def _edged(text: str, start: str, end: str) -> str:
    """text with `start` before its first non-blank and `end` after its last."""
    lead, trail = len(text) - len(text.lstrip()), len(text.rstrip())
    return text[:lead] + start + text[lead:trail] + end + text[trail:]


class _Inserted:
    """Atoms to put into a text (place, masks, source order; sorted), taken by `text` as the
    text is written from start to end."""

    def __init__(self, text: str, inserted: list[tuple[int, str, int]]) -> None:
        self._text, self._left = text, collections.deque(inserted)

    def text(self, lo: int, hi: int, through: bool) -> str:
        """text[lo:hi] with the atoms not taken yet placed before hi (with `through`: at hi
        too) in it."""
        out, pos = [], lo
        while self._left and (self._left[0][0] < hi or (through and self._left[0][0] == hi)):
            at, masks, _ = self._left.popleft()
            at = min(max(at, pos), hi)
            out += [self._text[pos:at], masks]
            pos = at
        out.append(self._text[pos:hi])
        return "".join(out)


def _groups(sentence: str, found: list[tuple[int, int, int, int]]
            ) -> list[tuple[list[tuple[int, int, int, int]], int | None]]:
    """The pairs carried over, as (pairs directly around each other, outermost first; the
    index of the group they are nested in with other text around them, or None), parents
    first. Left out (their masks stay in the sentence): empty pairs, pairs that cross another,
    and pairs nested two levels deep."""
    groups: list[tuple[list[tuple[int, int, int, int]], int | None]] = []
    for pair in found:  # by opening position
        a, b, c, d = pair
        if not sentence[b:c].strip():
            continue
        container = next((i for i in reversed(range(len(groups)))
                          if a < groups[i][0][0][3]), None)  # opens inside group i's pairs
        if container is None:
            groups.append(([pair], None))
            continue
        pairs, parent = groups[container]
        last = pairs[-1]  # the innermost pair of the group
        if not (last[1] <= a and d <= last[2]):
            continue  # crosses it
        if not sentence[last[1]:a].strip() and not sentence[d:last[2]].strip():
            pairs.append(pair)  # directly inside: moves with it
        elif parent is None:
            groups.append(([pair], container))
    return groups


def _part(text: str, start: int, end: int, goals: Iterable[str], glued: tuple[bool, bool],
          after: int) -> tuple[int, int]:
    """The part of the window text[start:end] that is one of `goals` (case aside), the first
    from `after` on, where the pair's text was glued to more of its word in the source: with a
    mark beside it ("Sphinx-Stil", "Jira/Confluence"), or, on a side where the source had a
    letter or digit beside it too (glued: left, right), with one ("H<sub>2</sub>O",
    "<b>Un</b>like"); else the window."""
    for goal in (g.strip() for g in goals):
        n = len(goal)
        if not goal or n >= end - start:
            continue
        # searched in the text itself: a case-folded copy can be longer ("ß" -> "ss"), and
        # its places would not be the text's
        pattern = re.compile(re.escape(goal), re.IGNORECASE)
        found = pattern.search(text, after, end)
        while found:
            at = found.start()
            if ((at == start or glued[0] or not text[at - 1].isalnum())
                    and (at + n == end or glued[1] or not text[at + n].isalnum())):
                return at, at + n
            found = pattern.search(text, at + 1, end)
    return start, end


def _in_word(plain: str, start: int, end: int) -> bool:
    """Whether the text plain[start:end] is part of a word (`L` of `L'histoire`, `3` of
    `valued3`): something not a space right before or after it."""
    return any(c and not c.isspace() for c in (plain[start - 1 : start] if start else "",
                                               plain[end : end + 1]))


def _glued(plain: str, start: int, end: int) -> tuple[bool, bool]:
    """Whether the text plain[start:end] has a letter or digit right before it, right after."""
    return plain[start - 1 : start].isalnum(), plain[end : end + 1].isalnum()


_OWN_BRACES = re.compile(r"\{[^{}\s]*\}")  # a mask ("{3}") or a placeholder ("{name}")


def _unmasked(text: str) -> str:
    """text with each mask or placeholder in braces as letters: not punctuation."""
    return _OWN_BRACES.sub(lambda m: "x" * len(m.group()), text)


def _punctuation(text: str, chars: str) -> tuple[int, int]:
    """How many of `chars` text has at its start and at its end (not the braces of a mask:
    "{3}." ends in one)."""
    core = _unmasked(text)
    return len(core) - len(core.lstrip(chars)), len(core) - len(core.rstrip(chars))


def _spaced_after(c: str) -> bool:
    """Whether a word that follows c directly is a word of its own (after a letter, a digit, a
    mark that ends a clause or a closing bracket), not one an opening bracket or quote holds."""
    return c.isalnum() or c in ".,;:!?)]}”’»"


def _without(sentence: str, removed: list[tuple[int, int]], atoms: set[tuple[int, int]]):
    """sentence without the removed ranges (a space left doubled by a removal goes too, one
    between two words that an atom alone kept apart comes in), and a function from a
    position in sentence to the same place in the result."""
    out, pos, shifts = [], 0, []
    atom = False  # an atom among the ranges removed since the last text
    for a, b in removed:
        out.append(sentence[pos:a])
        atom = (atom and a == pos) or (a, b) in atoms
        # a space before the removed mask (or masks: "open {3}{5} file") with a space or the
        # end after it goes too, and before an atom with a mark after it that closes a clause
        # ("See page {1}." -> "See page.")
        if (sentence[b:b + 1] in (" ", "") or (
                atom and sentence[b:b + 1] in ".,;:!?)]}")) and "".join(out).endswith(" "):
            while out and not out[-1]:
                out.pop()
            out[-1] = out[-1][:-1]
        # a tag standing alone between two words with no space ("file<br>and", "Name:<x/>John",
        # "<b>on</b><br><b>off</b>") leaves one: two words still; after an opening bracket or
        # quote none comes. A pair's tags inside a word ("H<sub>2</sub>O", "<b>Un</b>like")
        # leave none: one word still
        elif atom and sentence[b:b + 1].isalnum() and _spaced_after(next(
                (piece[-1] for piece in reversed(out) if piece), " ")):
            out.append(" ")
        shifts.append((b, sum(map(len, out))))
        pos = b
    out.append(sentence[pos:])
    plain = "".join(out)

    def moved(at: int) -> int:
        base, offset = 0, 0
        for b, length in shifts:
            if at >= b:
                base, offset = b, length
        return offset + (at - base) if base else at

    return plain, moved
