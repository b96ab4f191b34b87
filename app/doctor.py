"""`nmt doctor`: the state of this environment as `nmt serve` would find it, without serving.

It takes the same flags and NMT_* variables as `nmt serve` and prints ONNX Runtime's version and
providers, the provider the service would use, our native kernels (built? loadable? the CPU
features they need?), threads, decode workers and server processes, and the bundles in the
models directory with their variants and sizes. It loads no model and starts no session beyond
loading the kernel library once; nothing leaves the machine. Exit status 0 when the service
could start with these settings, 1 (each reason printed) when it could not, 2 on bad settings.
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass, field
from pathlib import Path

from app.config import Settings

# the CPU features our kernels compile for or dispatch on (app.engine.kernels)
FEATURES = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "amx_tile", "amx_int8")


@dataclass
class Diagnosis:
    """What `nmt doctor` found: (label, text) lines in order, and why the service could not
    start (empty: it could)."""

    lines: list[tuple[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def add(self, label: str, text: str) -> None:
        self.lines.append((label, text))

    def render(self) -> str:
        width = max((len(label) for label, _ in self.lines), default=0)
        out = [f"{label + ':':<{width + 1}} {text}" if label else f"{'':<{width + 1}} {text}"
               for label, text in self.lines]
        if self.problems:
            out += ["", "nmt serve could not start:", *(f"  - {p}" for p in self.problems)]
        else:
            out += ["", "nmt serve could start with these settings."]
        return "\n".join(out)


def _size(nbytes: int) -> str:
    return f"{nbytes / 1e6:.1f} MB"


def runtime_lines(diagnosis: Diagnosis, settings: Settings) -> None:
    """ONNX Runtime, its providers, and the provider the service would run on."""
    import onnxruntime as ort

    from app.engine.sessions import PROVIDERS

    available = ort.get_available_providers()
    diagnosis.add("onnxruntime", f"{ort.__version__} ({ort.get_device()}); providers: "
                  f"{', '.join(available)}")
    wanted = PROVIDERS[settings.provider]
    if wanted in available:
        diagnosis.add("provider", f"{settings.provider} ({wanted})")
    else:  # the sessions fall back to the CPU (app.engine.sessions.execution_providers)
        diagnosis.add("provider", f"{settings.provider} requested, but this onnxruntime has no "
                      f"{wanted}: the service falls back to cpu (pip install .[gpu] on a "
                      "machine with CUDA)")


def kernel_lines(diagnosis: Diagnosis, settings: Settings) -> None:
    """Our kernels: which run, the library's build note, whether ONNX Runtime loads it, and
    the CPU features they need."""
    from app.engine.kernels import builder, runtime

    flags = runtime.cpu_flags()
    diagnosis.add("cpu", f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores usable; "
                  + " ".join(f"{f}={'yes' if f in flags else 'no'}" for f in FEATURES))
    found = runtime.report(settings.provider)
    diagnosis.add("kernels", found.line().removeprefix("kernels: "))
    path = runtime.library_path()
    note = builder.read_note(path) or {}
    if path.is_file():
        built = (f"built for ONNX Runtime's C API {note['api']}, for CPUs with "
                 f"{', '.join(note.get('cpu') or ['no extra features'])}"
                 if "api" in note else "built before build notes (rebuild to check it)")
        diagnosis.add("kernel library", f"{path}: {built}")
        if found.library is not None:
            diagnosis.add("", f"loads into ONNX Runtime: {_loads(path)}")
    else:
        diagnosis.add("kernel library", f"{path}: {runtime.library_problem() or 'not built'}")
    langid = runtime.langid_library()
    diagnosis.add("langid library", str(langid) if langid else
                  found.inactive.get("langid", "not used"))


def _loads(path: Path) -> str:
    """'yes', or ONNX Runtime's complaint when it cannot register the library's operators."""
    import onnxruntime as ort

    try:
        ort.SessionOptions().register_custom_ops_library(str(path))
    except Exception as exc:  # noqa: BLE001 (any refusal is the answer, in words)
        return f"no ({str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r})"
    return "yes"


def engine_lines(diagnosis: Diagnosis, settings: Settings) -> None:
    """Threads, decode workers and server processes as `nmt serve` would choose them; with
    several server processes, as each of them runs (app.serving.supervisor.share)."""
    from app.engine.sessions import SessionConfig, decode_workers
    from app.serving.supervisor import process_count, share

    processes = process_count(settings)
    each = share(settings, processes) if processes > 1 else settings
    per = " per server process" if processes > 1 else ""
    diagnosis.add("threads", f"{each.threads} (ONNX Runtime's intra-op threads{per})"
                  if each.threads else "0: ONNX Runtime's default per session")
    config = SessionConfig(provider=each.provider, intra_op_threads=each.threads,
                           workers=each.workers)
    workers = decode_workers(config, each.max_batch_size)
    if processes > 1:
        own = each.workers // processes
        diagnosis.add("decode workers", f"{workers} per server process ({own} its own, "
                      f"{workers - own} spare); worker processes off (threads, under server "
                      "processes)")
    else:
        # as Translator.use_worker_processes decides: only on the CPU with two decode workers
        if not settings.worker_processes:
            mode = "off (NMT_WORKER_PROCESSES)"
        elif each.provider != "cpu":
            mode = f"off (the {each.provider} provider runs the decode workers on threads)"
        elif workers < 2:
            mode = "off (one decode worker runs on a thread)"
        else:
            mode = "on (NMT_WORKER_PROCESSES)"
        diagnosis.add("decode workers", f"{workers} in all; worker processes {mode}")
    diagnosis.add("server processes", f"{processes} behind {settings.host}:{settings.port}")


def model_lines(diagnosis: Diagnosis, settings: Settings) -> None:
    """The bundles `nmt serve` would load, each checked as it would check it (manifest,
    files and their checksums), with its variants and their sizes on disk."""
    from app.engine.bundle import BundleError, load_bundle
    from app.translation.registry import bundle_dirs

    root = Path(settings.models_dir)
    dirs = bundle_dirs(root)
    diagnosis.add("models dir", f"{root.resolve()} ({len(dirs)} bundle(s))")
    if not dirs:
        diagnosis.problems.append(f"{root}: no bundle found (no */manifest.json); set "
                                  "NMT_MODELS_DIR or --models-dir, or nmt import a model")
    for path in dirs:
        try:
            bundle = load_bundle(path, settings.variant)
        except BundleError as exc:
            diagnosis.add(path.name, f"cannot be served: {exc}")
            diagnosis.problems.append(str(exc))
            continue
        sizes = []
        for name, files in bundle.manifest["variants"].items():
            paths = [path / entry["file"] for entry in files.values()
                     if isinstance(entry, dict) and "file" in entry]
            found = [p for p in paths if p.is_file()]
            sizes.append(f"{name} {_size(sum(p.stat().st_size for p in found))}"
                         + (" (served)" if name == bundle.variant else "")
                         + (f" ({len(paths) - len(found)} file(s) missing)"
                            if len(found) < len(paths) else ""))
        diagnosis.add(bundle.name, f"{bundle.source_lang}->{bundle.target_lang}, "
                      f"{', '.join(sizes)}")


def diagnose(settings: Settings) -> Diagnosis:
    diagnosis = Diagnosis()
    diagnosis.add("nmt-service", f"{Path(__file__).resolve().parent} (Python "
                  f"{platform.python_version()}, {sys.platform})")
    runtime_lines(diagnosis, settings)
    kernel_lines(diagnosis, settings)
    diagnosis.add("variant", settings.variant or "each bundle's default")
    engine_lines(diagnosis, settings)
    model_lines(diagnosis, settings)
    return diagnosis


def doctor_main(argv: list[str]) -> int:
    from pydantic import ValidationError

    from app.server import settings_from_args

    try:
        settings = settings_from_args(
            argv, "nmt doctor", "Print the state of this environment as `nmt serve` with the "
            "same flags would find it; exit 0 when it could start, 1 when not.")
    except ValidationError as exc:
        print(f"nmt doctor: invalid settings:\n{exc}", file=sys.stderr)
        return 2
    diagnosis = diagnose(settings)
    print(diagnosis.render())
    return 1 if diagnosis.problems else 0
