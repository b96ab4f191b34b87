"""PDF documents: small files built here with reportlab (two columns, a heading, an image, a
link, a form XObject, a rotated page), translated by upper-casing or by the fake engine, and
read back with pypdf and pdfminer: the translation is on the page, in its block's box, nothing
of the source text is left, images and links are kept; hostile files are refused quickly."""

from __future__ import annotations

import io
import random
import re
import sys
import time
import zlib

import pytest

pytest.importorskip("pypdf")
pytest.importorskip("pdfminer")
pytest.importorskip("reportlab")

from pdfminer.high_level import extract_pages, extract_text  # noqa: E402
from pdfminer.layout import LAParams, LTChar, LTTextBox  # noqa: E402
from pypdf import PdfReader, PdfWriter  # noqa: E402
from pypdf.generic import (  # noqa: E402
    ContentStream,
    DecodedStreamObject,
    DictionaryObject,
    NameObject,
    StreamObject,
)
from reportlab.lib.utils import ImageReader  # noqa: E402
from reportlab.pdfgen import canvas  # noqa: E402

from app.documents import (  # noqa: E402
    DocumentTooLarge,
    InvalidDocument,
    Limits,
    UnsupportedFormat,
    extract,
    handler,
    pdf_file,
    rebuild,
    translate_document,
)
from bench.fuzz_documents import run_case  # noqa: E402

LEFT = ["The service reads every page of the file", "and writes the translation in the same",
        "place. Long words are hyphen-", "ated at the end of a line."]
RIGHT = ["Images and links stay where they", "were on the page."]


def _image() -> ImageReader:
    from PIL import Image

    return ImageReader(Image.new("RGB", (8, 8), (200, 30, 30)))


def two_columns(rotate: int = 0) -> bytes:
    """A heading, a paragraph in each of two columns, an image and a link, on a landscape page
    600 by 400 as a viewer shows it; rotate=90: a portrait page shown turned (/Rotate 90), its
    content drawn turned the other way, as landscape pages often are."""
    out = io.BytesIO()
    c = canvas.Canvas(out, pagesize=(600, 400) if not rotate else (400, 600))
    if rotate:
        c.setPageRotation(90)
        c.transform(0, 1, -1, 0, 400, 0)  # what the viewer shows at (x, y) is here
    c.setFont("Helvetica-Bold", 18)
    c.drawString(40, 350, "Getting started")
    c.setFont("Helvetica", 11)
    for k, line in enumerate(LEFT):
        c.drawString(40, 300 - 14 * k, line)
    c.setFillColorRGB(0, 0, 0.8)
    for k, line in enumerate(RIGHT):
        c.drawString(330, 300 - 14 * k, line)
    c.linkURL("https://example.org/", (330, 280, 500, 310), relative=1)
    c.drawImage(_image(), 40, 60, 100, 100)
    c.showPage()
    c.save()
    return out.getvalue()


def lines_page(lines: list[tuple[str, float, float, float, str]]) -> bytes:
    """A page 500 by 300 with each line (font, size, x, y, text) drawn by reportlab."""
    def draw(c):
        for font, size, x, y, text in lines:
            c.setFont(font, size)
            c.drawString(x, y, text)
    return page_of(draw, (500, 300))


def upper(texts: list[str]) -> list[str]:
    return [t.upper() for t in texts]


def boxes(data: bytes) -> list[tuple[str, tuple[float, ...]]]:
    """(text, box) of every text box pdfminer finds, on every page."""
    return [(" ".join(el.get_text().split()), el.bbox)
            for page in extract_pages(io.BytesIO(data), laparams=LAParams())
            for el in page if isinstance(el, LTTextBox)]


def test_a_block_is_a_segment_its_lines_joined_in_reading_order():
    doc = extract(two_columns(), "pdf")
    # the blocks top down by their lowest line: the right column, shorter, before the left
    assert doc.segments == [
        "Getting started",
        "Images and links stay where they were on the page.",
        "The service reads every page of the file and writes the translation in the same "
        "place. Long words are hyphenated at the end of a line.",  # re-joined
    ]
    blocks = doc.state[1]
    assert [b.bold for b in blocks] == [True, False, False]
    assert blocks[0].size == pytest.approx(18) and blocks[2].size == pytest.approx(11)
    assert blocks[1].colour == pytest.approx((0, 0, 0.8))


def test_bullets_written_at_win_ansi_code_127_are_read_and_written_back():
    # reportlab (and so the translation) writes Helvetica's bullet at 0x7F, which the PDF
    # standard gives WinAnsiEncoding's bullet too; pdfminer read no character there: the
    # bullets were lost and a list's items joined into one segment
    doc = extract(lines_page([("Helvetica", 11, 40, 250, "\u2022 Open the file"),
                         ("Helvetica", 11, 40, 236, "\u2022 Save your work")]), "pdf")
    assert doc.segments == ["\u2022 Open the file", "\u2022 Save your work"]
    assert extract(rebuild(doc, upper(doc.segments)), "pdf").segments == [
        "\u2022 OPEN THE FILE", "\u2022 SAVE YOUR WORK"]


@pytest.mark.parametrize("rotate", [0, 90])
def test_the_translation_replaces_the_text_where_each_block_was(rotate):
    data = two_columns(rotate)
    doc = extract(data, "pdf")
    out = rebuild(doc, upper(doc.segments))
    text = extract_text(io.BytesIO(out))
    assert "GETTING STARTED" in text and "IMAGES AND LINKS" in " ".join(text.split())
    assert not any(ch.islower() for ch in text)  # nothing of the source is left
    got = boxes(out)
    assert sorted(t for t, _ in got) == sorted(upper(doc.segments))
    originals = dict(zip(upper(doc.segments), (b.box for b in doc.state[1]), strict=True))
    for t, box in got:  # from its block's top left, over no other block
        assert box[0] == pytest.approx(originals[t][0], abs=1), t
        assert box[3] == pytest.approx(originals[t][3], abs=2), t
        assert not [u for u, other in originals.items() if u != t and overlap(box, other)], t


