"""Readers for the translation files games ship besides gettext ``.mo`` catalogs.

Each reader takes an unpacked package directory and yields raw (English, German)
pairs; cleaning and filtering happen in the builder as for every other source.

* ``.po`` catalogs (flare, supertux, pingus, frozen-bubble): ``msgid``/``msgstr``
  with continuation lines; fuzzy entries are left out (gettext does not use them
  either), plural entries pair the singular with form 0 and the plural with form 1.
* Lua tables (hedgewars ``Locale/de.lua``): ``["English"] = "German",`` lines.
* Lua dialogue scripts (Fish Fillets ``script/<level>/dialogs_de.lua``): each
  ``dialogId("id", "font", "English")`` call followed by ``dialogStr("German")``.
* Keyed files (megaglest ``*_english.lng``/``*_german.lng``, hedgewars
  ``campaigns_en.txt``/``campaigns_de.txt``, FreeCol's ``FreeColMessages.properties``/
  ``FreeColMessages_de.properties``): ``key=text`` lines; an English and a German file are
  joined on the key.
* Tux Paint stamp descriptions: the first line of a stamp's ``.txt`` is English,
  ``de.utf8=...`` its German text.
* Qt ``.qm`` catalogs (gcompris ``gcompris_de.qm``): compiled messages that keep their
  English source text beside the translation.
* FreeOrion string tables (``stringtables/en.txt``, ``de.txt``): a key line, then its text on
  the next line or between ``'''`` marks over several lines; the two files are joined on the
  key. Texts that pull in other entries (``[[KEY]]``) are left out: they are not whole
  sentences.
* OpenClonk's groups (``Objects.ocd``, ``Missions.ocf``...): packed archives holding, per
  object and scenario, ``StringTblUS.txt``/``StringTblDE.txt`` (``key=text``, joined on the
  key) and ``DescUS.txt``/``DescDE.txt`` (one description each).
* ScummVM's ``supernova.dat`` (Mission Supernova, a German adventure, with its English
  translation): per game, the German and the English messages in the same order.
"""

from __future__ import annotations

import gzip
import re
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path

from .gettext import Message, message_pairs

Pair = tuple[str, str]

# ------------------------------------------------------------------ .po catalogs

_PO_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "r": "\r"}
_PO_ESCAPE_RE = re.compile(r"\\(.)")
_PO_LINE_RE = re.compile(r'^(msgctxt|msgid_plural|msgid|msgstr(?:\[\d+\])?)\s+"(.*)"\s*$')
_PO_CONT_RE = re.compile(r'^"(.*)"\s*$')


def _po_unescape(text: str) -> str:
    return _PO_ESCAPE_RE.sub(lambda m: _PO_ESCAPES.get(m.group(1), m.group(1)), text)


def _po_message(fields: dict[str, str]) -> Message | None:
    if "msgid" not in fields or not fields["msgid"]:  # the header has an empty msgid
        return None
    forms = [fields[k] for k in sorted(fields, key=_form_index) if k.startswith("msgstr")]
    return Message(
        msgid=fields["msgid"],
        msgstr=tuple(forms),
        msgctxt=fields.get("msgctxt"),
        msgid_plural=fields.get("msgid_plural"),
    )


def _form_index(key: str) -> int:
    match = re.search(r"\[(\d+)\]", key)
    return int(match.group(1)) if match else 0


def parse_po(text: str) -> list[Message]:
    """Messages of a .po file; fuzzy and obsolete (``#~``) entries are skipped."""
    messages: list[Message] = []
    fields: dict[str, str] = {}
    key: str | None = None
    fuzzy = False

    def flush() -> None:
        nonlocal fields, key, fuzzy
        message = _po_message(fields)
        if message is not None and not fuzzy:
            messages.append(message)
        fields, key, fuzzy = {}, None, False

    for line in text.splitlines():
        line = line.strip()
        if not line:
            if fields:
                flush()
            continue
        if line.startswith("#"):
            if fields and key is not None and not line.startswith("#~"):
                flush()  # a comment after a complete entry starts the next one
            if line.startswith("#,") and "fuzzy" in line:
                fuzzy = True
            continue
        match = _PO_LINE_RE.match(line)
        if match:
            if match.group(1) in ("msgctxt", "msgid") and "msgid" in fields:
                flush()
            key = match.group(1)
            fields[key] = _po_unescape(match.group(2))
            continue
        match = _PO_CONT_RE.match(line)
        if match and key is not None:
            fields[key] += _po_unescape(match.group(1))
    if fields:
        flush()
    return messages


