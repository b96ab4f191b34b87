"""PDF (.pdf): pdfminer.six reads the text blocks, pypdf and reportlab write the translation
over the original page.

Reading: pdfminer's layout analysis groups each page's characters into lines and the lines into
text boxes (in form XObjects too), in its reading order. A box is a segment (a box whose lines
start with a bullet is one segment per item), its lines joined with spaces, a word hyphenated
at a line's end joined again when the next line goes on in lower case; so the model reads whole
sentences, not the pieces a PDF draws one by one. Each block keeps its box, font size, line
pitch, weight, slant and colour.

Writing: the original page stays (images, vector graphics, backgrounds, links and other
annotations); only the operators that show text (Tj, TJ, ', ") are taken out of its content
streams and of the form XObjects it draws, so everything else they do (colours, clipping,
marked content) is unchanged. Each block's translation is drawn in its box on a one-page
overlay (reportlab) merged onto the page (pypdf): wrapped to the box's width, in the block's
font size made smaller step by step until it fits the box. Fonts are replaced: Helvetica for
text it can encode, else DejaVu Sans embedded; text neither can draw is refused. Not covered:
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
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from pdfminer.converter import PDFPageAggregator
from pdfminer.layout import LAParams, LTChar, LTFigure, LTTextBox, LTTextLine
from pdfminer.pdffont import PDFSimpleFont
from pdfminer.pdfinterp import PDFPageInterpreter, PDFResourceManager
from pdfminer.pdfpage import PDFPage
from pypdf import PdfReader, PdfWriter
from pypdf.errors import LimitReachedError, PyPdfError
from pypdf.generic import (
    ContentStream,
    DictionaryObject,
    IndirectObject,
    NameObject,
    StreamObject,
)
from reportlab.lib.utils import simpleSplit
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.ttfonts import TTFont
from reportlab.pdfgen import canvas

from app.documents import Document, DocumentTooLarge, InvalidDocument, Limits

# decoded stream bytes pdfminer may read: a floor for small files, else this many times the
# file's size (text content deflates a few times over; a bomb, a thousand times)
CONTENT_FLOOR = 4 * 1024 * 1024
CONTENT_RATIO = 20
PAGE_COST = 1024  # what pdfminer's work on a page and on a stream weighs beside their bytes
STREAM_COST = 64
MIN_FONT_SIZE = 4.0
_SHOW_TEXT = {b"Tj", b"TJ", b"'", b'"'}
_BULLET = re.compile(r"[•◦▪‣∙·\-–—*] ")
_LEADERS = re.compile(r"(\. ?){4,}\s*\w+$")  # "Naming . . . . 3"
_LIGATURES = re.compile("[\ufb00-\ufb06]")
_UNMAPPED = re.compile(r"\(cid:\d+\)")  # pdfminer's text for a glyph without a character
# a font's own glyphs (flag emoji, TeX's big brackets) mapped to private-use characters: they
# mean nothing to the model, and no font here draws them (an empty box each)
_PRIVATE_USE = re.compile("[\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd]")
_DEVICE_COLOURS = {"DeviceGray": 1, "DeviceRGB": 3, "DeviceCMYK": 4}
# where Debian, Fedora, Arch and Homebrew put DejaVu Sans
_FONT_DIRS = ["/usr/share/fonts/truetype/dejavu", "/usr/share/fonts/dejavu",
              "/usr/share/fonts/TTF", "/usr/local/share/fonts", "/opt/homebrew/share/fonts"]


@dataclass(frozen=True)
class Block:
    """Where a segment's translation goes: its page, its box in pdfminer's page space (origin at
    the media box's lower left, the page's rotation applied), and how its text looked."""

    page: int
    box: tuple[float, float, float, float]
    size: float
    pitch: float  # the distance between its lines' baselines, in font sizes
    bold: bool
    italic: bool
    colour: tuple[float, ...]  # 1 (gray), 3 (RGB) or 4 (CMYK) components
    # a block in a monospaced font (code, a terminal session) is not translated: its lines
    # (x, y of their boxes' lower left, text), drawn again where they were
    code: tuple[tuple[float, float, str], ...] = ()


def extract(data: bytes, limits: Limits = Limits()) -> Document:
    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted:
        raise InvalidDocument("the .pdf file is encrypted; remove the password and send it again")
    _check_content(reader, min(limits.max_unpacked_bytes,
                               max(CONTENT_FLOOR, CONTENT_RATIO * len(data))))
    manager = _Resources()
    device = PDFPageAggregator(manager, laparams=LAParams(all_texts=True))
    interpreter = PDFPageInterpreter(manager, device)
    segments, blocks, matrices, kept = [], [], [], []
    for number, page in enumerate(PDFPage.get_pages(io.BytesIO(data))):
        matrices.append(_page_matrix(page.mediabox, page.rotate))
        interpreter.process_page(page)
        for box in _text_boxes(device.get_result()):
            for lines in _items(box):
                block = _block(number, lines)
                if block.code:
                    kept.append(block)
                    continue
                text = _join([_clean(line.get_text()) for line in lines])
                if text.strip():
                    segments.append(text)
                    blocks.append(block)
    if len(matrices) != len(reader.pages):  # pdfminer guessed pages from a broken page tree
        raise InvalidDocument(f"cannot read the file as .pdf: {len(reader.pages)} pages in its "
                              f"page tree, {len(matrices)} found")
    if not segments:
        raise InvalidDocument("the .pdf file has no text layer (a scan?); text in images is not "
                              "translated (no OCR)")
    return Document("pdf", segments, (data, blocks + kept, matrices))


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


def _items(box: LTTextBox) -> list[list[LTTextLine]]:
    """The box's lines cut into paragraphs: after a line of dot leaders (a table of contents),
    after a sentence's end well short of the box's right edge, before a bullet."""
    groups: list[list[LTTextLine]] = []
    for line in box:
        if not isinstance(line, LTTextLine):
            continue
        text = line.get_text().strip()
        if not groups or _BULLET.match(text) or _ends(groups[-1][-1], box):
            groups.append([])
        groups[-1].append(line)
    return groups


def _ends(line: LTTextLine, box: LTTextBox) -> bool:
    text = line.get_text().strip()
    if _LEADERS.search(text):
        return True
    return text.endswith((".", "!", "?", ":")) and box.x1 - line.x1 > 0.15 * box.width


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


def _block(page: int, lines: list[LTTextLine]) -> Block:
    chars = [c for line in lines for c in line if isinstance(c, LTChar)]
    sizes = sorted(c.size for c in chars)
    size = sizes[len(sizes) // 2]
    pitch = 1.2
    if len(lines) > 1:
        pitch = min(max((lines[0].y1 - lines[-1].y1) / (len(lines) - 1) / size, 1.0), 1.8)
    name = chars[0].fontname.lower()
    code = ()
    if 2 * sum(any(m in c.fontname.lower() for m in _MONOSPACED) for c in chars) > len(chars):
        code = tuple((line.x0, line.y0, _UNMAPPED.sub("", line.get_text()).rstrip())
                     for line in lines)
    return Block(
        page=page,
        box=(min(x.x0 for x in lines), min(x.y0 for x in lines),
             max(x.x1 for x in lines), max(x.y1 for x in lines)),
        size=size, pitch=pitch,
        bold="bold" in name or "cmbx" in name or "black" in name,
        italic="italic" in name or "oblique" in name or "cmti" in name,
        colour=_colour(chars[0]),
        code=code,
    )


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


def _rebuild(data: bytes, blocks: list[Block], matrices: list, translations: list[str]) -> bytes:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    done: set[int] = set()  # form XObjects already stripped (pages share them)
    for number, page in enumerate(writer.pages):
        _strip_text(page, writer, done)
        texts = translations + [""] * (len(blocks) - len(translations))  # code blocks last
        drawn = [(b, t) for b, t in zip(blocks, texts, strict=True) if b.page == number]
        if drawn:
            overlay = PdfReader(io.BytesIO(_overlay(drawn, matrices[number]))).pages[0]
            overlay.mediabox = page.mediabox  # merge_page clips to the overlay's box
            overlay.cropbox = page.cropbox
            page.merge_page(overlay)
        page.compress_content_streams()
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def _strip_text(page, writer: PdfWriter, done: set[int]) -> None:
    """Take the text-showing operators out of the page and of the form XObjects it draws."""
    contents = page.get_contents()
    if contents is not None:
        contents.operations = [op for op in contents.operations if op[1] not in _SHOW_TEXT]
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
                operations = content.operations
            except PyPdfError:
                # a figure whose stream inflates to what pypdf cannot parse (damaged) is kept
                # as it was: refused, the whole document went untranslated for one figure
                continue
            content.operations = [op for op in operations if op[1] not in _SHOW_TEXT]
            # pypdf re-encodes with Flate only: other filters (ASCII85 ...) give way to it
            form[NameObject("/Filter")] = NameObject("/FlateDecode")
            form.pop("/DecodeParms", None)
            form.set_data(content.get_data())
            stack.append(form.get("/Resources"))


def _overlay(drawn: list[tuple[Block, str]], matrix: tuple[float, ...]) -> bytes:
    """A one-page PDF with each translation drawn in its block's box."""
    out = io.BytesIO()
    page = canvas.Canvas(out)
    page.transform(*_inverse(matrix))  # pdfminer's page space -> the page's user space
    for block, text in drawn:
        _draw(page, block, " ".join(text.split()))
    page.showPage()
    page.save()
    return out.getvalue()