def overlap(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_images_links_and_the_rotation_are_kept():
    data = two_columns(rotate=90)
    out = PdfReader(io.BytesIO(rebuild(doc := extract(data, "pdf"), upper(doc.segments))))
    page = out.pages[0]
    xobjects = page["/Resources"]["/XObject"]
    assert any(x.get_object()["/Subtype"] == "/Image" for x in xobjects.values())
    links = [a.get_object() for a in page["/Annots"]]
    assert [a["/A"]["/URI"] for a in links] == ["https://example.org/"]
    assert page.rotation == 90


def page_of(draw, size: tuple[float, float] = (400, 400)) -> bytes:
    out = io.BytesIO()
    c = canvas.Canvas(out, pagesize=size)
    draw(c)
    c.showPage()
    c.save()
    return out.getvalue()


def pages_of_one_line(n: int) -> bytes:
    out = io.BytesIO()
    c = canvas.Canvas(out, pagesize=(400, 400))
    for k in range(n):
        c.drawString(40, 300, f"Page {k} has one line of words.")
        c.showPage()
    c.save()
    return out.getvalue()


def drawn(data: bytes) -> dict[str, tuple[tuple[float, ...], list[LTChar]]]:
    """Each text box pdfminer finds: its text -> (its box, its characters)."""
    return {" ".join(el.get_text().split()): (el.bbox, [c for line in el for c in line
                                                          if isinstance(c, LTChar)])
            for page in extract_pages(io.BytesIO(data), laparams=LAParams())
            for el in page if isinstance(el, LTTextBox)}


def test_a_one_line_block_grows_into_free_space_below_instead_of_shrinking():
    # a line fitted tight to its English text came back in a tiny font once translated longer
    def draw(c):
        c.setFont("Helvetica", 12)
        c.drawString(40, 300, "Open the file first.")
        c.drawString(40, 60, "Page 1")
    doc = extract(page_of(draw), "pdf")
    longer = ["Öffnen Sie zuerst die Datei, bitte.", "Seite 1"]
    (x0, y0, x1, y1), chars = drawn(rebuild(doc, longer))[longer[0]]
    assert {round(c.size) for c in chars} == {12}  # the size it had, on two lines
    assert len({round(c.y0) for c in chars}) == 2
    assert x0 == pytest.approx(40, abs=1) and x1 <= doc.state[1][0].box[2] + 1  # its column
    assert y1 == pytest.approx(doc.state[1][0].box[3], abs=1) and y0 > 75  # above the footer


def test_a_block_grows_inside_its_ruled_box_never_over_it_nor_over_the_next_block():
    def draw(c):
        c.rect(30, 180, 150, 60)  # a table's cell
        c.setFont("Helvetica", 10)
        c.drawString(36, 226, "Cell text here")
        c.setFont("Helvetica-Bold", 14)
        c.drawString(220, 306, "Settings")  # a heading closely followed by a paragraph
        c.setFont("Helvetica", 10)
        c.drawString(220, 284, "Change them below.")
        c.drawString(220, 272, "Then save them.")
    doc = extract(page_of(draw), "pdf")
    assert doc.segments == ["Settings", "Change them below. Then save them.", "Cell text here"]
    longer = ["Die Einstellungen", "Ändern Sie sie unten. Dann speichern Sie sie.",
              "Der Text in dieser Zelle ist viel länger"]
    got = drawn(rebuild(doc, longer))
    box, chars = got[longer[2]]
    assert {round(c.size) for c in chars} == {10}  # grew down inside the cell
    assert box[0] > 30 and box[1] > 180 and box[2] < 180 and box[3] < 240  # inside the rules
    heading, chars = got[longer[0]]
    assert not overlap(heading, doc.state[1][1].box)
    assert chars[0].size < 14  # no room: drawn smaller, in its line


def all_pairs_rooms(block, page, texts):
    """The rooms of a block by the rules as first written, every other box of the page looked
    at one by one: the reference for the rooms worked out on arrays."""
    def around(outer, inner):
        return (outer[0] <= inner[0] + 1 and outer[1] <= inner[1] + 1
                and outer[2] >= inner[2] - 1 and outer[3] >= inner[3] - 1)

    x0, y0, x1, y1 = block.box
    gap = pdf_file.GAP * block.size
    left, bottom, right, _ = page.frame
    others = [o for o in texts + list(page.graphics) if not around(block.box, o)]
    apart = [o for o in others if not around(o, block.box)]
    for ox0, oy0, ox1, oy1 in (o for o in others if around(o, block.box)):
        pad = min(max(x0 - ox0, 1.0), gap)
        if not all(around((ox0, oy0, ox1, oy1), t) for t in texts):
            bottom = oy0 + pad
        left, right = max(left, ox0 + pad), min(right, ox1 - pad)
    left, right = max(min(left, x0), page.crop[0]), min(max(right, x1), page.crop[2])
    bottom = max(min(bottom, y0), page.crop[1])
    for ox0, oy0, ox1, oy1 in apart:
        if oy0 < y1 and oy1 > y0:
            if ox0 + ox1 > x0 + x1:
                right = min(right, max(ox0 - gap, x1))
            else:
                left = max(left, min(ox1 + gap, x0))

    def grown(a, b):
        low = bottom
        for ox0, oy0, ox1, oy1 in apart:
            if ox0 < b and ox1 > a and oy0 + oy1 < y0 + y1:
                low = max(low, min(oy1 + gap, y0))
        return a, low, b, y1

    middle = (x0 + x1) / 2
    half = min(middle - left, right - middle)
    spans = {"centre": (middle - half, middle + half), "right": (left, x1)}
    wide = grown(*spans.get(block.align, (x0, right)))
    return [block.box, wide] if block.lines == 1 else [block.box, grown(x0, x1), wide]


def crowded_page(seed: int) -> tuple[list[pdf_file.Block], pdf_file.Page]:
    """A page of some 70 blocks: three columns of blocks one under another, a few apart, and
    stray blocks across them (labels, a figure's captions), some boxed (a frame or a table's
    cell around them), some underlined, some sharing their box with another, over a
    background, with rules and images between them; some places whole numbers."""
    rnd = random.Random(seed)
    blocks, graphics = [], []

    def block(x0: float, y1: float, width: float) -> pdf_file.Block:
        size, lines = rnd.choice([8, 10, 10, 12.5, 18]), rnd.choice([1, 1, 2, 3, 5])
        return pdf_file.Block(
            page=0, box=(x0, y1 - 1.2 * size * lines, x0 + width, y1), size=size, pitch=1.2,
            bold=False, italic=False, colour=(0.0,), lines=lines,
            align=rnd.choice(["left", "centre", "right", "justified"]))

    for column in (40, 216, 392):
        y1 = 770.0
        while y1 > 80:
            blocks.append(block(column, y1, rnd.choice([170, rnd.uniform(20, 170)])))
            y1 = blocks[-1].box[1] - rnd.choice([2, 6, rnd.uniform(1, 60)])
    for _ in range(20):
        blocks.append(block(rnd.uniform(20, 500), float(rnd.randrange(60, 780)),
                            rnd.uniform(8, 200)))
    blocks += [pdf_file.replace(b, lines=1) for b in rnd.sample(blocks, 5)]  # the same box
    for b in rnd.sample(blocks, 20):
        x0, y0, x1, y1 = b.box
        graphics.append((x0 - rnd.uniform(0, 8), y0 - rnd.uniform(0, 40),
                         x1 + rnd.uniform(0, 30), y1 + rnd.uniform(0, 8)))  # around it
        graphics.append((x0, y0 - 1, x1, y0 + 0.5))  # an underline
    graphics += [(0, 0, 612, 792), (36, 36, 576, 780)]  # a background, a page's frame
    for _ in range(20):  # rules, images
        x, y = rnd.uniform(0, 600), rnd.uniform(0, 780)
        graphics.append((x, y, x + rnd.choice([0.4, rnd.uniform(1, 200)]),
                         y + rnd.choice([0.4, rnd.uniform(1, 120)])))
    page = pdf_file.Page(matrix=(1, 0, 0, 1, 0, 0), crop=(0, 0, 612, 792),
                         graphics=tuple(graphics), frame=(40, 20, 566, 792))
    return blocks, page


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_rooms_of_a_crowded_page_are_those_of_every_box_looked_at_one_by_one(seed):
    blocks, page = crowded_page(seed)
    want = [all_pairs_rooms(b, page, [o.box for o in blocks if o is not b]) for b in blocks]
    assert pdf_file._page_rooms(blocks, page) == want
    # the page tries the rules: blocks grown down and sideways, blocks held by their neighbours
    widest = [(b.box, rooms[-1]) for b, rooms in zip(blocks, want, strict=True)]
    assert sum(room[1] < box[1] for box, room in widest) > 10
    assert sum(room[2] > box[2] for box, room in widest) > 5
    assert sum(room == box for box, room in widest) > 20


def test_a_centred_heading_stays_centred():
    def draw(c):
        c.setFont("Helvetica-Bold", 16)
        c.drawCentredString(200, 340, "Annual report of the club")
        c.setFont("Helvetica", 10)
        for k in range(3):  # the page's text, justified: its middle is the page's
            c.drawCentredString(200, 300 - 12 * k, "A line of the report, as wide as the "
                                "page's text and no wider")
    doc = extract(page_of(draw), "pdf")
    assert doc.state[1][0].align == "centre"
    for heading in ["Jahresbericht", "Der Jahresbericht des Vereins für das Jahr"]:
        (x0, _, x1, _), chars = drawn(rebuild(doc, [heading, "Eine Zeile."]))[heading]
        assert (x0 + x1) / 2 == pytest.approx(200, abs=1.5), heading
        assert chars[0].size == pytest.approx(16, abs=0.1), heading


def test_a_block_takes_the_look_of_most_of_its_characters():
    # a bold first word made the whole paragraph bold
    def draw(c):
        c.setFont("Helvetica-Bold", 11)
        c.drawString(40, 300, "Note:")
        c.setFont("Helvetica", 11)
        c.drawString(72, 300, "the service keeps a copy of every file it translates.")
    doc = extract(page_of(draw), "pdf")
    assert [(b.bold, b.italic) for b in doc.state[1]] == [(False, False)]
    (_, chars), = drawn(rebuild(doc, upper(doc.segments))).values()
    assert {c.fontname for c in chars} == {"Helvetica"}


def test_a_longer_translation_is_drawn_smaller_where_no_room_is_left():
    # the heading has the left column close below it, the left column the image
    doc = extract(two_columns(), "pdf")
    longer = [" ".join([f"{t} {t} und noch viel mehr Wörter"] * 3) for t in doc.segments]
    chars = [c for _, cs in drawn(rebuild(doc, longer)).values() for c in cs]
    # the heading is bold, the right column blue, the left one black
    looks = [lambda c: "Bold" in c.fontname,
             lambda c: c.graphicstate.ncolor == (0, 0, 0.8),
             lambda c: "Bold" not in c.fontname and c.graphicstate.ncolor == 0]
    for k, look in enumerate(looks):
        mine = [c for c in chars if look(c)]
        box = (min(c.x0 for c in mine), min(c.y0 for c in mine),
               max(c.x1 for c in mine), max(c.y1 for c in mine))
        if k != 1:  # the right column has room below it
            assert mine[0].size < doc.state[1][k].size, k
        others = [b.box for j, b in enumerate(doc.state[1]) if j != k]
        assert not any(overlap(box, other) for other in others), k
        assert box[1] > 160 or box[0] > 140  # not over the image


def parsed(data: bytes) -> bytes | str:
    """What pypdf makes of a content stream less its text-showing operations (the bytes it
    writes), or the error it raises."""
    stream = ContentStream(None, None)
    stream.set_data(data)
    try:
        stream.operations = [op for op in stream.operations if op[1] not in pdf_file._SHOW_TEXT]
    except Exception as exc:
        return type(exc).__name__
    return stream.get_data()


# content streams the scan reads: it must write them as pypdf does, less the text
SCANNED = [
    b"BT /F1 12 Tf 72 700 Td (Hello) Tj ET",
    b"BT[(A)-250(B)]TJ/F2 9 Tf(C)Tj ET",  # no spaces
    b"q 1 0 0 1 0 0 %note 5 /F2\ncm Q",  # a comment's words before an operator: no operands
    b"BT (a \\) b) Tj (c(d)e) Tj (x\\\\) Tj (\\(\\() Tj (\\\n) Tj ET",  # escapes, nesting
    b"BT <48 65 6c6C6f> Tj <> Tj <4> Tj ET",
    b"BT 1 2 (x) \" (y) ' T* 0 -12 TD ET",
    b"% (not a string\nBT (a%b) Tj % Tj in a comment\n ET\r% last\r",
    b"/Span <</ActualText (Tj) /A [1 (TJ) true] /B <</C null>> /MCID 3>> BDC BT (x) Tj ET EMC",
    b"/GS1 gs 0.5 0 0 0.5 10 10 cm /Im1 Do [3 2] 0 d 1,5 w",
    b"BT 910.60.852 0 Td (x) Tj ET",  # a damaged number: 0 to pypdf
    b"true false (x) Tj",  # operators to pypdf, outside an array
    b"BT 1 2 Tj 3 (x) TJ Tj ET",
    b"",
]
# streams it leaves to pypdf whole
UNSCANNED = [
    b"q BI /W 6 /H 1 /BPC 8 /CS /G ID (x)Tj EI Q BT (y) Tj ET",  # an inline image's bytes
    b"BT (unclosed Tj ET",
    b"BT (x) Tj ET \x00 q Q",
    b"BT (x) Tj\x0bET",
    b"BT [(a) /Name] TJ ET",
    b"BT [(a) [(b)]] TJ ET",
    b"/P <</A <</B [1]>>>> BDC",  # nested deeper than the scan reads
    b"BT (a(b(c))) Tj ET",
    b"BT 12345678901234567890123 (x) Tj ET",
    b"BT <4G> Tj ET",
    b"<</A 1>> stream\nxx\nendstream",
    b"BT [1 0 R] TJ ET",
    b"BT (x) Tj ET 1 0 R",  # an object reference, which pypdf fails on
    b"BT (x) Tj ET % a comment at the end",
    b"BT (x) Tj ET 5",
    b"BT {(x)} Tj ET",
]


@pytest.mark.parametrize("data", SCANNED + UNSCANNED)
def test_a_stream_less_its_text_is_written_as_pypdf_writes_it_having_parsed_it(data):
    kept = pdf_file._without_text(data)
    assert (kept is not None) == (data in SCANNED)
    if kept is not None:
        assert kept == parsed(data)


def test_streams_put_together_at_random_are_written_as_pypdf_writes_them():
    rnd = random.Random(7)
    pieces = [b"(a)", b"(b\\)c)", b"(d(e)f)", b"<6162>", b"[(g) -20 <68>]", b"12", b"-3.5",
              b"1,5", b"/F1", b"/Name#20x", b"<</K (v) /L [1 true]>>", b"[1 2]", b"true",
              b"null", b"Tj", b"TJ", b"'", b'"', b"Tf", b"Td", b"BT", b"ET", b"q", b"Q", b"cm",
              b"re", b"BDC", b"%c Tj\n", b"(", b")", b"]", b"\x00", b"BI", b"stream",
              b"0 R", b"<<", b">>"]
    separators = [b" ", b"", b"\n", b"\r\n", b"\t", b"  "]
    scanned = 0
    for _ in range(3000):
        data = b"".join(rnd.choice(pieces) + rnd.choice(separators)
                        for _ in range(rnd.randrange(1, 12)))
        kept = pdf_file._without_text(data)
        if kept is not None:
            scanned += 1
            assert kept == parsed(data), data
    assert scanned > 300


def test_text_in_a_form_xobject_is_read_and_removed():
    def draw(c):
        c.beginForm("note")
        c.setFont("Helvetica", 12)
        c.drawString(20, 100, "Shared footer text.")
        c.endForm()
        c.doForm("note")
    doc = extract(page_of(draw, (400, 200)), "pdf")
    assert doc.segments == ["Shared footer text."]
    text = extract_text(io.BytesIO(rebuild(doc, upper(doc.segments))))
    assert " ".join(text.split()) == "SHARED FOOTER TEXT."


def test_a_form_xobject_whose_content_cannot_be_parsed_is_kept_as_it_was():
    # a figure whose stream inflates to garbage (a number longer than pypdf reads): the whole
    # manual was refused ("Read stream length of 112 exceeds maximum allowed length of 64")
    def draw(c):
        c.beginForm("figure")
        c.rect(10, 10, 50, 50)
        c.endForm()
        c.doForm("figure")
        c.setFont("Helvetica", 12)
        c.drawString(20, 150, "The caption of the figure.")
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(page_of(draw, (400, 200)))))
    form = writer.pages[0]["/Resources"]["/XObject"]["/FormXob.figure"].get_object()
    garbage = b"q 0 0 m " + b"7" * 100 + b" l S Q"
    del form[NameObject("/Filter")]
    StreamObject.set_data(form, garbage)  # stored as it is, without a filter
    broken = io.BytesIO()
    writer.write(broken)
    doc = extract(broken.getvalue(), "pdf")
    assert doc.segments == ["The caption of the figure."]
    result = PdfReader(io.BytesIO(rebuild(doc, upper(doc.segments))))
    assert result.pages[0]["/Resources"]["/XObject"]["/FormXob.figure"].get_data() == garbage
    assert " ".join(result.pages[0].extract_text().split()) == "THE CAPTION OF THE FIGURE."