def po_pairs(paths: Iterable[Path]) -> Iterator[Pair]:
    """(English, German) pairs of German .po files."""
    for path in paths:
        yield from message_pairs(parse_po(path.read_text(encoding="utf-8", errors="replace")))


# ------------------------------------------------------------------ Lua tables

_LUA_STRING = r'"((?:[^"\\]|\\.)*)"'
_LUA_ENTRY_RE = re.compile(rf"^\s*\[{_LUA_STRING}\]\s*=\s*{_LUA_STRING}\s*,?")
_LUA_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "'": "'", "\\": "\\"}


def _lua_unescape(text: str) -> str:
    return _PO_ESCAPE_RE.sub(lambda m: _LUA_ESCAPES.get(m.group(1), m.group(1)), text)


def lua_table_pairs(text: str) -> Iterator[Pair]:
    """(English, German) pairs of a ``["English"] = "German",`` table; commented-out lines
    (``--``) are untranslated entries and are skipped."""
    for line in text.splitlines():
        match = _LUA_ENTRY_RE.match(line)
        if match:
            yield _lua_unescape(match.group(1)), _lua_unescape(match.group(2))


_DIALOG_RE = re.compile(
    rf"dialogId\(\s*{_LUA_STRING}\s*,\s*{_LUA_STRING}\s*,\s*{_LUA_STRING}\s*\)"
    rf"\s*dialogStr\(\s*{_LUA_STRING}\s*\)"
)


def dialog_pairs(text: str) -> Iterator[Pair]:
    """(English, German) pairs of a Fish Fillets ``dialogs_de.lua``: the English line is the
    third argument of ``dialogId``, its German the ``dialogStr`` right after it (either may
    wrap onto the next line). Commented-out calls (``--``) are skipped."""
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    for match in _DIALOG_RE.finditer(text):
        yield _lua_unescape(match.group(3)), _lua_unescape(match.group(4))


# ------------------------------------------------------------------ key=text files


def keyed_texts(text: str) -> dict[str, str]:
    """``key=text`` lines as a dict (``\\n`` in a text becomes a line break; comments and
    lines without ``=`` are skipped)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.lstrip("\ufeff")
        if not line.strip() or line.lstrip().startswith(("#", ";", "//")) or "=" not in line:
            continue
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip().replace("\\n", "\n")
    return out


def keyed_pairs(english: str, german: str) -> Iterator[Pair]:
    """Pairs of two keyed files joined on their keys, in the English file's order."""
    de = keyed_texts(german)
    for key, en in keyed_texts(english).items():
        if key in de:
            yield en, de[key]


def _read(path: Path) -> str:
    return _decode(path.read_bytes())


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")  # older megaglest files


def keyed_file_pairs(files: Iterable[tuple[Path, Path]]) -> Iterator[Pair]:
    """Pairs of (English file, German file) couples."""
    for en, de in files:
        yield from keyed_pairs(_read(en), _read(de))


# ------------------------------------------------------------------ Tux Paint stamps


