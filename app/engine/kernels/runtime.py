"""Whether the native libraries are there and usable here: the one place that asks.

`library()` is the ONNX Runtime custom-operator library (app/engine/kernels/*.cc),
`langid_library()` the language identification scorer (app/text/langid_score.cc); each is used
when it is built from these sources for a CPU like this one (its build note says so) and not
turned off (NMT_KERNELS=off), and the engine or the language identification falls back to its
own code otherwise. `cpu_flags`, `matmul_supported` and `amx_supported` say what this CPU runs;
`report` which kernels run, and why the others do not."""

from __future__ import annotations

import functools
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from app.engine.kernels.builder import (
    DEFAULT_LIBRARY,
    HEADERS,
    HOW_TO_BUILD,
    KERNELS_DIR,
    LANGID_LIBRARY,
    LANGID_SOURCE,
    SOURCES,
    compile_kernels,
    cpu_flags,
    read_note,
    sources_digest,
)

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_LIBRARY", "KERNELS_DIR", "LANGID_LIBRARY", "LANGID_SOURCE", "SOURCES",
           "KERNELS", "KernelReport", "amx_supported", "cpu_flags", "langid_library", "library",
           "build", "library_path", "library_problem", "matmul_supported", "report", "turned_off"]

MATMUL_FLAGS = {"avx512f", "avx512bw", "avx512_vnni"}  # what int8_matmul.cc's kernel runs on


def library_path() -> Path:
    """Where the library is built and looked for: NMT_KERNELS_LIB, else next to the source."""
    return Path(os.environ.get("NMT_KERNELS_LIB") or DEFAULT_LIBRARY)


def turned_off() -> bool:
    """NMT_KERNELS=off (or 0, false, no): ONNX Runtime's kernels and py3langid's scoring."""
    return os.environ.get("NMT_KERNELS", "on").lower() in ("off", "0", "false", "no")


def _unusable(path: Path, sources: list[Path]) -> str | None:
    """Why the library at path is not to be used here (None: it is): not built (with the
    reason the install noted), built from other sources, or for a CPU with features this one
    lacks (its code would stop the process on an illegal instruction)."""
    note = read_note(path)
    if not path.is_file():
        if note and note.get("error"):
            return f"not built: {note['error']}"
        return "not built"
    if note is None:  # built before build notes: its file time against its sources'
        if any(source.stat().st_mtime > path.stat().st_mtime for source in sources
               if source.is_file()):
            return "older than its sources"
        return None
    if note.get("sources") != sources_digest([s for s in sources if s.is_file()]):
        return "built from other sources than these"
    missing = sorted(set(note.get("cpu", [])) - cpu_flags())
    if missing:
        return f"built for a CPU with {', '.join(missing)}, which this one lacks"
    return None


def _check(path: Path, sources: list[Path]) -> bool:
    """path is there and usable here (else a warning says why, where it was built)."""
    why = _unusable(path, sources)
    if why is not None and path.is_file():
        log.warning("%s is %s: not used (%s)", path, why, HOW_TO_BUILD)
    return why is None


def library_problem() -> str | None:
    """Why library() is None, in words (None when it is not)."""
    if turned_off():
        return "turned off (NMT_KERNELS=off)"
    path = library_path()
    why = _unusable(path, SOURCES + HEADERS)
    if why is not None:
        return why
    import onnxruntime

    major, minor = (int(x) for x in re.findall(r"\d+", onnxruntime.__version__)[:2])
    needs = _api_version(path)
    if (major, minor) < (1, needs):
        return f"needs onnxruntime 1.{needs} or newer (this is {onnxruntime.__version__})"
    return None


@functools.cache
def library() -> Path | None:
    """The built library when it is there, built from these sources for a CPU like this one,
    not turned off (NMT_KERNELS=off) and this onnxruntime is new enough for it, else None."""
    why = library_problem()
    if why is None:
        return library_path()
    if library_path().is_file() and not turned_off():
        log.warning("%s: not used, %s (%s)", library_path(), why, HOW_TO_BUILD)
    return None


