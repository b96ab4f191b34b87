"""python -m app.engine.kernels build [--include DIR] [--out PATH] [--no-fetch]: both native
libraries, for this machine."""

from __future__ import annotations

import subprocess
from pathlib import Path

from app.engine.kernels.builder import BuildError, build_langid
from app.engine.kernels.runtime import build, library_path


def main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m app.engine.kernels",
                                 description="Build the native libraries for this machine.")
    sub = ap.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="compile the libraries for this machine (the language "
                       "identification one first: it needs no ONNX Runtime headers)")
    b.add_argument("--include", help="the directory holding onnxruntime_c_api.h (default: "
                   "NMT_ORT_INCLUDE, the system's, or Debian's fetched into ~/.cache)")
    b.add_argument("--out", type=Path, help=f"default: {library_path()}")
    b.add_argument("--no-fetch", dest="fetch", action="store_false",
                   help="never fetch Debian's headers (fetch_headers.sh) when none are found")
    args = ap.parse_args(argv)
    try:
        print(build_langid())
        path = build(args.include, args.out, fetch=args.fetch)
    except (OSError, BuildError, subprocess.CalledProcessError) as exc:  # no compiler, no headers
        raise SystemExit(f"error: {exc}") from exc
    print(path)


if __name__ == "__main__":
    main()
