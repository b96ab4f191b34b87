"""PDF (.pdf): pdfminer.six reads the text blocks, pypdf and reportlab write the translation
over the original page.

Reading: pdfminer's layout analysis groups each page's characters into lines and the lines into
text boxes (in form XObjects too), top down. A box is a segment (one per item where
its lines start with bullets, one per part where their size, weight or spacing changes), its
lines joined with spaces, a word hyphenated at a line's end joined again when the next line goes
on in lower case; so the model reads whole sentences, not the pieces a PDF draws one by one.
Each block keeps its box, font size, line pitch, weight, slant, colour and alignment; each page,
what its graphics cover.

Writing: the original page stays (images, vector graphics, backgrounds, links and other
annotations); only the operators that show text (Tj, TJ, ', ") are taken out of its content
streams and of the form XObjects it draws, so everything else they do (colours, clipping,
marked content) is unchanged. Each block's translation is drawn on a one-page overlay
(reportlab) that the page draws after its own content (`_draw_over`), in the block's font
size, in its box grown first into free space below and beside it (never over another block,
a graphic or the rules of a box around it), made smaller step by step only where even that
is too small; centred, right-aligned and justified blocks stay so (a justified one's lines
but the last stretched by their word spacing). Fonts are replaced: Helvetica for text it can
encode, else DejaVu Sans embedded; text neither can draw is refused. Not covered:
text of annotations (form fields), of Type 3 font glyphs and of tiling patterns is neither
read nor removed.

A small file must not cost minutes or gigabytes: pdfminer inflates streams without a bound,
so before it runs the streams it would read (each page's content and form XObjects, once per
use, and the other streams its resources hold, once) are inflated here, within a budget that
grows with the file's size; an image's data is never inflated (neither library draws it).
"""

from __future__ import annotations

import io
import re
import unicodedata
from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import cache, lru_cache
from itertools import count, pairwise
from pathlib import Path
from typing import NamedTuple

import numpy as np
from pdfminer.layout import (
    LAParams,
    LTChar,
    LTCurve,
    LTFigure,
    LTImage,
    LTTextBox,
    LTTextLine,
)
from pdfminer.pdffont import PDFSimpleFont
from pdfminer.pdfinterp import PDFPageInterpreter, PDFResourceManager
from pdfminer.pdfpage import PDFPage
from pypdf import PdfReader, PdfWriter
from pypdf.errors import LimitReachedError, PyPdfError
from pypdf.generic import (
    ArrayObject,
    ContentStream,
    DictionaryObject,
    FloatObject,
    IndirectObject,
    NameObject,
    NumberObject,
    StreamObject,
    read_object,
)
from reportlab.lib.utils import simpleSplit
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.ttfonts import TTFont
from reportlab.pdfgen import canvas

from app.documents import Budget, Document, DocumentTooLarge, InvalidDocument, Limits
from app.documents.pdf_boxes import Crowded, Grid, held
from app.documents.pdf_lines import Aggregator

# decoded stream bytes pdfminer may read: a floor for small files, else this many times the
# file's size (text content deflates a few times over; a bomb, a thousand times)
CONTENT_FLOOR = 4 * 1024 * 1024
CONTENT_RATIO = 20
PAGE_COST = 1024  # what pdfminer's work on a page and on a stream weighs beside their bytes
STREAM_COST = 64
MIN_FONT_SIZE = 4.0
SHRINK = 0.95  # each step down in size
GAP = 0.4  # what a grown block keeps clear of a neighbour, in its font size
# a box's line starts another segment if its size differs by more than this share, if it is
# this much bold under a mostly regular line (or the other way), or if it sits this many times
# the box's usual line pitch below the line before (an eighth more: lines spaced out a little
# by a taller inline font stay under it, the stretched space between paragraphs does not)
RESIZED = 0.1
BOLD_LINE = 0.9
GAP_PITCH = 1.125
# a block is justified on its own with this many flush lines (fewer: ragged text's lines
# sometimes end together by chance), a shorter one where a block justified on its own has its
# right edge; a line is flush within this share of its font size (TeX's are exact)
JUSTIFIED_LINES = 3
FLUSH = 0.1
# the most a justified line's spaces may grow, all together, as a share of its words' width:
# a line nearly empty before a long word (its words fill less than half the box) stays
# left-aligned rather than show a few words far apart; a fuller line is stretched even with
# wide spaces, since a short line inside a paragraph reads as its end
STRETCH = 1.0
_SHOW_TEXT = {b"Tj", b"TJ", b"'", b'"'}
_BULLET = re.compile(r"[•◦▪‣∙·\-–—*] ")
# dot leaders before a number at a line's end ("Naming . . . . 3"), matched in the line read
# backwards: searched for from the front, each dot of a long run began a try to its end
_LEADERS_BACKWARDS = re.compile(r"\w+\s*( ?\.){4}")
_WORD = re.compile(r"[^\W\d_]+")  # letters: not a number, not dot leaders
_LIGATURES = re.compile("[\ufb00-\ufb06]")
_UNMAPPED = re.compile(r"\(cid:\d+\)")  # pdfminer's text for a glyph without a character
# a font's own glyphs (flag emoji, TeX's big brackets) mapped to private-use characters: they
# mean nothing to the model, and no font here draws them (an empty box each)
_PRIVATE_USE = re.compile("[\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd]")
_DEVICE_COLOURS = {"DeviceGray": 1, "DeviceRGB": 3, "DeviceCMYK": 4}
# where Debian, Fedora, Arch and Homebrew put DejaVu Sans
_FONT_DIRS = ["/usr/share/fonts/truetype/dejavu", "/usr/share/fonts/dejavu",
              "/usr/share/fonts/TTF", "/usr/local/share/fonts", "/opt/homebrew/share/fonts"]


Box = tuple[float, float, float, float]  # x0, y0, x1, y1 in pdfminer's page space


@dataclass(frozen=True)
class Block:
    """Where a segment's translation goes: its page, its box in pdfminer's page space (origin at
    the media box's lower left, the page's rotation applied), and how its text looked."""

    page: int
    box: Box
    size: float
    pitch: float  # the distance between its lines' baselines, in font sizes
    bold: bool
    italic: bool
    colour: tuple[float, ...]  # 1 (gray), 3 (RGB) or 4 (CMYK) components
    # a block in a monospaced font (code, a terminal session) is not translated: its lines
    # (x, y of their boxes' lower left, text), drawn again where they were
    code: tuple[tuple[float, float, str], ...] = ()
    lines: int = 1
    align: str = "left"  # or "centre", "right", "justified": judged from its lines' places
    # its lines but the last, where each has two words or more and ends at its right edge and
    # the lines under the first start at one place (else 0): the signs of justified text
    flush: int = 0


