"""bench.job_reads on the tiny bundle: a generated PDF goes through both servers (the job
translating its upload's read, and reading its file again) to the same result, and the bench
reports each phase and the ratio of the job times."""

from __future__ import annotations

import json

import pytest

from bench import job_reads


def test_job_reads_bench_compares_the_hand_off_with_reading_again(tiny_bundle, tmp_path,
                                                                   capsys):
    pytest.importorskip("reportlab")
    pytest.importorskip("pdfminer")
    out = tmp_path / "job_reads.json"
    code = job_reads.main(["--models-dir", str(tiny_bundle), "--variant", "fp32",
                           "--threads", "1", "--book-pages", "3", "--timeout", "120",
                           "--json", str(out)])
    assert code == 0
    [row] = json.loads(out.read_text())["documents"]
    assert row["file"] == "book-3.pdf" and row["same_result"]
    for variant in ("hand-off", "read again"):
        assert row[variant]["state"] == "done" and row[variant]["pages"] == 3
        assert row[variant]["sentences"] > 0
    assert row["job_ratio"] == pytest.approx(
        row["read again"]["job_s"] / row["hand-off"]["job_s"], rel=0.01)
    assert "job time read again / hand-off" in capsys.readouterr().out
