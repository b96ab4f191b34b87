"""Build pipeline without apt: extraction from fake unpacked packages, dedup, split, output."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from model.corpus import build, ding, sources
from model.corpus.debian import parse_licence
from model.corpus.gettext import Message, write_mo

FIXTURES = Path(__file__).parent / "fixtures" / "help"

UI = [
    Message("_Open", ("Ö_ffnen",)),
    Message("Creates a new LibreOffice document.", ("Erstellt ein neues LibreOffice-Dokument.",)),
    Message(
        "%d file was copied",
        ("%d Datei wurde kopiert", "%d Dateien wurden kopiert"),
        msgid_plural="%d files were copied",
    ),
    Message("Copy %s to the folder", ("Kopiere in den Ordner",)),
    Message("Printer", ("Printer",)),
    Message("Style|Bold", ("Fett",), msgctxt="font"),
]


def _fake_package(root: Path, name: str, messages: list[Message], locale: str = "de") -> Path:
    target = root / name
    mo_dir = target / "usr/share/locale" / locale / "LC_MESSAGES"
    mo_dir.mkdir(parents=True)
    (mo_dir / f"{name}.mo").write_bytes(write_mo(messages))
    doc = target / "usr/share/doc" / name
    doc.mkdir(parents=True)
    (doc / "copyright").write_text("Format: x\n\nFiles: *\nCopyright: me\nLicense: GPL-2+\n")
    return target


def _help_package(root: Path, name: str, lang: str) -> Path:
    target = root / name
    shutil.copytree(FIXTURES / lang, target / "usr/share/libreoffice/help" / lang)
    return target


def _info(tmp_path: Path) -> dict[str, dict]:
    dirs = {
        sources.HELP_EN: _help_package(tmp_path, sources.HELP_EN, "en-US"),
        sources.HELP_DE: _help_package(tmp_path, sources.HELP_DE, "de"),
        "libreoffice-l10n-de": _fake_package(tmp_path, "libreoffice-l10n-de", UI),
        "coreutils": _fake_package(tmp_path, "coreutils", [Message("Open", ("Öffnen",))]),
        "tar": _fake_package(tmp_path, "tar", [Message("Swiss", ("Schweiz",))], "de_CH"),
    }
    return {
        name: {"version": "1.0", "licence": "GPL-2+", "dir": path, "deb": f"{name}_1.0_all.deb"}
        for name, path in dirs.items()
    }


def test_collect_extracts_filters_and_credits_first_source(tmp_path):
    corpus = build.collect(_info(tmp_path))
    pairs = corpus.pairs
    assert pairs[("Open", "Öffnen")] == "libreoffice-l10n-de"
    assert pairs[("New", "Neu")] == build.HELP_SOURCE
    assert pairs[("Bold", "Fett")] == "libreoffice-l10n-de"
    assert ("%d files were copied", "%d Dateien wurden kopiert") in pairs
    assert not any("Printer" in src or "Copy %s" in src for src, _ in pairs)
    assert not any(src == "Swiss" for src, _ in pairs)  # de_CH is not used
    duplicate = ("Creates a new LibreOffice document.", "Erstellt ein neues LibreOffice-Dokument.")
    assert pairs[duplicate] == build.HELP_SOURCE
    stats = corpus.stats["libreoffice-l10n-de"]
    assert stats.rejected["untranslated"] == 1 and stats.rejected["placeholder_mismatch"] == 1
    assert corpus.stats["coreutils"].new_unique == 0 and corpus.stats["coreutils"].kept == 1


def test_written_corpus_files_and_summary(tmp_path):
    info = _info(tmp_path)
    corpus = build.collect(info)
    by_split = build.assign_splits(corpus)
    doc = build.summary(corpus, by_split, info, 1.0)
    out = tmp_path / "out"
    build.write_corpus(out, by_split, doc)
    build.write_corpus(out, by_split, doc)  # replacing an existing corpus works
    for name in build.SPLITS:
        en = (out / f"{name}.en").read_text(encoding="utf-8").split("\n")[:-1]
        de = (out / f"{name}.de").read_text(encoding="utf-8").split("\n")[:-1]
        assert len(en) == len(de) == doc["counts"][name]
        assert all(line and "\t" not in line for line in en + de)
    meta = json.loads((out / "corpus.json").read_text(encoding="utf-8"))
    assert meta["unique_pairs"] == len(corpus.pairs) == sum(meta["counts"].values())
    assert meta["packages"][sources.HELP_EN]["licence"] == "MPL-2.0"
    assert meta["packages"]["coreutils"] == {
        "version": "1.0",
        "deb": "coreutils_1.0_all.deb",
        "licence": "GPL-2+",
    }
    assert meta["sources"][build.HELP_SOURCE]["new_unique_pairs"] > 0
    assert not list(tmp_path.glob("out.*"))


def test_splits_are_disjoint_by_source(tmp_path):
    corpus = build.Corpus()
    rows = [
        (f"This is English sentence {i}", f"Das ist der deutsche Satz {i}") for i in range(3000)
    ]
    corpus.add("pkg", rows + [(src, tgt + " nochmal") for src, tgt in rows[:500]])
    by_split = build.assign_splits(corpus)
    sources_per_split = {name: {src for src, _, _ in found} for name, found in by_split.items()}
    assert not sources_per_split["train"] & sources_per_split["dev"]
    assert not sources_per_split["train"] & sources_per_split["test"]
    assert not sources_per_split["dev"] & sources_per_split["test"]
    assert by_split["dev"] and by_split["test"]
    assert by_split == build.assign_splits(corpus)


def test_split_lines_pairs_option_tables_only():
    src = "Usage: foo [OPTION]\nDo things\nwell.\n\n  -a, --all   show all\n      entries\n"
    src += "  -b   brief\n"
    tgt = "Aufruf: foo [OPTION]\nDinge gut\ntun.\n\n  -a, --all   alle\n      zeigen\n  -b   kurz\n"
    pairs = build.split_lines(src, tgt)
    assert pairs[0] == (
        "Usage: foo [OPTION]\nDo things\nwell.",
        "Aufruf: foo [OPTION]\nDinge gut\ntun.",
    )
    assert pairs[1:] == [
        ("-a, --all   show all entries", "-a, --all   alle zeigen"),
        ("-b   brief", "-b   kurz"),
    ]
    assert build.split_lines("one\ntwo", "eins zwei\ndrei") == [("one\ntwo", "eins zwei\ndrei")]


def test_strip_qualifier():
    assert build.strip_qualifier("?plural:Ohlone", "Ohlone-Volk") == ("Ohlone", "Ohlone-Volk")
    assert build.strip_qualifier("Style|Bold", "Fett") == ("Bold", "Fett")
    assert build.strip_qualifier("a | b", "a | b") == ("a | b", "a | b")


def test_parse_licence():
    dep5 = "Format: x\n\nFiles: debian/*\nLicense: GPL-2+\n\nFiles: *\nLicense: LGPL-2.1+\n"
    assert parse_licence(dep5) == "LGPL-2.1+"
    assert parse_licence("Copyright: x\nLicense: MIT\n") == "MIT"
    free = "This program is free software under the GNU General Public License version 3."
    assert parse_licence(free) == "GPL-3"
    assert parse_licence("All rights reserved") == "see copyright file"


def test_reserved_packages_are_never_used():
    used = sources.GETTEXT_PACKAGES + sources.HELP_PACKAGES + sources.GENERAL_GETTEXT_PACKAGES
    assert not sources.RESERVED & set(used)
    assert len(set(used)) == len(used)


def test_builder_refuses_a_reserved_package_before_fetching(tmp_path, monkeypatch):
    packages = [*sources.GENERAL_GETTEXT_PACKAGES, "wesnoth-1.16-httt"]
    monkeypatch.setattr(sources, "GENERAL_GETTEXT_PACKAGES", packages)
    monkeypatch.setattr(build, "fetch", lambda *a: pytest.fail("fetched a reserved package"))
    with pytest.raises(ValueError, match="wesnoth-1.16-httt reserved for independent evaluation"):
        build.build(tmp_path / "out", tmp_path / "cache")


def _ding_package(root: Path) -> Path:
    target = root / ding.DING_PACKAGE
    (target / ding.DING_FILE).parent.mkdir(parents=True)
    lines = [
        "# Version :: test",
        "Wetter {n} | schönes Wetter :: weather | nice weather",
        "Die Kinder spielten im Garten. :: The children played in the garden.",
        "jdm. beim Umzug helfen :: to help sb. move house",
        # Same English as a software pair: the software pair keeps the source.
        "Öffnen :: Open",
    ]
    (target / ding.DING_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target


def test_domains_label_train_and_split_dev_test(tmp_path):
    info = _info(tmp_path)
    info[ding.DING_PACKAGE] = {
        "version": "1.9",
        "licence": "see copyright file",
        "dir": _ding_package(tmp_path),
        "deb": "trans-de-en_1.9_all.deb",
    }
    corpus = build.collect(info)
    assert corpus.pairs[("nice weather", "schönes Wetter")] == ding.DING_PACKAGE
    assert corpus.pairs[("Open", "Öffnen")] == "libreoffice-l10n-de"
    # Force every eligible source into dev or test to see where each domain goes.
    by_split = {name: [] for name in build.SPLITS}
    for i, ((src, tgt), origin) in enumerate(corpus.pairs.items()):
        by_split[("train", "dev", "test")[i % 3]].append((src, tgt, origin))
    doc = build.summary(corpus, by_split, info, 1.0)
    out = tmp_path / "out"
    build.write_corpus(out, by_split, doc)

    labels = (out / "train.domain").read_text(encoding="utf-8").split()
    assert len(labels) == doc["counts"]["train"]
    assert set(labels) <= {*sources.DOMAINS, sources.DICTIONARY, sources.PHRASE}
    # the dictionary's training pairs are labelled apart from the rest of the general domain,
    # its example sentences apart from its words and patterns
    assert labels == [sources.train_label(origin, src) for src, _t, origin in by_split["train"]]
    assert ding.DING_PACKAGE in {origin for _s, _t, origin in by_split["train"]}
    assert sources.train_label(ding.DING_PACKAGE, "nice weather") == sources.DICTIONARY
    assert sources.train_label(ding.DING_PACKAGE, "to help sb. move house") == sources.DICTIONARY
    assert (sources.train_label(ding.DING_PACKAGE, "The children played in the garden.")
            == sources.PHRASE)
    assert sources.train_label("wesnoth-1.16-data", "The children played.") == "general"
    for name in ("dev", "test"):
        rows = by_split[name]
        general = [r[0] for r in rows if r[2] == ding.DING_PACKAGE]
        assert (out / f"{name}.general.en").read_text(encoding="utf-8").split("\n")[:-1] == general
        in_domain = (out / f"{name}.en").read_text(encoding="utf-8").split("\n")[:-1]
        assert in_domain == [r[0] for r in rows if r[2] != ding.DING_PACKAGE]
        per_domain = sum(doc["files"][f"{name}.{d}"] for d in sources.DOMAINS)
        assert per_domain == doc["counts"][name]
    assert doc["sources"][ding.DING_PACKAGE]["domain"] == "general"
    assert doc["packages"][ding.DING_PACKAGE]["licence"] == ding.DING_LICENCE
    assert sum(doc["domains"]["general"].values()) == 4


def test_builder_takes_only_the_chosen_domains(tmp_path, monkeypatch):
    fetched: list[list[str]] = []

    def fake_fetch(cache, packages):
        fetched.append(packages)
        raise SystemExit  # stop after the package list
    monkeypatch.setattr(build, "fetch", fake_fetch)
    with pytest.raises(SystemExit):
        build.build(tmp_path / "out", tmp_path / "cache", domains=("software", "documentation"))
    assert sources.HELP_EN in fetched[0] and sources.HELP_DE in fetched[0]
    assert "coreutils" in fetched[0]
    assert ding.DING_PACKAGE not in fetched[0] and "widelands-data" not in fetched[0]
    with pytest.raises(ValueError, match="unknown domains"):
        build.build(tmp_path / "out", tmp_path / "cache", domains=("news",))


def test_the_command_line_names_a_wrong_option_or_path_without_a_traceback(tmp_path, capsys):
    from model.corpus.__main__ import main

    where = ["--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache")]
    assert main(["build", "--domains", "news", *where]) == 1
    assert "unknown domains ['news']" in capsys.readouterr().err
    assert main(["build", "--pair", "en-fr", *where]) == 1
    assert "only en-de" in capsys.readouterr().err
    assert main(["sample", "--out", str(tmp_path / "nope")]) == 1
    assert "nope/train.en" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


def test_data_file_sources_are_read_split_and_credited(tmp_path):
    stamps = tmp_path / "tuxpaint-stamps-default/usr/share/tuxpaint/stamps/animals"
    stamps.mkdir(parents=True)
    (stamps / "frog.txt").write_text("A green frog sits on a stone.\nde.utf8=Ein grüner Frosch "
                                     "sitzt auf einem Stein.\n", encoding="utf-8")
    (stamps / "open.txt").write_text("Open\nde.utf8=Öffnen\n", encoding="utf-8")
    info = _info(tmp_path)
    info["tuxpaint-stamps-default"] = {
        "version": "1", "licence": "GPL-2", "dir": tmp_path / "tuxpaint-stamps-default",
        "deb": "tuxpaint-stamps-default_1_all.deb",
    }
    corpus = build.collect(info)
    frog = ("A green frog sits on a stone.", "Ein grüner Frosch sitzt auf einem Stein.")
    assert corpus.pairs[frog] == "tuxpaint-stamps-default"
    assert corpus.pairs[("Open", "Öffnen")] == "libreoffice-l10n-de"  # read earlier: keeps it
    stats = corpus.stats["tuxpaint-stamps-default"]
    assert (stats.raw, stats.kept, stats.new_unique) == (2, 2, 1)
    earlier = set().union(*(build.words(en) for en, _ in corpus.pairs if en != frog[0]))
    assert 0 < stats.new_words_en == len(build.words(frog[0]) - earlier) < len(build.words(frog[0]))
    doc = build.summary(corpus, build.assign_splits(corpus), info, 1.0)
    row = doc["sources"]["tuxpaint-stamps-default"]
    assert row["domain"] == "general" and row["licence"] == "GPL-2"
    assert row["new_words_en"] == stats.new_words_en
