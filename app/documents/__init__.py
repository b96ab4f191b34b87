"""Documents: read a file's translatable segments, write the same file with them translated.

One module per format, each with

    extract(data: bytes) -> Document       # the segments, in reading order (.pdf: top down)
    rebuild(doc: Document, translations: list[str]) -> bytes

Structure, styles, formatting runs, timings and catalog metadata come from the original file;
only segment text changes. Formatting inside a segment (a bold run in a .docx paragraph, a
<span> in an .odt one, <b> in HTML, **bold** in Markdown) travels as inline tags
(`<g id="3">...</g>`, `<x id="4"/>`), which app.text.protect keeps away from the model and puts
back, so the runs survive translation.

`translate_document` is the whole path for a service or a CLI: limits, extraction, protected
sentence-by-sentence translation through a `translate(list[str]) -> list[str]` callable (the
batcher, a Translator, a fake in tests), progress callbacks, rebuild.
"""

from __future__ import annotations

import html
import importlib
import inspect
import io
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any, TypeVar

from app.errors import InvalidInput, ServiceError, TooLarge, UnsupportedMediaType
from app.text import tags
from app.text.protect import MARKUP_RE, mask, unmask
from app.text.segment import Wraps, segment_text, soft_wrap

# extension -> module under app.documents (named *_file: "html" and "srt" are libraries)
FORMATS = {
    "txt": "txt_file",
    "html": "html_file",
    "htm": "html_file",
    "md": "markdown_file",
    "srt": "srt_file",
    "po": "po_file",
    "pot": "po_file",
    "xliff": "xliff_file",
    "xlf": "xliff_file",
    "docx": "docx_file",
    "odt": "odt_file",
    "odp": "odt_file",
    "pptx": "pptx_file",
    "epub": "epub_file",
    "pdf": "pdf_file",
}
# the optional extra a format's libraries come with, where it is not 'documents'
EXTRAS = {"pdf": "pdf"}


class DocumentError(ServiceError):
    """A document that cannot be translated. Each kind is also one of the service's errors
    (app.errors), so the API maps it like any other: unsupported format -> unsupported media
    type, unreadable -> invalid input, over a limit -> too large."""

    code = "invalid_document"

    def __init__(self, message: str, *, field: str = "file", limit: int | None = None) -> None:
        super().__init__(message, field=field, limit=limit)


class UnsupportedFormat(DocumentError, UnsupportedMediaType):
    code = "unsupported_format"


class InvalidDocument(DocumentError, InvalidInput):
    code = "invalid_document"


class DocumentTooLarge(DocumentError, TooLarge):
    code = "document_too_large"


@dataclass(frozen=True)
class Limits:
    """max_unpacked_bytes bounds what a zipped format (.docx, .odt, .pptx, .odp) unpacks to
    (a zip bomb)."""

    max_bytes: int = 20 * 1024 * 1024
    max_unpacked_bytes: int = 200 * 1024 * 1024
    max_segments: int = 50_000
    max_chars: int = 5_000_000


T = TypeVar("T")


