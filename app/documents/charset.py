"""Which encoding a text file is read in, and how its translation is written back.

UTF-8 (with or without a BOM) and UTF-16/32 with a BOM are read as such. A file that is not
UTF-8 was most often saved by an older editor or subtitle tool in the Windows code page of its
language (windows-1252 for English, German, French...; windows-1250 for Polish or Czech;
windows-1251 for Russian): it is read in the code page of the source language, or in the one an
HTML page declares (`<meta charset>`). The translation goes back in the encoding it was read in;
where it holds a character that encoding lacks, HTML writes that character as a character
reference and the other formats are written in UTF-8 with a BOM (so that editors and players
tell), instead of losing it."""

from __future__ import annotations

import codecs
import re

from app.documents import InvalidDocument

_BOMS = ((b"\xef\xbb\xbf", "utf-8-sig"), (b"\xff\xfe\0\0", "utf-32"), (b"\0\0\xfe\xff", "utf-32"),
         (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16"))  # UTF-32's first: it starts as UTF-16's
# the Windows code page of each language that has one other than windows-1252
_CODE_PAGES = {language: page for page, languages in {
    "cp1250": "bs cs hr hu pl ro sk sl sq",
    "cp1251": "be bg kk ky mk mn ru tg tt uk",
    "cp1253": "el",
    "cp1254": "az tr",
    "cp1255": "he",
    "cp1256": "ar fa ur",
    "cp1257": "et lt lv",
    "cp1258": "vi",
    "cp874": "th",
    "cp932": "ja",
    "cp936": "zh",
    "cp949": "ko",
    "cp950": "zt",  # LibreTranslate's code for Chinese in traditional characters
}.items() for language in languages.split()}
# a page's declared charset, in its first bytes (HTML reads the declaration within 1,024)
_META_CHARSET = re.compile(rb"""<meta\s[^>]*charset\s*=\s*["']?\s*([\w.:-]+)""", re.IGNORECASE)
# HTML reads these labels as windows-1252 (the WHATWG Encoding standard)
_AS_1252 = {"ascii", "latin-1", "iso8859-1"}


def code_page(language: str | None) -> str:
    """The Windows code page a file in `language` (a code: "de", "pt-BR", "zh-Hant") was most
    likely saved in; windows-1252 for the languages written in it and when none is known."""
    primary = (language or "").replace("_", "-").split("-")[0].lower()
    if primary == "zh" and language and language.lower().split("-")[-1] in ("hant", "tw", "hk"):
        return "cp950"
    return _CODE_PAGES.get(primary, "cp1252")


def declared_in_html(data: bytes) -> str | None:
    """The charset an HTML page declares in its first 1,024 bytes, as a Python codec name; None
    if none, an unknown one, or a UTF-16/32 one (a page read as bytes cannot be)."""
    found = _META_CHARSET.search(data[:1024])
    if not found:
        return None
    try:
        name = codecs.lookup(found.group(1).decode("ascii")).name
    except (LookupError, UnicodeDecodeError):
        return None
    if name.startswith(("utf-16", "utf-32")):
        return None
    return "cp1252" if name in _AS_1252 else name


def decode(data: bytes, legacy: str = "cp1252", declared: str | None = None) -> tuple[str, str]:
    """(text, encoding): by its BOM; else UTF-8 when it is (a pure ASCII file takes the
    encoding it declares, which its translation is written in); else the `declared` encoding,
    else the `legacy` code page (code_page of the source language)."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data.decode(encoding), encoding
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        at = exc.start
    else:
        return text, declared if declared and text.isascii() else "utf-8"
    tried = [e for e in dict.fromkeys((declared, legacy)) if e]
    for encoding in tried:
        try:
            return data.decode(encoding), encoding
        except UnicodeDecodeError:
            continue
    names = " nor ".join(_name(e) for e in tried)
    raise InvalidDocument(f"the file is neither UTF-8 nor {names} text (byte {at}); "
                          "save it as UTF-8, or give its source language")


def encode(text: str, encoding: str, markup: bool = False) -> bytes:
    """The text in the encoding it was read in (decode); a character that encoding lacks is a
    character reference in markup, else the whole text goes in UTF-8 with a BOM."""
    try:
        return text.encode(encoding)
    except UnicodeEncodeError:
        if markup:
            return text.encode(encoding, "xmlcharrefreplace")
        return text.encode("utf-8-sig")


def _name(encoding: str) -> str:
    """windows-1252 for cp1252: the name people know a Windows code page by."""
    return f"windows-{encoding[2:]}" if re.fullmatch(r"cp125\d", encoding) else encoding
