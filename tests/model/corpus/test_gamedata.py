"""Readers of games' translation files: .po, Lua tables, keyed files, Tux Paint stamps,
OpenClonk's groups, ScummVM's supernova.dat."""

from __future__ import annotations

import gzip
import struct

import pytest

from model.corpus import gamedata, sources

PO = r'''# German translation
msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\n"

#: level.stl:3
msgid "The penguin walks "
"into the forest."
msgstr "Der Pinguin geht "
"in den Wald."

#, fuzzy
msgid "An old guess"
msgstr "Eine alte Vermutung"

msgctxt "menu"
msgid "Quit"
msgstr "Beenden"

msgid "%d coin"
msgid_plural "%d coins"
msgstr[0] "%d Münze"
msgstr[1] "%d Münzen"

msgid "Not translated yet"
msgstr ""

msgid "Say \"hello\"\nand wave."
msgstr "Sag \"hallo\"\nund winke."

#~ msgid "Obsolete"
#~ msgstr "Veraltet"
'''


def test_po_entries_pair_with_continuations_context_and_plurals():
    messages = gamedata.parse_po(PO)
    by_id = {m.msgid: m for m in messages}
    assert by_id["The penguin walks into the forest."].msgstr == ("Der Pinguin geht in den Wald.",)
    assert by_id["Quit"].msgctxt == "menu"
    assert by_id["%d coin"].msgid_plural == "%d coins"
    assert by_id["%d coin"].msgstr == ("%d Münze", "%d Münzen")
    assert by_id['Say "hello"\nand wave.'].msgstr == ('Sag "hallo"\nund winke.',)
    # fuzzy, obsolete and the header are not messages; empty translations give no pair
    assert "An old guess" not in by_id and "Obsolete" not in by_id and "" not in by_id


def test_po_pairs_skip_untranslated_and_pair_plural_forms(tmp_path):
    path = tmp_path / "de.po"
    path.write_text(PO, encoding="utf-8")
    pairs = list(gamedata.po_pairs([path]))
    assert ("%d coins", "%d Münzen") in pairs and ("%d coin", "%d Münze") in pairs
    assert not any(src == "Not translated yet" for src, _ in pairs)
    assert len(pairs) == 5


def test_lua_table_lines_unescape_and_commented_lines_are_skipped():
    text = "\n".join(
        [
            "locale = {",
            '["Fire at will!"] = "Feuer frei!", -- Mission_1',
            '--      ["Untranslated line"] = "",',
            '["Say \\"cheese\\"\\nnow"] = "Sag \\"Käse\\"\\njetzt",',
            "}",
        ]
    )
    assert list(gamedata.lua_table_pairs(text)) == [
        ("Fire at will!", "Feuer frei!"),
        ('Say "cheese"\nnow', 'Sag "Käse"\njetzt'),
    ]


def test_keyed_files_join_on_keys_in_english_order():
    english = "; comment\nhint2=Press the key.\\nThen wait.\nhint1=Hello there\nonly_en=Lonely\n"
    german = "\ufeffhint1=Hallo zusammen\nhint2=Drücke die Taste.\\nDann warte.\nonly_de=Allein\n"
    assert list(gamedata.keyed_pairs(english, german)) == [
        ("Press the key.\nThen wait.", "Drücke die Taste.\nDann warte."),
        ("Hello there", "Hallo zusammen"),
    ]


def test_stamp_description_is_the_first_plain_line_and_its_german():
    text = "A frog.\naf.utf8='n Padda.\nde.utf8=Ein Frosch.|\nen_GB.utf8=A frog.\n"
    assert gamedata.stamp_pair(text) == ("A frog.", "Ein Frosch.")
    assert gamedata.stamp_pair("A frog.\nfr.utf8=Une grenouille.\n") is None