def _private_use_flags() -> bytes:
    """A line in Helvetica whose code 1 is mapped (ToUnicode) to a private-use character, as
    a Google Docs export maps its flag emoji."""
    writer = PdfWriter()
    page = writer.add_blank_page(400, 200)

    def stream(data: bytes):
        obj = DecodedStreamObject()
        obj.set_data(data)
        return writer._add_object(obj)

    cmap = (b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap /CMapName /F def "
            b"/CMapType 2 def 1 begincodespacerange <00> <FF> endcodespacerange 1 beginbfchar "
            b"<01> <E000> endbfchar endcmap CMapName currentdict /CMap defineresource pop end "
            b"end")
    font = DictionaryObject({NameObject("/Type"): NameObject("/Font"),
                             NameObject("/Subtype"): NameObject("/Type1"),
                             NameObject("/BaseFont"): NameObject("/Helvetica"),
                             NameObject("/ToUnicode"): stream(cmap)})
    page[NameObject("/Resources")] = DictionaryObject({NameObject("/Font"): DictionaryObject(
        {NameObject("/F1"): writer._add_object(font)})})
    page[NameObject("/Contents")] = stream(b"BT /F1 12 Tf 40 100 Td (Indonesia \\001 Germany) "
                                           b"Tj ET")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_private_use_characters_are_left_out():
    # a font's own glyphs (flag emoji, TeX's big brackets) read as private-use characters: the
    # model was given them, and no font here draws them (the translation showed empty boxes)
    doc = extract(_private_use_flags(), "pdf")
    assert doc.segments == ["Indonesia Germany"]
    assert extract(rebuild(doc, upper(doc.segments)), "pdf").segments == ["INDONESIA GERMANY"]


