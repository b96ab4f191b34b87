"""Pairs from the Ding German-English dictionary (Debian package ``trans-de-en``).

Each line of ``/usr/share/trans/de-en`` is one entry, German first::

    je {adv} | mehr als je zuvor | Siehst du ihn? :: ever | more than ever | Do you see him?

``::`` separates the languages, `` | `` separates parallel sub-entries (the n-th German
sub-entry translates the n-th English one), ``;`` separates synonyms inside a
sub-entry.  Grammar notes (``{f}``, ``{adj}``), labels (``[Am.]``, ``[ugs.]``),
abbreviations (``/lat./``) and parenthesised explanations are dropped; only the
first synonym of each side is kept, so every sub-entry gives one pair.  Word
entries teach vocabulary; the example phrases and sentences are the everyday
English this source is there for.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

DING_PACKAGE = "trans-de-en"
DING_FILE = Path("usr/share/trans/de-en")
DING_LICENCE = "GPL-2+"

_NOTES_RE = re.compile(r"\{[^{}]*\}|\[[^\[\]]*\]|\([^()]*\)|/[^/\s][^/]*\./|<[^<>]*>")
_SPACE_RE = re.compile(r"\s+")
# The dictionary's slots for an object ("to summon sb.", "etw. auflassen") mark an entry as a
# pattern to fill in, not a sentence as written.
_SLOT_RE = re.compile(r"\b(?:sth|sb|etw|jdn|jdm|jds)\b")
_SENTENCE_END_RE = re.compile(r"[.?!][\"”’']?$")


def _clean(text: str) -> str:
    """A sub-entry's first synonym without notes, labels or explanations."""
    for _ in range(2):  # notes may nest once: ((...)) or {[...]}
        text = _NOTES_RE.sub(" ", text)
    first = text.split(";")[0]
    return _SPACE_RE.sub(" ", first).strip(" ,")


def entry_pairs(line: str) -> list[tuple[str, str]]:
    """(English, German) pairs of one dictionary line; none for comments or odd lines."""
    if line.startswith("#") or line.count(" :: ") != 1:
        return []
    german, english = line.rstrip("\n").split(" :: ")
    de_parts, en_parts = german.split(" | "), english.split(" | ")
    if len(de_parts) != len(en_parts):
        return []
    pairs = []
    for de, en in zip(de_parts, en_parts, strict=True):
        de, en = _clean(de), _clean(en)
        # "Breiten…" and "… in …" are fragments, not text a user would send.
        if de and en and "…" not in de + en and "..." not in de + en:
            pairs.append((en, de))
    return pairs


def is_example_sentence(english: str) -> bool:
    """Whether an entry's English side is one of the dictionary's example sentences ("I don't
    know any details.") rather than a word or a pattern ("to smile at sb."): four words or
    more, a capital first letter, a sentence's last mark, no object slot."""
    return (len(english.split()) >= 4 and english[:1].isupper()
            and bool(_SENTENCE_END_RE.search(english)) and not _SLOT_RE.search(english))


def ding_pairs(lines: Iterable[str]) -> Iterator[tuple[str, str]]:
    """All (English, German) pairs of the dictionary file's lines."""
    for line in lines:
        yield from entry_pairs(line)


def read_ding(unpacked: Path) -> Iterator[tuple[str, str]]:
    """Pairs from an unpacked ``trans-de-en`` package."""
    with (unpacked / DING_FILE).open(encoding="utf-8") as handle:
        yield from ding_pairs(handle)
