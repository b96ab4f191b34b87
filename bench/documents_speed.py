"""Reading and writing documents of every format but PDF: the code of a git revision (--base)
against the working tree's, on the same files in one run.

For each file under the folder with an extension app.documents reads (searched recursively,
sorted; .pdf is bench.pdf_rebuild's): the CPU seconds of `app.documents.extract` and of
`app.documents.rebuild` (the fake translation of bench.documents_wild: each word's letters
reversed), the best of --repeat runs of each code, alternating, and their ratios (base / now:
above 1, now is faster). Each file is checked the same with both codes: the same segments and
a byte-identical translated file (of a zipped format, the same entries in the same order with
the same bytes: a library's writer stamps them with the time); a file that differs is named
and the run exits 1.

The base code is app/ as it is at that revision (`git archive`), imported beside today's: each
code's modules are put in sys.modules while it runs, so that what either imports as it runs
(a format's module, a helper) is its own. The files come from the caller; `--make FOLDER`
writes large generated ones first (bench.scaling's inputs at a large N: a .docx with tables,
links and footnotes, a .pptx, an .odt, an .epub, an .xliff, an .srt).

    python -m bench.documents_speed /tmp/docs --make /tmp/docs
    python -m bench.documents_speed /tmp/docs --base main --repeat 3
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import io
import math
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from types import ModuleType

from bench.documents_wild import reverse

ROOT = Path(__file__).resolve().parents[1]
SKIPPED = {"pdf"}  # bench.pdf_rebuild's


def _ours(name: str) -> bool:
    return name == "app" or name.startswith("app.")


def _loaded(fmts: list[str]) -> dict[str, ModuleType]:
    """app.documents and each format's module imported (from sys.path as it is now), and every
    module of app/ that took: a code's whole set."""
    documents = importlib.import_module("app.documents")
    for fmt in fmts:
        documents.handler(fmt)
    return {name: module for name, module in sys.modules.items() if _ours(name)}


def base_code(revision: str, fmts: list[str]) -> dict[str, ModuleType]:
    """app/ as it is at `revision`: its modules, imported from a copy of its files, with
    today's left in sys.modules afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="documents-base-"))
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "app"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    for lib in (ROOT / "app").rglob("*.so*"):  # native libraries, not in git
        target = folder / lib.relative_to(ROOT)
        if target.parent.is_dir() and not target.exists():
            shutil.copy2(lib, target)
    today = {name: sys.modules.pop(name) for name in list(sys.modules) if _ours(name)}
    sys.path.insert(0, str(folder))
    try:
        return _loaded(fmts)
    finally:
        sys.path.remove(str(folder))
        for name in [name for name in sys.modules if _ours(name)]:
            del sys.modules[name]
        sys.modules.update(today)


@contextlib.contextmanager
def running(code: dict[str, ModuleType]):
    """sys.modules holding this code's modules of app/ while the block runs."""
    before = {name: sys.modules.pop(name) for name in list(sys.modules) if _ours(name)}
    sys.modules.update(code)
    try:
        yield code["app.documents"]
    finally:
        for name in [name for name in sys.modules if _ours(name)]:
            del sys.modules[name]
        sys.modules.update(before)


def cpu(call):
    """(what call() returns, the CPU seconds it took)."""
    gc.collect()
    start = time.process_time()
    out = call()
    return out, time.process_time() - start


def comparable(data: bytes) -> object:
    """A rebuilt file as it is compared: a zip as its entries in order (names and bytes)."""
    if not data.startswith(b"PK"):
        return data
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return [(info.filename, archive.read(info)) for info in archive.infolist()]


def measure(data: bytes, fmt: str, codes: dict[str, dict], repeat: int) -> dict:
    best = {(name, step): math.inf for name in codes for step in ("extract", "rebuild")}
    results = {}
    # run 0 is not timed: odfpy declares in each file it writes every namespace any file written
    # before in the process used (a class attribute), so the first .odt written differs
    for run in range(repeat + 1):
        order = list(codes) if run % 2 == 0 else list(codes)[::-1]
        for name in order:
            with running(codes[name]) as documents:
                try:
                    doc, seconds = cpu(lambda documents=documents:
                                       documents.extract(data, fmt, documents.Limits(), "en"))
                except documents.DocumentError as exc:  # the same refusal from both, no time
                    results[name] = (f"refused: {exc}", None)
                    continue
                if run:
                    best[name, "extract"] = min(best[name, "extract"], seconds)
                translations = reverse(doc.segments)
                out, seconds = cpu(lambda documents=documents, doc=doc, t=translations:
                                   documents.rebuild(doc, t, "de"))
                if run:
                    best[name, "rebuild"] = min(best[name, "rebuild"], seconds)
            results[name] = (doc.segments, comparable(out))
    (read_a, out_a), (read_b, out_b) = results.values()
    return {"best": best, "same_read": read_a == read_b, "same_file": out_a == out_b,
            "segments": len(read_a) if isinstance(read_a, list) else 0}


