"""Text segmentation: split inputs into sentences keeping every other character as it was.

A text becomes `Segments`: a list of parts whose concatenation is exactly the input, some of
them marked for translation (sentences), the rest verbatim (whitespace, line breaks, markup,
pieces without letters). `rejoin` puts translations in place of the marked parts, so paragraphs,
indentation and line breaks survive translation exactly.

A line break inside a sentence (text wrapped at a width: e-mail, subtitles, HTML source) does
not cut it: cut, each half was translated without the other, and the scores of wrapped test
sentences fell far below; joined by soft_wrap they come close to the unwrapped ones
(`python -m bench.wrapped`; BENCHMARKS.md).
Such a sentence goes to the model on one line, and its breaks go back into the translation at
the spaces nearest their relative places (`rewrap`). Which breaks are wraps is the `wraps` rule
of `add_text`: in plain text a break where the next line's first word would not have fit on a
full line before and the next line starts with a lowercase letter at the same indentation
(`soft_wrap`); in HTML every break in a text (`always`: HTML renders it as a space); in
subtitles every break but a speaker's turn (`subtitle_wrap`).

Where a period ends a sentence depends on the source language where the service knows it (the
model's source: named, or detected for "auto"): German writes ordinals with a period before a
capitalised noun ("am 3. Oktober"), each language has its own abbreviations (`rules_for`).
Without a language, the rules for any text apply (English and German abbreviations).

HTML goes through the stdlib parser: text nodes are segmented, tags, comments, entities outside
sentences and the contents of script/style/pre/textarea and of inline code (code, kbd, samp, tt,
var; and of translate="no" elements) are kept byte for byte. (The service does this only with
span protection off; with it, HTML is cut into blocks of text with their inline tags, inline
code and inline translate="no" elements: app.translation.service._layout.)
"""

from __future__ import annotations

import bisect
import dataclasses
import html
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser

from app.text.protect import INLINE_CODE_TAGS, KEPT_CLASSES, find_spans

MAX_SENTENCE_CHARS = 400  # longer "sentences" are cut at clause or word boundaries

# a line break with the whitespace around it, tried only where a run of whitespace begins and
# taken without giving back: tried from every space of a run without one, it cost the square
_LINE_BREAKS = re.compile(r"(?<!\s)[^\S\n]*+\n\s*+")
_INDENT = re.compile(r"[ \t]*(?:(?:[-*+•‣◦]|\d{1,3}[.)])[ \t]+)?")  # indentation, list marker
_LETTER_ITEM = re.compile(r"[a-z][.)]\s")  # "a) ", "b. ": a list item, not a continuation
# which line breaks fall inside a sentence: (line before, line after, longest line) -> bool
Wraps = Callable[[str, str, int], bool]
# a sentence ends at . ! ? … (possibly repeated, followed by closing quotes/brackets) + space
_SENTENCE_END = re.compile(r"(?<=[.!?…。！？])[\"'”’»)\]]*(\s+)(?=\S)")
_OPENERS = "\"'“„«‚‘(["
# a period after one of these words does not end a sentence: titles before a name, and Latin,
# English and German abbreviations a sentence goes on after (lower-cased, without the last
# period; "etc." and "usw." often end one, and a lower-case word after them says when not).
# These are the rules for text in any language (no source language known, or one without
# rules of its own: LANGUAGES)
_NO_END_AFTER = frozenset({
    "mr", "mrs", "ms", "messrs", "dr", "prof", "sr", "st", "mt", "capt", "col", "gen", "lt",
    "sgt", "rev", "hon", "vs", "cf", "e.g", "i.e", "a.k.a", "approx", "z.b", "d.h", "u.a",
    "bzw", "ca", "vgl", "ggf", "evtl", "inkl", "bspw", "sog", "hr", "fr", "mio", "mrd",
})
# ... and these only before a number: "Fig. 3", "No. 5", "p. 12", "Nr. 4", "Jan. 5"
_NO_END_BEFORE_NUMBER = frozenset({
    "no", "nr", "fig", "figs", "p", "pp", "vol", "art", "ch", "chap", "sec", "abb", "s", "bd",
    "tab", "op", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov",
    "dec",
})


