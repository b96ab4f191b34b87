"""PDF pages of many blocks: reading and rebuilding one costs in proportion to its blocks and
graphics, counted without a clock (the lines of the documents code run, the pairs of boxes its
array comparisons compare), on a page of thousands of strings in rows and on one of strings
all drawn on one spot; and the layout decisions worked out from an index of the page's boxes
are those of every box looked at one by one, on random pages."""

from __future__ import annotations

import io
import random
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pypdf")
pytest.importorskip("pdfminer")
pytest.importorskip("reportlab")

from pypdf import PdfReader  # noqa: E402

from app.documents import DocumentTooLarge, Limits, pdf_boxes, pdf_file  # noqa: E402
from bench.pdf_hostile import grid_page, piled_page  # noqa: E402
from tests.app.test_pdf import all_pairs_rooms  # noqa: E402

Box = tuple[float, float, float, float]

DOCUMENTS = str(Path(pdf_file.__file__).parent)


def work(monkeypatch, run) -> int:
    """What the documents code does while run() runs: each line of its own executed, and each
    pair of boxes compared by pdf_file's array comparison (_arounds), which no line counts."""
    pairs = lines = 0
    arounds = pdf_file._arounds

    def counted(outer, inner, slack=1.0):
        nonlocal pairs
        out = arounds(outer, inner, slack)
        pairs += np.size(out)
        return out

    def line(frame, event, arg):
        nonlocal lines
        lines += event == "line"
        return line

    def call(frame, event, arg):  # only the documents code's frames are followed
        return line if frame.f_code.co_filename.startswith(DOCUMENTS) else None

    monkeypatch.setattr(pdf_file, "_arounds", counted)
    sys.settrace(call)
    try:
        run()
    finally:
        sys.settrace(None)
    return lines + pairs


@pytest.mark.parametrize("page", [grid_page, piled_page])
def test_reading_and_rebuilding_a_page_cost_in_proportion_to_its_blocks(monkeypatch, page):
    # only what grows with the page's boxes: what any page may look through (a small page,
    # whole) would hide it on pages this small
    monkeypatch.setattr(pdf_boxes, "LOOK", 0)

    def cost(n: int) -> tuple[int, int]:
        data = page(n)
        doc = pdf_file.extract(data)
        assert len(doc.segments) == n
        translations = [s.upper() for s in doc.segments]
        return (work(monkeypatch, lambda: pdf_file.extract(data)),
                work(monkeypatch, lambda: pdf_file.rebuild(doc, translations)))

    (read_small, rebuild_small), (read_large, rebuild_large) = cost(100), cost(800)
    # eight times the blocks: about eight times the work (every block compared with every
    # other: 64 times)
    assert read_large < 12 * read_small
    assert rebuild_large < 12 * rebuild_small