def test_package_readers_find_their_files(tmp_path):
    locale = tmp_path / "usr/share/games/hedgewars/Data/Locale"
    locale.mkdir(parents=True)
    (locale / "de.lua").write_text('["Good luck!"] = "Viel Glück!",\n', encoding="utf-8")
    (locale / "missions_en.txt").write_text("m1.desc=Reach the goal.\n", encoding="utf-8")
    (locale / "missions_de.txt").write_text("m1.desc=Erreiche das Ziel.\n", encoding="utf-8")
    assert list(gamedata.read_hedgewars(tmp_path)) == [
        ("Good luck!", "Viel Glück!"),
        ("Reach the goal.", "Erreiche das Ziel."),
    ]
    lang = tmp_path / "usr/share/games/megaglest/data/lang"
    lang.mkdir(parents=True)
    (lang / "english.lng").write_text("Yes=Yes please\n", encoding="utf-8")
    (lang / "german.lng").write_bytes("Yes=Ja, bitte schön\n".encode("latin-1"))
    assert list(gamedata.read_megaglest(tmp_path)) == [("Yes please", "Ja, bitte schön")]
    strings = tmp_path / "usr/share/games/freecol/strings"
    strings.mkdir(parents=True)
    (strings / "FreeColMessages.properties").write_text(
        "# comment\nmodel.goods.cotton.name=Cotton\nmodel.unit.name={{plural:%number%|one=Unit}}\n"
        "model.goods.furs.name=Furs\n", encoding="utf-8")
    (strings / "FreeColMessages_de.properties").write_text(
        "model.goods.furs.name=Felle\nmodel.unit.name={{plural:%number%|one=Einheit}}\n"
        "model.goods.cotton.name=Baumwolle\n", encoding="utf-8")
    assert list(gamedata.read_freecol(tmp_path)) == [("Cotton", "Baumwolle"), ("Furs", "Felle")]
    stamps = tmp_path / "usr/share/tuxpaint/stamps/animals"
    stamps.mkdir(parents=True)
    (stamps / "frog.txt").write_text("A frog.\nde.utf8=Ein Frosch.\n", encoding="utf-8")
    assert list(gamedata.read_tuxpaint_stamps(tmp_path)) == [("A frog.", "Ein Frosch.")]
    po_dir = tmp_path / "mods/core/languages"
    po_dir.mkdir(parents=True)
    (po_dir / "data.de.po").write_text('msgid "Sword"\nmsgstr "Schwert"\n', encoding="utf-8")
    assert list(gamedata.po_reader("**/languages/data.de.po")(tmp_path)) == [("Sword", "Schwert")]


def test_general_packages_extract_only_german_text_and_the_copyright():
    for package, source in sources.DATA_SOURCES.items():
        assert sources.members_of(package) == source.members
        assert "./usr/share/doc/*" in source.members, package
        assert sources.domain_of(package) == "general"
    assert sources.members_of("naev-data") == sources.CATALOG_MEMBERS
    assert sources.members_of("libreoffice-l10n-de") == ()  # software: everything


def _qm_field(tag: int, payload: bytes) -> bytes:
    return bytes([tag]) + len(payload).to_bytes(4, "big") + payload


def test_qm_messages_pair_source_text_with_their_one_translation(tmp_path):
    """A compiled Qt catalog as lrelease lays it out (magic, then tagged blocks; in the
    messages block each message's fields end with tag 1): messages with a source text and one
    translation pair up; plural forms, missing translations and other blocks are skipped."""
    def message(*fields: bytes) -> bytes:
        return b"".join(fields) + b"\x01"

    messages = (
        message(_qm_field(3, "Hallo Welt".encode("utf-16-be")), b"\x05" + b"\x00\x01\x02\x03",
                _qm_field(6, b"Hello world"), _qm_field(7, b"MainView"))
        + message(_qm_field(3, "%n Datei".encode("utf-16-be")),  # plural forms: left out
                  _qm_field(3, "%n Dateien".encode("utf-16-be")), _qm_field(6, b"%n file(s)"))
        + message(b"\x03\xff\xff\xff\xff", _qm_field(6, b"Untranslated"))
        + message(_qm_field(3, "Schließe das Café".encode("utf-16-be")),
                  _qm_field(8, b"a button"), _qm_field(6, "Close the café".encode()))
    )
    data = (gamedata.QM_MAGIC + _qm_field(0x42, b"\x00" * 16) + _qm_field(0x69, messages)
            + _qm_field(0x2F, b"\x00" * 8))
    assert list(gamedata.qm_pairs(data)) == [("Hello world", "Hallo Welt"),
                                            ("Close the café", "Schließe das Café")]
    folder = tmp_path / "usr/share/gcompris-qt/translations"
    folder.mkdir(parents=True)
    (folder / "gcompris_de.qm").write_bytes(data)
    assert len(list(gamedata.read_qm("**/translations/gcompris_de.qm")(tmp_path))) == 2
    try:
        list(gamedata.qm_pairs(b"not a catalog"))
    except ValueError as exc:
        assert "magic" in str(exc)
    else:
        raise AssertionError("a file without the .qm magic number was read")