@dataclass(frozen=True)
class Rules:
    """What tells a period inside a sentence from one at its end, in one source language."""

    no_end_after: frozenset[str] = _NO_END_AFTER
    no_end_before_number: frozenset[str] = _NO_END_BEFORE_NUMBER
    # the language writes ordinals and dates with a period ("3. 10. 2024", "3. – 9."): a
    # number's period before another number does not end a sentence
    dates: bool = False
    # a number's period (up to three digits: a year ends sentences) after one of these words,
    # or before one of the next, is an ordinal's: German capitalises nouns and months, so the
    # lower-case rule cannot tell "am 3. Oktober" from "ist 5. Danach"
    ordinal_after: frozenset[str] = frozenset()
    ordinal_before: frozenset[str] = frozenset()

    def more(self, after: str = "", before_number: str = "", drop: str = "", **changes
             ) -> Rules:
        """These rules with more abbreviations (space-separated), less the words in `drop`."""
        return dataclasses.replace(
            self, no_end_after=(self.no_end_after | _words(after)) - _words(drop),
            no_end_before_number=self.no_end_before_number | _words(before_number), **changes)


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


ANY_LANGUAGE = Rules()
_DATES = ANY_LANGUAGE.more(dates=True)
_MONTHS_DE = ("januar jänner februar märz april mai juni juli august september oktober "
              "november dezember jan feb mär apr jun jul aug sep sept okt nov dez")
# the source language's primary subtag -> its rules; each list is the abbreviations its
# writers put before a capitalised word (a name, a noun), over the rules for any text
LANGUAGES = {
    "de": ANY_LANGUAGE.more(
        "bzgl zzgl geb gest", "abs kap tel", dates=True,
        ordinal_after=_words("der die das dem den des am im zum zur vom beim ins ans aufs "
                             "sein seine seinem seinen seiner ihr ihre ihrem ihren ihrer"),
        ordinal_before=_words(f"{_MONTHS_DE} jahrhundert jahrhunderts jahrtausend "
                              "jahrtausends jh mal")),
    "fr": ANY_LANGUAGE.more("m mme mlle pr ex av apr", "env"),
    "es": ANY_LANGUAGE.more("sra srta sres dra ud uds dña ej av avda", "pág núm"),
    "it": ANY_LANGUAGE.more("sig sigg dott ing avv geom rag es", "pag"),
    "pt": ANY_LANGUAGE.more("sra srta dra ex av", "pág"),
    "nl": ANY_LANGUAGE.more("dhr mevr bijv d.w.z m.a.w o.a i.p.v t.a.v evt vnl zgn resp ir "
                            "drs ing", "blz"),
    "da": _DATES.more("f.eks bl.a dvs", "kl"),
    "no": _DATES.more("f.eks bl.a dvs", "kl"),
    "fi": _DATES.more("esim ks ns"),
    "sv": ANY_LANGUAGE.more("t.ex bl.a d.v.s dvs", "kl", drop="hon"),
    # ordinals and dates with a period, nouns and months in lower case
    **dict.fromkeys(("cs", "sk", "pl", "hu", "hr", "sl", "sr", "bs", "et", "lv", "is"), _DATES),
}
LANGUAGES["nb"] = LANGUAGES["nn"] = LANGUAGES["no"]


def rules_for(language: str | None) -> Rules:
    """The rules for text in `language` (a code: "de", "pt-BR", "zh_Hant"); the rules for any
    text where it is None or has none of its own ("en" among them)."""
    if not language:
        return ANY_LANGUAGE
    return LANGUAGES.get(re.split("[-_]", language.lower(), maxsplit=1)[0], ANY_LANGUAGE)


_WINDOW = 80  # characters on each side of a break that _ends_sentence reads
_CLAUSE_BREAK = re.compile(r"[,;:]\s+")
_SKIP_TAGS = {"script", "style", "pre", "textarea"} | INLINE_CODE_TAGS
# elements without content or end tag: marked translate="no", they keep only themselves
_VOID_TAGS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
              "source", "track", "wbr"}


MIN_WRAPPED_LINE = 25  # characters: shorter lines are list items, labels, verse, not wraps


