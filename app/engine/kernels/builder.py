"""Building the native libraries on the machine that runs them: the ONNX Runtime kernels (from
their sources here and ONNX Runtime's C API headers) and the language identification scorer
(app/text/langid_score.cc, which needs no ONNX Runtime headers). `python -m app.engine.kernels
build` runs both."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from app.engine.kernels import runtime
from app.engine.kernels.runtime import LANGID_LIBRARY, LANGID_SOURCE, SOURCES

HEADER_DIRS = ("/usr/include/onnxruntime", "/usr/local/include/onnxruntime")
# the C API version a library asks for is its headers' (ORT_API_VERSION N: onnxruntime 1.N on),
# written next to it at build time
API_VERSION = re.compile(r"#define ORT_API_VERSION (\d+)")


def find_headers(include: str | Path | None = None) -> Path:
    """The directory holding onnxruntime_c_api.h: include, NMT_ORT_INCLUDE, or a system one."""
    for candidate in (include, os.environ.get("NMT_ORT_INCLUDE"), *HEADER_DIRS):
        if candidate and (Path(candidate) / "onnxruntime_cxx_api.h").is_file():
            return Path(candidate)
    raise FileNotFoundError(
        "ONNX Runtime's C API headers (onnxruntime_c_api.h, onnxruntime_cxx_api.h) were not "
        f"found in {', '.join(str(p) for p in (include, *HEADER_DIRS) if p)}: install "
        "libonnxruntime-dev (Debian trixie and later) or pass --include DIR")



def _compiler(compiler: str | None) -> str:
    cxx = compiler or os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        raise FileNotFoundError("no C++ compiler (g++) found")
    return cxx


def build_langid(out: Path | None = None, compiler: str | None = None) -> Path:
    """Compile the language identification library (it needs no ONNX Runtime headers)."""
    out = out or LANGID_LIBRARY
    tmp = out.with_suffix(".tmp.so")
    subprocess.run([_compiler(compiler), "-O2", "-shared", "-fPIC", "-fvisibility=hidden",
                    str(LANGID_SOURCE), "-o", str(tmp)], check=True)
    tmp.replace(out)
    return out


def build(include: str | Path | None = None, out: Path | None = None,
          compiler: str | None = None) -> Path:
    """Compile the library for this CPU (AVX2 + FMA where it has them) and return its path."""
    headers = find_headers(include)
    cxx = _compiler(compiler)
    out = out or runtime.library_path()
    flags = ["-O3", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden"]
    if {"avx2", "fma"} <= runtime.cpu_flags():
        flags += ["-mavx2", "-mfma"]
    found = API_VERSION.search((headers / "onnxruntime_c_api.h").read_text(errors="replace"))
    if not found:
        raise FileNotFoundError(f"no ORT_API_VERSION in {headers / 'onnxruntime_c_api.h'}")
    tmp = out.with_suffix(".tmp.so")
    subprocess.run([cxx, *flags, f"-I{headers}", *map(str, SOURCES), "-o", str(tmp)],
                   check=True)
    out.with_name(out.name + ".api").write_text(found.group(1) + "\n")
    tmp.replace(out)  # whole or not at all: a running process may have the old one loaded
    runtime.library.cache_clear()
    runtime.amx_supported.cache_clear()
    return out
