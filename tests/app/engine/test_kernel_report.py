"""Which of our kernels run, and why the others do not (app.engine.kernels.runtime.report): the
build note beside a library decides whether it is used (its sources, the CPU features its code
needs, why the install could not build it), and the report, its log line, /v1/models and the
nmt_kernel_active metric say the same. Libraries here are stand-ins: nothing is loaded."""

from __future__ import annotations

import json
import logging

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.config import Settings
from app.engine.kernels import builder, runtime
from app.http.app import create_app
from tests.app.fakes import FakeTranslator, fake_model, running

LIBRARY_KERNELS = runtime.KERNELS[:6]  # all but langid


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """A library file at NMT_KERNELS_LIB (not a real one: report() only looks at it) and a
    function writing its build note; the caches forgotten before and after."""
    lib = tmp_path / "libnmt_kernels.so"
    lib.write_bytes(b"\x7fELF")
    monkeypatch.setenv("NMT_KERNELS_LIB", str(lib))
    monkeypatch.delenv("NMT_KERNELS", raising=False)

    def note(**fields) -> None:
        base = {"api": 1, "sources": builder.sources_digest(builder.SOURCES + builder.HEADERS),
                "cpu": []}
        builder.note_path(lib).write_text(json.dumps({**base, **fields}))
        runtime.library.cache_clear()
        runtime.amx_supported.cache_clear()

    note()
    yield lib, note
    runtime.library.cache_clear()
    runtime.amx_supported.cache_clear()


def test_a_library_built_from_these_sources_for_this_cpu_is_used(stand_in, monkeypatch):
    lib, _ = stand_in
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx2", "fma"})  # no AVX-512
    found = runtime.report()
    assert runtime.library() == lib == found.library
    assert {"attention", "search_tail", "beam_walk", "greedy_advance"} <= set(found.active)
    assert found.inactive["int8_matmul"] == found.inactive["int8_matmul_amx"] == (
        "this CPU lacks avx512_vnni, avx512bw, avx512f")
    assert not found.missing
    line = found.line()
    assert line.startswith("kernels: attention, search_tail, beam_walk, greedy_advance")
    assert "int8_matmul, int8_matmul_amx not: this CPU lacks avx512_vnni" in line


def test_a_library_for_cpu_features_this_one_lacks_is_not_used(stand_in, monkeypatch, caplog):
    """An image built on a CPU with AVX2 and run on one without: the library would stop the
    process on an illegal instruction, so it is left out, with a warning that says why."""
    lib, note = stand_in
    note(cpu=["avx2", "fma"])
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"sse4_2", "avx2"})
    with caplog.at_level(logging.WARNING, logger=runtime.__name__):
        found = runtime.report()
    assert runtime.library() is None and found.library is None
    assert set(found.inactive) >= set(LIBRARY_KERNELS)
    assert found.inactive["attention"] == "built for a CPU with fma, which this one lacks"
    assert found.missing and runtime.HOW_TO_BUILD in found.line()
    assert f"{lib}: not used, built for a CPU with fma" in caplog.text
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx2", "fma"})
    runtime.library.cache_clear()
    assert runtime.library() == lib


def test_a_library_from_other_sources_is_not_used_whatever_its_file_time(stand_in):
    """The note's digest decides, not file times (an installed package's files all get the time
    they were unpacked)."""
    _, note = stand_in
    note(sources="0" * 64)
    assert runtime.library() is None
    assert runtime.report().inactive["search_tail"] == "built from other sources than these"


def test_why_the_install_could_not_build_it_is_reported(stand_in):
    lib, note = stand_in
    lib.unlink()
    builder.note_failure(lib, "at install: no C++ compiler (g++) found")
    found = runtime.report()
    assert found.inactive["attention"] == "not built: at install: no C++ compiler (g++) found"
    assert found.missing
    assert "python -m app.engine.kernels build" in found.line()
    lib.write_bytes(b"\x7fELF")  # built by hand since: its note is the build's
    note()
    builder.note_failure(lib, "a later failed install")  # never hides a library that is there
    assert "error" not in builder.read_note(lib)
    assert runtime.library() == lib


def test_turned_off_or_another_provider_is_a_choice_not_a_missing_build(stand_in, monkeypatch):
    cuda = runtime.report("cuda")
    assert cuda.library is None and not cuda.missing
    assert cuda.inactive["attention"] == "the cuda provider runs its own kernels"
    monkeypatch.setenv("NMT_KERNELS", "off")
    runtime.library.cache_clear()
    off = runtime.report()
    assert off.active == () and not off.missing
    assert set(off.inactive.values()) == {"turned off (NMT_KERNELS=off)"}
    assert off.line() == ("kernels: none active (turned off (NMT_KERNELS=off)); ONNX Runtime's "
                          "kernels run instead")


def test_the_server_shows_the_report_in_v1_models_and_the_metric(stand_in, monkeypatch):
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx2", "fma"})
    want = runtime.report()
    app = create_app(Settings(max_wait_ms=1), loader=lambda s: [fake_model(FakeTranslator())])
    with running(app) as server:
        body = httpx.get(f"{server.url}/v1/models", timeout=10).json()
        text = httpx.get(f"{server.url}/metrics", timeout=10).text
    assert body["kernels"] == {"active": list(want.active), "inactive": want.inactive}
    assert set(body) == {"models", "pivots", "kernels"}
    (family,) = [f for f in text_string_to_metric_families(text)
                 if f.name == "nmt_kernel_active"]
    values = {s.labels["kernel"]: s.value for s in family.samples}
    assert values == {name: float(name in want.active) for name in runtime.KERNELS}
    assert values["attention"] == 1 and values["int8_matmul"] == 0


def test_the_metric_is_read_in_multiprocess_mode(tmp_path, monkeypatch):
    """Under several server processes the scrape reads the shared files, and this collector."""
    from app.http.metrics import Metrics

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    metrics = Metrics(multiprocess=True)
    metrics.kernels.report = runtime.KernelReport("cpu", None, ("langid",),
                                                  dict.fromkeys(LIBRARY_KERNELS, "not built"))
    text = metrics.render().decode()
    assert 'nmt_kernel_active{kernel="langid"} 1.0' in text
    assert 'nmt_kernel_active{kernel="attention"} 0.0' in text


def test_without_a_compiler_nothing_is_fetched(tmp_path, monkeypatch):
    """An install on a machine with no compiler fails the kernel build at once, before any
    header is fetched from the network."""
    monkeypatch.setenv("CXX", "")
    monkeypatch.setattr(builder.shutil, "which", lambda name: None)
    monkeypatch.setattr(builder, "fetch_headers", lambda dest: pytest.fail("fetched"))
    with pytest.raises(FileNotFoundError, match=r"no C\+\+ compiler"):
        builder.compile_kernels(out=tmp_path / "libnmt_kernels.so", fetch=True)
    assert not list(tmp_path.iterdir())