needs_dejavu = pytest.mark.skipif(pdf_file._registered("DejaVuSans") is None,
                                  reason="DejaVu Sans is not installed (fonts-dejavu-core)")


def test_the_translation_is_drawn_over_the_page_without_parsing_its_drawing(monkeypatch):
    """The overlay's content stream (reportlab's drawing of the translation) was parsed by
    pypdf's merge_page twice per page (its resources renamed into the page's), most of a
    rebuild's time. Its resources now take names the page does not use, its stream renamed by
    a scan; the page's own font /F1 and the overlay's stay apart."""
    parsed = []
    parse = ContentStream._parse_content_stream
    monkeypatch.setattr(ContentStream, "_parse_content_stream",
                        lambda self, stream: parsed.append(1) or parse(self, stream))
    data = two_columns()
    assert "/F1" in PdfReader(io.BytesIO(data)).pages[0]["/Resources"]["/Font"]
    doc = extract(data, "pdf")
    out = rebuild(doc, upper(doc.segments))
    assert parsed == []
    assert sorted(t for t, _ in boxes(out)) == sorted(upper(doc.segments))
    fonts = PdfReader(io.BytesIO(out)).pages[0]["/Resources"]["/Font"]
    assert "/F1" in fonts and any(name.startswith("/Tr") for name in fonts)