class Budget:
    """What a document may still hold under its limits (segments, characters to translate)
    while its reader finds them. A reader that reads a file part by part (a book's pages, a
    PDF's pages, a presentation's slides, paragraphs, cues) spends each part's segments as it
    finds them, so a file over a limit is refused at the first part past it, naming the limit,
    and the rest of the file is never read. `extract` checks the whole document with a budget
    of its own afterwards, so a reader that spends nothing (or less than it finds) is still
    bounded."""

    def __init__(self, limits: Limits = Limits()) -> None:
        self.limits = limits
        self.segments = 0
        self.chars = 0

    def spend(self, segments: Sequence[str]) -> None:
        """Count these segments; DocumentTooLarge once the document is past a limit."""
        self.count(len(segments), sum(map(len, segments)))

    def count(self, segments: int, chars: int) -> None:
        """spend, for a reader that knows how many segments and characters it found (at
        least), not the texts."""
        self.segments += segments
        self.chars += chars
        limits = self.limits
        if self.segments > limits.max_segments:
            raise DocumentTooLarge(f"the file has at least {self.segments} segments; the limit "
                                   f"is {limits.max_segments}", limit=limits.max_segments)
        if self.chars > limits.max_chars:
            raise DocumentTooLarge(f"the file has at least {self.chars} characters to "
                                   f"translate; the limit is {limits.max_chars}",
                                   limit=limits.max_chars)

    def each(self, found: Iterable[T], segment: Callable[[T], str]) -> list[T]:
        """What a reader finds one at a time (a paragraph, a cue), each spent as it comes
        (`segment`: its text), so that reading stops at the first one past a limit."""
        out = []
        for item in found:
            self.spend([segment(item)])
            out.append(item)
        return out

    def copy(self) -> Budget:
        """A budget that has spent what this one has: for a reader that spends what it knows
        so far of a part (at least what it will hold) before it spends the part itself."""
        out = Budget(self.limits)
        out.segments, out.chars = self.segments, self.chars
        return out


@dataclass
class Document:
    """segments: the texts to translate, in order; markup: they are HTML-escaped text with
    inline tags (else plain text); state: what the format's rebuild needs (parsed tree ...);
    wraps: which line breaks in a segment fall inside a sentence (app.text.segment.soft_wrap)."""

    format: str
    segments: list[str]
    state: Any = None
    markup: bool = False
    meta: dict[str, Any] = field(default_factory=dict)
    wraps: Wraps = soft_wrap


def check_no_dtd(root, part: str) -> None:
    """InvalidDocument where an Office Open XML part (its root element, read by lxml) declares a
    DTD: its entities, read as references, would be written back without their declarations,
    a file that opens nowhere. The format allows no DTD (Word refuses one too)."""
    if root.getroottree().docinfo.doctype:
        raise InvalidDocument(f"the part {part} declares a DTD (<!DOCTYPE ...>), which Office "
                              "Open XML does not allow")


def format_of(filename: str) -> str:
    """The format name for a file name (by extension); UnsupportedFormat if none."""
    ext = PurePath(filename).suffix.lower().lstrip(".")
    if ext not in FORMATS:
        raise UnsupportedFormat(
            f"unsupported file format {'.' + ext if ext else '(no extension)'}; "
            f"supported: {', '.join('.' + e for e in FORMATS)}"
        )
    return ext


def handler(fmt: str):
    """The module reading and writing format `fmt` (an extension from FORMATS)."""
    if fmt not in FORMATS:
        raise UnsupportedFormat(f"unsupported file format {fmt!r}")
    try:
        return importlib.import_module(f"app.documents.{FORMATS[fmt]}")
    except ImportError as exc:  # the optional extra is not installed
        raise UnsupportedFormat(
            f".{fmt} files need the '{EXTRAS.get(fmt, 'documents')}' extra "
            f"({exc.name} is not installed)"
        ) from exc


