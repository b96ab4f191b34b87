"""app.documents.pdf_lines groups a page's lines into text boxes as pdfminer does (the same
boxes, in the same order, each with its lines in the same order), without copying a box's
lines into each box it is merged into, and within a bound on what the neighbour searches
look at."""

from __future__ import annotations

import random

from pdfminer.layout import LAParams, LTLayoutContainer, LTTextLineHorizontal

from app.documents import pdf_lines

PAGE = (0, 0, 600, 800)


def _line(x0: float, y0: float, width: float, height: float) -> LTTextLineHorizontal:
    line = LTTextLineHorizontal(0.1)
    line.set_bbox((x0, y0, x0 + width, y0 + height))
    return line


def _layout(rng: random.Random) -> list[LTTextLineHorizontal]:
    """Lines in rows and columns, some overlapping, some of one height and aligned, some of
    no width (their own search misses them), some off the page."""
    lines = []
    for _ in range(rng.randint(1, 60)):
        kind = rng.random()
        height = rng.choice([8, 10, 10, 10, 12, 20])
        x = rng.choice([20, 20, 40, 300, rng.uniform(0, 580)])
        y = rng.choice([rng.randrange(0, 800, 12), rng.uniform(0, 790)])
        width = rng.choice([50, 120, 200, rng.uniform(1, 300)])
        if kind < 0.08:
            width = 0
        elif kind < 0.12:
            x, y = rng.choice([(-400, y), (x, 900)])
        elif kind < 0.3 and lines:  # on or near another line
            other = rng.choice(lines)
            x, y = other.x0 + rng.choice([0, 0.5, 3]), other.y0 + rng.choice([0, 0.5, 11])
        lines.append(_line(x, y, width, height))
    return lines


def _shape(boxes) -> list[tuple[str, list[int]]]:
    return [(type(b).__name__, [id(line) for line in b]) for b in boxes]


def test_the_boxes_are_pdfminers():
    rng = random.Random(3)
    params = LAParams()
    twice = 0
    for _ in range(3000):
        lines = _layout(rng)
        theirs = _shape(LTLayoutContainer(PAGE).group_textlines(params, lines))
        ours = _shape(pdf_lines.grouped(PAGE, params, lines))
        assert ours == theirs
        twice += sum(len(ids) != len(set(ids)) for _, ids in theirs) + (
            sum(len(ids) for _, ids in theirs) > len({i for _, ids in theirs for i in ids}))
    assert twice  # the layouts hold lines pdfminer leaves in two boxes


def test_each_line_is_placed_a_bounded_number_of_times(monkeypatch):
    """Lines that all reach each other (each a little below the last): pdfminer copied the
    growing box into each new one, the square of the lines; here a line is appended as
    itself when its turn comes, when it is first found, and when it leads a box that is
    merged (each box is merged once): three times at most."""
    appended = []
    append = pdf_lines._Boxes._append
    monkeypatch.setattr(pdf_lines._Boxes, "_append",
                        lambda self, box, line: appended.append(line) or append(self, box, line))
    n = 3000
    lines = [_line(20, 700 - k * 0.2, 200, 10) for k in range(n)]
    boxes = list(pdf_lines.grouped((0, 0, 600, 800), LAParams(), lines, work=10**9))
    assert len(boxes) == 1 and len(list(boxes[0])) == n
    assert len(appended) <= 3 * n, len(appended)


def test_a_pile_of_lines_stops_looking_once_the_bound_is_spent(monkeypatch):
    """Thousands of lines on one spot: each search looks through all of them. Once the
    bound is spent no line searches; each line left keeps its box or has one of its own."""
    searched = []
    neighbours = pdf_lines._neighbours
    monkeypatch.setattr(pdf_lines, "_neighbours",
                        lambda line, *args: searched.append(line) or neighbours(line, *args))
    n = 1000
    lines = [_line(100 + k % 7 * 30, 400, 80 + k % 5 * 40, 10 + k % 3) for k in range(n)]
    boxes = list(pdf_lines.grouped(PAGE, LAParams(), lines, work=50 * n))
    assert len(searched) <= 51, len(searched)  # each search looks at all n lines
    assert sorted(id(line) for b in boxes for line in b) == sorted(map(id, lines))
    searched.clear()
    assert _shape(pdf_lines.grouped(PAGE, LAParams(), lines, work=10**9)) == _shape(
        LTLayoutContainer(PAGE).group_textlines(LAParams(), lines))
    assert len(searched) == n


def test_a_page_of_strings_piled_in_rows_is_read_within_the_bound(monkeypatch):
    """A page of short strings drawn a little apart in rows that overlap (pdfminer's grouping
    took about a minute for a few thousand): the reader groups its lines here, its searches
    stop at the page's bound, and every string is read."""
    from app.documents import pdf_file
    from bench.pdf_hostile import rows_page

    looked = []
    neighbours = pdf_lines._neighbours

    def counted(line, plane, ratio, budget):
        found, left = neighbours(line, plane, ratio, budget)
        looked.append(budget - left)
        return found, left

    monkeypatch.setattr(pdf_lines, "_neighbours", counted)
    monkeypatch.setattr(pdf_lines, "_WORK_FLOOR", 20_000)
    monkeypatch.setattr(pdf_lines, "_WORK_PER_LINE", 4)
    n = 1500
    doc = pdf_file.extract(rows_page(n))
    read = sorted("".join(doc.segments).replace(" ", ""))  # (the strings overlap: jumbled)
    assert read == sorted("".join(f"word{i}" for i in range(n)))
    assert looked and sum(looked) <= 20_000 + max(looked), sum(looked)


def test_a_pdfminer_whose_plane_is_built_otherwise_groups_lines_its_own_way(monkeypatch):
    from pdfminer.layout import LTPage

    lines = [_line(20, 700 - k * 12, 200, 10) for k in range(5)]
    page = pdf_lines._Page(1, PAGE)
    assert _shape(page.group_textlines(LAParams(), lines)) == _shape(
        LTPage(1, PAGE).group_textlines(LAParams(), lines))
    called = []
    monkeypatch.setattr(pdf_lines, "grouped", lambda *args: called.append(1) or iter(()))
    list(page.group_textlines(LAParams(), lines))
    monkeypatch.setattr(pdf_lines, "_PLANE_READABLE", False)
    assert _shape(page.group_textlines(LAParams(), lines)) == _shape(
        LTPage(1, PAGE).group_textlines(LAParams(), lines))
    assert called == [1]
