"""SubRip subtitles (.srt) with the srt library: each subtitle's text is a segment; numbering,
timings and line breaks inside a subtitle stay. A subtitle's lines are translated as one
text (app.text.segment.subtitle_wrap: a sentence often runs over both), unless a line opens a
speaker's turn ("- "); the line break goes back at the nearest space. Windows line breaks
(\r\n) stay: the srt library writes \n."""

from __future__ import annotations

import srt as srtlib

from app.documents import Document
from app.documents.txt_file import decode_text
from app.text.segment import subtitle_wrap


def extract(data: bytes) -> Document:
    text, encoding = decode_text(data)
    subtitles = list(srtlib.parse(text))
    return Document("srt", [s.content for s in subtitles], (subtitles, encoding, "\r\n" in text),
                    wraps=subtitle_wrap)


def rebuild(doc: Document, translations: list[str]) -> bytes:
    subtitles, encoding, windows = doc.state
    out = [
        srtlib.Subtitle(s.index, s.start, s.end, text, s.proprietary)
        for s, text in zip(subtitles, translations, strict=True)
    ]
    composed = srtlib.compose(out, reindex=False, strict=False)
    return (composed.replace("\n", "\r\n") if windows else composed).encode(encoding)