@pytest.mark.parametrize("rotate", [0, 90])
def test_the_translation_drawn_over_the_page_renders_as_merge_page_draws_it(monkeypatch, rotate):
    """Rendered by PDFium, a page with the translation drawn over it (resources renamed by a
    scan of the drawing) is pixel for pixel the page pypdf's merge_page makes."""
    pdfium = pytest.importorskip("pypdfium2")
    import numpy as np

    def pixels(data: bytes) -> list:
        document = pdfium.PdfDocument(data)
        return [np.asarray(page.render(scale=2).to_pil()) for page in document]

    data = two_columns(rotate)
    doc = extract(data, "pdf")
    ours = rebuild(doc, upper(doc.segments))
    monkeypatch.setattr(pdf_file, "_renamed", lambda data, rename: None)  # to merge_page
    theirs = rebuild(doc, upper(doc.segments))
    assert ours != theirs
    drawn, merged = pixels(ours), pixels(theirs)
    assert all(np.array_equal(a, b) for a, b in zip(drawn, merged, strict=True))
    assert (drawn[0] < 100).any()  # (the translation's letters, dark on white)


def test_a_drawing_the_scan_cannot_read_goes_over_the_page_by_merge_page(monkeypatch):
    monkeypatch.setattr(pdf_file, "_renamed", lambda data, rename: None)  # (unread)
    doc = extract(two_columns(), "pdf")
    out = rebuild(doc, upper(doc.segments))
    assert sorted(t for t, _ in boxes(out)) == sorted(upper(doc.segments))


def test_names_in_a_drawing_are_renamed_where_they_are_operands_only():
    data = b"BT /F1 12 Tf (a /F1 b) Tj [(/F1)] TJ ET /F10 gs q /F1 Do Q"
    assert pdf_file._renamed(data, {b"/F1": b"/Tr0F1"}) == (
        b"BT /Tr0F1 12 Tf (a /F1 b) Tj [(/F1)] TJ ET /F10 gs q /Tr0F1 Do Q")
    assert pdf_file._renamed(b"BI /W 1 ID x EI", {b"/W": b"/X"}) is None


@needs_dejavu
def test_text_helvetica_cannot_encode_is_drawn_in_dejavu_sans():
    doc = extract(two_columns(), "pdf")
    russian = ["Начало работы", "Служба читает страницу.", "Ссылки остаются."]
    out = rebuild(doc, russian)
    assert sorted(t for t, _ in boxes(out)) == sorted(russian)
    fonts = PdfReader(io.BytesIO(out)).pages[0]["/Resources"]["/Font"]
    assert any("DejaVuSans" in f.get_object()["/BaseFont"] for f in fonts.values())


@needs_dejavu
def test_without_a_font_for_the_translation_it_is_refused(monkeypatch):
    doc = extract(two_columns(), "pdf")
    with pytest.raises(InvalidDocument, match="no font here draws"):
        rebuild(doc, ["漢字", "b", "c"])  # DejaVu Sans has no Han characters
    monkeypatch.setattr(pdf_file, "_FONT_DIRS", [])
    pdf_file._registered.cache_clear()
    try:
        with pytest.raises(InvalidDocument, match="DejaVu Sans"):
            rebuild(doc, ["Начало", "б", "в"])
    finally:
        pdf_file._registered.cache_clear()


def test_encrypted_scanned_and_broken_files_are_refused():
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(two_columns())))
    writer.encrypt("secret")
    locked = io.BytesIO()
    writer.write(locked)
    with pytest.raises(InvalidDocument, match="encrypted; remove the password"):
        extract(locked.getvalue(), "pdf")
    scan = io.BytesIO()
    c = canvas.Canvas(scan)
    c.drawImage(_image(), 40, 60, 300, 300)
    c.showPage()
    c.save()
    with pytest.raises(InvalidDocument, match="no text layer"):
        extract(scan.getvalue(), "pdf")
    with pytest.raises(InvalidDocument, match=r"cannot read the file as \.pdf"):
        extract(b"%PDF-1.7\nnot a pdf at all", "pdf")
    with pytest.raises(InvalidDocument, match=r"cannot read the file as \.pdf"):
        extract(two_columns()[:700], "pdf")  # truncated


