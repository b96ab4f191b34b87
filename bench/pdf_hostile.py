"""PDF pages made to be hard to lay out: the CPU seconds and peak memory of reading
(`pdf_file.extract`) and rebuilding (`pdf_file.rebuild`, each segment upper-cased) such a page
with the code of a git revision (--base) and the working tree's, in one run, and their ratios
(base / now: above 1, now is cheaper).

The pages, each of --sizes strings:
- grid: one-line strings ("word<i>", Helvetica 4 pt) in rows of 60, 48 apart, the rows 12
  apart (the page as tall as they need: lines that overlap, pdfminer merges into one box), a
  small rectangle around every fourth;
- piled: each string in a form XObject of its own, all drawn on one spot (pdfminer lays out
  each form's text apart: a block each), a rectangle around each;
- rows: strings ("word<i>", Helvetica 10 pt) each drawn half a point right of the last, in
  rows of 500 14 points apart: lines that all reach each other, which pdfminer's grouping
  into boxes merged with the square of their number (app/documents/pdf_lines.py).

Seconds are the best of --repeat runs of each code, alternating; peak memory (tracemalloc)
is measured in a run of its own. `same` says whether both codes read the same blocks and wrote
the same bytes (on a piled page or rows of many strings they need not: the code may give up
looking through a crowd).

    python -m bench.pdf_hostile --sizes 1000 4000 16000
    python -m bench.pdf_hostile --pages grid --sizes 1000 --base main --repeat 1
"""

from __future__ import annotations

import argparse
import gc
import io
import math
import sys
import tracemalloc
from types import ModuleType

from reportlab.pdfgen import canvas

from app.documents import pdf_file
from bench.pdf_rebuild import base_module, cpu, state

COLUMNS = 60


def _page(size: tuple[float, float], draw) -> bytes:
    """A one-page PDF of that size, drawn by draw(canvas)."""
    out = io.BytesIO()
    c = canvas.Canvas(out, pagesize=size)
    draw(c)
    c.showPage()
    c.save()
    return out.getvalue()


def grid_page(n: int) -> bytes:
    rows = -(-n // COLUMNS)
    height = max(3000, 12 * rows + 40)

    def draw(c: canvas.Canvas) -> None:
        c.setFont("Helvetica", 4)
        for i in range(n):
            x, y = 20 + (i % COLUMNS) * 48, height - 20 - (i // COLUMNS) * 12
            c.drawString(x, y, f"word{i}")
            if i % 4 == 0:
                c.rect(x - 2, y - 3, 40, 10)

    return _page((3000, height), draw)


def piled_page(n: int) -> bytes:
    def draw(c: canvas.Canvas) -> None:
        for i in range(n):
            c.beginForm(f"f{i}")
            c.setFont("Helvetica", 10)
            c.drawString(100 + (i % 7) * 0.3, 300, f"word{i}")
            c.endForm()
            c.doForm(f"f{i}")
            c.rect(98, 296 + (i % 5) * 0.1, 60, 16)

    return _page((600, 600), draw)


def rows_page(n: int) -> bytes:
    def draw(c: canvas.Canvas) -> None:
        c.setFont("Helvetica", 10)
        for i in range(n):
            c.drawString(20 + (i % 500) * 0.5, 780 - (i // 500) * 14 % 760, f"word{i}")

    return _page((600, 800), draw)


PAGES = {"grid": grid_page, "piled": piled_page, "rows": rows_page}


def peak(call) -> float:
    """The most memory (MB, as tracemalloc counts it: numpy's arrays too) call() held."""
    gc.collect()
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()


def measure(data: bytes, codes: dict[str, ModuleType], repeat: int) -> dict:
    """Each code's best CPU seconds and peak memory reading and rebuilding the page, and
    whether the codes read and wrote the same."""
    best = {(name, step): math.inf for name in codes for step in ("extract", "rebuild")}
    results = {}
    for run in range(repeat):
        for name in list(codes) if run % 2 == 0 else list(codes)[::-1]:
            code = codes[name]
            doc, seconds = cpu(lambda code=code: code.extract(data))
            best[name, "extract"] = min(best[name, "extract"], seconds)
            texts = [s.upper() for s in doc.segments]
            out, seconds = cpu(lambda code=code, doc=doc, t=texts: code.rebuild(doc, t))
            best[name, "rebuild"] = min(best[name, "rebuild"], seconds)
            results[name] = (state(doc), out)
    memory = {}
    for name, code in codes.items():
        memory[name, "extract"] = peak(lambda code=code: code.extract(data))
        doc = code.extract(data)
        texts = [s.upper() for s in doc.segments]
        memory[name, "rebuild"] = peak(lambda code=code, doc=doc, t=texts: code.rebuild(doc, t))
    same = len({repr(r) for r in results.values()}) == 1
    return {"best": best, "memory": memory, "same": same,
            "segments": len(next(iter(results.values()))[0][0])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.pdf_hostile",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--pages", nargs="+", choices=list(PAGES), default=list(PAGES))
    ap.add_argument("--sizes", nargs="+", type=int, default=[1000, 4000, 16000])
    ap.add_argument("--base", default="main", help="git revision of the code to compare with")
    ap.add_argument("--base-up-to", type=int, default=16000,
                    help="the largest size the base code runs at (it may take minutes)")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args(argv)
    base = base_module(args.base)
    print(f"{'page':6} {'strings':>7} {'segs':>7} | {'extract base':>12} {'now':>6} {'ratio':>6} "
          f"| {'rebuild base':>12} {'now':>6} {'ratio':>6} | {'MB extract base':>15} {'now':>5} "
          f"| {'MB rebuild base':>15} {'now':>5} | same")
    for kind in args.pages:
        for n in args.sizes:
            codes = {"base": base, "now": pdf_file} if n <= args.base_up_to else {"now": pdf_file}
            r = measure(PAGES[kind](n), codes, args.repeat)
            cells = []
            for step in ("extract", "rebuild"):
                now = r["best"]["now", step]
                was = r["best"].get(("base", step), math.inf)
                cells.append(f"{was:12.2f} {now:6.2f} {was / now:6.1f}" if was < math.inf
                             else f"{'-':>12} {now:6.2f} {'-':>6}")
            for step in ("extract", "rebuild"):
                was = r["memory"].get(("base", step))
                cells.append(f"{was:15.1f} {r['memory']['now', step]:5.1f}" if was is not None
                             else f"{'-':>15} {r['memory']['now', step]:5.1f}")
            same = ("yes" if r["same"] else "no") if "base" in codes else "-"
            print(f"{kind:6} {n:7} {r['segments']:7} | {' | '.join(cells)} | {same}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
