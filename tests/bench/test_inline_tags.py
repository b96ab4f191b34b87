"""bench.inline_tags on the tiny bundle: both sets, three ways each, every tag kept where the
service's way (carried) is used."""

from __future__ import annotations

import json

import pytest

from bench import inline_tags

SOURCES = [f"open the file and save the window number {n} now" for n in range(12)]


def test_inline_tags_bench_reports_both_sets(tiny_bundle, tmp_path, capsys):
    src, ref, out = tmp_path / "t.en", tmp_path / "t.de", tmp_path / "r.json"
    src.write_text("\n".join(SOURCES) + "\n")
    ref.write_text("\n".join(f"öffne die Datei {n}" for n in range(12)) + "\n")
    inline_tags.main(["--bundle", str(tiny_bundle), "--src", str(src), "--ref", str(ref),
                      "--sentences", "8", "--json", str(out)])
    report = json.loads(out.read_text())
    ways = {"pair": ("plain", "masks", "carried"), "atom": ("plain", "masks", "carried"),
            "br": ("plain", "split", "carried")}
    assert set(report) == {f"{k} / {w}" for k, ws in ways.items() for w in (*ws, "sentences")}
    assert report["pair / sentences"] == report["atom / sentences"] == 8
    assert report["br / sentences"] == 8  # every sentence has a lowercase word after the first
    for kind in ways:
        assert report[f"{kind} / carried"]["tags_kept"] == 1.0, kind
    assert all(0 <= row["chrF"] <= 100 for row in report.values() if isinstance(row, dict))
    assert "pair carried" in capsys.readouterr().out
    plain, tagged, refs = inline_tags.tagged_set(src, ref, 8, 0, "atom")
    assert len(plain) == len(tagged) == len(refs) == 8
    assert all(sum(t.count(a) for a in inline_tags.ATOMS) == 1 for t in tagged)
    plain, tagged, refs = inline_tags.tagged_set(src, ref, 8, 0, "br")
    assert all(t.count("<br>") == 1 and " <br>" not in t and "<br> " not in t for t in tagged)
    assert [t.replace("<br>", " ") for t in tagged] == plain


def test_speed_times_both_paragraphs_and_compares_with_a_revision(tmp_path, monkeypatch, capsys):
    """--speed needs no model; --against loads app/text/tags.py of a git revision (here the
    module itself stands in for it, so the outputs must be the same)."""
    from app.text import tags

    monkeypatch.setattr(inline_tags, "revision_tags", lambda rev: tags)
    out = tmp_path / "speed.json"
    inline_tags.main(["--speed", "--pairs", "10,30", "--against", "HEAD", "--repeat", "1",
                      "--json", str(out)])
    report = json.loads(out.read_text())
    assert set(report) == {f"{k} / {n}" for k in ("packed", "moved") for n in (10, 30)}
    for row in report.values():
        # (the ratio of two timings of a few milliseconds: a number, whatever the machine's
        # load made it; rounded, a busy moment under one of them makes it 0.0)
        assert row["same_output"] is True and row["seconds"] >= 0
        assert isinstance(row["ratio"], float)
    assert "packed" in capsys.readouterr().out
    seconds, text = inline_tags.carrying_seconds("moved", 4, tags, 1)
    assert text.count("<b>") == text.count("</b>") == 2 and text.count("<i>") == 2, text


def test_a_revision_of_the_tags_module_loads_on_its_own():
    import subprocess

    try:
        module = inline_tags.revision_tags("HEAD")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    from app.text import tags

    assert module is not tags and module.TagPlan is not tags.TagPlan
    plan = module.TagPlan.of("Open the {1}file{2}.", (("{1}", "{2}"),))
    assert plan.apply(["Öffnen Sie die Datei.", "Datei"]) == "Öffnen Sie die {1}Datei{2}."
