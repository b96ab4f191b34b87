"""The `nmt` command.

nmt translate   lines in (stdin or --input), one translation per line out (stdout or --output)
nmt serve       the HTTP service (app.server, imported only when asked for)
nmt import      an Argos Translate package, a CTranslate2 model or a Transformers Marian (OPUS-MT)
                directory -> a bundle: runs `python -m export.argos` (or export.marian) in a
                child process, so the service itself never imports torch
nmt translate-file IN -t de [-o OUT]   a document, structure kept (app.documents.cli)
nmt doctor      the environment as `nmt serve` would find it: providers, kernels, threads,
                processes, models; exit 0 when it could serve (app.doctor)
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TextIO

from app.documents import cli as documents_cli

DEFAULT_BUNDLES = Path("bundles")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nmt", description="Machine translation on ONNX Runtime.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("serve", help="run the HTTP service (options: nmt serve --help)")
    commands.add_parser("doctor", help="check this environment: providers, kernels, threads, "
                        "processes, models (options: those of nmt serve)")
    commands.add_parser(
        "import", help="import an Argos package, CTranslate2 or Marian model (nmt import --help)"
    )
    t = commands.add_parser(
        "translate",
        help="translate lines of text",
        description="Translate one sentence per line: from stdin or --input, to stdout or "
        "--output. Blank lines stay blank.",
    )
    t.add_argument("--bundle", type=Path, help="bundle directory (default: first in ./bundles)")
    t.add_argument("--input", "-i", type=Path, help="input file (default: stdin)")
    t.add_argument("--output", "-o", type=Path, help="output file (default: stdout)")
    t.add_argument("--variant", help="precision variant, e.g. fp32 or int8 (default: bundle's)")
    t.add_argument("--beam-size", type=int, help="1 = greedy (default: the bundle's)")
    t.add_argument("--length-penalty", type=float, help="default: the bundle's")
    t.add_argument("--batch-size", type=int, default=32, help="lines per batch (default 32)")
    t.add_argument("--provider", choices=["cpu", "cuda"], default="cpu")
    t.add_argument("--threads", type=int, default=0, help="intra-op threads (0 = ORT default)")
    t.add_argument("--no-progress", action="store_true", help="no progress bar for --input")
    documents_cli.add_parser(commands)
    return parser


def default_bundle(root: Path = DEFAULT_BUNDLES) -> Path:
    from app.engine.bundle import BundleError, find_bundles

    found = find_bundles(root)
    if not found:
        raise BundleError(f"{root.resolve()}: no bundle found (no */manifest.json); use --bundle")
    return found[0]


def batches(lines: Iterable[str], size: int) -> Iterator[list[str]]:
    it = iter(lines)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def translate_lines(translator, lines: Iterable[str], out: TextIO, options, size: int, bar) -> int:
    """Translate lines in batches, writing one line per input line; returns the count."""
    count = 0
    for chunk in batches((line.rstrip("\r\n") for line in lines), size):
        for result in translator.translate_batch(chunk, options):
            out.write(result.text.replace("\n", " ") + "\n")
        out.flush()
        count += len(chunk)
        if bar is not None:
            bar.update(len(chunk))
    return count


def translate_main(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from tqdm import tqdm

    from app.engine import BundleError, Translator

    if args.batch_size < 1:
        print("nmt translate: --batch-size must be >= 1", file=sys.stderr)
        return 2
    try:
        translator = Translator.from_dir(
            args.bundle or default_bundle(),
            variant=args.variant,
            provider=args.provider,
            intra_threads=args.threads,
            max_batch_size=args.batch_size,
        )
        changes = {"beam_size": args.beam_size, "length_penalty": args.length_penalty}
        options = replace(
            translator.default_options, **{k: v for k, v in changes.items() if v is not None}
        )
    except (BundleError, ValueError) as exc:
        print(f"nmt translate: {exc}", file=sys.stderr)
        return 2
    source = open(args.input, encoding="utf-8") if args.input else sys.stdin  # noqa: SIM115
    target = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout  # noqa: SIM115
    bar = None
    if args.input and not args.no_progress:
        with open(args.input, encoding="utf-8") as f:
            total = sum(1 for _ in f)
        bar = tqdm(total=total, unit="line", file=sys.stderr, desc=translator.name)
    try:
        translate_lines(translator, source, target, options, args.batch_size, bar)
    finally:
        if bar is not None:
            bar.close()
        if args.input:
            source.close()
        if args.output:
            target.close()
    return 0


def serve_main(argv: list[str]) -> int:
    try:
        from app.server import serve_main as run_server
    except ImportError as exc:
        print(
            f"nmt serve: the HTTP service is not available ({exc}); "
            "install the runtime dependencies with `pip install .`",
            file=sys.stderr,
        )
        return 2
    return run_server(argv)


IMPORT_NEEDS = {"export.marian": ("torch", "transformers", "onnx"),
                "export.argos": ("torch", "onnx")}


def is_marian_dir(arg: str) -> bool:
    """Whether arg names a Transformers Marian directory (config.json with model_type marian)."""
    import json

    config = Path(arg) / "config.json"
    try:
        return json.loads(config.read_text(encoding="utf-8")).get("model_type") == "marian"
    except (OSError, ValueError):
        return False


def import_main(argv: list[str]) -> int:
    """`python -m export.marian ARGS` for a Marian directory, else `python -m export.argos
    ARGS` (Argos packages, CTranslate2 models), with this interpreter; a clear message when
    the importer's dependencies are missing."""
    marian = any(is_marian_dir(a) for a in argv if not a.startswith("-"))
    module = "export.marian" if marian else "export.argos"
    missing = [m for m in IMPORT_NEEDS[module] if importlib.util.find_spec(m) is None]
    # export.argos prints its help before it imports torch: `nmt import --help` works anywhere
    if missing and not (module == "export.argos" and {"-h", "--help"} & set(argv)):
        print(
            f"nmt import: needs {', '.join(missing)}, which this environment lacks; install "
            'them with `pip install torch==2.13.0 && pip install -e ".[train,bench]"`',
            file=sys.stderr,
        )
        return 2
    return subprocess.call([sys.executable, "-m", module, *argv])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:  # every option after `serve` belongs to the server
        return serve_main(argv[1:])
    if argv[:1] == ["import"]:  # and after `import`, to the importer
        return import_main(argv[1:])
    if argv[:1] == ["doctor"]:  # the server's options, checked rather than served
        from app.doctor import doctor_main

        return doctor_main(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command == "translate-file":
        return documents_cli.translate_file_main(args)
    return translate_main(args)


if __name__ == "__main__":
    sys.exit(main())
