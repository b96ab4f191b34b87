"""The project is described in pyproject.toml; this file adds one step to its build.

build_kernels compiles the native libraries (app/engine/kernels -> libnmt_kernels.so, and
app/text/langid_score.cc -> libnmt_langid.so) for the machine that installs the package, where
a C++ compiler and ONNX Runtime's C API headers can be had (the system's, NMT_ORT_INCLUDE, or
Debian's, fetched by app/engine/kernels/fetch_headers.sh). It runs at install time, never at
serve time, and never fails the install: a library that cannot be built is left out with a
note of why beside where it would be (the server and `nmt doctor` report it), and a warning
says how to add it later. NMT_BUILD_KERNELS=0 skips the step.

`pip install .` puts the libraries into the package it installs; `pip install -e .` builds them
in place, beside their sources, where the editable package is imported from.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from setuptools import Command, Distribution, setup
from setuptools.command.build import build

ROOT = Path(__file__).resolve().parent
BUILDER = ROOT / "app" / "engine" / "kernels" / "builder.py"
KERNELS = Path("app/engine/kernels/libnmt_kernels.so")
LANGID = Path("app/text/libnmt_langid.so")


def _kernels_wanted() -> bool:
    return os.environ.get("NMT_BUILD_KERNELS", "1").lower() not in ("0", "off", "false", "no")


def _builder():
    """app/engine/kernels/builder.py loaded by its path: the build environment has neither
    onnxruntime nor numpy, which importing the app package would need."""
    spec = importlib.util.spec_from_file_location("_nmt_kernels_builder", BUILDER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class build_kernels(Command):  # noqa: N801 (setuptools names commands in lower case)
    description = "compile the native kernels for this machine, where it can (never fails)"
    user_options: list = []
    editable_mode = False

    def initialize_options(self) -> None:
        self.build_lib = None
        self.editable_mode = False

    def finalize_options(self) -> None:
        self.set_undefined_options("build_py", ("build_lib", "build_lib"))

    def _base(self) -> Path:
        return ROOT if self.editable_mode else Path(self.build_lib)

    def run(self) -> None:
        if not _kernels_wanted():
            self.announce("build_kernels: skipped (NMT_BUILD_KERNELS=0)", level=2)
            return
        builder = _builder()
        base = self._base()
        failed = []
        for target, compile_one in ((LANGID, builder.compile_langid),
                                    (KERNELS, lambda out: builder.compile_kernels(
                                        out=out, fetch=True))):
            out = base / target
            out.parent.mkdir(parents=True, exist_ok=True)
            if not self.editable_mode:  # nothing of an earlier build in build/ goes in unseen
                for stale in (out, builder.note_path(out)):
                    stale.unlink(missing_ok=True)
            try:
                compile_one(out)
                print(f"build_kernels: built {out}", file=sys.stderr)
            except Exception as exc:  # noqa: BLE001 (no failure of this step fails the install)
                reason = (str(exc).strip() or repr(exc)).splitlines()[0]
                builder.note_failure(out, f"at install: {reason}")
                failed.append(f"{target.name} ({reason})")
        if failed:
            print(f"WARNING: nmt-service: the native kernels were not built: "
                  f"{'; '.join(failed)}. The service runs without them (ONNX Runtime's own "
                  "kernels, language identification scored in Python); to add them later, "
                  f"run: {builder.HOW_TO_BUILD}", file=sys.stderr)

    def get_outputs(self) -> list[str]:
        base = Path(self.build_lib)
        return [str(base / path) for target in (LANGID, KERNELS)
                for path in (target, target.with_name(target.name + ".json"))]

    def get_output_mapping(self) -> dict[str, str]:
        return {}

    def get_source_files(self) -> list[str]:
        kernels = KERNELS.parent
        found = sorted((ROOT / kernels).glob("*.cc")) + sorted((ROOT / kernels).glob("*.h"))
        return [*(str(path.relative_to(ROOT)) for path in found),
                str(kernels / "fetch_headers.sh"), str(LANGID.with_name("langid_score.cc"))]


class build_with_kernels(build):  # noqa: N801
    sub_commands = [*build.sub_commands, ("build_kernels", None)]


class NativeDistribution(Distribution):
    """A wheel that carries libraries compiled for this machine is tagged for its Python and
    platform (cp311-cp311-linux_x86_64, say), not as pure Python (py3-none-any), so pip never
    installs it where the libraries cannot load."""

    def has_ext_modules(self) -> bool:
        return _kernels_wanted()


setup(cmdclass={"build": build_with_kernels, "build_kernels": build_kernels},
      distclass=NativeDistribution)
