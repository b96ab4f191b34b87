"""Building the native libraries on the machine that runs them: the ONNX Runtime kernels (from
their sources here and ONNX Runtime's C API headers) and the language identification scorer
(app/text/langid_score.cc, which needs no ONNX Runtime headers). `python -m app.engine.kernels
build` runs both; so does `pip install` (setup.py's build_kernels step).

This module imports nothing but the standard library at import time: setup.py loads it by its
path, in a build environment that has neither onnxruntime nor numpy.

Each library gets a build note beside it (`<library>.json`): the C API version it asks for, a
digest of the sources it was built from and the CPU features its code needs; or, where the
install could not build it, why not. `runtime` reads the note before it uses a library."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

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
FETCH_SCRIPT = KERNELS_DIR / "fetch_headers.sh"

HEADER_DIRS = ("/usr/include/onnxruntime", "/usr/local/include/onnxruntime")
# the C API version a library asks for is its headers' (ORT_API_VERSION N: onnxruntime 1.N on)
API_VERSION = re.compile(r"#define ORT_API_VERSION (\d+)")
# compiled for the whole library where the building CPU has them (the attention and search
# tail's vector code); the AVX-512 and AMX code is in functions of their own target, called
# only where the running CPU has it
WHOLE_LIBRARY_FLAGS = {"avx2": "-mavx2", "fma": "-mfma"}
HOW_TO_BUILD = ("python -m app.engine.kernels build (needs a C++ compiler; it finds ONNX "
                "Runtime's C API headers or fetches Debian's)")


class BuildError(Exception):
    """A library could not be built here: no compiler, no headers, or the compiler failed."""


def cpu_flags() -> set[str]:
    """The CPU's feature flags as Linux lists them in /proc/cpuinfo (empty elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def sources_digest(paths: list[Path]) -> str:
    """One sha256 over the sources' names and bytes: what a build note compares, not file
    times (an installed package's files get the time they were unpacked)."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def note_path(library: Path) -> Path:
    return library.with_name(library.name + ".json")


def read_note(library: Path) -> dict | None:
    """The build note beside library, or None where there is none (or it is not JSON)."""
    try:
        note = json.loads(note_path(library).read_text())
    except (OSError, ValueError):
        return None
    return note if isinstance(note, dict) else None


def _write_note(library: Path, **fields: object) -> None:
    note_path(library).write_text(json.dumps(fields, indent=1, sort_keys=True) + "\n")


def cache_dir() -> Path:
    """Where fetched headers are kept between builds."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "nmt-service" / "onnxruntime-headers"


def _has_headers(directory: str | Path | None) -> bool:
    return bool(directory) and (Path(directory) / "onnxruntime_cxx_api.h").is_file()


def find_headers(include: str | Path | None = None, fetch: bool = False) -> Path:
    """The directory holding onnxruntime_c_api.h: include, NMT_ORT_INCLUDE, a system one or one
    fetched before; with fetch, else Debian's headers fetched now (fetch_headers.sh) into the
    cache. FileNotFoundError, naming where it looked, where none is found."""
    looked = [include, os.environ.get("NMT_ORT_INCLUDE"), *HEADER_DIRS, cache_dir()]
    for candidate in looked:
        if _has_headers(candidate):
            return Path(candidate)
    reason = ""
    if fetch:
        try:
            return fetch_headers(cache_dir())
        except BuildError as exc:
            reason = f"; fetching Debian's failed: {exc}"
    raise FileNotFoundError(
        "ONNX Runtime's C API headers (onnxruntime_c_api.h, onnxruntime_cxx_api.h) were not "
        f"found in {', '.join(str(p) for p in looked if p)}{reason}: install "
        "libonnxruntime-dev (Debian trixie and later) or pass --include DIR")