@pytest.mark.parametrize("repeat", [5_000_000, 20_000_000])  # under and over pypdf's own bound
def test_a_content_stream_that_inflates_hugely_is_refused_before_it_is_parsed(repeat):
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(two_columns())))
    bomb = StreamObject()
    bomb.set_data(zlib.compress(b"0 0 m " * repeat, 9))  # 30 or 120 MB of path operators
    bomb[NameObject("/Filter")] = NameObject("/FlateDecode")
    writer.pages[0][NameObject("/Contents")] = writer._add_object(bomb)
    data = io.BytesIO()
    writer.write(data)
    assert len(data.getvalue()) < 500_000
    start = time.monotonic()
    with pytest.raises(DocumentTooLarge, match="inflate to more than"):
        extract(data.getvalue(), "pdf")
    assert time.monotonic() - start < 5


def test_many_pages_sharing_one_content_stream_are_refused():
    # one page referenced again and again: small file, pdfminer would read it each time
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(two_columns())))
    for _ in range(5000):
        writer.add_page(writer.pages[0])
    data = io.BytesIO()
    writer.write(data)
    with pytest.raises(DocumentTooLarge):
        extract(data.getvalue(), "pdf")


def test_a_file_over_a_limit_is_refused_at_the_first_page_past_it(monkeypatch):
    """Twenty pages of one line each and a limit of three segments: the file is refused at
    the fourth page, naming the limit, and the pages after it are never read."""
    read = []
    real = pdf_file._page_matrix  # (called once for each page read)
    monkeypatch.setattr(pdf_file, "_page_matrix", lambda *args: read.append(1) or real(*args))
    with pytest.raises(DocumentTooLarge, match="segments; the limit is 3") as err:
        extract(pages_of_one_line(20), "pdf", Limits(max_segments=3))
    assert err.value.limit == 3 and len(read) == 4


def test_the_pages_read_are_told_as_they_are_read():
    seen = []
    doc = extract(pages_of_one_line(3), "pdf", reading=lambda done, total: seen.append(
        (done, total)))
    assert seen == [(0, 3), (1, 3), (2, 3), (3, 3)] and len(doc.segments) == 3


def test_what_the_teller_of_pages_raises_is_not_blamed_on_the_file():
    """A job cancelled while its PDF is read, or a jobs store that fails to count the pages,
    stops the reading with its own error: it was refused as the file's ("cannot read the
    file as .pdf"), a cancelled job counted as a rejected document and a failing store
    reported to the user as a broken file."""
    class Stopped(Exception):
        pass

    def reading(done: int, total: int) -> None:
        if done == 2:
            raise Stopped

    with pytest.raises(Stopped):
        extract(pages_of_one_line(3), "pdf", reading=reading)


def test_the_whole_path_with_sentences_and_a_fake_engine():
    out = translate_document(two_columns(), "pdf",
                             lambda texts: [" ".join(reversed(t.split())) for t in texts])
    text = " ".join(extract_text(io.BytesIO(out)).split())
    assert "started Getting" in text
    assert "page. the on were they where stay links and Images" in text


def test_without_the_extra_pdf_is_refused_naming_it(monkeypatch):
    monkeypatch.delitem(sys.modules, "app.documents.pdf_file")
    monkeypatch.setitem(sys.modules, "pypdf", None)
    with pytest.raises(UnsupportedFormat, match="need the 'pdf' extra"):
        handler("pdf")


def test_a_block_in_a_monospaced_font_is_code_kept_where_it_was():
    # code and terminal sessions were translated ("BIT STRING" came back "BIT ZEICHENKETTE")
    doc = extract(lines_page([("Helvetica", 11, 40, 250, "Run the command below to build it."),
                              ("Courier", 10, 60, 200, "make install"),
                              ("Courier", 10, 60, 188, "    --prefix=/usr")]), "pdf")
    assert doc.segments == ["Run the command below to build it."]
    result = rebuild(doc, upper(doc.segments))
    got = dict(boxes(result))
    assert "RUN THE COMMAND BELOW TO BUILD IT." in got
    code = [(t, box) for t, box in got.items() if "make" in t]
    assert [t for t, _ in code] == ["make install --prefix=/usr"]
    (x0, y0, _, _), = [box for _, box in code]
    assert x0 == pytest.approx(60, abs=1) and y0 == pytest.approx(185, abs=3)


def lines_at(c, x: float, y: float, pitch: float, lines: list[str]) -> float:
    """Draws the lines one under the other; returns the baseline below the last."""
    for line in lines:
        c.drawString(x, y, line)
        y -= pitch
    return y


PARAGRAPH = ["There are two important requirements for the way the database is kept:",
             "each application installs its own file, and the files are merged in one",
             "place every time a package is installed or removed from the system."]


def test_a_heading_right_above_its_paragraph_is_a_segment_of_its_own():
    # pdfminer put the heading in the paragraph's box: the model read "2.1 Directory layout
    # There are two ..." as one sentence, drawn at the paragraph's size
    def draw(c):
        c.setFont("Helvetica-Bold", 11)
        c.drawString(40, 320, "2.1 Directory layout")
        c.setFont("Helvetica", 11)
        y = lines_at(c, 40, 306, 13, PARAGRAPH)
        c.setFont("Helvetica-Bold", 14)
        c.drawString(40, y - 2, "2.2 Sources")
        c.setFont("Helvetica", 11)
        lines_at(c, 40, y - 17, 13, PARAGRAPH[:2])
    data = page_of(draw)
    assert len(boxes(data)) == 1  # what pdfminer makes of it
    doc = extract(data, "pdf")
    assert doc.segments == ["2.1 Directory layout", " ".join(PARAGRAPH), "2.2 Sources",
                            " ".join(PARAGRAPH[:2])]
    assert [(b.bold, round(b.size)) for b in doc.state[1]] == [
        (True, 11), (False, 11), (True, 14), (False, 11)]


