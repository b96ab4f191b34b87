"""Minimal reader (and writer, for tests) of GNU gettext ``.mo`` catalogs.

Only the standard library is used.  A catalog is returned as a list of
:class:`Message` records.  ``msgctxt`` is split off the ``"ctx\\x04msgid"`` key
and plural entries (``msgid\\0msgid_plural`` / ``msgstr[0]\\0msgstr[1]...``) are
kept together so that callers can pair the singular with ``msgstr[0]`` and the
plural with the matching German form.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

MAGIC_LE = 0x950412DE
MAGIC_BE = 0xDE120495


@dataclass(frozen=True)
class Message:
    """One catalog entry: context, English id(s) and translated string(s)."""

    msgid: str
    msgstr: tuple[str, ...]
    msgctxt: str | None = None
    msgid_plural: str | None = None


class MoError(ValueError):
    """Raised for files that are not valid .mo catalogs."""


def _byte_order(data: bytes) -> str:
    if len(data) < 28:
        raise MoError("file too short for a .mo header")
    (magic,) = struct.unpack("<I", data[:4])
    if magic == MAGIC_LE:
        return "<"
    if magic == MAGIC_BE:
        return ">"
    raise MoError(f"bad magic number {magic:#x}")


def _charset(header: str) -> str:
    for line in header.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() == "content-type" and "charset=" in value:
            return value.split("charset=", 1)[1].strip().split(";")[0] or "utf-8"
    return "utf-8"


def _strings(data: bytes, order: str, count: int, offset: int) -> list[bytes]:
    out = []
    for i in range(count):
        length, start = struct.unpack(order + "II", data[offset + 8 * i : offset + 8 * i + 8])
        if start + length > len(data):
            raise MoError("string table points past end of file")
        out.append(data[start : start + length])
    return out


def parse_mo(data: bytes) -> list[Message]:
    """Parse the bytes of a .mo file into messages (the header entry is skipped)."""
    order = _byte_order(data)
    _rev, count, orig_off, trans_off = struct.unpack(order + "4I", data[4:20])
    originals = _strings(data, order, count, orig_off)
    translations = _strings(data, order, count, trans_off)
    charset = "utf-8"
    for raw_id, raw_str in zip(originals, translations, strict=True):
        if raw_id == b"":
            charset = _charset(raw_str.decode("ascii", "replace"))
    messages = []
    for raw_id, raw_str in zip(originals, translations, strict=True):
        if raw_id == b"":
            continue
        messages.append(_message(raw_id, raw_str, charset))
    return messages


def _message(raw_id: bytes, raw_str: bytes, charset: str) -> Message:
    key = raw_id.decode(charset, "replace")
    ctxt = None
    if "\x04" in key:
        ctxt, key = key.split("\x04", 1)
    msgid, _, plural = key.partition("\x00")
    forms = tuple(raw_str.decode(charset, "replace").split("\x00"))
    return Message(msgid=msgid, msgstr=forms, msgctxt=ctxt, msgid_plural=plural or None)


def read_mo(path: str | Path) -> list[Message]:
    """Read and parse a .mo file from disk."""
    return parse_mo(Path(path).read_bytes())


def message_pairs(messages: list[Message]) -> list[tuple[str, str]]:
    """English/translation pairs of a catalog: singular with form 0, plural with form 1."""
    pairs = []
    for msg in messages:
        if msg.msgstr and msg.msgstr[0]:
            pairs.append((msg.msgid, msg.msgstr[0]))
        if msg.msgid_plural and len(msg.msgstr) > 1 and msg.msgstr[1]:
            pairs.append((msg.msgid_plural, msg.msgstr[1]))
    return pairs


def write_mo(messages: list[Message], charset: str = "utf-8") -> bytes:
    """Serialise messages as a little-endian .mo file (used by tests)."""
    header = f"Content-Type: text/plain; charset={charset}\n".encode(charset)
    entries = [(b"", header)]
    for msg in messages:
        key = msg.msgid
        if msg.msgid_plural is not None:
            key += "\x00" + msg.msgid_plural
        if msg.msgctxt is not None:
            key = msg.msgctxt + "\x04" + key
        entries.append((key.encode(charset), "\x00".join(msg.msgstr).encode(charset)))
    entries.sort(key=lambda item: item[0])
    return _pack(entries)


def _pack(entries: list[tuple[bytes, bytes]]) -> bytes:
    count = len(entries)
    orig_off = 28
    trans_off = orig_off + 8 * count
    data_off = trans_off + 8 * count
    blob = b""
    orig_table, trans_table = [], []
    for table, index in ((orig_table, 0), (trans_table, 1)):
        for entry in entries:
            table.append((len(entry[index]), data_off + len(blob)))
            blob += entry[index] + b"\x00"
    head = struct.pack("<7I", MAGIC_LE, 0, count, orig_off, trans_off, 0, data_off)
    tables = b"".join(struct.pack("<II", n, o) for n, o in orig_table + trans_table)
    return head + tables + blob