def extract(data: bytes, fmt: str, limits: Limits = Limits(),
            source_lang: str | None = None,
            reading: Callable[[int, int], None] | None = None) -> Document:
    """The document's segments, checked against the limits. `source_lang`: the language it is
    in, if known; a text file that is not UTF-8 is read in that language's code page, without
    one ("auto") in the code page its bytes look most like (app.documents.charset).
    reading(done, total) counts the pages of the formats slow to read (.pdf), 0 first."""
    if len(data) > limits.max_bytes:
        raise DocumentTooLarge(
            f"the file has {len(data)} bytes; the limit is {limits.max_bytes}",
            limit=limits.max_bytes,
        )
    if data.startswith(b"PK"):
        _check_unpacked(data, limits.max_unpacked_bytes)
    budget = Budget(limits)  # spent by the readers that read part by part
    told: list[Exception] = []  # what `reading` raised: the caller's error, not the file's

    def tell(done: int, total: int) -> None:
        try:
            reading(done, total)
        except Exception as exc:  # a cancelled job, a failing jobs store
            told.append(exc)
            raise

    try:
        from app.documents import charset  # it raises this module's errors

        module = handler(fmt)
        # what each reader takes: `legacy`, the code page of a text file that is not UTF-8
        # (None: guessed from its bytes); `limits`, to bound its own unpacking (.pdf's
        # streams); `budget`, to stop early; `reading`, to tell how far it has read
        offered = {"legacy": charset.code_page(source_lang), "limits": limits, "budget": budget,
                   "reading": tell if reading else None}
        takes = inspect.signature(module.extract).parameters
        doc = module.extract(data, **{k: v for k, v in offered.items() if k in takes})
    except DocumentError:
        raise
    except Exception as exc:  # each library has its own errors for a broken file
        if exc in told:
            raise
        # the first 200 characters: some quote all of the file they could not read
        said = str(exc) if len(str(exc)) <= 200 else f"{str(exc)[:200]}..."
        raise InvalidDocument(f"cannot read the file as .{fmt}: {said}") from exc
    Budget(limits).spend(doc.segments)  # the whole document, whatever its reader spent
    return doc


