"""bench.fuzz_documents: each outcome is told apart (translators and a document path made to
fail here, in the forked child), a case comes out the same every time, and a short seeded run
of every format finds no problem."""

from __future__ import annotations

import time

from app import documents
from bench import fuzz_documents
from bench.fuzz_documents import FORMATS, make_case, run_case, seeds

TEXT = b"Hello world.\n\nOpen the door now.\n"


def crashing(texts: list[str]) -> list[str]:
    raise KeyError("made to fail")


def sleeping(texts: list[str]) -> list[str]:
    time.sleep(60)
    return texts


def hogging(texts: list[str]) -> list[str]:
    hoard = []
    while True:
        hoard.append(bytearray(64 << 20))


def test_each_outcome_is_told_apart():
    assert run_case(TEXT, "txt").kind == "ok"
    refused = run_case(b"PK\x03\x04 not a zip", "docx")
    assert refused.kind == "refused" and "cannot read the file as .docx" in refused.detail
    crash = run_case(TEXT, "txt", crashing)
    assert (crash.kind, crash.detail) == ("crash", "KeyError: 'made to fail'")
    assert "crashing" in crash.trace and crash.where.startswith("__init__.py:")  # app/documents
    assert crash.key == f"crash KeyError {crash.where}"
    timeout = run_case(TEXT, "txt", sleeping, timeout=1)
    assert timeout.kind == "timeout" and timeout.seconds < 30
    memory = run_case(TEXT, "txt", hogging, memory_mb=1024)
    assert memory.kind == "memory" and "MemoryError" in memory.detail


def test_a_translator_that_keeps_state_between_files_is_a_leak():
    """The same child translates the case, then the clean seed: a translator that counts its
    calls writes the seed otherwise than a fresh process does."""
    calls = []

    def counting(texts: list[str]) -> list[str]:
        calls.append(1)
        return [f"{t} {len(calls)}" for t in texts]

    clean = seeds()["txt"][0]
    expected = run_case(clean, "txt", counting).detail
    leak = run_case(TEXT, "txt", counting, clean=clean, expected=expected)
    assert leak.kind == "leak" and expected in leak.detail
    assert run_case(TEXT, "txt", clean=clean,
                    expected=run_case(clean, "txt").detail).kind == "ok"


def test_an_output_its_library_cannot_open_is_broken(monkeypatch):
    monkeypatch.setattr(documents, "translate_document", lambda data, fmt, translate: b"PK")
    assert run_case(seeds()["docx"][0], "docx").kind == "broken"
    # an input its library cannot open either is not the path's breakage
    assert run_case(b"PK\x03\x04", "docx").kind == "ok"


def test_a_case_comes_out_the_same_every_time():
    for fmt in FORMATS:
        first, again = make_case(fmt, 5, 3), make_case(fmt, 5, 3)
        assert (first.data, first.notes) == (again.data, again.notes)
        assert first.data != seeds()[fmt][first.source]


def test_a_short_seeded_run_of_every_format_finds_no_problem(tmp_path):
    said = []
    report = fuzz_documents.fuzz(FORMATS, seed=0, cases=3, timeout=60, memory_mb=2048,
                                 out=tmp_path, say=said.append)
    assert report.problems == {}, said
    assert {fmt: sum(counts.values()) for fmt, counts in report.counts.items()} == dict.fromkeys(
        FORMATS, 3)
    assert "docx" in report.table() and list(tmp_path.iterdir()) == []