def _inverse(m: tuple[float, ...]) -> tuple[float, ...]:
    a, b, c, d, e, f = m
    det = a * d - b * c
    return (d / det, -b / det, -c / det, a / det, (c * f - d * e) / det, (b * e - a * f) / det)


def _draw(page: canvas.Canvas, block: Block, text: str) -> None:
    _colour_of(page, block)
    if block.code:
        _draw_code(page, block)
        return
    if not text:
        return
    font = _font(text, block.bold, block.italic)
    x0, y0, x1, y1 = block.box
    size = block.size
    while True:
        lines = simpleSplit(text, font, size, x1 - x0)
        ascent, descent = pdfmetrics.getAscentDescent(font, size)
        height = ascent - descent + block.pitch * size * (len(lines) - 1)
        wide = max(pdfmetrics.stringWidth(line, font, size) for line in lines)
        if (height <= y1 - y0 + 0.5 and wide <= x1 - x0 + 0.5) or size <= MIN_FONT_SIZE:
            break
        size = max(size * 0.9, MIN_FONT_SIZE)
    page.setFont(font, size)
    y = y1 - ascent
    for line in lines:
        page.drawString(x0, y, line)
        y -= block.pitch * size


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
_MONOSPACED = ("mono", "courier", "consol", "cmtt", "typewriter", "menlo", "code", "sfmono")


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