def test_freeorion_string_tables_join_on_keys_and_skip_texts_with_references(tmp_path):
    folder = tmp_path / "usr/share/games/freeorion/default/stringtables"
    folder.mkdir(parents=True)
    (folder / "en.txt").write_text(
        "English\n# a comment\n\n##\n## Common phrases\n##\n\nCANCEL\nCancel\n\n"
        "SP_HUMAN_DESC\n'''Humans walk on two legs.\n\nThey like to cook.\n'''\n\n"
        "ONE_LINE\n'''Quoted on one line.'''\n\nWITH_REF\n'''See [[SP_HUMAN]].'''\n\n"
        "ONLY_ENGLISH\nNot translated\n", encoding="utf-8")
    (folder / "de.txt").write_text(
        "Deutsch\n\nCANCEL\nAbbrechen\n\nSP_HUMAN_DESC\n'''Menschen gehen auf zwei Beinen.\n\n"
        "Sie kochen gern.'''\n\nONE_LINE\n'''In einer Zeile.'''\n\nWITH_REF\n"
        "'''Siehe [[SP_HUMAN]].'''\n", encoding="utf-8")
    assert list(gamedata.read_freeorion(tmp_path)) == [
        ("Cancel", "Abbrechen"),
        ("Humans walk on two legs.\n\nThey like to cook.",
         "Menschen gehen auf zwei Beinen.\n\nSie kochen gern."),
        ("Quoted on one line.", "In einer Zeile."),
    ]


def test_fillets_dialogues_pair_each_english_line_with_the_german_after_it(tmp_path):
    level = tmp_path / "usr/share/games/fillets-ng/script/airplane"
    level.mkdir(parents=True)
    (level / "dialogs_de.lua").write_text(
        '-- Intro\ndialogId("let-m-1", "font_small", "Seats. Why are there so many seats?")\n'
        'dialogStr("Sitze. Warum gibt es so viele Sitze?")\n\n'
        '--dialogId("let-m-2", "font_small", "Cut.")\n--dialogStr("Gestrichen.")\n'
        'dialogId("let-v-3", "font_big",\n"You mean \\"in the water\\".")\n'
        'dialogStr("Du meinst \\"im Wasser\\".")\n', encoding="utf-8")
    (level / "dialogs_de_CH.lua").write_text(
        'dialogId("let-m-1", "font_small", "Seats.")\ndialogStr("Sitzli.")\n', encoding="utf-8")
    assert list(gamedata.read_fillets(tmp_path)) == [
        ("Seats. Why are there so many seats?", "Sitze. Warum gibt es so viele Sitze?"),
        ('You mean "in the water".', 'Du meinst "im Wasser".'),
    ]


def _supernova_block(tag: bytes, lang: bytes, body: bytes) -> bytes:
    return tag + lang.ljust(4, b"\0") + struct.pack("<I", len(body)) + body


def _supernova_game(number: int, blocks: bytes) -> bytes:
    return bytes([number]) + struct.pack("<I", len(blocks)) + blocks