def stamp_pair(text: str) -> Pair | None:
    """(English, German) description of one stamp's .txt file, or None without German."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    english = next((line for line in lines if not re.match(r"^[\w@]+(?:\.utf8)?=", line)), None)
    german = next((line.split("=", 1)[1] for line in lines if line.startswith("de.utf8=")), None)
    if english and german:
        return english, german.rstrip("|").strip()
    return None


# ------------------------------------------------------------------ Qt .qm catalogs

QM_MAGIC = bytes.fromhex("3cb86418caef9c95cd211cbf60a1bddd")
_QM_MESSAGES = 0x69  # the block of messages; the others (hashes, contexts, rules) are skipped
# tags of a message's fields (Qt's translator format)
_QM_END, _QM_TRANSLATION, _QM_OBSOLETE1, _QM_SOURCE, _QM_OBSOLETE2 = 1, 3, 5, 6, 9
_QM_LENGTH_FIELDS = {2, 4, 6, 7, 8}  # source, context and comment: a length, then bytes
_QM_NULL = 0xFFFFFFFF  # a translation's length when it has none


def qm_pairs(data: bytes) -> Iterator[Pair]:
    """(source text, translation) of each message of a compiled Qt catalog that keeps its
    source texts and has one translation (messages with plural forms are left out: their
    source stands for several forms)."""
    if not data.startswith(QM_MAGIC):
        raise ValueError("not a Qt .qm catalog (wrong magic number)")
    at = len(QM_MAGIC)
    while at + 5 <= len(data):
        tag, length = data[at], struct.unpack_from(">I", data, at + 1)[0]
        at += 5
        if tag == _QM_MESSAGES:
            yield from _qm_messages(data[at:at + length])
        at += length


def _qm_messages(block: bytes) -> Iterator[Pair]:
    at, source, translations = 0, None, []
    while at < len(block):
        tag = block[at]
        at += 1
        if tag == _QM_END:
            if source and len(translations) == 1 and translations[0]:
                yield source, translations[0]
            source, translations = None, []
        elif tag == _QM_TRANSLATION:
            length = struct.unpack_from(">I", block, at)[0]
            at += 4
            if length != _QM_NULL:
                translations.append(block[at:at + length].decode("utf-16-be", "replace"))
                at += length
        elif tag in _QM_LENGTH_FIELDS:
            length = struct.unpack_from(">I", block, at)[0]
            if tag == _QM_SOURCE:
                source = block[at + 4:at + 4 + length].decode("utf-8", "replace")
            at += 4 + length
        elif tag in (_QM_OBSOLETE1, _QM_OBSOLETE2):  # four bytes
            at += 4
        else:
            raise ValueError(f"unknown field tag {tag} in a .qm message")


def read_qm(pattern: str):
    """A reader of the .qm catalogs matching ``pattern`` below the package root."""

    def read(root: Path) -> Iterator[Pair]:
        for path in _files(root, pattern):
            yield from qm_pairs(path.read_bytes())

    return read


# ------------------------------------------------------------------ OpenClonk groups

C4GROUP_MAGIC = b"\x1e\x8c"  # a gzip stream with its first two bytes changed
_C4_ID = b"RedWolf Design GrpFolder"
_C4_HEADER, _C4_RECORD = 204, 316  # bytes of a group's header and of one entry's record
_C4_MARKUP = re.compile(r"</?(?:c(?: [0-9a-fA-F]{6,8})?|i)>")  # colour and italics tags
# Some of its German texts are typed without umlauts ("fuer", "Gegenstaende", "Tuer"): words
# with ae, oe or ue inside, except where German spells them so (neue, Feuer, Bauer, quer,
# aktuell, zuerst, Aerobic). Such text would teach the model that spelling.
_NO_UMLAUTS = re.compile(
    r"(?i)\b(?!zuer)(?:(?:ue|oe|ae(?!r))\w*"
    r"|\w+?(?:ae|oe|(?<![aeq])ue(?!ll)|(?<![aeqtnsxdv])uell)\w*)")
_UMLAUTS = re.compile("[äöüÄÖÜß]")


def _c4_unscramble(header: bytes) -> bytes:
    """A group's header is stored XOR 0xED, the first and third of every three bytes swapped."""
    out = bytearray(b ^ 0xED for b in header)
    for i in range(0, len(out) - 2, 3):
        out[i], out[i + 2] = out[i + 2], out[i]
    return bytes(out)


