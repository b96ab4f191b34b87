"""PDF reading and rebuilding: the code of a git revision (--base) against the working tree's,
on the same files in one run.

For each PDF under the folder (searched recursively, sorted): the CPU seconds of
`pdf_file.extract` and of `pdf_file.rebuild` (the fake translation of bench.documents_wild:
each word's letters reversed), the best of --repeat runs of each code, alternating, and their
ratios (base / now: above 1, now is faster). Each file is checked the same with both codes: the
same segments, the same blocks and pages (every field), and a byte-identical translated PDF
(or the same refusal, where no font here draws the fake translation); a file that differs is
named and the run exits 1. The files come from the caller; nothing is
downloaded.

    python -m bench.pdf_rebuild /tmp/pdfs
    python -m bench.pdf_rebuild /tmp/pdfs --base main --repeat 3
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib.util
import logging
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

from app.documents import DocumentError, pdf_file
from bench.documents_wild import reverse

MODULE = "app/documents/pdf_file.py"


def base_module(revision: str) -> ModuleType:
    """pdf_file as it is at `revision`, imported under another name beside today's."""
    source = subprocess.run(["git", "show", f"{revision}:{MODULE}"], check=True,
                            capture_output=True, cwd=Path(__file__).resolve().parents[1]).stdout
    folder = Path(tempfile.mkdtemp(prefix="pdf-base-"))
    path = folder / "pdf_file_base.py"
    path.write_bytes(source)
    spec = importlib.util.spec_from_file_location("pdf_file_base", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


def cpu(call):
    """(what call() returns, the CPU seconds it took)."""
    gc.collect()
    start = time.process_time()
    out = call()
    return out, time.process_time() - start


def state(doc) -> tuple:
    """A read document's segments, blocks and pages as plain tuples (the two codes' dataclasses
    are different classes)."""
    _, blocks, pages = doc.state
    return (doc.segments, [dataclasses.astuple(b) for b in blocks],
            [dataclasses.astuple(p) for p in pages])


def measure(data: bytes, codes: dict[str, ModuleType], repeat: int) -> dict:
    best = {(name, step): float("inf") for name in codes for step in ("extract", "rebuild")}
    results = {}
    for run in range(repeat):
        order = list(codes) if run % 2 == 0 else list(codes)[::-1]
        for name in order:
            code = codes[name]
            doc, seconds = cpu(lambda code=code: code.extract(data))
            best[name, "extract"] = min(best[name, "extract"], seconds)
            translations = reverse(doc.segments)
            try:
                out, seconds = cpu(lambda code=code, doc=doc, t=translations:
                                   code.rebuild(doc, t))
                best[name, "rebuild"] = min(best[name, "rebuild"], seconds)
            except DocumentError as exc:  # (a translation no font here draws: no time)
                out = f"refused: {exc}"
            results[name] = (state(doc), out)
    (read_a, out_a), (read_b, out_b) = results.values()
    return {"best": best, "same_read": read_a == read_b, "same_pdf": out_a == out_b,
            "segments": len(read_a[0]), "pages": len(read_a[2]),
            "refused": out_a if isinstance(out_a, str) else ""}


def cell(base: float, now: float) -> str:
    """Two times and their ratio, or dashes where there are none (a refused rebuild)."""
    if math.isinf(base + now) or not now:
        return f"{'-':>12} {'-':>6} {'-':>5}"
    return f"{base:12.2f} {now:6.2f} {base / now:5.2f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.pdf_rebuild",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--base", default="main", help="git revision of the code to compare with")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    # pypdf's warnings on damaged streams, the same each run; only its own, and only while this
    # runs (a test runs main in the test session's process)
    pypdf_log = logging.getLogger("pypdf")
    level = pypdf_log.level
    pypdf_log.setLevel(logging.ERROR)
    try:
        return _compare(args)
    finally:
        pypdf_log.setLevel(level)


def _compare(args: argparse.Namespace) -> int:
    codes = {"base": base_module(args.base), "now": pdf_file}
    files = sorted(args.folder.rglob("*.pdf"))
    print(f"{'file':32} {'pages':>5} {'segs':>6} | {'extract base':>12} {'now':>6} {'ratio':>5} "
          f"| {'rebuild base':>12} {'now':>6} {'ratio':>5} | same")
    differ = []
    totals = dict.fromkeys(("extract", "rebuild"), (0.0, 0.0))
    for path in files:
        r = measure(path.read_bytes(), codes, args.repeat)
        cells = []
        for step in ("extract", "rebuild"):
            base, now = r["best"]["base", step], r["best"]["now", step]
            if not math.isinf(base + now):
                totals[step] = (totals[step][0] + base, totals[step][1] + now)
            cells.append(cell(base, now))
        same = r["same_read"] and r["same_pdf"]
        if not same:
            differ.append(path.name)
        print(f"{path.name[:32]:32} {r['pages']:5} {r['segments']:6} | {cells[0]} | {cells[1]} "
              f"| {'yes' if same else 'NO: ' + ('read' if not r['same_read'] else 'pdf')}"
              f"{' ' + r['refused'][:60] if r['refused'] else ''}", flush=True)
    cells = [cell(base, now) for base, now in totals.values()]
    print(f"{'all':32} {'':5} {'':6} | {cells[0]} | {cells[1]} |")
    if differ:
        print(f"different output: {', '.join(differ)}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
