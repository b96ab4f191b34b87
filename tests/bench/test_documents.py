"""bench.documents on the tiny bundle: a short job runs beside interactive requests and the
script reports both phases' percentiles, their ratio and the job's progress rate."""

from __future__ import annotations

import json

import pytest

from bench import documents


def test_documents_bench_reports_latency_beside_a_job(tiny_bundle, tmp_path, capsys):
    out = tmp_path / "documents.json"
    code = documents.main([
        "--models-dir", str(tiny_bundle), "--variant", "fp32", "--threads", "1",
        "--segments", "120", "--rate", "10", "--idle-seconds", "1", "--max-seconds", "60",
        "--json", str(out),
    ])
    assert code == 0
    data = json.loads(out.read_text())
    assert data["job_state"] == "done"
    assert data["sentences_done"] == data["sentences_total"] == 120
    assert data["idle"]["requests"] >= 5 and data["during_job"]["requests"] >= 1
    ratio = data["during_job"]["p50_ms"] / data["idle"]["p50_ms"]
    assert data["p50_ratio"] == pytest.approx(ratio, rel=0.05, abs=0.01)
    assert "ratio (during / idle)" in capsys.readouterr().out
