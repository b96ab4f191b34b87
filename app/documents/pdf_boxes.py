"""The boxes of a PDF page (x0, y0, x1, y1, as columns: see pdf_file._columns) and the
questions its layout asks of them, each answered without comparing every box with every
other: a page of tens of thousands of strings, or of strings all drawn on one spot, would
otherwise cost time with the square of its boxes.

`Grid` files the boxes by the cells of a grid they overlap and finds those that may meet a
rectangle. What a page's questions look through in all is bounded in proportion to its boxes:
past that (a crowd, each question finding thousands), a question is told `Crowded` rather
than look, and the caller decides without the boxes. `held` finds which graphics lower than
all of a page's text hold a text box."""

from __future__ import annotations

import math
from itertools import chain

import numpy as np

# what a page's questions may look through in all: this many boxes, and this many more for
# each of its boxes (a real page's questions look through far fewer: a block's neighbours
# are few, each one looked at again by a few questions of a few blocks)
LOOK = 1_000_000
LOOK_PER_BOX = 100
# the most cells a box is filed in: a larger one (a background, a frame, a long rule) is
# filed apart and looked at by every question, so filing a page costs in proportion to it
SPREAD = 16


class Crowded(Exception):  # noqa: N818 (a condition, not a failure)
    """The page's questions have looked through as many boxes as they may."""


class Grid:
    """The boxes, filed by the cells they overlap of a grid over their extent within `extent`
    (the page's crop box), its cells about as many as the boxes and about as wide as they are
    high; a box past the grid counts in the cells at its edge, and one over more than SPREAD
    cells, or not of finite numbers, is filed apart."""

    def __init__(self, boxes: np.ndarray, extent: tuple[float, float, float, float]) -> None:
        n = boxes.shape[1]
        finite = np.isfinite(boxes).all(axis=0)
        x0, y0, x1, y1 = extent
        if finite.any():  # (where the boxes are: a page's text may fill a corner of it)
            x0, y0 = np.maximum((x0, y0), boxes[:2, finite].min(axis=1)).tolist()
            x1, y1 = np.minimum((x1, y1), boxes[2:, finite].max(axis=1)).tolist()
        width, height = (d if math.isfinite(d) and d > 0 else 0.0 for d in (x1 - x0, y1 - y0))
        columns = 1 if not width else n if not height else round(
            min(n, math.sqrt(n * width / height)))
        columns = max(1, columns)
        self.shape = (columns, max(1, min(n, round(n / columns))))
        self.origin = (x0, y0)
        # (cells per point of the page, 0 where the grid is one cell that way)
        self.scale = (columns / width if width else 0.0,
                      self.shape[1] / height if height else 0.0)
        spans = [self._cells(boxes[k], k % 2) for k in range(4)]  # c0, r0, c1, r1
        apart = ((spans[2] - spans[0] + 1) * (spans[3] - spans[1] + 1) > SPREAD) | ~finite
        self.large = np.flatnonzero(apart).tolist()
        self.cells: list[list[int]] = [[] for _ in range(columns * self.shape[1])]
        filing = np.flatnonzero(~apart)
        for i, c0, r0, c1, r1 in zip(filing.tolist(), *(a[filing].tolist() for a in spans),
                                     strict=True):
            for row in range(r0 * columns, r1 * columns + 1, columns):
                for cell in range(row + c0, row + c1 + 1):
                    self.cells[cell].append(i)
        counts = np.array([len(cell) for cell in self.cells]).reshape(self.shape[::-1])
        # boxes filed in the cells up to each row and column: a rectangle's count at once
        filed = np.zeros((self.shape[1] + 1, columns + 1), dtype=np.int64)
        filed[1:, 1:] = counts.cumsum(axis=0).cumsum(axis=1)
        self.filed = filed.tolist()
        self.left = LOOK + LOOK_PER_BOX * n  # what the questions may still look through

    def _span(self, low: float, high: float, axis: int) -> tuple[int, int]:
        """The first and last cell along `axis` (0: x, 1: y) of the span from low to high
        (either way round; NaN: the first cell)."""
        origin, scale, last = self.origin[axis], self.scale[axis], self.shape[axis] - 1
        a, b = (min(low, high) - origin) * scale, (max(low, high) - origin) * scale
        return (0 if not a > 0 else last if a >= last else int(a),
                0 if not b > 0 else last if b >= last else int(b))

    def _cells(self, v: np.ndarray, axis: int) -> np.ndarray:
        """The cell along `axis` of each of v, worked out as _span does."""
        v = (v - self.origin[axis]) * self.scale[axis]
        return np.clip(np.floor(np.nan_to_num(v, nan=0.0)), 0, self.shape[axis] - 1).astype(int)

    def near(self, x0: float, y0: float, x1: float, y1: float) -> list[int]:
        """The boxes that may meet the rectangle (every one that does), in their order;
        Crowded where looking through them would pass what the page's questions may."""
        c0, c1 = self._span(x0, x1, 0)
        r0, r1 = self._span(y0, y1, 1)
        filed = self.filed
        count = (filed[r1 + 1][c1 + 1] - filed[r0][c1 + 1] - filed[r1 + 1][c0] + filed[r0][c0]
                 + len(self.large))
        if count > self.left:
            raise Crowded
        self.left -= count
        side, cells = self.shape[0], self.cells
        found = set(self.large)
        for row in range(r0 * side, r1 * side + 1, side):
            found.update(chain.from_iterable(cells[row + c0:row + c1 + 1]))
        return sorted(found)