def soft_wrap(before: str, after: str, width: int) -> bool:
    """Whether a line break between two non-blank lines of plain text (`width`: the text's
    longest line) falls inside a sentence, as text wrapped at a width breaks: the next line's
    first word would not have fit on the line before (at least MIN_WRAPPED_LINE characters, not
    ending in a colon), and the next line starts with a lowercase letter (not a letter item,
    "a) ") at the indentation of the line before or of its text after a list marker ("- ")."""
    head, text = before.strip(), after.lstrip()
    if len(head) < MIN_WRAPPED_LINE or not text or head.endswith(":") or not text[0].islower():
        return False
    if _LETTER_ITEM.match(text) or len(before.rstrip()) + 1 + len(text.split()[0]) <= width:
        return False
    indent = len(after) - len(text)
    lead = len(before) - len(before.lstrip())
    return indent in (lead, _INDENT.match(before).end())


def always(before: str, after: str, width: int) -> bool:
    """Every line break joins (HTML: a break in a text is a space to the browser)."""
    return True


def subtitle_wrap(before: str, after: str, width: int) -> bool:
    """The lines of a subtitle join unless the next one opens a speaker's turn ("- ...")."""
    return not after.lstrip().startswith(("-", "–", "—"))


def rewrap(source: str, translation: str) -> str:
    """translation (on one line) with the line breaks of source (a sentence that spans lines)
    put back, each at the space of translation nearest its relative place in source, in order;
    a break with no space left for it is dropped (the lines join)."""
    breaks = list(_LINE_BREAKS.finditer(source))
    if not breaks:
        return translation
    flat = len(_LINE_BREAKS.sub(" ", source)) or 1
    spaces = [m.start() for m in re.finditer(" ", translation)]
    out, pos, used, shift = [], 0, -1, 0
    for brk in breaks:
        place = (brk.start() - shift) / flat * len(translation)
        shift += len(brk.group()) - 1  # the break is one space in the flat text
        if used + 1 == len(spaces):
            break  # no space left
        used = _nearest(spaces, place, used + 1)
        out += [translation[pos : spaces[used]], brk.group()]
        pos = spaces[used] + 1
    return "".join(out) + translation[pos:]


def _nearest(spaces: list[int], place: float, first: int) -> int:
    """The index of the space nearest `place` from spaces[first] on (the first of two as near):
    they are in order, so it is one of the two around it (a scan of them all, once per line
    break, cost the square of a sentence's lines)."""
    at = bisect.bisect_left(spaces, place, first)
    if at == len(spaces) or (at > first and place - spaces[at - 1] <= spaces[at] - place):
        return at - 1
    return at


