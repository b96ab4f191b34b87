"""Cleaning and filtering rules applied to every English/German pair.

The rules are the same for every source so that the corpus is consistent:

* markup (known HTML/help tags) is stripped and entities are unescaped;
* accelerator markers (``_File``, ``&File``, ``~File``) are dropped on both sides;
* whitespace (including newlines and tabs) collapses to single spaces;
* pairs are dropped when the target equals the source, a side is a pure
  number/symbol/placeholder, a side looks like a path, URL or identifier, the
  length ratio is extreme, a segment is very long, or the placeholder multisets
  of the two sides differ.
"""

from __future__ import annotations

import html
import re
from collections import Counter

MAX_CHARS = 1000
MAX_WORDS = 200

_TAGS = (
    "a|abbr|ahelp|alt|b|big|body|br|caption|center|code|div|em|emph|embedvar|font|h[1-6]|head|"
    "help-id-missing|hr|html|i|image|img|item|kbd|li|link|menuitem|nobr|ol|p|pre|q|qt|s|samp|"
    "small|span|strike|strong|sub|sup|switchinline|table|tbody|td|th|tr|tt|u|ul|var|variable|"
    # KDE KUIT semantic markup
    "application|bcode|command|email|emphasis|envar|filename|icode|interface|link|message|"
    "nl|note|numid|para|placeholder|resource|shortcut|subtitle|title|warning"
)
TAG_RE = re.compile(rf"</?(?:{_TAGS})(?:\s[^<>]*)?/?>", re.IGNORECASE)
WS_RE = re.compile(r"\s+")

PLACEHOLDER_RE = re.compile(
    r"%(?:\d+\$)?[-+#0']*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|L|q|j|z|t|I64)?"
    r"[diouxXeEfFgGcsSpaA@]"  # printf
    r"|%\(\w+\)[-+ #0]*\d*(?:\.\d+)?[diouxXeEfFgGcrs]"  # python %(name)s
    r"|%[1-9]\d?"  # Qt / LibreOffice %1
    r"|%[A-Z][A-Z0-9_]{2,}%?"  # LibreOffice %PRODUCTNAME, %FOO%
    r"|\$\([\w.]+\)"  # $(VAR)
    r"|\$\{[\w.]+\}"  # ${VAR}
    r"|\$[1-9]"  # $1
    r"|\{[\w.]*\}"  # {name} / {0} / {}
    r"|\$[A-Z][A-Z0-9_]+\$?"  # $ARG1$ style
)
_ACCEL_RE = {
    "_": re.compile(r"(?<![\w_])_(?=\w)|(?<=[^\W_])_(?=[^\W\d_])"),
    "&": re.compile(r"&(?=[^\W_])"),
    "~": re.compile(r"~(?=[^\W_])"),
}
_PATHLIKE_RE = re.compile(r"^[\w.~-]*[/\\][\w./\\~*-]*$|://|^[\w.+-]+@[\w-]+\.[\w.]+$|^www\.")
_IDENT_RE = re.compile(r"^[\w.:-]*(?:[a-z][A-Z]|_|\.[a-z]{2,4}$|::|\(\))[\w.:()-]*$")
_LETTER_RE = re.compile(r"[^\W\d_]")


def strip_markup(text: str) -> str:
    """Remove known tags, unescape entities and collapse whitespace."""
    text = TAG_RE.sub(" ", text)
    text = html.unescape(text)
    text = text.replace("\u00a0", " ").replace("\u200b", "").replace("\u00ad", "")
    return WS_RE.sub(" ", text).strip()


_POSITION_RE = re.compile(r"^%\d+\$")


def placeholders(text: str) -> Counter:
    """Multiset of the placeholders of a string (``%2$s`` counts as ``%s``: reordering is fine)."""
    return Counter(_POSITION_RE.sub("%", p) for p in PLACEHOLDER_RE.findall(text))


_MNEMONIC_WORD_RE = re.compile(r"^[A-Z][a-z]*_[a-z]+$")


def _single_marker(text: str, char: str) -> bool:
    return len(_ACCEL_RE[char].findall(text)) == 1 and text.count(char) == 1


def _underscore_applies(src: str) -> bool:
    """``_`` is a mnemonic in phrases and capitalised words (``A_ction``), not in ``file_name``."""
    return " " in src or src.startswith("_") or bool(_MNEMONIC_WORD_RE.match(src))