def _check_unpacked(data: bytes, limit: int) -> None:
    """A zipped file that unpacks to more than `limit` bytes (a zip bomb) is refused before any
    of it is unpacked; one with an entry that cannot be unpacked (its header or its data
    damaged, encrypted, compressed in a way zipfile does not read) is refused naming it:
    the readers copy the entries they do not translate into the file they write, and one
    that fails there fails after the translation, as an error of the service."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except Exception:  # BadZipFile, NotImplementedError (a zip version it does not know) ...
        return  # the format's reader, opening it again, says what is wrong with it
    with archive:
        unpacked = sum(info.file_size for info in archive.infolist())
        if unpacked > limit:
            raise DocumentTooLarge(
                f"the file unpacks to {unpacked} bytes; the limit is {limit}", limit=limit
            )
        for info in archive.infolist():
            try:
                with archive.open(info) as entry:  # (it reads no more than its stated size)
                    while entry.read(1 << 20):
                        pass
            except Exception as exc:  # zipfile's and zlib's errors, each its own type
                raise InvalidDocument(f"the entry {info.filename[:200]} cannot be unpacked: "
                                      f"{_unpacking_fault(exc, info)}") from exc


_ZIP_METHODS = {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA}


def _unpacking_fault(exc: Exception, info: zipfile.ZipInfo) -> str:
    """What is wrong with a zip entry that failed to unpack, in words a user can act on (the
    libraries' own say "negative seek value -8", "Error -3 while decompressing data")."""
    if info.flag_bits & 0x41:  # (bit 6: strong encryption)
        return "it is encrypted"
    if isinstance(exc, NotImplementedError):
        if info.compress_type not in _ZIP_METHODS:
            return ("it is compressed with a method this service does not read "
                    f"({info.compress_type})")
        return "it uses a zip feature this service does not read"  # a patch (flag bit 5)
    if isinstance(exc, zipfile.BadZipFile) and str(exc).startswith("Bad CRC-32"):
        return "its data does not match its checksum"
    if isinstance(exc, zipfile.BadZipFile | ValueError):  # its header: its magic, its name
        return "its header is damaged"
    return "its compressed data is damaged"  # zlib's, bz2's, lzma's errors; ending early


def rebuild(doc: Document, translations: list[str], target_lang: str | None = None) -> bytes:
    """The file with the translations in place; `target_lang` (their language) goes into the
    formats that declare one (HTML's lang, XLIFF's target language)."""
    if len(translations) != len(doc.segments):
        raise ValueError(f"expected {len(doc.segments)} translations, got {len(translations)}")
    module = handler(doc.format)
    if target_lang and "target_lang" in inspect.signature(module.rebuild).parameters:
        return module.rebuild(doc, translations, target_lang=target_lang)
    return module.rebuild(doc, translations)


def translate_segments(
    segments: list[str],
    translate: Callable[[list[str]], list[str]],
    markup: bool = False,
    batch_size: int = 64,
    progress: Callable[[int, int], None] | None = None,
    fits: Callable[[str], bool] | None = None,
    wraps: Wraps = soft_wrap,
    language: str | None = None,
    target: str | None = None,
) -> list[str]:
    """Each segment split into sentences (app.text.segment; `wraps`: which line breaks do not end
    one),
    protected spans masked (app.text.protect),
    sentences sent to `translate` in batches of batch_size, everything put back together.
    With markup, segments are HTML-escaped text with inline tags: the model sees unescaped
    text, the result is escaped again. progress(done, total) counts sentences (0 first).
    `fits` (a sentence -> whether the model takes it whole): longer sentences are cut into runs
    of words that fit, so the engine never truncates one. `language`: the segments' (the
    source language), whose rules split sentences (app.text.segment.rules_for); with
    `target`, numbers come back written as the target language writes them
    (app.text.protect.mask)."""
    masked = [mask(_characters(seg) if markup else seg, languages=(language, target))
              for seg in segments]
    split = [segment_text(html.unescape(m.text) if markup else m.text, wraps, language)
             for m in masked]
    if fits is not None:
        for parts in split:
            parts.refine(fits)
    sentences = [s for parts in split for s in parts.sentences]
    # each segment's tags found once, each sentence given those in it (TagMarks.within)
    marks = [whole.within(sentence) for m, parts in zip(masked, split, strict=True)
             for whole in [tags.tag_marks(m)] for sentence in parts.sentences]
    out: list[str] = []
    if progress:
        progress(0, len(sentences))
    for start in range(0, len(sentences), batch_size):
        # inline tags: pairs carried over a translation of the plain sentence, tags that
        # stand alone taken out for unmask to put back (app.text.tags)
        plans, texts = tags.plan(sentences[start : start + batch_size],
                                 marks[start : start + batch_size])
        out.extend(tags.carried(plans, translate(texts)))
        if progress:
            progress(len(out), len(sentences))
    if len(out) != len(sentences):
        raise ValueError(f"translate returned {len(out)} texts for {len(sentences)}")
    results, pos = [], 0
    for m, parts in zip(masked, split, strict=True):
        n = len(parts.targets)
        text = parts.rejoin(out[pos : pos + n])
        pos += n
        results.append(unmask(m, html.escape(text, quote=False) if markup else text))
    return results


def _characters(markup: str) -> str:
    """Escaped text with inline tags, its character references (`&#64;`, `&nbsp;`) written as
    the characters (escaped again where they must be), as the model reads them: an address or
    a URL written in references (Markdown's `&#121;&#117;&#64;...`) is then protected, where
    the model's copy of it was deleted as a span it made up. Tags, and inline code elements
    whole, stay as written: they come back byte for byte."""
    out, pos = [], 0
    for m in MARKUP_RE.finditer(markup):
        out += [html.escape(html.unescape(markup[pos : m.start()]), quote=False), m.group()]
        pos = m.end()
    out.append(html.escape(html.unescape(markup[pos:]), quote=False))
    return "".join(out)


def translate_document(
    data: bytes,
    fmt: str,
    translate: Callable[[list[str]], list[str]],
    limits: Limits = Limits(),
    progress: Callable[[int, int], None] | None = None,
    fits: Callable[[str], bool] | None = None,
    target_lang: str | None = None,
    source_lang: str | None = None,
) -> bytes:
    doc = extract(data, fmt, limits, source_lang)
    translations = translate_segments(doc.segments, translate, doc.markup, progress=progress,
                                      fits=fits, wraps=doc.wraps, language=source_lang)
    return rebuild(doc, translations, target_lang)