def test_a_bold_word_or_inline_code_inside_a_paragraph_does_not_cut_it():
    def draw(c):
        c.setFont("Helvetica", 11)
        c.drawString(40, 320, "Each application installs one file into the")
        c.setFont("Helvetica-Bold", 11)
        c.drawString(40, 307, "packages")
        c.setFont("Helvetica", 11)
        c.drawString(92, 307, "directory, which the tools merge into one")
        c.setFont("Courier", 9)  # a line all in code, set a size smaller
        c.drawString(40, 294, "/usr/share/mime/packages/freedesktop.org.xml,")
        c.setFont("Helvetica", 11)
        c.drawString(40, 281, "and then the caches are written once again,")
        c.setFont("Helvetica-Bold", 11)  # a bold sentence going on into a bold line
        c.drawString(40, 268, "so never edit the caches by hand: they are")
        c.drawString(40, 255, "replaced without a warning.")
    doc = extract(page_of(draw), "pdf")
    assert len(doc.segments) == 1, doc.segments


def test_a_larger_gap_between_two_paragraphs_of_one_block_cuts_it():
    def draw(c):
        c.setFont("Helvetica", 11)
        y = lines_at(c, 40, 320, 13, PARAGRAPH)
        lines_at(c, 40, y - 2, 13, PARAGRAPH[:2])  # the gap a little larger
    data = page_of(draw)
    assert len(boxes(data)) == 1
    doc = extract(data, "pdf")
    assert doc.segments == [" ".join(PARAGRAPH), " ".join(PARAGRAPH[:2])]
    assert [b.lines for b in doc.state[1]] == [3, 2]


@pytest.mark.parametrize("step", [13, 15.5])
def test_two_lines_further_apart_than_the_page_s_lines_are_two_segments(step):
    # a box of two lines had no pitch of its own to judge a gap by: a heading-like line and
    # the sentence under it went to the model as one sentence
    def draw(c):
        c.setFont("Helvetica", 11)
        c.drawString(40, 340, "Installing the service")
        c.drawString(40, 340 - step, "Run the installer and follow the steps it shows.")
        lines_at(c, 40, 260, 13, PARAGRAPH)  # the page's lines, 13 apart
        lines_at(c, 40, 160, 11.5, ["Name", "Size", "Mode", "Owner"])  # a table's rows, closer
    data = page_of(draw)
    assert len(boxes(data)) == 3
    segments = extract(data, "pdf").segments
    if step == 13:  # as far apart as the page's lines: one paragraph
        assert segments[0] == ("Installing the service Run the installer and follow the "
                               "steps it shows.")
    else:
        assert segments[:2] == ["Installing the service",
                                "Run the installer and follow the steps it shows."]


def test_a_formula_s_symbol_set_apart_from_its_two_line_sentence_stays_in_it():
    # TeX sets a symbol of a formula on a baseline of its own; judged by the page's lines, the
    # sentence "f ist stetig" was cut from its subject
    def draw(c):
        c.setFont("Helvetica", 11)
        c.drawString(40, 340, "f")
        c.drawString(40, 324, "is continuous on the whole interval.")
        lines_at(c, 40, 260, 13, PARAGRAPH)
    segments = extract(page_of(draw), "pdf").segments
    assert segments[0] == "f is continuous on the whole interval."


def test_two_lines_on_a_page_without_other_lines_to_judge_by_stay_one_segment():
    doc = extract(lines_page([("Helvetica", 11, 40, 250, "Installing the service"),
                              ("Helvetica", 11, 40, 234, "Run the installer now.")]), "pdf")
    assert doc.segments == ["Installing the service Run the installer now."]


def test_urw_courier_is_a_monospaced_font():
    # NimbusMonL (Ghostscript's and TeX's Courier) was read as text: XML and tables went to the
    # model, and a line of paths in it, a size smaller, cut a sentence in three
    from types import SimpleNamespace
    assert pdf_file._monospaced(SimpleNamespace(fontname="JNNPWA+NimbusMonL-Regu"))
    assert not pdf_file._monospaced(SimpleNamespace(fontname="OLMHVN+NimbusRomNo9L-Regu"))


MANUAL = ["The database is built from the files that each application installs in",
          "its own directory, and the tools merge them in one place every time a",
          "package is installed or removed, so that every program on the system",
          "reads the same types and the same names for them."]


def paragraph(c, lines: list[str], x: float, y: float, width: float, align: str) -> None:
    """Lines one under the other, 13 apart: justified (every line but the last stretched to
    the width by its word spacing), left-aligned or centred on the width."""
    for k, line in enumerate(lines):
        if align == "centre":
            c.drawCentredString(x + width / 2, y - 13 * k, line)
            continue
        gap = 0.0
        if align == "justified" and k < len(lines) - 1:
            gap = (width - c.stringWidth(line, "Helvetica", 11)) / line.count(" ")
        c.drawString(x, y - 13 * k, line, wordSpace=gap)


def translated_lines(source: bytes, translation: str) -> list[tuple[float, float]]:
    """Where each line of the translation is drawn (left, right), top to bottom."""
    doc = extract(source, "pdf")
    out = rebuild(doc, [translation])
    lines = [line for page in extract_pages(io.BytesIO(out), laparams=LAParams())
             for box in page if isinstance(box, LTTextBox) for line in box]
    lines.sort(key=lambda line: -line.y0)
    return [(line.x0, max(c.x1 for c in line if isinstance(c, LTChar)
                          and c.get_text().strip())) for line in lines]


GERMAN = ("Die Datenbank wird aus den Dateien gebaut, die jede Anwendung in ihr eigenes "
          "Verzeichnis installiert, und die Werkzeuge führen sie jedes Mal an einem Ort "
          "zusammen, wenn ein Paket installiert oder entfernt wird, damit jedes Programm auf "
          "dem System dieselben Typen und dieselben Namen für sie liest.")


@pytest.mark.parametrize("translation", [GERMAN, GERMAN.replace("Ort", "Ort (łódź)")])
def test_a_justified_paragraph_is_drawn_justified(translation):
    # justified text (most manuals) came back ragged-right; in DejaVu Sans too
    def draw(c):
        c.setFont("Helvetica", 11)
        paragraph(c, MANUAL, 40, 330, 340, "justified")
    source = page_of(draw)
    assert [b.align for b in extract(source, "pdf").state[1]] == ["justified"]
    lines = translated_lines(source, translation)
    assert len(lines) >= 4
    assert {round(x0) for x0, _ in lines} == {40}
    for _, x1 in lines[:-1]:  # both edges straight
        assert x1 == pytest.approx(380, abs=0.5)
    assert lines[-1][1] < 340  # the last line is not stretched


