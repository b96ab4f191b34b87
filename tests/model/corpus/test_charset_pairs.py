"""The letter pair table of the code page guess: made from the catalogs of the packages picked
for it, leaving the others to bench.charset; read back by app.documents.charset."""

from __future__ import annotations

from app.documents import charset
from model.corpus import charset_pairs
from model.corpus.gettext import Message, write_mo


def catalog(root, package, locale, *texts):
    """A catalog of `texts` in `locale`, in the folder of `package` as the corpus builder
    unpacks it."""
    folder = root / package / "usr/share/locale" / locale / "LC_MESSAGES"
    folder.mkdir(parents=True, exist_ok=True)
    messages = [Message(f"id{i}", (text,)) for i, text in enumerate(texts)]
    (folder / "x.mo").write_bytes(write_mo(messages))


def test_the_table_counts_the_pairs_of_the_picked_packages_only(tmp_path):
    # sed is picked for the table, coreutils is not (a hash of the name, not of the version)
    assert charset_pairs.for_table("sed_4.9-1_amd64") and charset_pairs.for_table("sed")
    assert not charset_pairs.for_table("coreutils_9.1-1_amd64")
    catalog(tmp_path, "sed_4.9-1_amd64", "lv", "Pārlūkot mapes", "Pārlūkot mapes",
             "Saglabāt")  # a message twice (in several catalogs) counts once
    catalog(tmp_path, "coreutils_9.1-1_amd64", "lv", "Izmaiņas")
    catalog(tmp_path, "sed_4.9-1_amd64", "ru", "Открыть")
    text, sizes = charset_pairs.table(tmp_path)
    assert "# coreutils" not in text and "sed" in text.split("\n")[5]  # the packages it read
    rows = [line.split(" ") for line in text.splitlines() if not line.startswith("#")]
    pairs = {language: set() for language, *_ in rows}
    for language, _level, *found in rows:
        pairs[language].update(found)
    # "_": either end of a word; only pairs with a letter past ASCII
    assert pairs["lv"] == {"pā", "ār", "lū", "ūk", "bā", "āt"}
    assert sizes["lv"] == 6  # "ņ" came from coreutils, left to the bench
    assert pairs["ru"] == {"_о", "от", "тк", "кр", "ры", "ыт", "ть", "ь_"}
    # each pair's level: one in 2^k of the language's pairs (six pairs, one each: 2^-2.6)
    assert {int(level) for language, level, *_ in rows if language == "lv"} == {3}


def test_the_guess_reads_pairs_as_the_table_counts_them():
    data = "Nevarēja atvērt (Pārlūkot)".encode("cp1257")
    words = charset.read_words(data, "cp1257")
    assert words == {"nevarēja": 1, "atvērt": 1, "pārlūkot": 1}
    assert charset.letter_pairs(words) == {"rē": 1, "ēj": 1, "vē": 1, "ēr": 1, "pā": 1,
                                           "ār": 1, "lū": 1, "ūk": 1}
    # the same bytes read in windows-1252, with the pairs French would have to write
    assert set(charset.letter_pairs(charset.read_words(data, "cp1252"))) >= {"rç", "çj"}


def test_the_shipped_table_is_small_and_has_every_language_the_guess_knows():
    levels = charset._pair_levels()
    assert charset.PAIRS_FILE.stat().st_size < 50_000
    assert set(charset.languages()) - set(levels) <= {"en"}  # English has no letters past ASCII
    assert all(0 < level < charset.UNLISTED for pairs in levels.values()
               for level in pairs.values())
    assert levels["he"]["ים"] < levels["he"].get("щм", charset.UNLISTED)
