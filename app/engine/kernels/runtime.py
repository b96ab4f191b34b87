"""Whether the native libraries are there and usable here: the one place that asks.

`library()` is the ONNX Runtime custom-operator library (app/engine/kernels/*.cc),
`langid_library()` the language identification scorer (app/text/langid_score.cc); each is used
when it is built, newer than its sources and not turned off (NMT_KERNELS=off), and the engine
or the language identification falls back to its own code otherwise. `cpu_flags`,
`matmul_supported` and `amx_supported` say what this CPU runs."""

from __future__ import annotations

import functools
import logging
import os
import re
from pathlib import Path

log = logging.getLogger(__name__)

KERNELS_DIR = Path(__file__).parent
SOURCES = [KERNELS_DIR / name
           for name in ("attention.cc", "search_tail.cc", "int8_matmul.cc", "beam_walk.cc",
                        "greedy_advance.cc")]
HEADERS = [KERNELS_DIR / name for name in ("simd_exp.h", "op_status.h")]  # included
DEFAULT_LIBRARY = KERNELS_DIR / "libnmt_kernels.so"
# language identification scores for app.text.langid: a library of its own, without ONNX Runtime,
# built from the source beside its user
LANGID_SOURCE = KERNELS_DIR.parents[1] / "text" / "langid_score.cc"
LANGID_LIBRARY = LANGID_SOURCE.with_name("libnmt_langid.so")
MATMUL_FLAGS = {"avx512f", "avx512bw", "avx512_vnni"}  # what int8_matmul.cc's kernel runs on


def library_path() -> Path:
    """Where the library is built and looked for: NMT_KERNELS_LIB, else next to the source."""
    return Path(os.environ.get("NMT_KERNELS_LIB") or DEFAULT_LIBRARY)



# the C API version a library asks for is its headers' (ORT_API_VERSION N: onnxruntime 1.N on),
# written next to it at build time
API_VERSION = re.compile(r"#define ORT_API_VERSION (\d+)")


def turned_off() -> bool:
    """NMT_KERNELS=off (or 0, false, no): ONNX Runtime's kernels and py3langid's scoring."""
    return os.environ.get("NMT_KERNELS", "on").lower() in ("off", "0", "false", "no")




def _current(path: Path, sources: list[Path]) -> bool:
    """path is built and not older than any of its sources (else a warning says so)."""
    if not path.is_file():
        return False
    if any(source.stat().st_mtime > path.stat().st_mtime for source in sources
           if source.is_file()):
        log.warning("%s is older than its sources: not used (python -m app.engine.kernels "
                    "build)", path)
        return False
    return True


@functools.cache
def library() -> Path | None:
    """The built library when it is there, not turned off (NMT_KERNELS=off) and this
    onnxruntime is new enough for it, else None."""
    if turned_off():
        return None
    path = library_path()
    if not _current(path, SOURCES + HEADERS):
        return None
    import onnxruntime

    major, minor = (int(x) for x in re.findall(r"\d+", onnxruntime.__version__)[:2])
    needs = _api_version(path)
    if (major, minor) < (1, needs):
        log.warning("%s needs onnxruntime 1.%d or newer (this is %s): not used", path, needs,
                    onnxruntime.__version__)
        return None
    return path


def _api_version(path: Path) -> int:
    """The C API version the library at path was built for (1.N), from the note build wrote."""
    try:
        return int(path.with_name(path.name + ".api").read_text().strip())
    except (OSError, ValueError):
        return 999  # unknown: not used



def langid_library() -> Path | None:
    """The language identification library when it is built, current and not turned off
    (NMT_KERNELS=off), else None (app.text.langid then scores in Python)."""
    if turned_off() or not _current(LANGID_LIBRARY, [LANGID_SOURCE]):
        return None
    return LANGID_LIBRARY


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.partition(":")[2].split())



def matmul_supported() -> bool:
    """Whether this CPU runs Int8MatMul's kernel (AVX-512 with VNNI)."""
    return cpu_flags() >= MATMUL_FLAGS


@functools.cache
def amx_supported() -> bool:
    """Whether Int8MatMul's kernel runs calls of many rows on AMX in this process: the CPU has
    it and Linux grants the tile state (asked of the library itself; a container's seccomp
    profile may refuse it, and the kernel then keeps to AVX-512 VNNI)."""
    path = library()
    if path is None or not matmul_supported() or not cpu_flags() >= {"amx_tile", "amx_int8"}:
        return False
    import ctypes

    try:
        return bool(ctypes.CDLL(str(path)).nmt_amx_usable())
    except (OSError, AttributeError):
        return False