def test_a_ragged_paragraph_stays_ragged():
    ragged = [" ".join(line.split()[:-1]) if k % 2 else line for k, line in enumerate(MANUAL)]
    def draw(c):
        c.setFont("Helvetica", 11)
        paragraph(c, ragged, 40, 330, 340, "left")
    source = page_of(draw)
    assert [b.align for b in extract(source, "pdf").state[1]] == ["left"]
    ends = [x1 for _, x1 in translated_lines(source, GERMAN)[:-1]]
    assert max(ends) - min(ends) > 5


def test_centred_lines_stay_centred_not_justified():
    def draw(c):
        c.setFont("Helvetica", 11)
        paragraph(c, [" ".join(line.split()[:-k]) for k, line in enumerate(MANUAL, 1)],
                  40, 330, 340, "centre")
    source = page_of(draw)
    assert [b.align for b in extract(source, "pdf").state[1]] == ["centre"]
    middles = [(x0 + x1) / 2 for x0, x1 in translated_lines(source, GERMAN)]
    assert max(middles) - min(middles) < 1.5 and len(middles) >= 4


def test_a_short_paragraph_is_justified_where_its_column_is():
    # two lines alone could be ragged text whose first line happens to be the longest; a
    # justified paragraph on another page ends where they end
    out = io.BytesIO()
    c = canvas.Canvas(out, pagesize=(400, 400))
    for lines in ([MANUAL[2:]], [MANUAL, MANUAL[2:]]):
        c.setFont("Helvetica", 11)
        for k, paragraph_lines in enumerate(lines):
            paragraph(c, paragraph_lines, 40, 330 - 70 * k, 340, "justified")
        c.showPage()
    c.save()
    blocks = extract(out.getvalue(), "pdf").state[1]
    assert [(b.page, b.align) for b in blocks] == [(0, "justified"), (1, "justified"),
                                                  (1, "justified")]
    alone = page_of(lambda c: (c.setFont("Helvetica", 11),
                               paragraph(c, MANUAL[2:], 40, 260, 340, "justified")))
    assert [b.align for b in extract(alone, "pdf").state[1]] == ["left"]


def test_a_justified_line_of_one_word_or_nearly_empty_is_not_stretched():
    space = pdf_file._word_space
    width = pdf_file.pdfmetrics.stringWidth("Die Datenbank wird", "Helvetica", 11)
    assert space("Die Datenbank wird", "Helvetica", 11, width + 10) == pytest.approx(5)
    assert space("Datenbank", "Helvetica", 11, width + 10) == 0
    assert space("Die Datenbank wird", "Helvetica", 11, 1.9 * width) > 0  # wide spaces
    assert space("Die Datenbank wird", "Helvetica", 11, 2.1 * width) == 0  # nearly empty


def test_a_page_whose_resources_are_malformed_still_gets_its_translation():
    """A page whose /Resources, or whose /Font in them, is no dictionary (null) gets
    dictionaries of its own for the translation's fonts."""
    doc = extract(two_columns(), "pdf")
    data, blocks, pages = doc.state
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    from pypdf.generic import NullObject

    writer.pages[0]["/Resources"][NameObject("/Font")] = NullObject()
    broken = io.BytesIO()
    writer.write(broken)
    import dataclasses

    doc = dataclasses.replace(doc, state=(broken.getvalue(), blocks, pages))
    out = rebuild(doc, upper(doc.segments))
    assert sorted(t for t, _ in boxes(out)) == sorted(upper(doc.segments))


def test_dot_leaders_are_found_as_the_pattern_searched_for_them_finds_them():
    # the pattern searched from every dot of a long run of them to its end: the square of the
    # run; read from the end now, it must still say the same of every text
    searched = re.compile(r"(\. ?){4,}\s*\w+$")
    rng = random.Random(3)
    pieces = [".", " ", ". ", "a", "7", "\t", "é", "_", "-", "Naming"]
    for _ in range(20000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 14))).strip()
        assert pdf_file._leaders(text) == (searched.search(text) is not None), repr(text)
    assert pdf_file._leaders("Naming . . . . 3") and not pdf_file._leaders("a . . . 3")


def test_a_line_of_a_great_many_dots_is_read_in_linear_time():
    # a 3 KB file: a block whose first line is 60,000 dots (drawn small), read with the search
    # above for dot leaders at the line's end took minutes of CPU holding the GIL; a deadline,
    # in a child process, far above what the read takes
    def draw(c):
        text = c.beginText(40, 300)
        text.setFont("Helvetica", 0.5)
        for line in ("Intro " + "." * 60000, "The next line of the block.", "And a third."):
            text.textLine(line)
        c.drawText(text)
    assert run_case(page_of(draw), "pdf", timeout=30, checks=False).kind == "ok"


def test_a_comment_before_an_operator_is_no_operand_of_it_when_names_are_renamed():
    assert pdf_file._renamed(b"q /F1 % /F1 x\n gs Q", {b"/F1": b"/Tr1F1"}) == \
        b"q /Tr1F1 % /F1 x\n gs Q"


def test_a_page_whose_operation_has_a_great_many_spaces_before_its_operator_is_rebuilt_in_time():
    # the space after an operation's last operand was searched for one more from every byte
    # of it: the square of the space, minutes for a stream of a few KB compressed; a deadline,
    # in a child process
    writer = PdfWriter()
    page = writer.add_blank_page(400, 400)
    font = DictionaryObject({NameObject("/Type"): NameObject("/Font"),
                             NameObject("/Subtype"): NameObject("/Type1"),
                             NameObject("/BaseFont"): NameObject("/Helvetica")})
    page[NameObject("/Resources")] = DictionaryObject({NameObject("/Font"): DictionaryObject(
        {NameObject("/F1"): writer._add_object(font)})})
    contents = StreamObject()
    contents.set_data(b"q 1 0 0 1 0 0" + b" " * 500_000 + b"cm BT /F1 12 Tf 40 100 Td "
                      b"(Hello there, friend.) Tj ET Q")
    contents = contents.flate_encode()
    page[NameObject("/Contents")] = writer._add_object(contents)
    out = io.BytesIO()
    writer.write(out)
    assert run_case(out.getvalue(), "pdf", timeout=30, checks=False).kind == "ok"
