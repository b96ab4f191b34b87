"""pdfminer's grouping of a page's text lines into text boxes, in time linear in the lines and
the neighbours each finds, and bounded on a page where they crowd together.

pdfminer (`LTLayoutContainer.group_textlines`) puts each line, in turn, into one new box with
its neighbours (lines of its height, aligned with it, within a line's margin above or below)
and every box they are in, copying those boxes' lines into it: a page whose lines all reach
each other (strings piled in rows, each row a line that overlaps the next) cost the square of
its lines in copies alone, a minute for a few thousand. Here a box is a linked list of its
lines, spliced into the new one, and the boxes are merged by union-find, so each line of the
page is moved a bounded number of times; the boxes and the order of their lines are pdfminer's.

Finding the neighbours looks through the page's grid cells that a line's margin touches, as
pdfminer does; where thousands of lines share the cells (all drawn on one spot), that alone
is the square of them. What the page's searches look at in all is bounded (`_WORK_FLOOR`,
`_WORK_PER_LINE`); once it is spent, each line left keeps the box it is in, or a box of its
own: a page drawn to be read does not come near the bound.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from pdfminer.converter import PDFPageAggregator
from pdfminer.layout import (
    LAParams,
    LTFigure,
    LTPage,
    LTTextBox,
    LTTextBoxHorizontal,
    LTTextBoxVertical,
    LTTextLine,
    LTTextLineHorizontal,
)
from pdfminer.utils import Plane

# grid cells' entries a page's (or a form's) neighbour searches may look at in all
_WORK_FLOOR = 200_000
_WORK_PER_LINE = 256
# the searches read pdfminer's Plane from the inside (its cells, to count them); a pdfminer
# whose Plane is built otherwise groups lines its own way
_PLANE_READABLE = hasattr(Plane, "_getrange") and hasattr(Plane((0, 0, 1, 1)), "_grid")


class Aggregator(PDFPageAggregator):
    """pdfminer's page aggregator whose pages and form XObjects group lines with `grouped`."""

    def begin_page(self, page, ctm) -> None:
        super().begin_page(page, ctm)
        item = self.cur_item
        self.cur_item = _Page(item.pageid, item.bbox, item.rotate)

    def begin_figure(self, name, bbox, matrix) -> None:
        super().begin_figure(name, bbox, matrix)
        item = self.cur_item
        figure = _Figure.__new__(_Figure)
        figure.__dict__.update(item.__dict__)  # (LTFigure works its box out from bbox, matrix)
        self.cur_item = figure


class _Grouped:
    bbox: tuple[float, float, float, float]

    def group_textlines(self, laparams: LAParams, lines: Iterable[LTTextLine]
                        ) -> Iterator[LTTextBox]:
        if not _PLANE_READABLE:
            return super().group_textlines(laparams, lines)
        return grouped(self.bbox, laparams, list(lines))


class _Page(_Grouped, LTPage):
    pass


class _Figure(_Grouped, LTFigure):
    pass


def grouped(bbox, laparams: LAParams, lines: list[LTTextLine],
            work: int | None = None) -> Iterator[LTTextBox]:
    """The text boxes `LTLayoutContainer.group_textlines` makes of `lines` in a container of
    this bbox, in its order, each line in its place in its box (a line whose own search does
    not find it, a line of no width, may end in two boxes, as there). `work`: what the
    searches may look at in all (by default, as the size of the page says)."""
    plane: Plane[LTTextLine] = Plane(bbox)
    plane.extend(lines)
    budget = work if work is not None else max(_WORK_FLOOR, _WORK_PER_LINE * len(lines))
    boxes = _Boxes()
    for line in lines:
        if budget <= 0:
            if line not in boxes.of:  # (a line already in a box stays there)
                boxes.merge(line, [], horizontal=isinstance(line, LTTextLineHorizontal))
            continue
        neighbours, budget = _neighbours(line, plane, laparams.line_margin, budget)
        budget -= boxes.merge(line, neighbours,
                              horizontal=isinstance(line, LTTextLineHorizontal))
    done = set()
    for line in lines:
        if line not in boxes.of:
            continue
        root = boxes.root(boxes.of[line])
        if root in done:
            continue
        done.add(root)
        box = LTTextBoxHorizontal() if boxes.horizontal[root] else LTTextBoxVertical()
        for member in boxes.members(root):
            box.add(member)
        if not box.is_empty():
            yield box


def _neighbours(line: LTTextLine, plane: Plane, ratio: float, budget: int
                ) -> tuple[list[LTTextLine], int]:
    """`LTTextLine.find_neighbors(plane, ratio)`, and the budget left once the cells it looks
    through are counted (Plane.find's search, each cell's entries counted)."""
    horizontal = isinstance(line, LTTextLineHorizontal)
    d = ratio * (line.height if horizontal else line.width)
    x0, y0, x1, y1 = ((line.x0, line.y0 - d, line.x1, line.y1 + d) if horizontal
                      else (line.x0 - d, line.y0, line.x1 + d, line.y1))
    found, seen = [], set()
    for cell in plane._getrange((x0, y0, x1, y1)):
        entries = plane._grid.get(cell, ())
        budget -= len(entries)
        for obj in entries:
            if obj in seen:
                continue
            seen.add(obj)
            if obj.x1 <= x0 or x1 <= obj.x0 or obj.y1 <= y0 or y1 <= obj.y0:
                continue
            found.append(obj)
    if horizontal:
        found = [obj for obj in found if isinstance(obj, LTTextLineHorizontal)
                 and line._is_same_height_as(obj, tolerance=d)
                 and (line._is_left_aligned_with(obj, tolerance=d)
                      or line._is_right_aligned_with(obj, tolerance=d)
                      or line._is_centrally_aligned_with(obj, tolerance=d))]
    else:
        found = [obj for obj in found if isinstance(obj, type(line))
                 and line._is_same_width_as(obj, tolerance=d)
                 and (line._is_lower_aligned_with(obj, tolerance=d)
                      or line._is_upper_aligned_with(obj, tolerance=d)
                      or line._is_centrally_aligned_with(obj, tolerance=d))]
    return found, budget