def c4group_files(data: bytes, prefix: str = "") -> Iterator[tuple[str, bytes]]:
    """(path, contents) of every file in an OpenClonk group, nested groups included.

    A packed group is gzip with its magic changed; inside, a scrambled header (an id, two
    versions, the entry count), one fixed-size record per entry (a NUL-padded name of 260
    bytes, then little-endian: packed flag, child-group flag, size, a reserved word, offset
    from the end of the records), then the contents. A nested group is stored unpacked."""
    if data.startswith(C4GROUP_MAGIC):
        data = gzip.decompress(b"\x1f\x8b" + data[2:])
    header = _c4_unscramble(data[:_C4_HEADER])
    if not header.startswith(_C4_ID):
        raise ValueError("not an OpenClonk group (wrong header)")
    count = struct.unpack_from("<i", header, 36)[0]
    start = _C4_HEADER + count * _C4_RECORD
    for k in range(count):
        record = data[_C4_HEADER + k * _C4_RECORD:_C4_HEADER + (k + 1) * _C4_RECORD]
        name = record[:260].split(b"\0")[0].decode("latin-1")
        _packed, child, size, _reserved, offset = struct.unpack_from("<5i", record, 260)
        contents = data[start + offset:start + offset + size]
        if child:
            yield from c4group_files(contents, f"{prefix}{name}/")
        else:
            yield prefix + name, contents


def _clonk_text(text: str) -> str:
    """``|`` is the game's line break, ``\\"`` a quote escaped for the scripts that use it."""
    return _C4_MARKUP.sub("", text).replace("|", " ").replace('\\"', '"').strip()


def clonk_pairs(files: dict[str, bytes]) -> Iterator[Pair]:
    """(English, German) texts of a group's string tables and descriptions. Left out: texts
    that show an object's picture (``{{Name}}``: the picture is part of the sentence), German
    texts typed without umlauts, and whole German files typed so (more such words than
    umlauts: their other texts are most likely so typed too)."""
    for path, german in files.items():
        if not path.endswith(("StringTblDE.txt", "DescDE.txt")):
            continue
        english = files.get(path[:-len("DE.txt")] + "US.txt")
        if english is None:
            continue
        en, de = _decode(english), _decode(german)
        if len(_NO_UMLAUTS.findall(de)) > len(_UMLAUTS.findall(de)):
            continue
        texts = keyed_pairs(en, de) if path.endswith("StringTblDE.txt") else [(en, de)]
        for en_text, de_text in texts:
            if "{{" not in en_text + de_text and not _NO_UMLAUTS.search(de_text):
                yield _clonk_text(en_text), _clonk_text(de_text)


def read_openclonk(root: Path) -> Iterator[Pair]:
    for path in _files(root, "usr/share/games/openclonk/*.oc?"):
        yield from clonk_pairs(dict(c4group_files(path.read_bytes())))


# ------------------------------------------------------------------ ScummVM's supernova.dat

SUPERNOVA_MAGIC = b"MSN"
_SUPERNOVA_TEXT = b"TEXT"


def supernova_texts(data: bytes) -> dict[int, dict[str, list[str]]]:
    """The messages of each game in ScummVM's ``supernova.dat``, by game and language.

    The file is ``MSN`` and a version byte, then one part per game: the game's number (a
    byte), the part's length (four bytes, little-endian), then blocks, each a four-byte tag,
    a language code padded to four bytes with NULs, a length and the body. A ``TEXT``
    body holds the game's messages, NUL-separated, in code page 437 (the DOS game's); the
    other blocks (images, music, the manual) are skipped."""
    if not data.startswith(SUPERNOVA_MAGIC):
        raise ValueError("not ScummVM's supernova.dat (wrong magic)")
    texts: dict[int, dict[str, list[str]]] = {}
    at = len(SUPERNOVA_MAGIC) + 1
    while at + 5 <= len(data):
        game, length = data[at], struct.unpack_from("<I", data, at + 1)[0]
        at, end = at + 5, at + 5 + length
        while at + 12 <= end:
            tag, lang = data[at:at + 4], data[at + 4:at + 8].rstrip(b"\0").decode("ascii")
            size = struct.unpack_from("<I", data, at + 8)[0]
            if tag == _SUPERNOVA_TEXT:
                body = data[at + 12:at + 12 + size].decode("cp437")
                texts.setdefault(game, {})[lang] = body.split("\0")
            at += 12 + size
        at = end
    return texts


