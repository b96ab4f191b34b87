"""`nmt doctor`: the environment's state as `nmt serve` with the same flags would find it, and an
exit status that says whether it could start (0), could not (1, with each reason) or was given
bad settings (2)."""

from __future__ import annotations

import json
import re
import shutil

import onnxruntime as ort
import pytest

from app.cli import main
from app.engine.kernels import runtime


def doctor(capsys, *flags: str) -> tuple[int, str]:
    code = main(["doctor", *flags])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_a_servable_environment_is_described_and_exits_0(tiny_bundle, capsys, monkeypatch):
    monkeypatch.delenv("NMT_KERNELS", raising=False)
    code, out = doctor(capsys, "--models-dir", str(tiny_bundle.parent), "--workers", "2",
                       "--processes", "1", "--threads", "1")
    assert code == 0, out
    assert f"onnxruntime:      {ort.__version__}" in out
    assert "provider:         cpu (CPUExecutionProvider)" in out
    assert f"kernels:          {runtime.report().line().removeprefix('kernels: ')}" in out
    assert "threads:          1 (ONNX Runtime's intra-op threads)" in out
    assert "decode workers:   2 in all; worker processes on (NMT_WORKER_PROCESSES)" in out
    assert "server processes: 1 behind 127.0.0.1:8000" in out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("en-de:")]
    assert "en->de" in line and "int8 " in line and "fp32 " in line
    served = json.loads((tiny_bundle / "manifest.json").read_text())["default_variant"]
    assert re.search(rf"\b{served} [0-9.]+ MB \(served\)", line) and line.count("served") == 1
    assert out.rstrip().endswith("nmt serve could start with these settings.")


def test_several_server_processes_are_described_as_each_runs(tiny_bundle, capsys):
    """Each server process gets its share of the threads and decode workers, on threads even
    where worker processes are asked for (app.serving.supervisor.share)."""
    code, out = doctor(capsys, "--models-dir", str(tiny_bundle.parent), "--processes", "2",
                       "--threads", "4", "--worker-processes")
    assert code == 0, out
    assert "threads:          2 (ONNX Runtime's intra-op threads per server process)" in out
    assert ("decode workers:   2 per server process (1 its own, 1 spare); worker processes off"
            in out)
    assert "server processes: 2 behind" in out


def test_worker_processes_are_on_only_where_the_server_would_run_them(tiny_bundle, capsys):
    """Asked for (the default), worker processes still run only on the CPU with two decode
    workers or more (Translator.use_worker_processes): the line says what the server does."""
    models = ("--models-dir", str(tiny_bundle.parent), "--processes", "1")
    code, out = doctor(capsys, *models, "--workers", "1")
    assert code == 0, out
    assert ("decode workers:   1 in all; worker processes off (one decode worker runs on a "
            "thread)") in out
    code, out = doctor(capsys, *models, "--workers", "2", "--provider", "cuda")
    assert code == 0, out
    assert "worker processes off (the cuda provider runs the decode workers on threads)" in out
    code, out = doctor(capsys, *models, "--workers", "2", "--no-worker-processes")
    assert code == 0, out
    assert "decode workers:   2 in all; worker processes off (NMT_WORKER_PROCESSES)" in out


def test_the_kernel_library_is_loaded_into_onnx_runtime_where_it_is_used(tiny_bundle, capsys):
    code, out = doctor(capsys, "--models-dir", str(tiny_bundle))
    assert code == 0
    if runtime.library() is None:
        assert "loads into ONNX Runtime" not in out
    else:
        assert "loads into ONNX Runtime: yes" in out


def test_no_bundle_is_a_reason_not_to_start(tmp_path, capsys):
    code, out = doctor(capsys, "--models-dir", str(tmp_path))
    assert code == 1
    assert "nmt serve could not start:" in out and "no bundle found" in out


def test_a_bundle_the_server_would_refuse_is_named(tiny_bundle, tmp_path, capsys):
    code, out = doctor(capsys, "--models-dir", str(tiny_bundle), "--variant", "fp16")
    assert code == 1 and "no variant 'fp16'" in out
    broken = shutil.copytree(tiny_bundle, tmp_path / "en-de")
    with open(broken / "sentencepiece.model", "r+b") as f:
        f.seek(100)
        f.write(b"\x00\x01\x02")
    code, out = doctor(capsys, "--models-dir", str(tmp_path))
    assert code == 1 and "sentencepiece.model: sha256 mismatch" in out
    shutil.copy2(tiny_bundle / "sentencepiece.model", broken / "sentencepiece.model")
    other = next(v for v in ("fp32", "int8") if v != json.loads(
        (broken / "manifest.json").read_text())["default_variant"])
    (broken / f"decoder.{other}.onnx").unlink()  # not the served variant: a note, no reason
    code, out = doctor(capsys, "--models-dir", str(tmp_path))
    assert code == 0 and f"{other} " in out and "(1 file(s) missing)" in out


def test_cuda_without_its_provider_falls_back_and_still_starts(tiny_bundle, capsys):
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has CUDA")
    code, out = doctor(capsys, "--models-dir", str(tiny_bundle), "--provider", "cuda")
    assert code == 0
    assert "has no CUDAExecutionProvider: the service falls back to cpu" in out
    assert "the cuda provider runs its own kernels" in out


def test_bad_settings_exit_2(capsys):
    code, out = doctor(capsys, "--port", "70000")
    assert code == 2 and "port" in out