@dataclass(frozen=True)
class Page:
    """A page as the translations are laid out on it, in pdfminer's page space: the matrix that
    maps its user space there, its crop box, the boxes its images and vector graphics cover,
    and the extent of what it shows (left and right: its text's, the widest line; bottom: its
    lowest text or graphic), which a block grows within."""

    matrix: tuple[float, ...]
    crop: Box
    graphics: tuple[Box, ...]
    frame: Box


def extract(data: bytes, limits: Limits = Limits(), budget: Budget | None = None,
            reading: Callable[[int, int], None] | None = None) -> Document:
    """Page by page, each page's segments spent from `budget` once it is read: a file past a
    limit is read no further. reading(pages read, pages) after each page (0 first): a long
    file takes a while."""
    budget = budget or Budget(limits)
    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted:
        raise InvalidDocument("the .pdf file is encrypted; remove the password and send it again")
    _check_content(reader, min(limits.max_unpacked_bytes,
                               max(CONTENT_FLOOR, CONTENT_RATIO * len(data))))
    manager = _Resources()
    # boxes_flow=None: the text boxes in the order of their places on the page (top down, then
    # left to right); pdfminer's reading order clusters every pair of boxes of a page, its
    # slowest part on a page of many boxes, and the boxes are the same either way. Each box is
    # translated by itself and drawn in its own place, so their order changes nothing drawn.
    # (pdf_lines: pdfminer's grouping of lines into boxes, in bounded work)
    device = Aggregator(manager, laparams=LAParams(all_texts=True, boxes_flow=None))
    interpreter = PDFPageInterpreter(manager, device)
    segments, blocks, pages, kept = [], [], [], []
    reading = reading or (lambda done, total: None)
    reading(0, len(reader.pages))
    for number, page in enumerate(PDFPage.get_pages(io.BytesIO(data))):
        matrix = _page_matrix(page.mediabox, page.rotate)
        interpreter.process_page(page)
        layout = device.get_result()
        boxes = [(box, _lines(box)) for box in _text_boxes(layout)]
        pitch = _page_pitch([[line.look for line in lines] for _, lines in boxes])
        found = [(_block(number, item), _join([_clean(line.text) for line in item]))
                 for box, lines in boxes for item in _items(box, lines, pitch)]
        found = [(block, text) for block, text in found if block.code or text.strip()]
        # (a page past a limit is refused before what lies around its blocks is worked out)
        budget.spend([text for block, text in found if not block.code])
        space = _page_space(matrix, page.cropbox, _graphics(layout), [b.box for b, _ in found])
        pages.append(space)
        aligned = _page_aligned([b for b, _ in found], space)
        for block, (_, text) in zip(aligned, found, strict=True):
            if block.code:
                kept.append(block)
            else:
                segments.append(text)
                blocks.append(block)
        reading(number + 1, len(reader.pages))
    if len(pages) != len(reader.pages):  # pdfminer guessed pages from a broken page tree
        raise InvalidDocument(f"cannot read the file as .pdf: {len(reader.pages)} pages in its "
                              f"page tree, {len(pages)} found")
    if not segments:
        raise InvalidDocument("the .pdf file has no text layer (a scan?); text in images is not "
                              "translated (no OCR)")
    return Document("pdf", segments, (data, _in_columns(blocks) + kept, pages))


class _Resources(PDFResourceManager):
    """pdfminer's fonts, with WinAnsiEncoding's second bullet: the PDF standard gives that
    encoding's code 127 the bullet too, and reportlab (so the translation) writes Helvetica's
    bullet there; pdfminer read no character at it, and a list's bullets were lost, its items
    joined into one segment."""

    def get_font(self, objid, spec):
        font = super().get_font(objid, spec)
        # (a WinAnsi-based encoding: its bullet at 0x95, nothing at 0x7F)
        if (isinstance(font, PDFSimpleFont) and font.cid2unicode.get(0x95) == "\u2022"
                and 0x7F not in font.cid2unicode):
            font.cid2unicode = {**font.cid2unicode, 0x7F: "\u2022"}  # a copy: pdfminer shares it
        return font


def _check_content(reader: PdfReader, budget: int) -> None:
    """Refuse the file if pdfminer's work on it would pass budget: the bytes its streams inflate
    to (content and form XObjects each time a page uses them, other streams once), a stream
    and a page costing some more."""
    seen: set[int] = set()
    cost = 0

    def charge(stream: StreamObject | None = None, extra: int = STREAM_COST) -> None:
        nonlocal cost
        try:
            cost += extra + (len(stream.get_data()) if stream is not None else 0)
        except LimitReachedError:  # pypdf's own bound on one stream
            cost = budget + 1
        if cost > budget:
            raise DocumentTooLarge(f"the .pdf file's pages and streams inflate to more than "
                                   f"{budget} bytes, the limit for its size", limit=budget)

    for page in reader.pages:
        charge(extra=PAGE_COST)
        contents = page.get("/Contents")
        parts = contents.get_object() if contents is not None else []
        for part in parts if isinstance(parts, list) else [parts]:
            charge(part.get_object())
        for xobject in _xobjects(page.get("/Resources")):
            if xobject.get("/Subtype") == "/Form":
                charge(xobject)
        stack = [page.get("/Resources")]
        while stack:  # every other stream its resources reach, once
            obj = stack.pop()
            if isinstance(obj, IndirectObject):
                if obj.idnum in seen:
                    continue
                seen.add(obj.idnum)
                obj = obj.get_object()
            if isinstance(obj, StreamObject) and obj.get("/Subtype") != "/Image":
                charge(obj)
            if isinstance(obj, DictionaryObject):  # a stream's dictionary too
                stack += [v for k, v in obj.items() if k not in ("/Parent", "/P")]
            elif isinstance(obj, list):
                stack += obj


def _xobjects(resources) -> list:
    xobjects = resources.get_object().get("/XObject") if resources is not None else None
    return [x.get_object() for x in (xobjects.get_object().values() if xobjects else [])]


def _page_matrix(mediabox, rotate: int) -> tuple[float, ...]:
    """The matrix pdfminer maps a page's user space with (its PDFPageInterpreter.process_page):
    the media box's lower left to the origin, the page's rotation applied."""
    x0, y0, x1, y1 = mediabox
    return {90: (0, -1, 1, 0, -y0, x1), 180: (-1, 0, 0, -1, x1, y1),
            270: (0, 1, -1, 0, y1, -x0)}.get(rotate, (1, 0, 0, 1, -x0, -y0))


def _text_boxes(layout) -> list[LTTextBox]:
    out = []
    for item in layout:
        if isinstance(item, LTTextBox):
            out.append(item)
        elif isinstance(item, LTFigure):  # a form XObject's text, analysed with all_texts
            out += _text_boxes(item)
    return out


