"""app.documents.pdf_boxes: the grid finds every box that meets a rectangle (boxes past the
page, large ones, ones of NaN or infinity among them) and tells a crowd once a page's
questions have looked through what they may; `held` finds the graphics holding text that
every graphic compared with every text finds."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from app.documents import pdf_boxes
from app.documents.pdf_boxes import Crowded, Grid, held


def random_boxes(rnd: random.Random, n: int, whole: bool = False) -> list[tuple[float, ...]]:
    out = []
    for _ in range(n):
        x, y = rnd.uniform(-50, 650), rnd.uniform(-50, 850)
        w, h = rnd.choice([0.0, 0.4, rnd.uniform(1, 60), rnd.uniform(100, 800)]), rnd.uniform(0, 40)
        box = (x, y, x + w, y + h)
        out.append(tuple(map(round, box)) if whole else box)
    return out


def meets(box, rect) -> bool:
    return box[0] <= rect[2] and box[2] >= rect[0] and box[1] <= rect[3] and box[3] >= rect[1]


def test_the_grid_finds_every_box_that_meets_a_rectangle():
    rnd = random.Random(1)
    for n in (0, 1, 7, 300):
        boxes = random_boxes(rnd, n)
        if n > 1:
            boxes[0] = (math.nan, 1.0, 2.0, 3.0)
            boxes[1] = (-math.inf, 10.0, math.inf, 12.0)
        grid = Grid(np.array(boxes, dtype=float).reshape(-1, 4).T, (0.0, 0.0, 612.0, 792.0))
        for _ in range(200):
            x0, x1 = sorted(rnd.uniform(-100, 700) for _ in range(2))
            y0, y1 = sorted(rnd.uniform(-100, 900) for _ in range(2))
            found = grid.near(x0, y0, x1, y1)
            assert found == sorted(set(found))
            assert {k for k, b in enumerate(boxes) if meets(b, (x0, y0, x1, y1))} <= set(found)
            assert grid.near(x1, y1, x0, y0) == found  # (corners either way round)


def test_the_grid_files_a_page_s_boxes_in_proportion_to_them():
    # a thousand full-width rules and a thousand small boxes: the rules are filed apart
    rnd = random.Random(2)
    boxes = random_boxes(rnd, 1000) + [(0.0, y, 612.0, y + 0.5) for y in range(1000)]
    grid = Grid(np.array(boxes).T, (0.0, 0.0, 612.0, 792.0))
    assert sum(map(len, grid.cells)) <= pdf_boxes.SPREAD * len(boxes)
    assert len(grid.cells) <= len(boxes)


def test_a_page_s_questions_look_through_as_many_boxes_as_they_may_then_hear_it_is_crowded(
        monkeypatch):
    monkeypatch.setattr(pdf_boxes, "LOOK", 0)
    monkeypatch.setattr(pdf_boxes, "LOOK_PER_BOX", 2)
    boxes = np.array([(100.0, 100.0, 140.0, 110.0)] * 50 + [(500.0, 500.0, 540.0, 510.0)]).T
    grid = Grid(boxes, (0.0, 0.0, 600.0, 600.0))
    assert grid.near(99, 99, 101, 101) == list(range(50))
    assert grid.near(99, 99, 101, 101) == list(range(50))
    with pytest.raises(Crowded):  # 102 in all: a third look at the pile would pass it
        grid.near(99, 99, 101, 101)
    assert grid.near(499, 499, 501, 501) == [50]  # a question that looks at little still may


def test_the_graphics_holding_text_are_those_every_pair_finds():
    rnd = random.Random(3)
    for _ in range(200):
        whole = rnd.random() < 0.5  # (whole numbers: boxes a point's slack apart)
        texts = random_boxes(rnd, rnd.randrange(0, 30), whole)
        graphics = random_boxes(rnd, rnd.randrange(0, 30), whole)
        for text in rnd.sample(texts, len(texts) // 3):  # frames around some, below them all
            graphics.append((text[0] - rnd.choice([-1, 0, 1, 2]), -60.0,
                             text[2] + rnd.choice([-1, 0, 1, 2]), text[3] + rnd.choice([-1, 1])))
        if rnd.random() < 0.2:
            texts.append((math.nan, 0.0, 1.0, 1.0))
            graphics.append((0.0, -100.0, math.nan, 900.0))
        got = held(np.array(graphics, dtype=float).reshape(-1, 4).T,
                   np.array(texts, dtype=float).reshape(-1, 4).T)
        lowest = min((t[1] for t in texts if not math.isnan(t[1])), default=math.inf)
        want = [g[1] < lowest and any(
            g[0] <= t[0] + 1 and g[1] <= t[1] + 1 and g[2] >= t[2] - 1 and g[3] >= t[3] - 1
            for t in texts) for g in graphics]
        assert got.tolist() == want
