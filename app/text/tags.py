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
as they are; a source word of three letters or more found inside a window counts as
COPIED_SIMILARITY), less a penalty for lying far from where the wrapped text stood in the source
(relative position) and for a size other than the translation's. A window below MIN_SIMILARITY
is not trusted: the pair then wraps as many words as the wrapped text's translation has at that
relative position. Pairs are placed best match first, never overlapping. Edge punctuation of the
window stays outside the pair, but for as much as the wrapped source text had there (a mask's
braces are no punctuation, and a mask is a word of its own: `[{1}x{2}]{3}`). A pair around the
whole sentence wraps the whole translation, and one around text without letters (`<b>%s</b>`)
is matched by that text itself; neither asks the model for a second translation. A pair around
a symbol, text without a letter or digit (a period in a run of its own format, a permalink's
`¶`), wraps that symbol where the translation has it nearest its relative place, not a word
(another pair's window leaves it out at its edges: `<em>B</em><a>¶</a>` read "B¶");
where the translation lost it, the pair brings it back at the nearest word boundary.

A pair directly around another (`<a><b>this</b></a>`) moves with it as one; a pair nested in
another with other text around it (`<a>read the <b>short</b> guide</a>`) is translated and
placed the same way, among the words of its parent's window only.

A tag that stands alone (`<img/>`, XLIFF `<x/>`: `TagMarks.atoms`) leaves the sentence too, and
app.text.protect's unmask puts it back by its place in the source (a line break, `<br>`, ends the
sentence before it gets here: app.translation.service._layout). A pair around such tags only (an
.odt span holding a field) leaves and comes back with them.