@dataclass
class Segments:
    """Parts of one text; `targets` are the indices of the parts to translate."""

    parts: list[str] = field(default_factory=list)
    targets: list[int] = field(default_factory=list)
    html: bool = False
    language: str | None = None  # the source language: its sentence-end rules (rules_for)
    # verbatim pieces added after the last part, which they join (_flush)
    _verbatim: list[str] = field(default_factory=list, repr=False, compare=False)

    @property
    def sentences(self) -> list[str]:
        """What goes to the engine (entities decoded for HTML), each on one line."""
        self._flush()
        return [_LINE_BREAKS.sub(" ", self._plain(self.parts[i])) for i in self.targets]

    def rejoin(self, translations: list[str]) -> str:
        if len(translations) != len(self.targets):
            raise ValueError(f"expected {len(self.targets)} translations, got {len(translations)}")
        self._flush()
        parts = list(self.parts)
        for index, text in zip(self.targets, translations, strict=True):
            text = rewrap(parts[index], text.strip())
            parts[index] = html.escape(text, quote=False) if self.html else text
        return "".join(parts)

    def refine(self, fits: Callable[[str], bool]) -> None:
        """Cut the sentences that do not fit the model (`fits` is False) into runs of words that
        do, keeping the whitespace between runs verbatim, so nothing is truncated."""
        self._flush()
        old_parts, old_targets = self.parts, set(self.targets)
        self.parts, self.targets = [], []
        for index, part in enumerate(old_parts):
            if index not in old_targets or fits(self._plain(part)):
                self._append(part, index in old_targets)
                continue
            pieces = re.split(r"(\s+)", part)  # word, gap, word, ..., word
            run = pieces[0]
            for gap, word in zip(pieces[1::2], pieces[2::2], strict=True):
                if fits(self._plain(run + gap + word)):
                    run += gap + word
                else:
                    self._append_cut(run, fits)
                    self._append(gap, False)
                    run = word
            self._append_cut(run, fits)
        self._flush()

    def _append_cut(self, run: str, fits: Callable[[str], bool]) -> None:
        """A run of words to translate; a single word longer than the model takes (a line of
        letters without a space) is cut into the longest pieces that fit, joined with nothing."""
        while not fits(self._plain(run)) and len(run) > 1:
            low, high = 1, len(run) - 1  # the longest prefix that fits: at least one character
            while low < high:
                mid = (low + high + 1) // 2
                if fits(self._plain(run[:mid])):
                    low = mid
                else:
                    high = mid - 1
            self._append(run[:low], True)
            run = run[low:]
        self._append(run, True)

    def _plain(self, text: str) -> str:
        return html.unescape(text) if self.html else text

    def _append(self, text: str, translate: bool) -> None:
        if translate:
            self._flush()
            self.targets.append(len(self.parts))
            self.parts.append(text)
        else:
            self._add(text, translate=False)

    def _add(self, text: str, translate: bool) -> None:
        if not text:
            return
        if translate and any(ch.isalpha() for ch in self._plain(text)):
            self._flush()
            self.targets.append(len(self.parts))
            self.parts.append(text)
        else:
            self._verbatim.append(text)

    def _flush(self) -> None:
        """The verbatim pieces added since the last part joined (once: merged one by one,
        thousands of lines without letters copied their part again each) and merged with
        the part before them where that is verbatim too."""
        if not self._verbatim:
            return
        text = "".join(self._verbatim)
        self._verbatim.clear()
        if self.parts and (len(self.parts) - 1) not in self.targets[-1:]:
            self.parts[-1] += text  # merge neighbouring verbatim parts
        else:
            self.parts.append(text)

    def add_text(self, text: str, wraps: Wraps = soft_wrap) -> None:
        """Append plain text, split into lines and sentences; lines joined by a break that
        `wraps(line before, line after, longest line)` calls a wrap are split as one."""
        self._add_text(text, wraps)
        self._flush()

    def _add_text(self, text: str, wraps: Wraps) -> None:
        pos = start = 0
        lines = text.split("\n")
        width = max(len(line.rstrip()) for line in lines)
        for i in range(len(lines) - 1):
            pos += len(lines[i]) + 1
            if not (lines[i].strip() and lines[i + 1].strip()
                    and wraps(lines[i], lines[i + 1], width)):
                chunk = text[start : pos - 1]
                body = chunk.rstrip()
                self._add_line(body)
                self._add(chunk[len(body) :] + "\n", translate=False)
                start = pos
        self._add_line(text[start:])

    def _add_line(self, line: str) -> None:
        stripped = line.strip()
        if not stripped:
            self._add(line, translate=False)
            return
        lead = line[: len(line) - len(line.lstrip())]
        trail = line[len(line.rstrip()) :]
        self._add(lead, translate=False)
        pos = 0
        cased = any(ch.isupper() for ch in stripped)
        rules = rules_for(self.language)
        for end in _SENTENCE_END.finditer(stripped):
            if not _ends_sentence(stripped, end, cased, rules):
                continue
            self._add_sentence(stripped[pos : end.start(1)])
            self._add(end.group(1), translate=False)
            pos = end.end()
        self._add_sentence(stripped[pos:])
        self._add(trail, translate=False)

    def _add_sentence(self, sentence: str) -> None:
        for piece, gap in _cut_long(sentence, MAX_SENTENCE_CHARS):
            self._add(piece, translate=True)
            self._add(gap, translate=False)


def _ends_sentence(text: str, end: re.Match, cased: bool, rules: Rules = ANY_LANGUAGE) -> bool:
    """Whether the whitespace of `end` (a _SENTENCE_END match in text) follows a sentence's end.
    After ! ? … or a closing quote or bracket, always; after a period, not where the next word
    starts in lower case in a text that has capitals ("e.g. the file", "etc. and", "Hardly...
    go": a text typed all in lower case has nothing to tell its sentences apart by), nor after
    an initial (_initial) or an abbreviation of the language (`rules`), nor after its ordinals
    (_ordinal). Cut there, each piece went to the model alone, and a piece in lower case was
    capitalised as a sentence."""
    # the two words around the break are all it reads: a window, not the text's whole
    # prefix and suffix (a paragraph of thousands of periods would cost their square)
    before = text[max(0, end.start(1) - _WINDOW) : end.start(1)]
    after = text[end.end() : end.end() + _WINDOW].lstrip(_OPENERS)
    if not before.endswith(".") or not after:
        return True
    if cased and after[0].islower():
        return False
    words = before[:-1].split()[-2:]
    word = words[-1].lstrip(_OPENERS) if words else ""
    previous = words[-2].lstrip(_OPENERS) if len(words) > 1 else ""
    if len(word) == 1 and word.isalpha() and _initial(word, previous, after.split(None, 1)[0]):
        return False
    if _ordinal(word, previous, after, rules):
        return False
    word = word.lower()
    return word not in rules.no_end_after and not (
        after[0].isdigit() and word in rules.no_end_before_number)