class _Boxes:
    """The boxes so far: each a doubly linked list of nodes (one per line, a line in two boxes
    one in each), boxes merged by union-find. `of[line]`: the box a line was last placed in,
    its node there `node_of[box, id(line)]`; a box's list is kept at its root (`root`)."""

    def __init__(self) -> None:
        self.of: dict[LTTextLine, int] = {}
        self.parent: list[int] = []
        self.horizontal: list[bool] = []
        self.first: list[int] = []  # each box's first node (-1: none)
        self.last: list[int] = []
        self.node_line: list[LTTextLine] = []
        self.next: list[int] = []
        self.prev: list[int] = []
        self.node_of: dict[tuple[int, int], int] = {}
        self.twice: set[int] = set()  # id() of the lines left in two boxes

    def root(self, box: int) -> int:
        top = box
        while self.parent[top] != top:
            top = self.parent[top]
        while self.parent[box] != top:  # path compression
            self.parent[box], box = top, self.parent[box]
        return top

    def members(self, root: int) -> Iterator[LTTextLine]:
        node = self.first[root]
        while node >= 0:
            yield self.node_line[node]
            node = self.next[node]

    def merge(self, line: LTTextLine, neighbours: list[LTTextLine], horizontal: bool) -> int:
        """pdfminer's step: a new box of the line, then each neighbour followed by the lines of
        the box it is in, each line where it first comes, those boxes merged into the new one.
        Returns the work done beyond the neighbours (a line left in two boxes costs a walk)."""
        box = len(self.parent)
        self.parent.append(box)
        self.horizontal.append(horizontal)
        self.first.append(-1)
        self.last.append(-1)
        taken = {box}  # the boxes (roots) spliced in: merged into this one already
        placed = {id(line)}  # lines placed one by one
        line_root = self.root(self.of[line]) if line in self.of else None
        self._append(box, line)
        for n in neighbours:
            root = self.root(self.of[n]) if n in self.of else None
            if id(n) not in placed and (root is None or root not in taken):
                placed.add(id(n))
                if root is not None:
                    self._unlink(n)
                self._append(box, n)
            if root is not None and root not in taken:
                taken.add(root)
                if root == line_root:
                    self._unlink(line)
                self._splice(box, root)
                self.parent[root] = box
        if line_root is not None and line_root not in taken:
            # its own search missed it (a line of no width): pdfminer leaves it in its old
            # box as well as in the new one
            self.twice.add(id(line))
        for n in (line, *neighbours):
            if id(n) in placed:
                self.of[n] = box
        return self._first_only(box) if self.twice else 0

    def _first_only(self, box: int) -> int:
        """Each line of the box once, where it first comes (pdfminer's uniq over a box that
        holds a line left in two boxes): the box's length."""
        first: dict[int, int] = {}  # id(line) -> its first node in the box
        node, length = self.first[box], 0
        while node >= 0:
            line, after, length = self.node_line[node], self.next[node], length + 1
            if id(line) in first:
                self._remove(box, node)
                if self.node_of[self.of[line], id(line)] == node:  # its node now the first
                    self.of[line] = box
                    self.node_of[box, id(line)] = first[id(line)]
            else:
                first[id(line)] = node
            node = after
        return length

    def _append(self, box: int, line: LTTextLine) -> None:
        node = len(self.node_line)
        self.node_line.append(line)
        self.next.append(-1)
        self.prev.append(self.last[box])
        if self.last[box] >= 0:
            self.next[self.last[box]] = node
        else:
            self.first[box] = node
        self.last[box] = node
        self.node_of[box, id(line)] = node

    def _unlink(self, line: LTTextLine) -> None:
        """The line's node out of the list of the box it is in (its root's)."""
        self._remove(self.root(self.of[line]), self.node_of[self.of[line], id(line)])

    def _remove(self, root: int, node: int) -> None:
        before, after = self.prev[node], self.next[node]
        if before >= 0:
            self.next[before] = after
        else:
            self.first[root] = after
        if after >= 0:
            self.prev[after] = before
        else:
            self.last[root] = before

    def _splice(self, box: int, root: int) -> None:
        """The lines of the box at `root` after those of `box`."""
        head, tail = self.first[root], self.last[root]
        if head < 0:
            return
        if self.last[box] >= 0:
            self.next[self.last[box]] = head
            self.prev[head] = self.last[box]
        else:
            self.first[box] = head
        self.last[box] = tail