def _graphics(layout) -> list[Box]:
    """The boxes of the images and vector graphics (paths, rules, rectangles) on a page; a form
    XObject without text as one box, one with text by what it draws."""
    out = []
    for item in layout:
        if isinstance(item, (LTImage, LTCurve)):
            out.append(item.bbox)
        elif isinstance(item, LTFigure):
            out += _graphics(item) if _text_boxes(item) else [item.bbox]
    return out


def _page_space(matrix: tuple[float, ...], cropbox, graphics: list[Box],
                texts: list[Box]) -> Page:
    a, b, c, d, e, f = matrix
    cx0, cy0, cx1, cy1 = cropbox
    xs = [a * x + c * y + e for x in (cx0, cx1) for y in (cy0, cy1)]
    ys = [b * x + d * y + f for x in (cx0, cx1) for y in (cy0, cy1)]
    crop = (min(xs), min(ys), max(xs), max(ys))
    # a graphic around text (a background, a frame, a table's cell) says nothing of the margins
    holding = held(_columns(graphics), _columns(texts))
    loose = [g for g, around in zip(graphics, holding, strict=True) if not around]
    frame = (min((t[0] for t in texts), default=crop[0]),
             min((box[1] for box in texts + loose), default=crop[1]),
             max((t[2] for t in texts), default=crop[2]), crop[3])
    return Page(matrix, crop, tuple(graphics), frame)


def _around(outer: Box, inner: Box, slack: float = 1.0) -> bool:
    return (outer[0] <= inner[0] + slack and outer[1] <= inner[1] + slack
            and outer[2] >= inner[2] - slack and outer[3] >= inner[3] - slack)


def _arounds(outer, inner, slack: float = 1.0) -> np.ndarray:
    """_around for many boxes at once, as columns (see _columns; a box's tuple is one): for
    each, whether `outer` holds `inner`."""
    return ((outer[0] <= inner[0] + slack) & (outer[1] <= inner[1] + slack)
            & (outer[2] >= inner[2] - slack) & (outer[3] >= inner[3] - slack))


def _columns(boxes) -> np.ndarray:
    """Boxes as one array of their x0s, y0s, x1s and y1s: (4, N)."""
    return np.array(boxes, dtype=float).reshape(-1, 4).T


def _items(box: LTTextBox, lines: list[_Line],
           page_pitch: Callable[[float], float | None]) -> list[list[_Line]]:
    """The box's lines cut into paragraphs: after a line of dot leaders (a table of contents),
    after a sentence's end well short of the box's right edge, before a bullet, and where the
    look changes (pdfminer often boxes a heading with the paragraph under it): a line in
    another size or weight than the line before, or further below it than the box's lines
    usually are (a box of two lines has too few to tell: further below than any box of the
    page in their size sets its lines, `page_pitch`)."""
    known = [line.look for line in lines if line.look is not None]
    usual = _usual_pitch(_steps(known))
    pitch = usual[1] if usual else None
    if usual is None and known and known[0].size:
        pitch = page_pitch(known[0].size)
        # judged by the page, a line of a letter or two (a formula's symbol that TeX set apart
        # from its sentence, a matrix's numbers) is no paragraph of its own
        if any(sum(c.isalpha() for c in line.text) < 3 for line in lines):
            pitch = None
    groups: list[list[_Line]] = []
    before = None
    for line in lines:
        text = line.text.strip()
        if (not groups or _BULLET.match(text) or _ends(groups[-1][-1], box)
                or _new_look(before, line.look, text) or _apart(before, line.look, pitch)):
            groups.append([])
        groups[-1].append(line)
        before = line.look or before
    return groups


@dataclass(frozen=True)
class _Look:
    """A line's baseline, font size and share of bold characters, from most of its
    characters (a raised footnote mark or a bold word does not change them), and where its
    visible characters start and end (a space drawn at its end, as word processors do, is no
    part of it)."""

    base: float
    size: float | None  # None: the line is all code, whose size says nothing of a heading
    bold: float
    start: float
    end: float


class _Line(NamedTuple):
    """A line of a text box as read once: pdfminer's line, its text and its look (None:
    nothing visible on it)."""

    line: LTTextLine
    text: str
    look: _Look | None