_ORDINAL = re.compile(r"[0-9]{1,3}")
# in a date or a range of ordinals, a day's period before a month's or the next ordinal
# ("3. 10. 2024", "3. – 9. Jahrhundert"), and a month's before a year: "0. 1, if" is two
# sentences (an exit status listed after an end)
_DAY_NEXT = re.compile(r"(?:[-–—]\s*)?[0-9]{1,2}\.")
_DAY = re.compile(r"[0-9]{1,2}\.")
_YEAR_NEXT = re.compile(r"[0-9]{2,4}\b")


def _ordinal(number: str, previous: str, after: str, rules: Rules) -> bool:
    """Whether the period after `number` (the word before it: `previous`; the text after it:
    `after`) marks an ordinal in a language that writes them so (`rules`): in a date, or
    after a word that stands before ordinals, or before one that follows them. The
    number first in its sentence is a list item's ("1. Install"), which ends no sentence
    either way."""
    if not previous or not _ORDINAL.fullmatch(number):
        return False
    if rules.dates and (_DAY_NEXT.match(after)
                        or (_DAY.fullmatch(previous) and _YEAR_NEXT.match(after))):
        return True
    following = after.split(None, 1)[0].rstrip(".,;:!?)").lower()
    return previous.lower() in rules.ordinal_after or following in rules.ordinal_before


def _initial(letter: str, previous: str, following: str) -> bool:
    """Whether a one-letter word before a period is an initial or a letter of an abbreviation:
    after another one ("J. R. R.", "z. B."), before another one in lower case ("z. B.",
    "d. h."), or in upper case first in its sentence or after a name ("A. Smith", "Alfredo K.
    Kojima"); "column A." and "option is a." end their sentences."""
    def one_letter(word: str) -> bool:
        return len(word) == 2 and word[0].isalpha() and word[1] == "."

    if one_letter(previous):
        return True
    if letter.islower():
        return one_letter(following)
    return not previous or previous[0].isupper() or previous[-1] in ".!?…"


def _cut_long(sentence: str, limit: int) -> list[tuple[str, str]]:
    """(piece, following whitespace) pairs, each piece at most `limit` characters where a clause
    or word boundary allows it."""
    if len(sentence) <= limit:
        return [(sentence, "")]
    # the protected spans found once (not once per piece: a paragraph of 100,000 characters
    # has hundreds of pieces), as (start, end) in `sentence`
    spans = [(span.start, span.end) for span in find_spans(sentence)]
    out, base, first_span = [], 0, 0  # base: where the rest of the sentence starts
    while len(sentence) - base > limit:
        window = sentence[base : base + limit + 1]
        cut = None
        for match in _CLAUSE_BREAK.finditer(window):
            cut = (match.start() + 1, match.end())  # keep the comma with the piece
        if cut is None or cut[0] < limit // 3:
            spaces = [m.span() for m in re.finditer(r"\s+", window)]
            if spaces and spaces[-1][0] > 0:
                cut = spaces[-1]
        if cut is None:  # no boundary at all: hard cut, but not inside a protected span
            at = limit
            while first_span < len(spans) and spans[first_span][1] <= base:
                first_span += 1
            for start, end in spans[first_span:]:
                start, end = max(start - base, 0), end - base  # in the rest
                if start >= at:
                    break
                if at < end:
                    at = start or end
                    break
            cut = (at, at)
        out.append((sentence[base : base + cut[0]], sentence[base + cut[0] : base + cut[1]]))
        base += cut[1]
    out.append((sentence[base:], ""))
    return out


