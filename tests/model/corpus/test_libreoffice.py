"""LibreOffice help alignment on a committed English/German page pair."""

from __future__ import annotations

from pathlib import Path

from model.corpus.libreoffice import align_help, align_pages, help_root, page_paragraphs

FIXTURES = Path(__file__).parent / "fixtures" / "help"
PAGE = Path("text/shared/01/01010000.html")


def _pairs() -> list[tuple[str, str]]:
    en = (FIXTURES / "en-US" / PAGE).read_text(encoding="utf-8")
    de = (FIXTURES / "de" / PAGE).read_text(encoding="utf-8")
    return [(" ".join(a.split()), " ".join(b.split())) for a, b in align_pages(en, de)]


def test_paragraphs_and_headings_align_by_id():
    pairs = _pairs()
    assert ("New", "Neu") in pairs
    assert (
        "Creates a new LibreOffice document.",
        "Erstellt ein neues LibreOffice-Dokument.",
    ) in pairs
    assert ("Choose File - New.", "Wählen Sie Datei – Neu.") in pairs


def test_repeated_ids_pair_by_occurrence():
    pairs = _pairs()
    assert ("Choose File - New again.", "Wählen Sie erneut Datei – Neu.") in pairs


def test_platform_switch_keeps_default_variant_only():
    assert ("Key Ctrl+N", "Taste Strg+N") in _pairs()


def test_entities_are_decoded_and_chrome_is_ignored():
    pairs = _pairs()
    assert ("Text Document & more", "Text Dokument & mehr") in pairs  # nbsp -> space
    texts = " ".join(a for a, _ in pairs)
    assert "debug" not in texts and "Sub Main" not in texts and "7.4 Help" not in texts


def test_paragraph_missing_in_german_is_dropped():
    assert not any("only exists in English" in a for a, _ in _pairs())


def test_page_paragraphs_keys_count_occurrences():
    keys = page_paragraphs((FIXTURES / "en-US" / PAGE).read_text(encoding="utf-8"))
    assert ("par_id3154812", 0) in keys and ("par_id3154812", 1) in keys


def test_align_help_walks_both_trees_and_skips_pages_without_twin():
    pairs = list(align_help(FIXTURES / "en-US", FIXTURES / "de"))
    assert len(pairs) == len(_pairs())
    assert not any("German twin" in a for a, _ in pairs)


def test_help_root_layout(tmp_path):
    assert help_root(tmp_path, "de") == tmp_path / "usr/share/libreoffice/help/de"
