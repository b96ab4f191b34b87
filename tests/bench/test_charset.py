"""bench.charset: measured on the packages the letter pair table was not made from, against
another revision's charset.py on the same files."""

from __future__ import annotations

import json

from app.documents import charset
from bench import charset as bench
from tests.model.corpus.test_charset_pairs import catalog


def test_the_bench_measures_another_revision_on_the_same_files(tmp_path, capsys):
    catalog(tmp_path, "sed_4.9-1_amd64", "lv", "Pārlūkot mapes")  # the pair table's text
    lines = ["Nevarēja atvērt datni", "Saglabāt izmaiņas", "Lūdzu, uzgaidiet", "Ierīce"]
    catalog(tmp_path, "coreutils_9.1-1_amd64", "lv", *lines)
    assert sorted(bench.messages(tmp_path, "lv")) == sorted(lines)
    out = tmp_path / "report.json"
    bench.main(["--locales", str(tmp_path), "--files", "5", "--short", "3",
                "--against", charset.__file__, "--json", str(out)])
    report = json.loads(out.read_text())
    row = report["lv"]
    assert row["files"]["files"] == 5 and row["lines"]["files"] == 3
    # the same module as --against: the same share right
    assert row["files"]["against"] == row["files"]["now"]
    assert "files  before against     now" in capsys.readouterr().out
    # a 1 MiB file of the messages, guessed by both
    assert set(report["large"]["lv"]) == {"now", "against"}
