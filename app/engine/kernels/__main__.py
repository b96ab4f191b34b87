"""python -m app.engine.kernels build [--include DIR] [--out PATH]: both native libraries."""

from __future__ import annotations

import subprocess
from pathlib import Path

from app.engine.kernels.builder import build, build_langid
from app.engine.kernels.runtime import library_path


def main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m app.engine.kernels",
                                 description="Build the native libraries for this machine.")
    sub = ap.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="compile the libraries for this machine (the language "
                       "identification one first: it needs no ONNX Runtime headers)")
    b.add_argument("--include", help="the directory holding onnxruntime_c_api.h")
    b.add_argument("--out", type=Path, help=f"default: {library_path()}")
    args = ap.parse_args(argv)
    try:
        print(build_langid())
        path = build(args.include, args.out)
    except (FileNotFoundError, subprocess.CalledProcessError) as exc:
        raise SystemExit(f"error: {exc}") from exc
    print(path)


if __name__ == "__main__":
    main()