def test_supernova_pairs_the_english_and_german_messages_of_each_game_by_position(tmp_path):
    first = (_supernova_block(b"TEXT", b"de", "Gehe\0Das ist dein Bett.|Toll, nicht wahr?\0"
                              .encode("cp437"))
             + _supernova_block(b"IMG1", b"en", b"\x01\x02\x03")
             + _supernova_block(b"TEXT", b"en", b"Go\0This is your bed.|Great, isn't it?\0")
             + _supernova_block(b"TEXT", b"it", b"Vai\0Questo e il tuo letto.\0"))
    # the second game's lists differ in length: pairing by position would go wrong
    second = (_supernova_block(b"TEXT", b"de", "Tür\0Wand\0".encode("cp437"))
              + _supernova_block(b"TEXT", b"en", b"Door\0"))
    folder = tmp_path / "usr/share/scummvm"
    folder.mkdir(parents=True)
    (folder / "supernova.dat").write_bytes(
        b"MSN\x04" + _supernova_game(1, first) + _supernova_game(2, second))
    assert list(gamedata.read_supernova(tmp_path)) == [
        ("Go", "Gehe"),
        ("This is your bed. Great, isn't it?", "Das ist dein Bett. Toll, nicht wahr?"),
    ]
    with pytest.raises(ValueError, match="supernova"):
        list(gamedata.supernova_pairs(b"XYZ\x04"))


def _c4_scramble(header: bytes) -> bytes:
    out = bytearray(header)
    for i in range(0, len(out) - 2, 3):
        out[i], out[i + 2] = out[i + 2], out[i]
    return bytes(b ^ 0xED for b in out)


def _c4_group(entries: list[tuple[str, bytes, bool]], packed: bool) -> bytes:
    """An OpenClonk group: a scrambled header, one 316-byte record per entry, the contents."""
    header = b"RedWolf Design GrpFolder".ljust(28, b"\0") + struct.pack("<3i", 1, 2, len(entries))
    records, contents = b"", b""
    for name, data, child in entries:
        fields = struct.pack("<5i", 0, int(child), len(data), 0, len(contents))
        records += (name.encode().ljust(260, b"\0") + fields).ljust(316, b"\0")
        contents += data
    group = _c4_scramble(header.ljust(204, b"\0")) + records + contents
    return b"\x1e\x8c" + gzip.compress(group)[2:] if packed else group


def test_openclonk_groups_pair_string_tables_and_descriptions_in_nested_groups(tmp_path):
    cave = _c4_group([
        ("DescUS.txt", b"A dark cave.|Find the gold!", False),
        ("DescDE.txt", "Eine dunkle Höhle.|Finde das Gold!".encode(), False),
        # typed without umlauts throughout: the whole file is left out
        ("Door.ocd/StringTblUS.txt", b"Desc=Opens the door for you.", False),
        ("Door.ocd/StringTblDE.txt", b"Desc=Oeffnet fuer dich die Tuer.", False),
    ], packed=False)
    missions = _c4_group([
        ("StringTblUS.txt", b'# dialogue\nHello=Hi, how is my wipf doing?\nSay=Say \\"yes\\".\n'
                            b"Pic=Take the {{Shovel}}.\nLit=<c ffff00>Lit</c> from inside.\n"
                            b"Full=Full.\nOnly=English only\n", False),
        ("StringTblDE.txt", "Hello=Hey, wie geht es meinem Wipf?\nSay=Sag \\\"ja\\\".\n"
                            "Pic=Nimm die {{Shovel}}.\nLit=Von innen <c ffff00>beleuchtet</c>.\n"
                            "Full=Gefuellt.\nWarm=Schön warm.\n".encode(), False),
        ("Cave.ocs", cave, True),
    ], packed=True)
    folder = tmp_path / "usr/share/games/openclonk"
    (folder / "Music.ocg").mkdir(parents=True)  # an unpacked folder: not read
    (folder / "Missions.ocf").write_bytes(missions)
    assert list(gamedata.read_openclonk(tmp_path)) == [
        ("Hi, how is my wipf doing?", "Hey, wie geht es meinem Wipf?"),
        ('Say "yes".', 'Sag "ja".'),
        ("Lit from inside.", "Von innen beleuchtet."),
        ("A dark cave. Find the gold!", "Eine dunkle Höhle. Finde das Gold!"),
    ]
    with pytest.raises(ValueError, match="OpenClonk"):
        list(gamedata.c4group_files(b"\0" * 300))