def segment_text(text: str, wraps: Wraps = soft_wrap, language: str | None = None
                 ) -> Segments:
    """`language`: the text's (the source language), for its sentence-end rules (rules_for);
    None when it is not known."""
    segments = Segments(language=language)
    segments.add_text(text, wraps)
    return segments


class _HtmlSplitter(HTMLParser):
    """Records where each parser event starts, so the source can be sliced back exactly."""

    def __init__(self, source: str) -> None:
        super().__init__(convert_charrefs=True)
        self.source = source
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", source)]
        self.events: list[tuple[int, bool]] = []  # (start offset, is translatable text)
        self.skip: list[str] = []  # open elements whose text is kept verbatim
        self.tag_kept = False  # the last start tag is marked translate="no" (or notranslate)

    def _mark(self, translatable: bool) -> None:
        line, col = self.getpos()
        self.events.append((self.line_starts[line - 1] + col, translatable))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._mark(False)
        self.tag_kept = _kept(attrs)
        if tag in _VOID_TAGS:  # no content, no end tag to pop it at
            return
        if tag in _SKIP_TAGS or self.tag_kept or (self.skip and tag == self.skip[-1]):
            self.skip.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._mark(False)
        self.tag_kept = _kept(attrs)

    def handle_endtag(self, tag: str) -> None:
        self._mark(False)
        if self.skip and tag == self.skip[-1]:
            self.skip.pop()

    def handle_data(self, data: str) -> None:
        self._mark(not self.skip)

    def handle_comment(self, data: str) -> None:
        self._mark(False)

    def handle_decl(self, decl: str) -> None:
        self._mark(False)

    def handle_pi(self, data: str) -> None:
        self._mark(False)

    def unknown_decl(self, data: str) -> None:
        self._mark(False)


def _kept(attrs: list[tuple[str, str | None]]) -> bool:
    """Whether a tag's attributes mark its element as not to be translated (translate="no" in
    any case, a class of app.text.protect.KEPT_CLASSES), as app.text.protect reads them."""
    values = {name: (value or "").lower() for name, value in attrs}
    return values.get("translate") == "no" or not KEPT_CLASSES.isdisjoint(
        values.get("class", "").split())


def segment_html(source: str, language: str | None = None) -> Segments:
    """Segments of an HTML fragment or document: text nodes split into sentences (by the rules
    of `language`, as segment_text)."""
    splitter = _HtmlSplitter(source)
    splitter.feed(source)
    splitter.close()
    segments = Segments(html=True, language=language)
    events = splitter.events
    if not events or events[0][0] > 0:
        events.insert(0, (0, False))
    # neighbouring text events (the parser may split text at a stray '<') form one text node
    bounds = [off for i, (off, kind) in enumerate(events) if i == 0 or kind != events[i - 1][1]]
    kinds = [kind for i, (_, kind) in enumerate(events) if i == 0 or kind != events[i - 1][1]]
    bounds.append(len(source))
    for start, end, translatable in zip(bounds, bounds[1:], kinds, strict=False):
        chunk = source[start:end]
        if translatable:
            segments._add_text(chunk, always)
        else:
            segments._add(chunk, translate=False)
    segments._flush()
    return segments


def segment(text: str, fmt: str = "text", language: str | None = None) -> Segments:
    return (segment_html(text, language) if fmt == "html"
            else segment_text(text, language=language))


def translate_fitting(
    texts: list[str], fits: Callable[[str], bool] | None,
    translate: Callable[[list[str]], list[str]],
) -> list[str]:
    """translate(texts), with every text that the model cannot take whole (`fits` is False)
    cut into runs of words that fit and put back together afterwards."""
    whole = [True] * len(texts) if fits is None else [fits(text) for text in texts]
    if all(whole):
        return translate(texts)
    cut = [Segments([text], [0]) for text in texts]
    for seg, fit in zip(cut, whole, strict=True):
        if not fit:
            seg.refine(fits)
    out = iter(translate([s for seg in cut for s in seg.sentences]))
    return [seg.rejoin([next(out) for _ in seg.targets]) for seg in cut]


def fits_engine(engine) -> Callable[[str], bool] | None:
    """Whether `engine` (its max_source_tokens and count_tokens) takes a sentence whole, for
    Segments.refine; None where it has no limit."""
    limit = engine.max_source_tokens
    if not limit:
        return None
    return lambda sentence: engine.count_tokens(sentence) <= limit