def drop_accelerators(src: str, tgt: str) -> tuple[str, str]:
    """Drop mnemonic markers (``_``, ``&``, ``~``) on both sides.

    A marker is removed when it is the only occurrence of its character in a
    string and precedes a letter; ``&&`` (an escaped ampersand) becomes ``&``.
    The same rule runs on both sides, so ``_Open``/``Ö_ffnen`` becomes
    ``Open``/``Öffnen`` while ``file_name`` style identifiers are kept (and
    later dropped as identifiers).
    """
    src, tgt = src.replace("&&", "\x00"), tgt.replace("&&", "\x00")
    for char, pattern in _ACCEL_RE.items():
        if char not in src and char not in tgt:
            continue
        if char == "_" and not _underscore_applies(src):
            continue
        if _single_marker(src, char):
            src = pattern.sub("", src, count=1)
        if _single_marker(tgt, char):
            tgt = pattern.sub("", tgt, count=1)
    return src.replace("\x00", "&"), tgt.replace("\x00", "&")


def _cjk_accel(text: str) -> str:
    """Drop trailing accelerator hints like ``(_F)`` or ``(&F)``."""
    return re.sub(r"\s*\([_&~]\w\)", "", text)


def clean_pair(src: str, tgt: str, markup: bool = True) -> tuple[str, str]:
    """Normalise one pair (markup, entities, accelerators, whitespace)."""
    if markup:
        src, tgt = strip_markup(src), strip_markup(tgt)
    else:
        src, tgt = WS_RE.sub(" ", src).strip(), WS_RE.sub(" ", tgt).strip()
    src, tgt = drop_accelerators(_cjk_accel(src), _cjk_accel(tgt))
    src, tgt = src.strip(" :"), tgt.strip(" :")
    return WS_RE.sub(" ", src).strip(), WS_RE.sub(" ", tgt).strip()


def _junk(text: str) -> str | None:
    """Reason why one side is not a usable segment, or None."""
    if not text:
        return "empty"
    if len(text) > MAX_CHARS or len(text.split()) > MAX_WORDS:
        return "too_long"
    rest = PLACEHOLDER_RE.sub("", text)
    if not _LETTER_RE.search(rest):
        return "no_letters"
    if " " not in text and (_PATHLIKE_RE.search(text) or _IDENT_RE.match(text)):
        return "path_or_identifier"
    if "://" in text or re.search(r"\b\w+\.(?:png|svg|xml|html?|so|py|desktop|conf)\b", text):
        return "path_or_identifier"
    if text.startswith(("-", ".", "/", "#")) and " " not in text:
        return "option_or_symbol"
    if re.match(r"^/[^/\s][^/]*/", text) or text.startswith("="):
        return "path_or_formula"
    if re.search(r"\bgtk-|\bstock_|\bGtk[A-Z]", text):
        return "code_like"
    if len(text.split()) < 8 and re.search(r"[<>{}\[\]=|;]{2,}", text):
        return "code_like"
    return None


_EN_WORDS = re.compile(r"\b(?:the|and|of|to|is|are|with|this|that|for|you|your|from|which|be)\b")
_DE_WORDS = re.compile(
    r"\b(?:der|die|das|und|ist|sind|mit|nicht|von|zu|für|sie|ein|eine|den|dem|wird|werden|auf)\b",
    re.IGNORECASE,
)


def looks_english(text: str) -> bool:
    """True when a (supposedly German) segment reads as English: a partial translation."""
    if len(text.split()) < 4:
        return False
    english = len(_EN_WORDS.findall(text))
    return english >= 2 and english > len(_DE_WORDS.findall(text))


def _ratio_bad(src: str, tgt: str) -> bool:
    a, b = len(src), len(tgt)
    lo, hi = min(a, b), max(a, b)
    if hi <= 12:
        return False
    if hi <= 40:
        return hi > 4 * lo
    return hi > 2.5 * lo


CREDIT_MSGIDS = frozenset(
    {
        "translator-credits",
        "translator_credits",
        "translator-credits.",
        "Your names",
        "Your emails",
        "NAME OF TRANSLATORS",
        "EMAIL OF TRANSLATORS",
        "ROLES OF TRANSLATORS",
        "CREDIT FOR TRANSLATORS",
    }
)


def reject_reason(src: str, tgt: str) -> str | None:
    """Why a cleaned pair must be dropped, or None if it is kept."""
    if src in CREDIT_MSGIDS:
        return "translator_credits"
    for side in (src, tgt):
        reason = _junk(side)
        if reason:
            return reason
    if src == tgt or src.casefold() == tgt.casefold():
        return "untranslated"
    if looks_english(tgt) or (len(src) > 15 and len(src.split()) > 2 and src in tgt):
        return "partly_untranslated"
    if _ratio_bad(src, tgt):
        return "length_ratio"
    if placeholders(src) != placeholders(tgt):
        return "placeholder_mismatch"
    if src.count("\t") or tgt.count("\t"):
        return "tab"
    return None