Left to the masks as before: pairs that cross, pairs nested two levels deep, a pair split over
two sentences, empty pairs, and the other masks (URLs, addresses, code)."""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from app.engine.types import Result
from app.text.protect import Masked, has_words

MIN_SIMILARITY = 0.5  # below it a window is not a match: the pair goes by relative position
COPIED_SIMILARITY = 0.8  # a source word found as it is inside a window
DISTANCE_WEIGHT = 0.25  # similarity given up per unit of relative distance (0..1)
SIZE_WEIGHT = 0.05  # and per word more or less than the wrapped text's translation has
_WORD = re.compile(r"\{\d+\}|(?:[^\s{]|\{(?!\d+\}))+")  # a mask ("{3}") is a word of its own
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
        Numbered brace masks ("{12}") are found by their shape in one scan; other masks, which
        do not come in such numbers, are kept as they are."""
        if len(self.pairs) + len(self.atoms) <= _MANY_MARKS or not self._braced:
            return self
        present = set(_BRACE_MASK.findall(sentence))
        return TagMarks(tuple(p for p in self.pairs if p[0] in present),
                        tuple(a for a in self.atoms if a in present))

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
class TagPlan:
    """How one sentence goes to the model: `texts` are the plain sentence and then each
    translated group's wrapped text; `apply` takes their translations (in that order) and
    returns the sentence's translation with the groups' masks in it."""

    texts: tuple[str, ...]
    groups: tuple[_Group, ...]  # parents before their children

    @classmethod
    def of(cls, sentence: str, pairs: Iterable[tuple[str, str]],
           atoms: Iterable[str] = ()) -> TagPlan | None:
        """The plan for sentence, or None where no pair of it is carried over and no atom
        taken out (the sentence then goes to the model as it is)."""
        found, atoms = [], list(atoms)
        for opening, closing in pairs:
            a, b = sentence.find(opening), sentence.find(closing)
            if a < 0 or b < a + len(opening) or sentence.count(opening) != 1:
                continue
            if not functools.reduce(lambda t, atom: t.replace(atom, ""), atoms,
                                    sentence[a + len(opening):b]).strip():
                atoms += [opening, closing]  # around atoms only: out and back with them
                continue
            found.append((a, a + len(opening), b, b + len(closing)))
        groups = _groups(sentence, sorted(found))
        alone = [(a, a + len(atom)) for atom in atoms
                 if (a := sentence.find(atom)) >= 0 and sentence.count(atom) == 1]
        if not groups and not alone:
            return None
        removed = sorted([r for g, _ in groups for a, b, c, d in g for r in ((a, b), (c, d))]
                         + alone)
        plain, moved = _without(sentence, removed)
        tops = sum(parent is None for _, parent in groups)
        out = []
        for g, parent in groups:
            start, end = moved(g[-1][1]), moved(g[-1][2])
            inner = plain[start:end]
            lead, trail = _punctuation(inner, _PUNCT + " ")
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
        texts = [plain] + [plain[g.start:g.end].strip() for g in out if g.translated]
        return cls(tuple(texts), tuple(out))

    def apply(self, translations: Sequence[str]) -> str:
        plain = self.texts[0]
        text, asked = translations[0], iter(translations[1:])
        if not self.groups:  # only atoms were taken out: unmask puts them back
            return text
        pieces = [next(asked) if g.translated else "" for g in self.groups]
        words = [m.span() for m in _WORD.finditer(text)]
        if not words:  # nothing to wrap: the pairs go empty around what there is
            return ("".join(g.opening for g in self.groups) + text
                    + "".join(g.closing for g in reversed(self.groups)))
        spans: dict[int, tuple[int, int]] = {}
        tops = [i for i, g in enumerate(self.groups) if g.parent is None and not g.symbol]
        if self.groups[0].whole:
            spans[0] = (0, len(words))
        else:
            spans.update(self._windows(tops, (0, len(plain)), text, words, (0, len(words)),
                                       pieces))
        for parent in tops:  # groups nested in it, inside its window
            children = [i for i, g in enumerate(self.groups)
                        if g.parent == parent and not g.symbol]
            if children:
                p = self.groups[parent]
                spans.update(self._windows(children, (p.start, p.end), text, words,
                                           spans[parent], pieces))
        ranges: dict[int, tuple[int, int]] = {}
        lost = set()  # symbols the translation does not have: they go back in
        edge = _PUNCT + "".join(g.symbol for g in self.groups)  # left out at a window's edges
        for i, g in enumerate(self.groups):  # parents first
            if g.symbol:
                ranges[i] = self._symbol(i, text, words, ranges)
                lost |= {i} if ranges[i][0] == ranges[i][1] else set()
                continue
            first, last = spans[i]
            start, end = words[first][0], words[last - 1][1]
            lead, trail = _punctuation(text[start:end], edge)
            # the window's edge punctuation stays outside, but as much as the source had inside
            lead, trail = lead - len(g.edges[0]), trail - len(g.edges[1])
            if 0 < lead < end - start:
                start += lead
            if 0 < trail < end - start:
                end -= trail
            if any(c and not c.isspace() for c in (plain[g.start - 1 : g.start] if g.start
                                                   else "", plain[g.end : g.end + 1])):
                start, end = _part(text, start, end, (pieces[i], plain[g.start:g.end]))
            ranges[i] = (start, end)
        children: dict[int | None, list[int]] = {}
        for i, g in enumerate(self.groups):
            children.setdefault(g.parent, []).append(i)

        def render(members: list[int], lo: int, hi: int) -> str:
            """text[lo:hi] with the groups `members` (and theirs) around their ranges, each
            kept inside [lo, hi) and after the one before (so the result is well-formed even
            where windows touch or a parent's edge punctuation was left out)."""
            out, pos = [], lo
            for i in sorted(members, key=lambda i: (ranges[i][0], i)):
                start = min(max(ranges[i][0], pos), hi)
                end = min(max(ranges[i][1], start), hi)
                g = self.groups[i]
                inner = g.symbol if i in lost else render(children.get(i, []), start, end)
                out += [text[pos:start], g.opening, inner, g.closing]
                pos = end
            out.append(text[pos:hi])
            return "".join(out)

        return render(children[None], 0, len(text))

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

    def _windows(self, which: list[int], source: tuple[int, int], text: str,
                 words: list[tuple[int, int]], within: tuple[int, int],
                 pieces: Sequence[str]) -> dict[int, tuple[int, int]]:
        """Windows (first word, last + 1) for the groups `which`, among the words `within`
        (first, last + 1) of the translation, which stand for plain[source[0]:source[1]]."""
        lo, hi = within
        t_lo, t_hi = words[lo][0], words[hi - 1][1]
        t_len, s_len = max(1, t_hi - t_lo), max(1, source[1] - source[0])
        options = []  # (score, -group index, first, last)
        wanted = {}
        for i in which:
            g, piece = self.groups[i], pieces[i]
            # the wrapped text's translation, or the text itself (names, numbers and
            # placeholders come through as they are)
            goals = [_Goal(x.strip(_PUNCT + " ").casefold(), copied)
                     for x, copied in ((piece, False), (self.texts[0][g.start:g.end], True))
                     if x.strip(_PUNCT + " ")]
            size = min(hi - lo, max(1, len(_WORD.findall(goals[0].text)) if goals else 1))
            where = ((g.start + g.end) / 2 - source[0]) / s_len
            wanted[i] = (size, where)
            for length in range(max(1, size - 1), size + 2):
                for first in range(lo, hi - length + 1):
                    last = first + length
                    window = text[words[first][0]:words[last - 1][1]].strip(_PUNCT)
                    similarity = max((goal.similarity(window.casefold()) for goal in goals),
                                     default=0.0)
                    if similarity < MIN_SIMILARITY:
                        continue
                    center = ((words[first][0] + words[last - 1][1]) / 2 - t_lo) / t_len
                    options.append((similarity - DISTANCE_WEIGHT * abs(center - where)
                                    - SIZE_WEIGHT * abs(length - size), -i, first, last))
        taken: dict[int, tuple[int, int]] = {}
        used: set[int] = set()
        for _, minus_i, first, last in sorted(options, reverse=True):
            i = -minus_i
            if i in taken or used & set(range(first, last)):
                continue
            taken[i] = (first, last)
            used |= set(range(first, last))
        for i in which:
            if i in taken:
                continue
            size, where = wanted[i]
            free = [(abs(((words[f][0] + words[f + size - 1][1]) / 2 - t_lo) / t_len - where), f)
                    for f in range(lo, max(lo + 1, hi - size + 1))
                    if not used & set(range(f, min(hi, f + size)))]
            first = min(free)[1] if free else lo
            taken[i] = (first, min(hi, first + size))
            used |= set(range(*taken[i]))
        return taken


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


