"""`nmt translate-file IN -t de [-s en] [-o OUT]`: a document through a local model.

The bundle is the one under --bundles (default ./bundles) whose pair matches -s/-t, or --bundle.
OUT defaults to IN with the target language before the extension (report.docx ->
report.de.docx). A progress bar on stderr counts sentences. `nmt translate-file` (app/cli.py)
is this command.
Standalone: `python -m app.documents.cli IN -t de`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from app.documents import FORMATS, DocumentError, format_of, translate_document
from app.text.segment import fits_engine


def add_parser(commands) -> argparse.ArgumentParser:
    kinds = " ".join(f".{ext}" for ext in FORMATS)
    p = commands.add_parser(
        "translate-file",
        help=f"translate a document ({kinds})",
        description=f"Translate a document keeping its structure and formatting ({kinds}).",
    )
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", type=Path, metavar="IN", help="the document")
    p.add_argument("-t", "--target", required=True, help="target language, e.g. de")
    p.add_argument("-s", "--source", help="source language (default: the bundle's)")
    p.add_argument("-o", "--output", type=Path, help="default: IN with .<target> before its suffix")
    p.add_argument("--bundle", type=Path, help="bundle directory (default: found by -s/-t)")
    p.add_argument("--bundles", type=Path, default=Path("bundles"), help="where to look")
    p.add_argument("--variant", help="precision variant, e.g. fp32 or int8")
    p.add_argument("--threads", type=int, default=0, help="intra-op threads (0 = ORT default)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--no-progress", action="store_true")


def output_path(path: Path, target: str) -> Path:
    return path.with_name(f"{path.stem}.{target}{path.suffix}")


def pick_bundle(root: Path, source: str | None, target: str) -> Path:
    """The first bundle under root translating source (any if None) into target."""
    from app.engine.bundle import BundleError, find_bundles, load_bundle

    for path in find_bundles(root):
        bundle = load_bundle(path, verify_checksums=False)
        if bundle.target_lang == target and source in (None, bundle.source_lang):
            return path
    pair = f"{source or '*'}->{target}"
    raise BundleError(f"{root.resolve()}: no bundle translates {pair}; use --bundle")


def translate_file_main(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from app.engine import BundleError, Translator

    try:
        fmt = format_of(args.input.name)
        data = args.input.read_bytes()
        translator = Translator.from_dir(
            args.bundle or pick_bundle(args.bundles, args.source, args.target),
            variant=args.variant,
            intra_threads=args.threads,
            max_batch_size=args.batch_size,
        )
    except (DocumentError, BundleError, OSError, ValueError) as exc:
        print(f"nmt translate-file: {exc}", file=sys.stderr)
        return 2
    bar = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if args.no_progress:
            return
        if bar is None:
            bar = tqdm(total=total, unit="sentence", file=sys.stderr, desc=args.input.name)
        bar.update(done - bar.n)

    def translate(texts: list[str]) -> list[str]:
        return [r.text for r in translator.translate_batch(texts)]

    try:
        out = translate_document(data, fmt, translate, progress=progress,
                                 fits=fits_engine(translator), target_lang=translator.target_lang,
                                 source_lang=translator.source_lang)
    except DocumentError as exc:
        print(f"nmt translate-file: {exc}", file=sys.stderr)
        return 2
    finally:
        if bar is not None:
            bar.close()
    target = args.output or output_path(args.input, args.target)
    target.write_bytes(out)
    print(f"{target}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nmt translate-file", description=__doc__.split("\n")[0])
    add_arguments(parser)
    return translate_file_main(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