def random_page(seed: int) -> tuple[list[pdf_file.Block], tuple[float, ...], list[Box]]:
    """Blocks and graphics at random on a page (its crop box): blocks of one line or more in
    random places and sizes, some in a centred stack (a title page), some ending at the right
    edge of the text or of a cell (a running header, a label), some piled on one spot; cells
    (one or two) around some, underlines, a background, rules; some places whole numbers,
    some a point's slack apart (where the rules draw their lines)."""
    rnd = random.Random(seed)
    width, height = rnd.choice([(612.0, 792.0), (400.0, 300.0), (3000.0, 3000.0)])
    blocks: list[pdf_file.Block] = []
    graphics: list[Box] = []

    def add(x0: float, y0: float, w: float, size: float, lines: int) -> pdf_file.Block:
        code = ((x0, y0, "x = 1"),) if rnd.random() < 0.05 else ()
        blocks.append(pdf_file.Block(
            page=0, box=(x0, y0, x0 + w, y0 + 1.2 * size * lines), size=size, pitch=1.2,
            bold=False, italic=False, colour=(0.0,), code=code, lines=lines,
            align=rnd.choice(["left", "left", "centre", "right", "justified"])))
        return blocks[-1]

    def place(extent: float) -> float:
        return rnd.choice([round, float])(rnd.uniform(0, extent))

    for _ in range(rnd.randrange(1, 60)):
        add(place(width), place(height), place(width / 3) + 4,
            rnd.choice([4, 8, 10, 12.5, 18]), rnd.choice([1, 1, 1, 2, 3, 6]))
    for _ in range(rnd.randrange(3)):  # a centred stack
        middle, y, size = rnd.uniform(50, width - 50), rnd.uniform(0, height), rnd.choice([8, 14])
        for _ in range(rnd.randrange(2, 6)):
            w = rnd.uniform(10, 100)
            add(middle - w / 2 + rnd.uniform(-1, 1), y, w, size, 1)
            y -= size * rnd.uniform(1.2, 5)
    for _ in range(rnd.randrange(4)):  # ending at the text's right edge
        w = rnd.uniform(10, width / 3)
        add(width * 0.9 - w + rnd.uniform(-1, 1), rnd.uniform(0, height), w, 10, 1)
    if rnd.random() < 0.3:  # a pile
        x0, y0 = rnd.uniform(0, width), rnd.uniform(0, height)
        for _ in range(rnd.randrange(2, 30)):
            add(x0 + rnd.choice([0, rnd.uniform(-0.5, 0.5)]), y0, 40, 10, 1)
    for b in rnd.sample(blocks, rnd.randrange(len(blocks) // 2 + 1)):
        x0, y0, x1, y1 = b.box
        for _ in range(rnd.choice([1, 1, 2])):  # a cell around it, a table's around that
            x0, y0 = x0 - rnd.choice([-1, 1, 2, rnd.uniform(0, 30)]), y0 - place(40)
            x1, y1 = x1 + rnd.choice([-1, 1, 2, rnd.uniform(0, 30)]), y1 + place(8)
            graphics.append((x0, y0, x1, y1))
        if rnd.random() < 0.3:
            graphics.append((b.box[0], b.box[1] - 1, b.box[2], b.box[1] + 0.5))  # underline
    if rnd.random() < 0.3:
        graphics.append((0.0, 0.0, width, height))  # a background
    for _ in range(rnd.randrange(10)):  # rules, images, some below all the text
        x, y = rnd.uniform(-10, width), rnd.uniform(-20, height)
        graphics.append((x, y, x + rnd.choice([0.4, rnd.uniform(1, width)]),
                         y + rnd.choice([0.4, rnd.uniform(1, height / 4)])))
    rnd.shuffle(graphics)
    crop = rnd.choice([(0.0, 0.0, width, height), (10.0, 20.0, width - 10, height - 5)])
    return blocks, crop, graphics


def all_pairs_space(cropbox, graphics: list[Box], texts: list[Box]) -> pdf_file.Page:
    """A page's space by the rule as first written, every graphic looked at with every text:
    the reference for the graphics holding text found by a sweep."""
    x0, y0, x1, y1 = cropbox
    held = [any(pdf_file._around(g, t) for t in texts) for g in graphics]
    loose = [g for g, around in zip(graphics, held, strict=True) if not around]
    frame = (min((t[0] for t in texts), default=x0),
             min((box[1] for box in texts + loose), default=y0),
             max((t[2] for t in texts), default=x1), y1)
    return pdf_file.Page((1, 0, 0, 1, 0, 0), (x0, y0, x1, y1), tuple(graphics), frame)


def all_pairs_aligned(block, page, blocks):
    """A one-line block's alignment by the rule as first written, every graphic and every
    block of the page looked at: the reference for the alignment found through grids."""
    if block.lines > 1 or block.code:
        return block
    x0, y0, x1, y1 = block.box
    size, middle = block.size, (x0 + x1) / 2
    around = [g for g in page.graphics if pdf_file._around(g, block.box)]
    left, _, right, _ = min(around, key=lambda g: g[2] - g[0]) if around else page.frame
    if x0 - left > size and (pdf_file._same([middle, (left + right) / 2], size) or any(
            b.box[1] - 4 * size < y1 and b.box[3] + 4 * size > y0
            and abs(b.box[0] - x0) > size
            and pdf_file._same([middle, (b.box[0] + b.box[2]) / 2], size) for b in blocks)):
        return pdf_file.replace(block, align="centre")
    if pdf_file._same([x1, right], size) and x0 > (left + right) / 2:
        return pdf_file.replace(block, align="right")
    return block


def only_meeting(monkeypatch) -> None:
    """Grids that find only the boxes that meet the rectangle asked about, not every box of
    the cells it overlaps: what the layout asks must hold every box that counts."""
    near = pdf_boxes.Grid.near

    def meeting(self, x0, y0, x1, y1):
        found = near(self, x0, y0, x1, y1)
        return [k for k in found if self.boxes[0][k] <= max(x0, x1)
                and self.boxes[2][k] >= min(x0, x1) and self.boxes[1][k] <= max(y0, y1)
                and self.boxes[3][k] >= min(y0, y1)]

    init = pdf_boxes.Grid.__init__

    def kept(self, boxes, extent):
        init(self, boxes, extent)
        self.boxes = boxes.tolist()

    monkeypatch.setattr(pdf_boxes.Grid, "near", meeting)
    monkeypatch.setattr(pdf_boxes.Grid, "__init__", kept)


@pytest.mark.parametrize("found", ["in the cells", "meeting"])
def test_the_layout_of_random_pages_is_that_of_every_box_looked_at_one_by_one(monkeypatch,
                                                                              found):
    """A few hundred random pages: the page's space (what graphics hold text), the one-line
    blocks' alignment and every block's rooms are those of the rules as first written."""
    if found == "meeting":
        only_meeting(monkeypatch)
    tried = Counter()
    for seed in range(300):
        blocks, crop, graphics = random_page(seed)
        texts = [b.box for b in blocks]
        page = pdf_file._page_space((1, 0, 0, 1, 0, 0), crop, graphics, texts)
        assert page == all_pairs_space(crop, graphics, texts), seed
        aligned = pdf_file._page_aligned(blocks, page)
        assert aligned == [all_pairs_aligned(b, page, blocks) for b in blocks], seed
        rooms = pdf_file._page_rooms(aligned, page)
        assert rooms == [all_pairs_rooms(b, page, [o.box for o in aligned if o is not b])
                         for b in aligned], seed
        tried.update(f"{b.align} from {a.align}" for a, b in zip(blocks, aligned, strict=True)
                     if a.lines == 1 and not a.code and a.align == "left")
        tried.update(("grown", "down") for b, r in zip(aligned, rooms, strict=True)
                     if r[-1][1] < b.box[1])
        tried.update(("grown", "right") for b, r in zip(aligned, rooms, strict=True)
                     if r[-1][2] > b.box[2])
        tried["frame lowered by a graphic"] += page.frame[1] < min(t[1] for t in texts)
    # the pages try the rules: centred and right-aligned blocks, rooms grown each way
    assert tried["centre from left"] > 20 and tried["right from left"] > 20, tried
    assert tried["left from left"] > 100, tried
    assert tried["grown", "down"] > 500 and tried["grown", "right"] > 500, tried
    assert tried["frame lowered by a graphic"] > 20, tried


def test_a_block_in_a_crowd_keeps_its_box_and_its_alignment(monkeypatch):
    """Strings on one spot, each of a form of its own, a rectangle around each: once the
    page's questions have looked through what a page of so many boxes may, the blocks left
    keep their box (their translation drawn in it, smaller where it must be) and the
    alignment their lines gave; those before them were laid out as ever."""
    monkeypatch.setattr(pdf_boxes, "LOOK", 0)
    doc = pdf_file.extract(piled_page(300))
    blocks, (page,) = doc.state[1], doc.state[2]
    assert {b.align for b in blocks} == {"left"}
    rooms = pdf_file._page_rooms(blocks, page)
    crowded = [r == [b.box] for b, r in zip(blocks, rooms, strict=True)]
    first = crowded.index(True)
    assert first > 0 and all(crowded[first:])
    assert rooms[:first] == [all_pairs_rooms(b, page, [o.box for o in blocks if o is not b])
                             for b in blocks[:first]]
    out = pdf_file.rebuild(doc, [s.upper() for s in doc.segments])
    assert len(PdfReader(io.BytesIO(out)).pages) == 1


def test_the_page_s_pitch_for_a_size_is_the_widest_of_its_boxes_in_about_that_size():
    """A box of two lines is judged by the widest usual pitch of the page's boxes in about
    its size: found in a range of the pitches sorted by size, it is the one every pitch of the
    page looked at finds."""
    rnd = random.Random(4)
    for _ in range(300):
        boxes = []
        for _ in range(rnd.randrange(0, 40)):
            size, base = rnd.choice([8.0, 9.0, 10.0, 11.0, rnd.uniform(4, 30)]), 700.0
            looks = []
            for _ in range(rnd.randrange(1, 6)):
                looks.append(pdf_file._Look(base=base, size=size, bold=0.0, start=0, end=1)
                             if rnd.random() < 0.9 else None)
                base -= size * rnd.choice([1.2, 1.2, rnd.uniform(0.3, 3)])
            boxes.append(looks)
        pitches = [p for p in (pdf_file._usual_pitch(pdf_file._steps(
            [x for x in looks if x is not None])) for looks in boxes) if p is not None]
        pitch = pdf_file._page_pitch(boxes)
        for size in [s for s, _ in pitches] + [rnd.uniform(3, 35) for _ in range(20)]:
            assert pitch(size) == max((p for s, p in pitches if not pdf_file._resized(s, size)),
                                      default=None)


def test_a_page_past_the_segment_limit_is_refused_before_its_layout_is_worked_out(monkeypatch):
    """Its segments are counted once its blocks are read, before what lies around them is
    (the message as ever: all the page's segments)."""
    laid_out = []
    space = pdf_file._page_space
    monkeypatch.setattr(pdf_file, "_page_space", lambda *a: laid_out.append(1) or space(*a))
    with pytest.raises(DocumentTooLarge, match="at least 300 segments; the limit is 100"):
        pdf_file.extract(grid_page(300), Limits(max_segments=100))
    assert not laid_out
