"""bench.scaling at a tiny scale: every case runs its phases at two sizes and reports their
ratios; a ratio is flagged only above FLAGGED where the larger run took long enough to tell."""

from __future__ import annotations

import json
import subprocess

import pytest

from bench import scaling


def test_every_case_runs_at_two_sizes_and_reports_its_ratios(tmp_path, capsys):
    out = tmp_path / "scaling.json"
    assert scaling.main(["--scale", "0.002", "--json", str(out)]) == 0
    report = json.loads(out.read_text())["cases"]
    assert set(report) == {case.name for case in scaling.CASES}
    for name, row in report.items():
        assert row["n"] >= 1 and len(row["digests"]) == 2, name
        assert set(row["seconds"]) == set(row["ratio"]) and row["ratio"], name
        for small, large in row["seconds"].values():
            assert small >= 0 and large >= 0
    # a document's three phases, the text path's own
    assert set(report["docx: paragraphs"]["seconds"]) == {"read", "translate", "write"}
    assert set(report["protect: URLs in a text"]["seconds"]) == {"mask", "unmask"}
    printed = capsys.readouterr().out
    assert "docx: runs in a paragraph" in printed and "ratio" in printed


def test_the_inputs_grow_along_their_dimension():
    """Each builder's input grows by what it holds per unit of n (here: segments)."""
    from app import documents

    for name in ("docx: paragraphs", "pptx: slides", "odt: paragraphs", "epub: chapters",
                 "po: entries", "xliff: units", "srt: cues", "html: table rows",
                 "md: list items", "txt: paragraphs"):
        case = next(c for c in scaling.CASES if c.name == name)
        fmt = name.split(":")[0]
        a, b, c = (len(documents.extract(case.build(n), fmt).segments) for n in (3, 6, 12))
        assert c - b == 2 * (b - a) > 0, name


def test_a_ratio_is_flagged_above_the_line_where_the_run_took_long_enough():
    row = {"ratio": {"read": 16.0, "write": 16.0, "translate": 4.0},
           "seconds": {"read": [0.1, 1.6], "write": [0.001, 0.016], "translate": [1.0, 4.0]}}
    assert scaling.flagged(row, "read")
    assert not scaling.flagged(row, "write")  # too quick to tell
    assert not scaling.flagged(row, "translate")


def test_against_a_revision_runs_the_same_cases_on_its_code(capsys):
    try:
        subprocess.run(["git", "rev-parse", "HEAD"], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    assert scaling.main(["--scale", "0.002", "--only", "srt: cues", "--against", "HEAD"]) == 0
    printed = capsys.readouterr().out
    assert "against HEAD" in printed
    assert "srt: cues" in printed.split("against HEAD")[1]


def test_a_flagged_case_is_measured_again_and_flagged_only_if_it_stays_so(monkeypatch, capsys):
    """One slow run at 4N (a busy moment) is measured again; a step that grows with the
    square stays flagged."""
    busy = iter([1.0, 9.0, 1.0, 4.0])  # seconds of the runs at N, 4N, then again at N, 4N

    def once(n):
        return {"read": next(busy)}, "d"

    cases = [scaling.Case("busy once", 10, lambda n: n, once),
             scaling.Case("square", 10, lambda n: n, lambda n: ({"read": n * n / 100}, "d"))]
    monkeypatch.setattr(scaling, "CASES", cases)
    report = scaling.run_cases(["busy once", "square"], 1.0, 1)
    assert report["busy once"]["ratio"]["read"] == 4.0
    assert report["busy once"]["seconds"]["read"] == [1.0, 4.0]
    assert report["square"]["ratio"]["read"] == 16.0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].endswith("4.0 ") and printed[1].endswith("!!")
