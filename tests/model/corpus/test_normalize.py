"""Normalisation and filtering rules."""

from __future__ import annotations

import pytest

from model.corpus.normalize import (
    MAX_CHARS,
    clean_pair,
    drop_accelerators,
    placeholders,
    reject_reason,
    strip_markup,
)


@pytest.mark.parametrize(
    ("src", "tgt", "expected"),
    [
        ("_Open", "Ö_ffnen", ("Open", "Öffnen")),
        ("Save _As", "Speichern _unter", ("Save As", "Speichern unter")),
        ("A_ction", "A_ktion", ("Action", "Aktion")),
        ("~File", "~Datei", ("File", "Datei")),
        ("&Save", "&Speichern", ("Save", "Speichern")),
        ("Black && &White", "Schwarz && &Weiß", ("Black & White", "Schwarz & Weiß")),
        ("Tom & Jerry", "Tom & Jerry", ("Tom & Jerry", "Tom & Jerry")),
        ("file_name", "datei_name", ("file_name", "datei_name")),
    ],
)
def test_accelerators_dropped_on_both_sides(src, tgt, expected):
    assert drop_accelerators(src, tgt) == expected


def test_markup_entities_and_whitespace():
    assert strip_markup("<b>Bold</b>&nbsp;&amp;\n<i>italic</i>  <br/>text") == "Bold & italic text"
    assert strip_markup("<filename>a.txt</filename> copied") == "a.txt copied"
    assert strip_markup("Use <count> items") == "Use <count> items"


def test_clean_pair_strips_trailing_colons_and_cjk_hints():
    assert clean_pair("<b>_Name:</b>", "<b>_Name:</b>") == ("Name", "Name")
    assert clean_pair("Open (_O)", "Öffnen") == ("Open", "Öffnen")


def test_placeholders_multiset():
    text = "%s of %d, %1 and %2$s {name} $(VAR) ${HOME} %PRODUCTNAME %(count)d"
    found = placeholders(text)
    for token in ("%s", "%d", "%1", "{name}", "$(VAR)", "${HOME}", "%PRODUCTNAME", "%(count)d"):
        assert found[token] >= 1, token
    assert found["%s"] == 2  # %2$s counts as %s
    assert placeholders("25 % dunkler") == placeholders("25% darker")


@pytest.mark.parametrize(
    ("src", "tgt", "reason"),
    [
        ("Open %s file", "Datei öffnen", "placeholder_mismatch"),
        ("Use {name}", "{Name} benutzen", "placeholder_mismatch"),
        ("Printer", "Printer", "untranslated"),
        ("42", "42", "no_letters"),
        ("%s", "%s", "no_letters"),
        ("/usr/share/doc", "/usr/share/doc", "path_or_identifier"),
        ("https://example.org", "https://example.org", "path_or_identifier"),
        ("gtk-ok", "gtk-ok", "code_like"),
        ("=SUM(A1:A4)", "=SUMME(A1:A4)", "path_or_formula"),
        ("Edit", "Bearbeitungswerkzeuge für Fortgeschrittene", "length_ratio"),
        ("word " * 201, "Wort " * 201, "too_long"),
        ("Your names", "Hans Muster", "translator_credits"),
        ("Internal error in the loop", "Fehler: Internal error in the loop", "partly_untranslated"),
        ("", "leer", "empty"),
    ],
)
def test_rejections(src, tgt, reason):
    assert reject_reason(*clean_pair(src, tgt)) == reason


def test_long_segments_are_dropped_by_characters():
    src = "a" * (MAX_CHARS + 1)
    assert reject_reason(src, src + "b") == "too_long"


@pytest.mark.parametrize(
    ("src", "tgt"),
    [
        ("Open %s file", "Datei %s öffnen"),
        ("Could not open '%1'", "„%1“ konnte nicht geöffnet werden"),
        ("invalid --%s argument %s", "ungültiges Argument %2$s für Option --%1$s"),
        ("Creates a new document.", "Erstellt ein neues Dokument."),
        ("%PRODUCTNAME Writer", "%PRODUCTNAME Writer-Textdokument"),
    ],
)
def test_good_pairs_are_kept(src, tgt):
    assert reject_reason(*clean_pair(src, tgt)) is None
