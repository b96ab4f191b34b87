"""What a new user gets: on a fresh virtual environment, `pip install .` builds the native kernels
(setup.py's build_kernels step) into the installed package, and `nmt serve`, started from a
directory outside the repository, logs that they are active and exports nmt_kernel_active; a
build that cannot happen leaves the install (here an editable one, as CI's) successful, with a
note the server and nmt doctor report.

The fresh environment sees the project's venv's packages through a .pth file (the dependencies,
setuptools for the build) but not its editable install of this repository; pip runs without the
network (--no-index, --no-build-isolation). Skipped where there is no C++ compiler or ONNX
Runtime's headers cannot be had (the system's, NMT_ORT_INCLUDE, or Debian's, fetched)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import httpx
import pytest

from app.engine.kernels import builder
from tests.app.fakes import free_port, wait_ready

ROOT = Path(__file__).resolve().parents[1]
# what `pip install .` reads: the distribution's files and its packages, without built libraries
PROJECT = ("pyproject.toml", "setup.py", "README.md", "app", "model", "export", "bench")
LEFT_OUT = shutil.ignore_patterns("*.so", "*.so.json", "*.so.api", "__pycache__")


def _skip_reason() -> str | None:
    try:
        builder.find_compiler()
        builder.find_headers(fetch=True)
    except (FileNotFoundError, builder.BuildError) as exc:
        return f"kernels cannot be built here: {exc}"
    return None


def fresh_checkout(dest: Path) -> Path:
    dest.mkdir()
    for name in PROJECT:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=LEFT_OUT)
        else:
            shutil.copy2(source, dest / name)
    return dest


def fresh_venv(dest: Path) -> Path:
    """A venv whose site-packages also reads this interpreter's (a plain path in a .pth file:
    its own .pth files, this repository's editable install among them, are not run)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True)
    site = Path(subprocess.run(
        [str(dest / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()"
         "['purelib'])"], capture_output=True, text=True, check=True).stdout.strip())
    (site / "_project_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return dest / "bin"


def pip_install(bin_dir: Path, source: Path, *flags: str, **env: str
                ) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "-v", "--no-deps", "--no-index",
         "--no-build-isolation", "--ignore-installed", "--disable-pip-version-check", *flags,
         str(source)],
        capture_output=True, text=True, timeout=600, cwd=source,
        env={**os.environ, "PIP_NO_CACHE_DIR": "1", **env})


def installed_package(bin_dir: Path) -> Path:
    out = subprocess.run([str(bin_dir / "python"), "-c", "import app; print(app.__file__)"],
                         capture_output=True, text=True, check=True, cwd=bin_dir).stdout
    return Path(out.strip()).parent


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_pip_install_then_nmt_serve_runs_on_our_kernels(tmp_path, tiny_bundle):
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    bin_dir = fresh_venv(tmp_path / "venv")
    done = pip_install(bin_dir, fresh_checkout(tmp_path / "checkout"))
    assert done.returncode == 0, done.stderr[-3000:]
    # the wheel pip built carries compiled libraries: tagged for this Python and platform
    (wheel,) = re.findall(r"filename=(nmt_service-\S+\.whl)", done.stdout)
    python = f"cp{sys.version_info.major}{sys.version_info.minor}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    assert wheel.endswith(f"-{python}-{python}-{platform}.whl"), wheel
    package = installed_package(bin_dir)
    assert package.is_relative_to(tmp_path / "venv")  # the install's, not this repository's
    note = json.loads((package / "engine/kernels/libnmt_kernels.so.json").read_text())
    assert "error" not in note and note["api"] > 0
    assert (package / "engine/kernels/libnmt_kernels.so").is_file()
    assert (package / "text/libnmt_langid.so").is_file()
    assert (package / "documents/charset_pairs.txt").is_file()  # the code page guess's data

    port, workdir = free_port(), tmp_path / "elsewhere"
    workdir.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("NMT_KERNELS", "NMT_KERNELS_LIB",
                                                             "PYTHONPATH")}
    server = subprocess.Popen(
        [str(bin_dir / "nmt"), "serve", "--models-dir", str(tiny_bundle), "--port", str(port),
         "--threads", "1", "--processes", "1", "--workers", "1"],
        cwd=workdir, env={**env, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, 180)
        metrics = httpx.get(f"{url}/metrics", timeout=10).text
        kernels = httpx.get(f"{url}/v1/models", timeout=10).json()["kernels"]
    finally:
        server.send_signal(signal.SIGTERM)
        log, _ = server.communicate(timeout=60)
    (line,) = [ln for ln in log.splitlines() if "app.server: kernels:" in ln]
    assert "attention, search_tail, beam_walk, greedy_advance" in line and " active" in line
    assert {"attention", "search_tail", "langid"} <= set(kernels["active"])
    assert 'nmt_kernel_active{kernel="attention"} 1.0' in metrics
    assert 'nmt_kernel_active{kernel="langid"} 1.0' in metrics


@pytest.mark.slow
def test_an_install_that_cannot_build_them_succeeds_and_says_how(tmp_path):
    """No compiler (CXX names a program that fails), in an editable install (CI's): the install
    succeeds, warns once with the command that adds them later, and notes why in place, beside
    the sources the package is imported from, where the server and nmt doctor read it."""
    bin_dir = fresh_venv(tmp_path / "venv")
    checkout = fresh_checkout(tmp_path / "checkout")
    done = pip_install(bin_dir, checkout, "--editable", CXX="false",
                       NMT_ORT_INCLUDE=str(tmp_path / "no headers"))
    assert done.returncode == 0, done.stderr[-3000:]
    output = done.stdout + done.stderr
    assert output.count("WARNING: nmt-service: the native kernels were not built") == 1
    assert "python -m app.engine.kernels build" in output
    package = installed_package(bin_dir)
    assert package == checkout / "app"
    assert not (package / "engine/kernels/libnmt_kernels.so").exists()
    note = json.loads((package / "engine/kernels/libnmt_kernels.so.json").read_text())
    assert note["error"].startswith("at install:")
    doctor = subprocess.run([str(bin_dir / "nmt"), "doctor", "--models-dir", str(tmp_path)],
                            capture_output=True, text=True, cwd=tmp_path)
    assert f"not built: {note['error']}" in doctor.stdout
