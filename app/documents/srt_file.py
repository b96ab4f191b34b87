"""SubRip subtitles (.srt) with the srt library: each subtitle's text is a segment; numbering,
timings and line breaks inside a subtitle stay (cues without a number are numbered by their
place). A subtitle's lines are translated as one text (app.text.segment.subtitle_wrap: a
sentence often runs over both), unless a line opens a speaker's turn ("- "); the line break
goes back at the nearest space. Windows line breaks (\r\n) stay: the srt library writes \n."""

from __future__ import annotations

import srt as srtlib

from app.documents import Budget, Document, charset
from app.text.segment import subtitle_wrap


def extract(data: bytes, legacy: str | None = "cp1252", budget: Budget | None = None
            ) -> Document:
    text, encoding = charset.decode(data, legacy)
    # the library reads one cue at a time: a file past a limit is read no further
    subtitles = (budget or Budget()).each(srtlib.parse(text), lambda s: s.content)
    return Document("srt", [s.content for s in subtitles], (subtitles, encoding, "\r\n" in text),
                    wraps=subtitle_wrap)


def rebuild(doc: Document, translations: list[str]) -> bytes:
    subtitles, encoding, windows = doc.state
    # a cue without a number (the file had none) gets its place: the library writes 0
    out = [
        srtlib.Subtitle(k if s.index is None else s.index, s.start, s.end, text, s.proprietary)
        for k, (s, text) in enumerate(zip(subtitles, translations, strict=True), 1)
    ]
    composed = srtlib.compose(out, reindex=False, strict=False)
    return charset.encode(composed.replace("\n", "\r\n") if windows else composed, encoding)
