"""SubRip subtitles (.srt) with the srt library: each subtitle's text is a segment; numbering,
timings and line breaks inside a subtitle stay (cues without a number are numbered by their
place). A subtitle's lines are translated as one text (app.text.segment.subtitle_wrap: a
sentence often runs over both), unless a line opens a speaker's turn ("- "); the line break
goes back at the nearest space. Windows line breaks (\r\n) stay: the srt library writes \n."""

from __future__ import annotations

import re
from collections.abc import Iterator

import srt as srtlib

from app.documents import Budget, Document, charset
from app.text.segment import subtitle_wrap


def extract(data: bytes, legacy: str | None = "cp1252", budget: Budget | None = None
            ) -> Document:
    text, encoding = charset.decode(data, legacy)
    # the library reads one cue at a time: a file past a limit is read no further
    subtitles = (budget or Budget()).each(_parse(text), lambda s: s.content)
    return Document("srt", [s.content for s in subtitles], (subtitles, encoding, "\r\n" in text),
                    wraps=subtitle_wrap)


# The library's pattern with its runs of digits possessive: as the library writes them, a run
# of n digits (a cue's number, a line of digits in a cue, which the pattern looks ahead at) is
# split between `[0-9]+` and `[0-9]*` in every way before a match fails, n squared steps. What
# follows each run is never a digit, so giving digits back never made a match.
_CUE = re.compile(srtlib.SRT_REGEX.pattern.replace("[0-9]+", "[0-9]++")
                  .replace("[0-9]*", "[0-9]*+"), srtlib.SRT_REGEX.flags)


def _parse(text: str) -> Iterator[srtlib.Subtitle]:
    """srtlib.parse's subtitles, each cue matched where the last one ended. The library searches
    for the next cue from there and then refuses the file if it did not start there; a search
    from every character of a long run of spaces cost the square of its length (a 10 MB file:
    hours, holding the GIL)."""
    pos = 1 if text.startswith("\ufeff") else 0  # the library lets a byte order mark lead
    while pos < len(text):
        m = _CUE.match(text, pos)
        if m is None:
            if pos == 0 and text.isspace():
                return
            line = text.count("\n", 0, pos) + 1
            raise ValueError(f"no subtitle at line {line} ({text[pos : pos + 40]!r}): a "
                             "subtitle is a number, a line 'start --> end' and its text")
        raw_index, start, end, proprietary, content = m.groups()
        index = None if raw_index is None else int(raw_index.split(".")[0])
        yield srtlib.Subtitle(index, srtlib.srt_timestamp_to_timedelta(start),
                              srtlib.srt_timestamp_to_timedelta(end),
                              content.replace("\r\n", "\n"), proprietary)
        pos = m.end()


def rebuild(doc: Document, translations: list[str]) -> bytes:
    subtitles, encoding, windows = doc.state
    # a cue without a number (the file had none) gets its place: the library writes 0
    out = [
        srtlib.Subtitle(k if s.index is None else s.index, s.start, s.end, text, s.proprietary)
        for k, (s, text) in enumerate(zip(subtitles, translations, strict=True), 1)
    ]
    composed = srtlib.compose(out, reindex=False, strict=False)
    return charset.encode(composed.replace("\n", "\r\n") if windows else composed, encoding)