def _look(line: LTTextLine) -> _Look | None:
    chars = [c for c in line if isinstance(c, LTChar) and c.get_text().strip()]
    if not chars:
        return None
    # inline code is often set a size smaller than the text around it
    sizes = sorted(c.size for c in chars if not _monospaced(c))
    return _Look(base=sorted(c.matrix[5] for c in chars)[len(chars) // 2],  # the origin's y
                 size=sizes[len(sizes) // 2] if sizes else None,
                 bold=sum(_bold(c.fontname) for c in chars) / len(chars),
                 start=min(c.x0 for c in chars), end=max(c.x1 for c in chars))


def _lines(box: LTTextBox) -> list[_Line]:
    return [_Line(line, line.get_text(), _look(line)) for line in box
            if isinstance(line, LTTextLine)]


def _steps(looks: list[_Look]) -> list[tuple[float, float]]:
    """(size, distance between the baselines) of each line under a line in the same size."""
    return [(a.size, a.base - b.base) for a, b in pairwise(looks)
            if a.size and b.size and not _resized(a.size, b.size)
            and a.base - b.base > a.size / 2]


def _usual_pitch(steps: list[tuple[float, float]]) -> tuple[float, float] | None:
    """The (size, distance) of most of the steps between lines (the lower middle one: the
    gaps between paragraphs are fewer than the steps between their lines); None below two
    steps (three lines), too few to tell."""
    steps = sorted(steps, key=lambda step: step[1])
    return steps[(len(steps) - 1) // 2] if len(steps) > 1 else None


def _page_pitch(boxes: list[list[_Look | None]]) -> Callable[[float], float | None]:
    """What a box of two lines is judged by: for a size, the widest usual pitch among those of
    the page's boxes (their lines' looks) that have one (three lines or more) in that size, not
    _resized (a table's rows, set closer than the paragraphs, do not cut them); None if none.
    The sizes within a tenth of one lie side by side in their order, so each size looks at a
    range of them, its widest pitch found at once (_range_max)."""
    pitches = (_usual_pitch(_steps([x for x in looks if x is not None])) for looks in boxes)
    pitches = sorted((p for p in pitches if p is not None), key=lambda p: p[0])
    sizes = [size for size, _ in pitches]
    widest = _range_max([pitch for _, pitch in pitches])

    @cache
    def pitch(size: float) -> float | None:
        first = bisect_left(sizes, True, key=lambda s: not (s < size and _resized(s, size)))
        end = bisect_left(sizes, True, key=lambda s: s > size and _resized(s, size))
        return widest(first, end) if first < end else None

    return pitch


def _range_max(values: list[float]) -> Callable[[int, int], float]:
    """The largest of values[first:end] (first < end), each range at once: the largest of each
    run of 1, 2, 4 ... values kept, a range covered by two runs (a sparse table)."""
    runs = [values]  # runs[k][i]: the largest of values[i:i + 2 ** k]
    while 2 ** len(runs) <= len(values):
        width = 2 ** (len(runs) - 1)
        runs.append([max(a, b) for a, b in zip(runs[-1], runs[-1][width:], strict=False)])

    def largest(first: int, end: int) -> float:
        level = (end - first).bit_length() - 1
        return max(runs[level][first], runs[level][end - 2 ** level])

    return largest


def _new_look(before: _Look | None, look: _Look | None, text: str) -> bool:
    """A line in another size than the line before, or bold under regular (or the other way)
    where it does not go on with a sentence in lower case (a bold phrase running on)."""
    if before is None or look is None:
        return False
    if before.size and look.size and _resized(before.size, look.size):
        return True
    heavier, lighter = max(before.bold, look.bold), min(before.bold, look.bold)
    return heavier > BOLD_LINE and lighter < 0.5 and not text[:1].islower()


def _resized(a: float, b: float) -> bool:
    return abs(a - b) > RESIZED * min(a, b)


def _apart(before: _Look | None, look: _Look | None, pitch: float | None) -> bool:
    return (before is not None and look is not None and pitch is not None
            and before.base - look.base > GAP_PITCH * pitch)


def _leaders(text: str) -> bool:
    """The text ends in dot leaders (four or more) and a word."""
    return _LEADERS_BACKWARDS.match(text[::-1]) is not None


def _ends(line: _Line, box: LTTextBox) -> bool:
    text = line.text.strip()
    if _leaders(text):
        return True
    return text.endswith((".", "!", "?", ":")) and box.x1 - line.line.x1 > 0.15 * box.width


def _clean(text: str) -> str:
    text = _PRIVATE_USE.sub("", _UNMAPPED.sub("", text))
    text = _LIGATURES.sub(lambda m: unicodedata.normalize("NFKC", m.group()), text)
    return re.sub(" {2,}", " ", text).strip()  # (a glyph left out between two spaces)


def _join(lines: list[str]) -> str:
    """Lines -> one text: a space between lines; a word hyphenated at a line's end (two letters
    or more, the next line going on in lower case) joined again; a soft hyphen dropped."""
    text = ""
    for line in filter(None, lines):
        if text.endswith("\xad") or (re.search(r"[^\W\d_]{2}-$", text)
                                      and line[0].islower()):
            text = text[:-1] + line
        elif text.endswith("-") or not text:
            text += line
        else:
            text += " " + line
    return text


def _block(page: int, item: list[_Line]) -> Block:
    lines = [line.line for line in item]
    chars = [c for line in lines for c in line if isinstance(c, LTChar)]
    sizes = sorted(c.size for c in chars)
    size = sizes[len(sizes) // 2]
    pitch = 1.2
    if len(lines) > 1:
        pitch = min(max((lines[0].y1 - lines[-1].y1) / (len(lines) - 1) / size, 1.0), 1.8)
    code = ()
    if 2 * sum(_monospaced(c) for c in chars) > len(chars):
        code = tuple((line.x0, line.y0, _UNMAPPED.sub("", text).rstrip())
                     for line, text, _ in item)
    # one look for the whole block: most of its characters' (a bold word or a link in a
    # sentence does not make it all bold or blue)
    (bold, italic, colour), _ = Counter(_styles(chars)).most_common(1)[0]
    # centred lines: their middles line up, their starts do not; right: their ends line up
    align = "left"
    starts, ends = [line.x0 for line in lines], [line.x1 for line in lines]
    if len(lines) > 1 and max(starts) - min(starts) > size:
        if _same([(a + b) / 2 for a, b in zip(starts, ends, strict=True)], size):
            align = "centre"
        elif _same(ends, size):
            align = "right"
    flush = _flush(item, size)
    if align == "left" and flush >= JUSTIFIED_LINES:
        align = "justified"
    return Block(
        page=page,
        box=(min(x.x0 for x in lines), min(x.y0 for x in lines),
             max(x.x1 for x in lines), max(x.y1 for x in lines)),
        size=size, pitch=pitch, bold=bold, italic=italic, colour=colour, code=code,
        lines=len(lines), align=align, flush=flush,
    )


def _flush(lines: list[_Line], size: float) -> int:
    """How many lines but the last end at the block's right edge with two words or more, the
    lines under the first starting at one place (the first may be indented, a list item's
    bullet hang out); 0 unless all of them do."""
    looks = [line.look for line in lines]
    if len(lines) < 2 or None in looks:
        return 0
    starts, ends = [look.start for look in looks], [look.end for look in looks]
    if (all(len(_WORD.findall(line.text)) > 1 for line in lines[:-1])
            and max(ends) - min(ends[:-1]) <= _slack(size)
            and max(starts[1:]) - min(starts[1:]) <= _slack(size)):
        return len(lines) - 1
    return 0


def _slack(size: float) -> float:
    return max(0.5, FLUSH * size)


def _styles(chars: list[LTChar]) -> list[tuple[bool, bool, tuple[float, ...]]]:
    """Each character's (bold, italic, colour), worked out once per font and graphics state:
    pdfminer gives all the characters one operator shows the same state."""
    known: dict[tuple[str, int, int], tuple[bool, bool, tuple[float, ...]]] = {}
    out = []
    for c in chars:
        key = (c.fontname, id(c.graphicstate), id(c.ncs))  # the chars keep them alive
        if (style := known.get(key)) is None:
            style = known[key] = (_bold(c.fontname), _italic(c.fontname), _colour(c))
        out.append(style)
    return out


# a document has few fonts and many characters: each font's name is judged once
@lru_cache(maxsize=1024)
def _bold(fontname: str) -> bool:
    name = fontname.lower()
    return "bold" in name or "cmbx" in name or "black" in name


def _monospaced(char: LTChar) -> bool:
    return _monospaced_font(char.fontname)


@lru_cache(maxsize=1024)
def _monospaced_font(fontname: str) -> bool:
    name = fontname.lower()
    return any(m in name for m in _MONOSPACED)


@lru_cache(maxsize=1024)
def _italic(fontname: str) -> bool:
    name = fontname.lower()
    return "italic" in name or "oblique" in name or "cmti" in name


def _same(xs: list[float], size: float) -> bool:
    return max(xs) - min(xs) <= max(1.0, 0.15 * size)


def _page_aligned(blocks: list[Block], page: Page) -> list[Block]:
    """The page's blocks with their one-line blocks' alignment judged (_aligned), the page's
    graphics and blocks filed in grids once; a block among more boxes than a grid looks
    through (a crowd of strings on one spot) keeps the alignment its lines gave it."""
    graphics = Grid(_columns(page.graphics), page.crop)
    texts = Grid(_columns([b.box for b in blocks]), page.crop)
    out = []
    for block in blocks:
        try:
            out.append(_aligned(block, page, blocks, graphics, texts))
        except Crowded:
            out.append(block)
    return out


def _aligned(block: Block, page: Page, blocks: list[Block], graphics: Grid,
             texts: Grid) -> Block:
    """A one-line block's alignment, from the ruled box around it (a table's cell) or else the
    page's text: centred if its middle is that box's middle, or the middle of a block close
    above or below that starts elsewhere (a title page's lines); right if it ends at that
    box's right edge and starts past its middle (a running header, a label in the margin).
    `graphics`, `texts`: the page's graphics and blocks (`blocks`), filed."""
    if block.lines > 1 or block.code:
        return block
    x0, y0, x1, y1 = block.box
    size, middle = block.size, (x0 + x1) / 2
    # (a box around the block meets it; a block whose middle is near the block's, its middle)
    around = [g for g in (page.graphics[k] for k in graphics.near(x0 - 2, y0 - 2, x1 + 2, y1 + 2))
              if _around(g, block.box)]
    left, _, right, _ = min(around, key=lambda g: g[2] - g[0]) if around else page.frame
    near = max(1.0, 0.15 * size) + 2  # (as _same, and some)
    if x0 - left > size and (_same([middle, (left + right) / 2], size) or any(
            b.box[1] - 4 * size < y1 and b.box[3] + 4 * size > y0
            and abs(b.box[0] - x0) > size and _same([middle, (b.box[0] + b.box[2]) / 2], size)
            for b in (blocks[k] for k in texts.near(middle - near, y0 - 4 * size - 2,
                                                      middle + near, y1 + 4 * size + 2)))):
        return replace(block, align="centre")
    if _same([x1, right], size) and x0 > (left + right) / 2:
        return replace(block, align="right")
    return block


def _in_columns(blocks: list[Block]) -> list[Block]:
    """A block with too few flush lines to tell (two or three lines) is justified where a block
    justified on its own, on any page, has its right edge: a short paragraph of a justified
    column (a document's pages keep one or two such edges: one-sided or two-sided)."""
    edges = sorted(b.box[2] for b in blocks if b.align == "justified")

    def on_edge(b: Block) -> bool:
        k = bisect_left(edges, b.box[2] - _slack(b.size))
        return k < len(edges) and edges[k] <= b.box[2] + _slack(b.size)

    return [replace(b, align="justified") if b.align == "left" and b.flush and on_edge(b)
            else b for b in blocks]


def _colour(char: LTChar) -> tuple[float, ...]:
    """The character's fill colour if it is in a device colour space, else black."""
    colour = char.graphicstate.ncolor
    colour = colour if isinstance(colour, tuple) else (colour,)
    space = getattr(char.ncs, "name", "DeviceGray")
    if _DEVICE_COLOURS.get(space) == len(colour) and all(
            isinstance(v, (int, float)) and 0 <= v <= 1 for v in colour):
        return tuple(float(v) for v in colour)
    return (0.0,)


def rebuild(doc: Document, translations: list[str]) -> bytes:
    try:
        return _rebuild(*doc.state, translations)
    except InvalidDocument:
        raise
    except Exception as exc:  # pypdf's errors on a part pdfminer read past
        raise InvalidDocument(f"cannot write the translated .pdf: {str(exc)[:200]}") from exc


def _rebuild(data: bytes, blocks: list[Block], pages: list[Page],
             translations: list[str]) -> bytes:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    done: set[int] = set()  # form XObjects already stripped (pages share them)
    texts = translations + [""] * (len(blocks) - len(translations))  # code blocks last
    on_page: dict[int, list[tuple[Block, str]]] = defaultdict(list)
    for block, text in zip(blocks, texts, strict=True):
        on_page[block.page].append((block, text))
    for number, page in enumerate(writer.pages):
        _strip_text(page, writer, done)
        if drawn := on_page.get(number):
            _draw_over(page, PdfReader(io.BytesIO(_overlay(drawn, pages[number]))).pages[0],
                       writer)
        page.compress_content_streams()
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


_RESOURCES = ("/ExtGState", "/ColorSpace", "/Pattern", "/Shading", "/XObject", "/Font",
              "/Properties")


def _draw_over(page, overlay, writer: PdfWriter) -> None:
    """The overlay page drawn over the page, clipped to its crop box, in the graphics state
    the page began with: pypdf's merge_page, without its parser. It parsed the overlay's
    content stream, twice where a resource's name had to change (reportlab's /F1 is common),
    most of a rebuild's time; here the overlay's resources take names the page does not use
    and a scan of its stream renames them (merge_page where the scan cannot read it)."""
    data = overlay.get_contents().get_data()
    theirs = overlay["/Resources"].get_object()
    ours = _own_resources(page)
    kinds = [kind for kind in _RESOURCES if kind in theirs]
    taken = {name for kind in kinds for name in _dictionary(ours, kind)}
    added: dict[str, dict[NameObject, object]] = {kind: {} for kind in kinds}
    rename: dict[bytes, NameObject] = {}  # (a name of two kinds is one operand: one new name)
    for kind in kinds:
        for name, value in theirs[kind].get_object().items():
            if name.encode() not in rename:
                rename[name.encode()] = next(n for k in count() if (
                    n := NameObject(f"/Tr{k}{name[1:]}")) not in taken)
                taken.add(rename[name.encode()])
            added[kind][rename[name.encode()]] = value
    renamed = _renamed(data, {old: new.encode() for old, new in rename.items()})
    if renamed is None:
        overlay.mediabox = page.mediabox  # merge_page clips to the overlay's box
        overlay.cropbox = page.cropbox
        page.merge_page(overlay)
        return
    for kind, entries in added.items():
        target = _dictionary(ours, kind)
        for new, value in entries.items():
            target[new] = value.clone(writer)
    if "/ProcSet" in theirs:  # (as merge_page: the sets combined)
        procs = ours.setdefault(NameObject("/ProcSet"), ArrayObject()).get_object()
        if isinstance(procs, ArrayObject):
            procs.extend(x for x in theirs["/ProcSet"].get_object() if x not in procs)
    box = page.cropbox
    clip = b"%s %s %s %s re W n\n" % tuple(
        _number(v) for v in (box.left, box.bottom, box.width, box.height))
    contents = page.get_contents()
    stream = ContentStream(None, writer)
    stream.set_data(b"q\n" + (contents.get_data() if contents is not None else b"")
                    + b"\nQ\nq\n" + clip + renamed + b"\nQ\n")
    page.replace_contents(stream)


def _number(value) -> bytes:
    out = io.BytesIO()
    FloatObject(value).write_to_stream(out)
    return out.getvalue()


def _own_resources(page) -> DictionaryObject:
    """The page's resources (a page that inherits them gets a copy of its own first: a name
    added to its parent's would be every page's; one whose entry is no dictionary, an empty
    one)."""
    resources, node = page.get("/Resources"), page
    if resources is None:
        while resources is None and (node := node.get("/Parent")) is not None:
            node = node.get_object()
            resources = node.get("/Resources")
        inherited = resources.get_object() if resources is not None else None
        page[NameObject("/Resources")] = DictionaryObject(
            inherited if isinstance(inherited, DictionaryObject) else {})
    return _dictionary(page, "/Resources")


def _dictionary(holder: DictionaryObject, key: str) -> DictionaryObject:
    """holder[key] (an indirect one read), made an empty dictionary where it is none."""
    value = holder.get(key)
    value = value.get_object() if value is not None else None
    if not isinstance(value, DictionaryObject):
        value = holder[NameObject(key)] = DictionaryObject()
    return value


def _renamed(data: bytes, rename: dict[bytes, bytes]) -> bytes | None:
    """The content stream with each name given as an operand renamed as `rename` says, the
    rest as it is; None where the scan cannot read it. (The tokens `_without_text` reads, at
    any length: its bound is pypdf's parser's, which never reads this stream.)"""
    pieces, end, copied = [], 0, 0
    while m := _OPERATION.match(data, end):
        end = m.end()
        if m["operator"] in (b"BI", b"R"):
            return None
        for token in _operands(data, m):
            if (new := rename.get(token[1])) is not None:
                pieces += [data[copied : token.start(1)], new]
                copied = token.end(1)
    if not _TRAILING.fullmatch(data, end):
        return None
    pieces.append(data[copied:])
    return b"".join(pieces)


def _strip_text(page, writer: PdfWriter, done: set[int]) -> None:
    """Take the text-showing operators out of the page and of the form XObjects it draws."""
    contents = page.get_contents()
    if contents is not None:
        _drop_text(contents)
        page.replace_contents(contents)
    stack = [page.get("/Resources")]
    while stack:
        xobjects = stack.pop()
        xobjects = xobjects.get_object().get("/XObject") if xobjects is not None else None
        for ref in xobjects.get_object().values() if xobjects is not None else []:
            form = ref.get_object()
            if ref.idnum in done or form.get("/Subtype") != "/Form":
                continue
            done.add(ref.idnum)
            content = ContentStream(form, writer)  # decodes the stream (pypdf keeps it)
            try:
                _drop_text(content)
            except PyPdfError:
                # a figure whose stream inflates to what pypdf cannot parse (damaged) is kept
                # as it was: refused, the whole document went untranslated for one figure
                continue
            # pypdf re-encodes with Flate only: other filters (ASCII85 ...) give way to it
            form[NameObject("/Filter")] = NameObject("/FlateDecode")
            form.pop("/DecodeParms", None)
            form.set_data(content.get_data())
            stack.append(form.get("/Resources"))


def _drop_text(content: ContentStream) -> None:
    """Take the text-showing operations out of a content stream (pypdf's PyPdfError where it
    cannot parse it)."""
    if (kept := _without_text(content.get_data())) is not None:
        content.set_data(kept)
    else:  # what the scan below does not read: pypdf parses it whole
        content.operations = [op for op in content.operations if op[1] not in _SHOW_TEXT]


# A content stream's tokens as pypdf's parser reads them (ContentStream._parse_content_stream,
# read_object), in only the forms it reads one way and without error: whitespace (no NUL, no
# vertical tab), comments ended by a line's end, literal strings (a backslash takes the next
# byte; parentheses nested one deep), hex strings, numbers (pypdf's characters, short of its
# look-ahead), names, operators (a letter, ' or " first), arrays and dictionaries nested two
# deep, true, false and null only inside them (outside, pypdf reads them as operators).
_SPACE = rb"(?:[\t\n\f\r ]++|%[^\r\n]*+[\r\n])*+"
_END = rb"(?=[\t\n\f\r ()<>\[\]{}/%]|\Z)"
_STRING = rb"\((?:[^()\\]++|\\.|\((?:[^()\\]++|\\.)*+\))*+\)"
_HEX = rb"<[0-9A-Fa-f\t\n\f\r \x00]*+>"
_NUMBER = rb"[+\-.0-9][+,\-.0-9]{0,18}+(?![+,\-.0-9])"
_NAME = rb"/[^\t\n\f\r\v ()<>\[\]{}/%\x00]{0,127}+" + _END
_INNER = rb"(?:%s|%s|%s|%s|(?:true|false|null)%s)" % (_STRING, _HEX, _NUMBER, _NAME, _END)


def _nested(value: bytes) -> tuple[bytes, bytes]:
    """An array and a dictionary of values (a dictionary followed by `stream` is a stream's)."""
    return (rb"\[%s(?:%s%s)*+\]" % (_SPACE, value, _SPACE),
            rb"<<%s(?:%s%s%s%s)*+>>(?![\t\n\f\r \x00]*+stream)"
            % (_SPACE, _NAME, _SPACE, value, _SPACE))


_ARRAY, _DICT = _nested(rb"(?:%s|%s|%s)" % ((_INNER, *_nested(_INNER))))
_OPERATION = re.compile(
    rb"%s(?P<operands>(?:(?:%s|%s|%s|%s|%s|%s)%s)*+)(?P<operator>['\"A-Za-z]"
    rb"[^\t\n\f\r\v ()<>\[\]{}/%%\x00]{0,31}+)%s"
    % (_SPACE, _STRING, _HEX, _NUMBER, _NAME, _ARRAY, _DICT, _SPACE, _END), re.S)
# what a text-showing operator takes: strings, numbers, arrays of them (at most 10,000: pypdf
# refuses a stream with an array of more than 100,000, which taken out first it would not)
_SHOWN = re.compile(rb"(?:(?:%s|%s|%s|\[%s(?:(?:%s|%s|%s)%s){0,10000}+\])%s)*+"
                    % (_STRING, _HEX, _NUMBER, _SPACE, _STRING, _HEX, _NUMBER, _SPACE, _SPACE),
                    re.S)
_OPERAND = re.compile(rb"%s(%s|%s|%s|%s|%s|%s)" % (_SPACE, _NUMBER, _NAME, _STRING, _HEX, _ARRAY,
                                                     _DICT), re.S)
_TRAILING = re.compile(_SPACE)
# a longer stream could hold more tokens than pypdf parses in one (2,000,000 by default; a
# token takes a byte at least), which it refuses: its text taken out first, it might not be
_SCANNED = 1_000_000


def _operands(data: bytes, operation: re.Match) -> Iterator[re.Match]:
    """An operation's operands, each read where the last one ended. (Searched for, the space
    after the last one was tried again from each of its bytes, the square of it, and words of
    a comment there were taken for operands.)"""
    pos, stop = operation.start("operands"), operation.start("operator")
    while token := _OPERAND.match(data, pos, stop):
        yield token
        pos = token.end()


def _without_text(data: bytes) -> bytes | None:
    """The content stream as pypdf writes it once it has parsed it and the text-showing
    operations are taken out, made without pypdf's parser, which reads a byte at a time: the
    strings of those operations (most of a page of text) are skipped, and each other token is
    read and written by pypdf once per stream, however often it comes. None where the stream
    holds what the tokens above do not read (an inline image, deeper nesting, a byte no token
    starts with, an object reference, which pypdf fails on), or is too long: pypdf parses it
    whole, as it did."""
    if len(data) > _SCANNED:
        return None
    lines, end = [], 0
    written: dict[bytes, bytes] = {}
    while m := _OPERATION.match(data, end):
        operator, end = m["operator"], m.end()
        if operator in (b"BI", b"R"):
            return None
        if operator in _SHOW_TEXT:
            if not _SHOWN.fullmatch(data, m.start("operands"), m.start("operator")):
                return None
            continue
        # as pypdf's ContentStream.get_data writes an operation: each operand and a space,
        # the operator, a line's end
        line = [written.get(t[1]) or _written(t[1], written) for t in _operands(data, m)]
        lines.append(b"".join([*line, operator, b"\n"]))
    return b"".join(lines) if _TRAILING.fullmatch(data, end) else None


def _written(token: bytes, written: dict[bytes, bytes]) -> bytes:
    """The token as pypdf writes what its read_object makes of it, and a space (kept in
    `written`)."""
    if token[:1] in b"+-.0123456789":  # (as read_object: a number, whatever follows its dot)
        operand = FloatObject(token) if b"." in token else NumberObject(token)
    else:
        operand = read_object(io.BytesIO(token), None)
    out = io.BytesIO()
    operand.write_to_stream(out)
    written[token] = out.getvalue() + b" "
    return written[token]


def _overlay(drawn: list[tuple[Block, str]], space: Page) -> bytes:
    """A one-page PDF with each translation drawn in its block's box, grown where it needs."""
    out = io.BytesIO()
    page = canvas.Canvas(out)
    page.transform(*_inverse(space.matrix))  # pdfminer's page space -> the page's user space
    rooms = _page_rooms([block for block, _ in drawn], space)
    for (block, text), room in zip(drawn, rooms, strict=True):
        _draw(page, block, " ".join(text.split()), room)
    page.showPage()
    page.save()
    return out.getvalue()


def _inverse(m: tuple[float, ...]) -> tuple[float, ...]:
    a, b, c, d, e, f = m
    det = a * d - b * c
    return (d / det, -b / det, -c / det, a / det, (c * f - d * e) / det, (b * e - a * f) / det)


def _draw(page: canvas.Canvas, block: Block, text: str, rooms: list[Box]) -> None:
    _colour_of(page, block)
    if block.code:
        _draw_code(page, block)
        return
    if not text:
        return
    font = _font(text, block.bold, block.italic)
    size, lines, (x0, _, x1, y1) = _fit(block, text, font, rooms)
    page.setFont(font, size)
    y = y1 - pdfmetrics.getAscentDescent(font, size)[0]
    for k, line in enumerate(lines):
        if block.align == "centre":
            page.drawCentredString((x0 + x1) / 2, y, line)
        elif block.align == "right":
            page.drawRightString(x1, y, line)
        elif block.align == "justified" and k < len(lines) - 1:
            page.drawString(x0, y, line, wordSpace=_word_space(line, font, size, x1 - x0))
        else:
            page.drawString(x0, y, line)
        y -= block.pitch * size


def _word_space(line: str, font: str, size: float, width: float) -> float:
    """What to add to each space of a justified block's line to make it as wide as its box:
    nothing for a single word, nor past STRETCH (the line stays left-aligned)."""
    spaces, natural = line.count(" "), pdfmetrics.stringWidth(line, font, size)
    extra = width - natural
    return extra / spaces if spaces and 0 < extra <= STRETCH * natural else 0.0


def _page_rooms(blocks: list[Block], page: Page) -> list[list[Box]]:
    """The rooms of each of a page's blocks (_rooms), its boxes made into arrays and filed in
    a grid once; a block among more boxes than the grid looks through (a crowd of strings on
    one spot) keeps its box."""
    texts = _columns([b.box for b in blocks])
    boxes = np.concatenate([texts, _columns(page.graphics)], axis=1)
    grid = Grid(boxes, page.crop)
    # (a box that holds this holds every text: the page's background)
    extent = (texts[0].min(), texts[1].min(), texts[2].max(), texts[3].max())
    out = []
    for block in blocks:
        try:
            out.append(_rooms(block, page, boxes, grid, extent))
        except Crowded:
            out.append([block.box])
    return out


def _rooms(block: Block, page: Page, boxes: np.ndarray, grid: Grid,
           extent: np.ndarray) -> list[Box]:
    """The boxes the block's translation may take, in the order they are tried: its own box;
    grown down at its width (a paragraph keeps its column's lines); grown down and sideways:
    to the right, a centred block both ways (staying centred), a right-aligned one to the
    left. Growing stops at the page's frame and crop box, at a ruled box around the block,
    and short of another block or a graphic below it or beside it; what lies inside the
    block's own box (an underline, a highlight) does not count. `boxes`: those of the page's
    blocks and graphics (as _columns), filed in `grid`; `extent`: the box of all its blocks.
    The rules look at the boxes that may count (those in the block's row, then those below
    it), all of them at once: the nearest box on a side is the one that stops the growing."""
    x0, y0, x1, y1 = block.box
    gap = GAP * block.size
    left, bottom, right, _ = page.frame
    middle = (x0 + x1) / 2
    # its row: what holds the block or lies in it meets it; what stops it growing sideways
    # lies beside it, within a gap of the page's frame or of the block
    reach = abs(gap) + 2
    row = grid.near(min(left, x0, middle) - reach, y0 - 2, max(right, x1, middle) + reach,
                    y1 + 2)
    near = boxes[:, row]
    inside = _arounds(block.box, near)
    holds = _arounds(near, block.box) & ~inside
    for ox0, oy0, ox1, oy1 in near[:, holds].T.tolist():  # a cell, a frame
        pad = min(max(x0 - ox0, 1.0), gap)  # as far from its rules as the text was
        if not _around((ox0, oy0, ox1, oy1), extent):  # not the background
            bottom = oy0 + pad  # the box, not the page's lowest text, ends it
        left, right = max(left, ox0 + pad), min(right, ox1 - pad)
    left, right = max(min(left, x0), page.crop[0]), min(max(right, x1), page.crop[2])
    bottom = max(min(bottom, y0), page.crop[1])
    seen = {row[k] for k in np.flatnonzero(inside | holds).tolist()}
    ox0, oy0, ox1, oy1 = near[:, ~(inside | holds)]
    beside = (oy0 < y1) & (oy1 > y0)
    after = ox0 + ox1 > x0 + x1
    if (on_right := beside & after).any():
        right = min(right, max(float(ox0[on_right].min()) - gap, x1))
    if (on_left := beside & ~after).any():
        left = max(left, min(float(ox1[on_left].max()) + gap, x0))

    def apart(ax0: float, ay0: float, ax1: float, ay1: float) -> np.ndarray:
        """The boxes neither in the block nor around it that may meet this rectangle."""
        return boxes[:, [k for k in grid.near(ax0, ay0, ax1, ay1) if k not in seen]]

    def grown(a: float, b: float) -> Box:  # down as far as the span from a to b is free
        # looking further down each time: the highest box below found in a stretch is the
        # highest of all; one lower than `bottom` less the gap shortens nothing
        floor, depth = bottom - gap - 2, max(y1 - y0 + gap, 0.0) + 2
        while True:
            low = max(y0 - depth, floor)
            ox0, oy0, ox1, oy1 = apart(a - 2, low, b + 2, y1 + 2)
            below = (ox0 < b) & (ox1 > a) & (oy0 + oy1 < y0 + y1)
            if below.any() and float(oy1[below].max()) >= low or not low > floor:
                break
            depth *= 2
        if not below.any():
            return a, bottom, b, y1
        return a, max(bottom, min(float(oy1[below].max()) + gap, y0)), b, y1

    if block.align == "centre":
        half = min(middle - left, right - middle)
        wide = grown(middle - half, middle + half)
    elif block.align == "right":
        wide = grown(left, x1)
    else:
        wide = grown(x0, right)
    if block.lines == 1:  # a heading, a caption, a cell: one line if it can stay one
        return [block.box, wide]
    return [block.box, grown(x0, x1), wide]


def _fit(block: Block, text: str, font: str, rooms: list[Box]) -> tuple[float, list[str], Box]:
    """The size, lines and box to draw the text in: the block's size in the first room it
    fits, else the largest room with the size made smaller step by step until it fits."""
    for room in rooms:
        if lines := _wrapped(text, font, block.size, block.pitch, room):
            return block.size, lines, room
    size, room = block.size, rooms[-1]
    while True:
        size = max(size * SHRINK, MIN_FONT_SIZE)
        lines = _wrapped(text, font, size, block.pitch, room)
        if lines or size == MIN_FONT_SIZE:
            return size, lines or simpleSplit(text, font, size, room[2] - room[0]), room


def _wrapped(text: str, font: str, size: float, pitch: float, room: Box) -> list[str]:
    """The text's lines wrapped to the room's width, or [] if they do not fit in it."""
    x0, y0, x1, y1 = room
    lines = simpleSplit(text, font, size, x1 - x0)
    ascent, descent = pdfmetrics.getAscentDescent(font, size)
    height = ascent - descent + pitch * size * (len(lines) - 1)
    wide = max(pdfmetrics.stringWidth(line, font, size) for line in lines)
    return lines if height <= y1 - y0 + 0.5 and wide <= x1 - x0 + 0.5 else []


def _colour_of(page: canvas.Canvas, block: Block) -> None:
    {1: page.setFillGray, 3: page.setFillColorRGB, 4: page.setFillColorCMYK}[
        len(block.colour)](*block.colour)


def _draw_code(page: canvas.Canvas, block: Block) -> None:
    """A code block's lines as they were, each where it was, in a monospaced font, smaller
    where the widest line would pass the box's right edge."""
    font = _font("".join(t for _, _, t in block.code), block.bold, block.italic, mono=True)
    right = block.box[2]
    size = block.size
    for x, _, text in block.code:
        if text and (wide := pdfmetrics.stringWidth(text, font, size)) > right - x + 0.5:
            size = max(size * (right - x) / wide, MIN_FONT_SIZE)
    descent = pdfmetrics.getAscentDescent(font, size)[1]
    page.setFont(font, size)
    for x, y, text in block.code:
        page.drawString(x, y - descent, text)


_HELVETICA = {(False, False): "Helvetica", (True, False): "Helvetica-Bold",
              (False, True): "Helvetica-Oblique", (True, True): "Helvetica-BoldOblique"}
_DEJAVU = {(False, False): "DejaVuSans", (True, False): "DejaVuSans-Bold",
           (False, True): "DejaVuSans-Oblique", (True, True): "DejaVuSans-BoldOblique"}
_COURIER = {(False, False): "Courier", (True, False): "Courier-Bold",
            (False, True): "Courier-Oblique", (True, True): "Courier-BoldOblique"}
# what the names of monospaced fonts hold (TeX's typewriter fonts are cmtt, sfmono ...)
_MONOSPACED = ("mono", "courier", "consol", "cmtt", "typewriter", "menlo", "code", "sfmono",
               "nimbusmon")  # URW's Courier, which Ghostscript and TeX embed


def _font(text: str, bold: bool, italic: bool, mono: bool = False) -> str:
    """The reportlab font name to draw text in: Helvetica (Courier for code) where its
    encoding holds the text, else DejaVu Sans (Mono) registered from the file the first time."""
    try:
        text.encode("cp1252")  # Helvetica's WinAnsi encoding, as reportlab writes it
        return (_COURIER if mono else _HELVETICA)[bold, italic]
    except UnicodeEncodeError:
        pass
    name = _DEJAVU[bold, italic].replace("Sans", "SansMono" if mono else "Sans")
    name = _registered(name) or _registered("DejaVuSansMono" if mono else "DejaVuSans")
    if name is None:
        raise InvalidDocument(
            "the translation has characters Helvetica cannot draw and the font DejaVu Sans "
            "(DejaVuSans.ttf, Debian's fonts-dejavu-core) is not installed")
    missing = sorted({ch for ch in text if ord(ch) not in _glyphs(name) and ch.isprintable()})
    if missing:
        raise InvalidDocument(f"no font here draws the characters {''.join(missing[:10])!r} "
                              "of the translation (Helvetica, DejaVu Sans)")
    return name


@cache
def _registered(name: str) -> str | None:
    """Register the TrueType font `name` with reportlab (embedded in the files it writes)."""
    for folder in _FONT_DIRS:
        path = Path(folder, f"{name}.ttf")
        if path.is_file():
            pdfmetrics.registerFont(TTFont(name, str(path)))
            return name
    return None


def _glyphs(name: str) -> dict[int, int]:
    return pdfmetrics.getFont(name).face.charToGlyph