def _api_version(path: Path) -> int:
    """The C API version the library at path was built for (1.N), from its build note (or the
    `.api` note of older builds)."""
    note = read_note(path)
    if note is not None and isinstance(note.get("api"), int):
        return note["api"]
    try:
        return int(path.with_name(path.name + ".api").read_text().strip())
    except (OSError, ValueError):
        return 999  # unknown: not used


def langid_library() -> Path | None:
    """The language identification library when it is built, current and not turned off
    (NMT_KERNELS=off), else None (app.text.langid then scores in Python)."""
    if turned_off() or not _check(LANGID_LIBRARY, [LANGID_SOURCE]):
        return None
    return LANGID_LIBRARY


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


# what report() names, in this order: the operators of the ONNX Runtime library (attention:
# self- and cross-attention; int8_matmul_amx: Int8MatMul's many-row calls on AMX tiles), then
# the language identification scorer
KERNELS = ("attention", "search_tail", "beam_walk", "greedy_advance", "int8_matmul",
           "int8_matmul_amx", "langid")


@dataclass(frozen=True)
class KernelReport:
    """Which of our kernels this process runs where a graph has their nodes, and why each other
    one does not: what the server logs at start, /v1/models and the nmt_kernel_active metric
    show, and `nmt doctor` prints."""

    provider: str
    library: Path | None  # the ONNX Runtime library in use, or None
    active: tuple[str, ...]
    inactive: dict[str, str] = field(default_factory=dict)  # kernel -> why not

    @property
    def missing(self) -> bool:
        """Whether the CPU provider runs ONNX Runtime's kernels where ours would run once
        built (not by a choice: NMT_KERNELS=off, another provider)."""
        return self.provider == "cpu" and self.library is None and not turned_off()

    def line(self) -> str:
        """One line for the log: what is active, why the rest is not, and how to build them
        where that is what they lack."""
        hint = f". To add ours: {HOW_TO_BUILD}" if self.missing else ""
        if not self.active:
            reasons = sorted(set(self.inactive.values()))
            return (f"kernels: none active ({'; '.join(reasons)}); ONNX Runtime's kernels "
                    f"run instead{hint}")
        by_reason: dict[str, list[str]] = {}
        for name, why in self.inactive.items():
            by_reason.setdefault(why, []).append(name)
        rest = "".join(f"; {', '.join(names)} not: {why}" for why, names in by_reason.items())
        return f"kernels: {', '.join(self.active)} active{rest}{hint}"


def report(provider: str = "cpu") -> KernelReport:
    """The kernels this process uses on `provider` (ours run on the CPU provider only)."""
    inactive: dict[str, str] = {}
    path = library()
    if provider != "cpu":
        why = f"the {provider} provider runs its own kernels"
        inactive.update(dict.fromkeys(KERNELS[:6], why))
    elif path is None:
        inactive.update(dict.fromkeys(KERNELS[:6], library_problem() or "not usable"))
    else:
        lacks = sorted(MATMUL_FLAGS - cpu_flags())
        if lacks:
            inactive["int8_matmul"] = f"this CPU lacks {', '.join(lacks)}"
            inactive["int8_matmul_amx"] = inactive["int8_matmul"]
        elif not cpu_flags() >= {"amx_tile", "amx_int8"}:
            inactive["int8_matmul_amx"] = "this CPU has no AMX"
        elif not amx_supported():
            inactive["int8_matmul_amx"] = "Linux does not grant this process AMX tiles"
    if langid_library() is None:
        inactive["langid"] = ("turned off (NMT_KERNELS=off)" if turned_off()
                              else _unusable(LANGID_LIBRARY, [LANGID_SOURCE]) or "not usable")
    return KernelReport(provider, None if provider != "cpu" else path,
                        tuple(k for k in KERNELS if k not in inactive), inactive)


def build(include: str | Path | None = None, out: Path | None = None,
          compiler: str | None = None, fetch: bool = False) -> Path:
    """builder.compile_kernels, then forget what this process knew about the library before."""
    path = compile_kernels(include, out or library_path(), compiler, fetch)
    library.cache_clear()
    amx_supported.cache_clear()
    return path