def held(graphics: np.ndarray, texts: np.ndarray, slack: float = 1.0) -> np.ndarray:
    """For each graphic whose bottom is lower than every text's, whether a text lies inside
    it, as pdf_file._arounds(graphic, text) tells (False for the others: lying no lower than
    some text, a graphic cannot be the lowest thing on the page, which is all this is asked
    for). A text lies inside such a graphic where its left edge (plus slack) is right of the
    graphic's, its right edge and top (less slack) left of and under the graphic's (its bottom
    is above the graphic's already): the graphics are taken by their tops, upwards, and the
    texts whose tops are under the graphic's kept in a Fenwick tree over the order of their
    left edges, each place holding the lowest right edge among them."""
    out = np.zeros(graphics.shape[1], dtype=bool)
    texts = texts[:, ~np.isnan(texts).any(axis=0)]  # (nothing lies inside a box of NaN)
    if not texts.shape[1]:
        return out
    low = np.flatnonzero((graphics[1] < texts[1].min()) & ~np.isnan(graphics).any(axis=0))
    if not len(low):
        return out
    lefts, rights, tops = texts[0] + slack, texts[2] - slack, texts[3] - slack
    order = np.argsort(-lefts, kind="stable")  # the rightmost left edge first
    place = np.empty(len(order), dtype=int)
    place[order] = np.arange(1, len(order) + 1)
    ascending = -lefts[order]
    tree = [math.inf] * (len(order) + 1)
    rising = np.argsort(tops, kind="stable").tolist()
    tops, rights, place = tops.tolist(), rights.tolist(), place.tolist()
    k = 0
    for g in low[np.argsort(graphics[3, low], kind="stable")].tolist():
        gx0, _, gx1, gy1 = graphics[:, g].tolist()
        while k < len(rising) and tops[rising[k]] <= gy1:
            t, k = rising[k], k + 1
            i = place[t]
            while i < len(tree):
                tree[i] = min(tree[i], rights[t])
                i += i & -i
        i, lowest = int(np.searchsorted(ascending, -gx0, side="right")), math.inf
        while i > 0:  # among the texts whose left edges are right of the graphic's
            lowest = min(lowest, tree[i])
            i -= i & -i
        out[g] = lowest <= gx1
    return out