def fetch_headers(dest: Path) -> Path:
    """Debian's libonnxruntime-dev headers unpacked into dest (fetch_headers.sh; nothing is
    installed), written whole or not at all."""
    if not FETCH_SCRIPT.is_file() or not shutil.which("bash"):
        raise BuildError(f"{FETCH_SCRIPT} cannot be run here")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        try:
            done = subprocess.run(["bash", str(FETCH_SCRIPT), f"{tmp}/headers"],
                                  capture_output=True, text=True, timeout=180)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BuildError(str(exc)) from exc
        found = Path(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else None
        if done.returncode != 0 or not _has_headers(found):
            raise BuildError((done.stderr.strip().splitlines() or ["no headers"])[-1])
        if found != Path(tmp) / "headers":  # the system has them after all
            return found
        shutil.rmtree(dest, ignore_errors=True)
        (Path(tmp) / "headers").rename(dest)
    return dest


def find_compiler(given: str | None = None) -> str:
    cxx = given or os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        raise FileNotFoundError("no C++ compiler (g++) found")
    return cxx


def _run(command: list[str]) -> None:
    try:
        subprocess.run(command, check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as exc:
        raise BuildError(f"{command[0]} failed ({exc.returncode}): "
                         f"{exc.stderr.strip()[-2000:]}") from exc


def compile_langid(out: Path | None = None, cxx: str | None = None) -> Path:
    """Compile the language identification library (it needs no ONNX Runtime headers)."""
    out = out or LANGID_LIBRARY
    tmp = out.with_suffix(".tmp.so")
    _run([find_compiler(cxx), "-O2", "-shared", "-fPIC", "-fvisibility=hidden", str(LANGID_SOURCE),
          "-o", str(tmp)])
    _write_note(out, sources=sources_digest([LANGID_SOURCE]), cpu=[])
    tmp.replace(out)
    return out


def compile_kernels(include: str | Path | None = None, out: Path | None = None,
                    cxx: str | None = None, fetch: bool = False,
                    flags: set[str] | None = None) -> Path:
    """Compile the ONNX Runtime kernels for this CPU (AVX2 + FMA where it has them; `flags`:
    another CPU's) and return the library's path. Each source is compiled on its own core."""
    cxx = find_compiler(cxx)  # first: without a compiler, nothing is fetched
    headers = find_headers(include, fetch)
    out = out or DEFAULT_LIBRARY
    found = API_VERSION.search((headers / "onnxruntime_c_api.h").read_text(errors="replace"))
    if not found:
        raise FileNotFoundError(f"no ORT_API_VERSION in {headers / 'onnxruntime_c_api.h'}")
    needs = sorted(set(WHOLE_LIBRARY_FLAGS) & (cpu_flags() if flags is None else flags))
    options = ["-O3", "-std=c++17", "-fPIC", "-fvisibility=hidden", f"-I{headers}",
               *(WHOLE_LIBRARY_FLAGS[flag] for flag in needs)]
    with tempfile.TemporaryDirectory() as tmp:
        objects = [Path(tmp) / (source.stem + ".o") for source in SOURCES]
        with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
            list(pool.map(lambda source, obj: _run([cxx, *options, "-c", str(source), "-o",
                                                    str(obj)]), SOURCES, objects))
        tmp_out = out.with_suffix(".tmp.so")
        _run([cxx, "-shared", *map(str, objects), "-o", str(tmp_out)])
    _write_note(out, api=int(found.group(1)), sources=sources_digest(SOURCES + HEADERS),
                cpu=needs)
    out.with_name(out.name + ".api").unlink(missing_ok=True)  # the note before build notes
    tmp_out.replace(out)  # whole or not at all: a running process may have the old one loaded
    return out


def note_failure(library: Path, reason: str) -> None:
    """Where no library is built at `library`, note why (the server and `nmt doctor` say it)."""
    if not library.exists():
        _write_note(library, error=reason)


def build_langid(out: Path | None = None, compiler: str | None = None) -> Path:
    return compile_langid(out, compiler)