def supernova_pairs(data: bytes) -> Iterator[Pair]:
    """(English, German) messages of each game, paired by position; a game whose two lists
    differ in length is left out (its messages would pair wrongly). ``|`` is the game's
    line break: a space here."""
    for languages in supernova_texts(data).values():
        english, german = languages.get("en", []), languages.get("de", [])
        if len(english) == len(german):
            for en, de in zip(english, german, strict=True):
                if en and de:  # each list ends with a NUL: an empty last message
                    yield en.replace("|", " "), de.replace("|", " ")


def read_supernova(root: Path) -> Iterator[Pair]:
    for path in _files(root, "usr/share/scummvm/supernova.dat"):
        yield from supernova_pairs(path.read_bytes())


# ------------------------------------------------------------------ FreeOrion string tables

_STRINGTABLE_KEY = re.compile(r"^[A-Za-z0-9_]+$")
_QUOTES = "'''"


def stringtable(text: str) -> dict[str, str]:
    """key -> text of a FreeOrion string table (its first line names the language)."""
    lines, table, at = text.splitlines(), {}, 1
    while at < len(lines):
        key = lines[at].strip()
        at += 1
        if not _STRINGTABLE_KEY.match(key) or at >= len(lines):
            continue  # blank lines, comments, section marks
        value = lines[at]
        at += 1
        if value.startswith(_QUOTES):
            parts = [value[len(_QUOTES):]]
            while not (parts[-1].endswith(_QUOTES) and (len(parts) > 1 or len(parts[0]) >= 3)):
                if at >= len(lines):
                    break
                parts.append(lines[at])
                at += 1
            value = "\n".join(parts).removesuffix(_QUOTES)
        table[key] = value.strip()
    return table


def read_freeorion(root: Path) -> Iterator[Pair]:
    folder = root / "usr/share/games/freeorion/default/stringtables"
    english, german = (stringtable(_read(folder / f"{lang}.txt")) for lang in ("en", "de"))
    for key, en in english.items():
        de = german.get(key)
        if de and "[[" not in en and "[[" not in de:
            yield en, de


# ------------------------------------------------------------------ per package


def _files(root: Path, pattern: str) -> list[Path]:
    return sorted(p for p in root.glob(pattern) if p.is_file())


def _english_twins(root: Path, pattern: str, de: str, en: str) -> list[tuple[Path, Path]]:
    """(English, German) file couples: each German file with the English file named alike."""
    couples = []
    for german in _files(root, pattern):
        english = german.with_name(german.name.replace(de, en))
        if english.is_file():
            couples.append((english, german))
    return couples


def read_hedgewars(root: Path) -> Iterator[Pair]:
    locale = root / "usr/share/games/hedgewars/Data/Locale"
    yield from lua_table_pairs(_read(locale / "de.lua"))
    yield from keyed_file_pairs(_english_twins(locale, "*_de.txt", "_de.txt", "_en.txt"))


def read_megaglest(root: Path) -> Iterator[Pair]:
    couples = _english_twins(root, "usr/share/games/megaglest/**/*german.lng", "german", "english")
    yield from keyed_file_pairs(couples)


def read_freecol(root: Path) -> Iterator[Pair]:
    """FreeCol's messages; those in its template language (``{{plural:...}}``, ``{{tag:...}}``)
    are left out: their text is markup, not sentences."""
    couples = _english_twins(root, "usr/share/games/freecol/strings/FreeColMessages_de.properties",
                             "_de.properties", ".properties")
    for en, de in keyed_file_pairs(couples):
        if "{{" not in en and "{{" not in de:
            yield en, de


def read_fillets(root: Path) -> Iterator[Pair]:
    """Fish Fillets' level dialogues (the Swiss German files, ``dialogs_de_CH.lua``, left out)."""
    for path in _files(root, "usr/share/games/fillets-ng/script/*/dialogs_de.lua"):
        yield from dialog_pairs(_read(path))


def read_tuxpaint_stamps(root: Path) -> Iterator[Pair]:
    for path in _files(root, "usr/share/tuxpaint/stamps/**/*.txt"):
        pair = stamp_pair(_read(path))
        if pair:
            yield pair


def po_reader(pattern: str):
    """A reader of the German .po files matching ``pattern`` below the package root."""

    def read(root: Path) -> Iterator[Pair]:
        yield from po_pairs(_files(root, pattern))

    return read
