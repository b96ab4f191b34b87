"""The .mo reader: round trips through the tiny writer, contexts, plurals, charsets, errors."""

from __future__ import annotations

import struct

import pytest

from model.corpus.gettext import Message, MoError, message_pairs, parse_mo, read_mo, write_mo

MESSAGES = [
    Message("Open", ("Öffnen",)),
    Message("Open", ("Offen",), msgctxt="state"),
    Message("%d file", ("%d Datei", "%d Dateien"), msgid_plural="%d files"),
    Message("Untranslated", ("",)),
]


def test_round_trip_keeps_context_and_plurals(tmp_path):
    path = tmp_path / "de.mo"
    path.write_bytes(write_mo(MESSAGES))
    parsed = read_mo(path)
    assert sorted(parsed, key=repr) == sorted(MESSAGES, key=repr)
    assert Message("Open", ("Offen",), msgctxt="state") in parsed


def test_header_entry_is_skipped():
    assert all(msg.msgid for msg in parse_mo(write_mo(MESSAGES)))


def test_message_pairs_pair_singular_and_plural_forms():
    pairs = message_pairs(MESSAGES)
    assert ("%d file", "%d Datei") in pairs
    assert ("%d files", "%d Dateien") in pairs
    assert ("Open", "Offen") in pairs
    assert not any(src == "Untranslated" for src, _ in pairs)


def test_latin1_catalog_is_decoded_with_its_charset():
    data = write_mo([Message("Size", ("Größe",))], charset="iso-8859-1")
    assert parse_mo(data)[0].msgstr == ("Größe",)


def test_big_endian_catalog():
    little = write_mo([Message("Yes", ("Ja",))])
    words = struct.unpack("<7I", little[:28])
    count = words[2]
    tables = struct.unpack(f"<{4 * count}I", little[28 : 28 + 16 * count])
    big = struct.pack(">7I", 0x950412DE, *words[1:]) + struct.pack(f">{4 * count}I", *tables)
    big += little[28 + 16 * count :]
    assert parse_mo(big) == [Message("Yes", ("Ja",))]


@pytest.mark.parametrize("data", [b"", b"\x00" * 40, b"\xde\x12\x04\x95" + b"\x00" * 10])
def test_invalid_files_raise(data):
    with pytest.raises(MoError):
        parse_mo(data)