def cell(base: float, now: float) -> str:
    if math.isinf(base + now):  # a refused file
        return f"{'-':>12} {'-':>6} {'-':>5}"
    ratio = f"{base / now:5.2f}" if now else f"{'-':>5}"
    return f"{base:12.3f} {now:6.3f} {ratio}"


def make(folder: Path) -> None:
    """Large generated inputs, one per zipped or structured format, written into `folder`."""
    from bench import scaling as s

    folder.mkdir(parents=True, exist_ok=True)
    body, notes = [], []
    for k in range(3000):
        body.append(f"<w:p>{s._run(f'Paragraph {k} has a ')}{s._run('bold', bold=True)}"
                    f"{s._run(' word and ')}{s._run('italic ones', italic=True)}"
                    f"{s._run('. It goes on for a while, as a page does.')}"
                    f'<w:r><w:footnoteReference w:id="{k + 1}"/></w:r></w:p>')
        notes.append(f'<w:footnote w:id="{k + 1}"><w:p><w:r><w:footnoteRef/></w:r>'
                     f"{s._run(f' Note {k} says a few words.')}</w:p></w:footnote>")
        if k % 20 == 0:
            body.append("<w:tbl>" + "".join(
                "<w:tr>" + "".join(f"<w:tc><w:p>{s._run(f'Cell {r} {c} words.')}</w:p></w:tc>"
                                   for c in range(5)) + "</w:tr>" for r in range(6))
                        + "</w:tbl>")
        if k % 7 == 0:
            body.append(f'<w:p>{s._run("see ")}<w:hyperlink r:id="rId{k}">'
                        f'{s._run(f"link {k}")}</w:hyperlink>{s._run(" and more.")}</w:p>')
    (folder / "book.docx").write_bytes(s._docx("".join(body), {"footnotes": "".join(notes)}))
    (folder / "deck.pptx").write_bytes(s.pptx_slides(1500))
    (folder / "book.odt").write_bytes(s.odt_paragraphs(8000))
    (folder / "book.epub").write_bytes(s.epub_chapters(300))
    (folder / "units.xliff").write_bytes(s.xliff_units(8000))
    (folder / "film.srt").write_bytes(s.srt_cues(8000))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.documents_speed",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--base", default="main", help="git revision of the code to compare with")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--make", type=Path, metavar="FOLDER", help="write generated inputs first")
    args = ap.parse_args(argv)
    if args.make:
        make(args.make)
    from app.documents import FORMATS

    files = sorted(p for p in args.folder.rglob("*") if p.is_file()
                   and p.suffix[1:].lower() in FORMATS and p.suffix[1:].lower() not in SKIPPED)
    fmts = sorted({p.suffix[1:].lower() for p in files})
    codes = {"base": base_code(args.base, fmts), "now": _loaded(fmts)}
    print(f"{'file':32} {'segs':>6} | {'extract base':>12} {'now':>6} {'ratio':>5} "
          f"| {'rebuild base':>12} {'now':>6} {'ratio':>5} | same")
    differ = []
    for path in files:
        r = measure(path.read_bytes(), path.suffix[1:].lower(), codes, args.repeat)
        cells = [cell(r["best"]["base", step], r["best"]["now", step])
                 for step in ("extract", "rebuild")]
        same = r["same_read"] and r["same_file"]
        if not same:
            differ.append(path.name)
        print(f"{path.name[:32]:32} {r['segments']:6} | {cells[0]} | {cells[1]} "
              f"| {'yes' if same else 'NO: ' + ('read' if not r['same_read'] else 'file')}",
              flush=True)
    if differ:
        print(f"different output: {', '.join(differ)}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