class _Goal:
    """What a window of the translation should read like (case-folded): the wrapped text's
    translation, or (copied) the wrapped source text itself."""

    def __init__(self, text: str, copied: bool) -> None:
        self.text, self.copied = text, copied
        self.matcher = difflib.SequenceMatcher(None, autojunk=False)
        self.matcher.set_seq2(text)  # difflib caches what it learns of the second sequence

    def similarity(self, window: str) -> float:
        """difflib's ratio (0 where its quick upper bound is below MIN_SIMILARITY); a source
        text of three letters or more found inside the window (`rev` in `Rev-Liste`) counts as
        COPIED_SIMILARITY at least."""
        copied = self.copied and len(self.text) >= 3 and self.text in window
        self.matcher.set_seq1(window)
        ratio = (self.matcher.ratio() if self.matcher.quick_ratio() >= MIN_SIMILARITY
                 else 0.0)
        return max(ratio, COPIED_SIMILARITY) if copied else ratio


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


def _part(text: str, start: int, end: int, goals: Iterable[str]) -> tuple[int, int]:
    """The part of the window text[start:end] that is one of `goals` (case aside) where the
    window has more after a mark or before one ("Sphinx-Stil", "Jira/Confluence"): the pair's
    text was glued to more of its word in the source; else the window."""
    for goal in (g.strip() for g in goals):
        n = len(goal)
        if not goal or n >= end - start:
            continue
        if text[start : start + n].casefold() == goal.casefold() and not text[start + n].isalnum():
            return start, start + n
        if text[end - n : end].casefold() == goal.casefold() and not text[end - n - 1].isalnum():
            return end - n, end
    return start, end


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


def _without(sentence: str, removed: list[tuple[int, int]]):
    """sentence without the removed ranges (a space left doubled by a removal goes too, one
    between two words that the range alone kept apart comes in), and a function from a
    position in sentence to the same place in the result."""
    out, pos, shifts = [], 0, []
    for a, b in removed:
        out.append(sentence[pos:a])
        # a space before the removed mask (or masks: "open {3}{5} file") with a space or the
        # end after it goes too
        if sentence[b:b + 1] in (" ", "") and "".join(out).endswith(" "):
            while out and not out[-1]:
                out.pop()
            out[-1] = out[-1][:-1]
        # a tag between two words with no space ("file<br>and", "Name:<x/>John") leaves one:
        # two words still; after an opening bracket or quote ("(<b>bold</b>)") none comes
        elif sentence[b:b + 1].isalnum() and _spaced_after(next(
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
