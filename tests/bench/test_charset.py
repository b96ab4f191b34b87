"""bench.charset: another revision's charset.py measured on the same files as this one's."""

from __future__ import annotations

import json

from app.documents import charset
from bench import charset as bench
from model.corpus.gettext import Message, write_mo


def test_the_bench_measures_another_revision_on_the_same_files(tmp_path, capsys):
    folder = tmp_path / "coreutils_9.1-1_amd64/usr/share/locale/lv/LC_MESSAGES"
    folder.mkdir(parents=True)
    lines = ["Nevarēja atvērt datni", "Saglabāt izmaiņas", "Lūdzu, uzgaidiet", "Ierīce"]
    (folder / "x.mo").write_bytes(write_mo([Message(f"id{i}", (t,))
                                            for i, t in enumerate(lines)]))
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
