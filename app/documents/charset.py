"""Which encoding a text file is read in, and how its translation is written back.

UTF-8 (with or without a BOM) and UTF-16/32 with a BOM are read as such. A file that is not
UTF-8 was most often saved by an older editor or subtitle tool in the Windows code page of its
language (windows-1252 for English, German, French...; windows-1250 for Polish or Czech;
windows-1251 for Russian): it is read in the code page of the source language, or in the one an
HTML page declares (`<meta charset>`). The translation goes back in the encoding it was read in;
where it holds a character that encoding lacks, HTML writes that character as a character
reference and the other formats are written in UTF-8 with a BOM (so that editors and players
tell), instead of losing it.

Where the source language is not given ("auto"), the code page is guessed from the bytes (guess):
each single-byte Windows code page that can read the file reads its words, and the one whose
letters look most like one language's alphabet wins; where several do as well, the one whose
letter pairs and words look most like that language's."""

from __future__ import annotations

import codecs
import functools
import itertools
import re
import sys
import unicodedata
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

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


def code_page(language: str | None) -> str | None:
    """The Windows code page a file in `language` (a code: "de", "pt-BR", "zh-Hant") was most
    likely saved in; windows-1252 for the languages written in it and for a code it does not
    know; None for no language ("auto"): the bytes tell (guess)."""
    if not language or language == "auto":
        return None
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


def decode(data: bytes, legacy: str | None = "cp1252", declared: str | None = None
           ) -> tuple[str, str]:
    """(text, encoding): by its BOM; else UTF-8 when it is (a pure ASCII file takes the
    encoding it declares, which its translation is written in); else the `declared` encoding,
    else the `legacy` code page (code_page of the source language; None: the one guessed from
    the bytes, windows-1252 where none looks right)."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data.decode(encoding), encoding
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        at = exc.start
    else:
        return text, declared if declared and text.isascii() else "utf-8"
    tried: list[str] = []
    for encoding in _candidates(data, legacy, declared):
        if encoding in tried:
            continue
        tried.append(encoding)
        try:
            return data.decode(encoding), encoding
        except UnicodeDecodeError:
            continue
    names = " nor ".join(_name(e) for e in tried)
    raise InvalidDocument(f"the file is neither UTF-8 nor {names} text (byte {at}); "
                          "save it as UTF-8, or give its source language")


def _candidates(data: bytes, legacy: str | None, declared: str | None) -> Iterator[str]:
    """The encodings a file that is not UTF-8 is tried in, in order: a generator, so that the
    guess is made only where the declared encoding does not read the file."""
    if declared:
        yield declared
    yield legacy or guess(data) or "cp1252"


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


# Guessing the code page. A file in the wrong single-byte code page reads as letters of another
# alphabet, or of the right alphabet in combinations no language has: Russian read as
# windows-1252 is "Ïðèâåò", Polish "b³¹d", Czech "pøeèíst". Each language below lists the
# letters beyond ASCII it is written with (lower case; capitals are added); a decoding's
# non-ASCII letters are counted as explained by the language of its code page that explains
# most of them, and the code page whose decoding explains most, less what it leaves
# unexplained, wins. Letters also count as unexplained where a word shows its decoding wrong:
# a capital right after a small letter ("КблзмЭсб": Greek read as windows-1251), or a letter
# of another script in a word with Latin letters ("Cafй": "Café" read as windows-1251). Where
# pages tie, the likelier letter pairs and the commonest words of the language tell (_fit).
def _span(first: str, last: str) -> str:
    return "".join(map(chr, range(ord(first), ord(last) + 1)))


def _vietnamese() -> str:
    """Vietnamese's letters, composed and as windows-1258 writes them (a base letter followed
    by a combining tone mark)."""
    tones = ("", "\u0300", "\u0301", "\u0303", "\u0309", "\u0323")
    return "đ" + "".join(tones) + "".join(unicodedata.normalize("NFC", base + tone)
                                          for base in "aăâeêioôơuưy" for tone in tones)


_CYRILLIC_RU = "абвгдеёжзийклмнопрстуфхцчшщъыьэюя"
_ALPHABETS = {
    # windows-1252
    "en": "", "de": "äöüß", "fr": "àâæçéèêëîïôœùûüÿ", "es": "áéíñóúü", "pt": "áâãàçéêíóôõú",
    "it": "àèéìíîòóùú", "nl": "áéèëïóöüú", "ca": "àçèéíïòóúü", "da": "æøåé", "nb": "æøåéóòâô",
    "sv": "åäöé", "fi": "äöåšž", "is": "áðéíóúýþæö", "ga": "áéíóú", "eu": "ñ", "gl": "áéíñóúü",
    # windows-1250
    "pl": "ąćęłńóśźż", "cs": "áčďéěíňóřšťúůýž", "sk": "áäčďéíĺľňóôŕšťúýž", "hu": "áéíóöőúüű",
    "ro": "ăâîșşțţ", "hr": "čćđšž", "sl": "čšž", "sq": "çë",
    # windows-1251
    "ru": _CYRILLIC_RU, "uk": "абвгґдеєжзиіїйклмнопрстуфхцчшщьюя",
    "be": "абвгдеёжзійклмнопрстуўфхцчшыьэюя", "bg": "абвгдежзийклмнопрстуфхцчшщъьюя",
    "mk": "абвгдѓежзѕијклљмнњопрстќуфхцчџш", "kk": _CYRILLIC_RU + "әғқңөұүһі",
    # the others
    "el": "αβγδεζηθικλμνξοπρσςτυφχψωάέήίόύώϊϋΐΰ", "tr": "çğıöşüâîûİ", "az": "çğıöşüəİ",
    "he": _span("\u05b0", "\u05c7") + _span("\u05d0", "\u05ea") + _span("\u05f0", "\u05f4"),
    "ar": _span("\u0600", "\u06ff"), "fa": _span("\u0600", "\u06ff"), "et": "äöõüšž",
    "lv": "āčēģīķļņšūž", "lt": "ąčęėįšųūž", "vi": _vietnamese(), "th": _span("\u0e01", "\u0e5b"),
}
# each language's commonest words, which with its letter pairs tell apart the pages whose
# letters read equally well (a word that languages of two pages share, as Czech and Italian
# "a", tells little: the lists favour the words only one page's languages write, as Italian
# "è", which is Czech "č"): French "â î û ç ï" are Latvian "ā ī ū ē ļ" in windows-1257, Hebrew
# reads as Russian letters
_COMMON = {language: frozenset(words.split()) for language, words in {
    "en": "the of and to in is for you not with this", "de": "der die das und ist nicht mit von",
    "fr": "de la le les et des un une pour est pas du à au sur il",
    "es": "de la el los las que en y para por con una",
    "pt": "de o os que em para do da um uma não com é",
    "it": "il di la che per non un una del è della con al alla",
    "nl": "de het een van en is niet voor met op", "ca": "de la el els les que per amb",
    "da": "og er det at en til ikke af med på som", "nb": "og er det at en til ikke av med på",
    "sv": "och är det att en till inte av med på som", "fi": "ja on ei se että tai kun",
    "is": "og að er ekki á í við til með sem", "ga": "an na ar agus is le do níl",
    "eu": "eta da ez du bat", "gl": "de o os que en para do da non un unha",
    "pl": "i w nie na z się do to że jest dla", "cs": "a v se na je to že s pro z do",
    "sk": "a v sa na je to že s pre z do", "hu": "a az és nem egy hogy is meg van",
    "ro": "și de la în nu cu pe un o din pentru este", "hr": "i je u se na da za su ne od",
    "sl": "in je v se na da za so ne ni", "sq": "të dhe në një me për nuk",
    "ru": "и в не на что с по как это для", "uk": "і в не на що з по як це для та",
    "be": "і ў не на што з па як гэта для", "bg": "и в не на за да се от с е",
    "mk": "и во не на за да се од со е", "kk": "және мен бұл да де үшін бар",
    "el": "και το η ο να του της την για δεν με", "tr": "ve bir bu için ile da de değil",
    "az": "və bir bu üçün ilə da də", "he": "של את לא על הוא זה עם כל אם יש",
    "ar": "في من على أن لا إلى هذا ما عن مع", "fa": "و در به از که این را با است برای",
    "et": "ja on ei see et ka kui mis",
    "lv": "un ir ar par no uz kas nav vai", "lt": "ir į yra su kad ne per iš ar",
    "vi": "và của có không là cho được một này",
}.items()}
# the single-byte code pages, in the order a tie goes: windows-1252, the most used, first
_SINGLE_BYTE = ("cp1252", "cp1250", "cp1251", "cp1253", "cp1254", "cp1255", "cp1256", "cp1257",
                "cp1258", "cp874")
_LATIN = ("cp1250", "cp1252", "cp1254", "cp1257", "cp1258")
# the double-byte East Asian pages, the same way; each one's most used letters, by the first
# byte of their code: kana and JIS X 0208's first level of kanji; KS X 1001's 2,350 Hangul
# syllables; GB2312's first level of hanzi; Big5's frequent hanzi. A file in another of these
# pages reads mostly as rarer characters (or half-width katakana) in this one.
_DOUBLE_BYTE = {"cp932": range(0x81, 0xA0), "cp949": range(0xB0, 0xC9),
                "cp936": range(0xB0, 0xD8), "cp950": range(0xA4, 0xC7)}
_NOT_KANJI = range(0x84, 0x88)  # cp932's rows of Cyrillic, Greek, box drawing: no letters of it
# a decoding whose letters are explained at least this share looks right
LOOKS_RIGHT = 0.9
# words of ASCII letters and bytes past ASCII, at least one of those; the first this many.
# A word is tried only where one begins, its ASCII letters taken without giving any back: tried
# from every letter of a long run of ASCII letters to the run's end, it cost the run's square
_WORD = re.compile(rb"(?<![A-Za-z\x80-\xff])[A-Za-z]*+[\x80-\xff][A-Za-z\x80-\xff]*+")
_ASCII_WORD = re.compile(rb"(?<![A-Za-z\x80-\xff])[A-Za-z]+(?![A-Za-z\x80-\xff])")
_SAMPLE_WORDS = 2_000
_SAMPLE_LETTERS = 20_000
# Which letters stand next to which tells apart the pages whose readings are all letters of
# one of their languages: windows-1255's Hebrew letters are windows-1251's small Cyrillic
# letters, all of them Russian's, but Hebrew read so gives pairs Russian seldom writes ("щм");
# Latvian "ē ā ū" are French "ç â û" in windows-1252, where "çj" and "pç" are not French.
# charset_pairs.txt lists, per language, the commonest pairs of its text as its page reads it
# (letter_pairs), by level: a pair of level k makes about one in 2^k of the language's pairs;
# a pair not listed counts as level UNLISTED (python -m model.corpus.charset_pairs makes it).
PAIRS_FILE = Path(__file__).with_name("charset_pairs.txt")
UNLISTED = 14
# each of a language's commonest words in the file counts as this many levels of its pairs:
# the words tell what the pairs do not see (words of ASCII letters: Croatian "je", "za")
COMMON_WORD = 4


def letter_pairs(words: Counter[str]) -> Counter[str]:
    """The pairs of neighbouring characters of `words` (read, lower case, composed; with how
    often each comes) that hold one past ASCII: a character that is no letter, and either end
    of a word, as "_"."""
    pairs: Counter[str] = Counter()
    for word, count in words.items():
        padded = f" {word} "
        shown = padded.translate(_SHOWN)
        last = -2  # the last character past ASCII: its pair with this one is counted
        for i, ch in enumerate(padded):
            if ch > "\x7f":
                if last != i - 1:
                    pairs[shown[i - 1:i + 1]] += count
                pairs[shown[i:i + 2]] += count
                last = i
    return pairs


class _Shown(dict):
    """str.translate's table for letter_pairs: a character that is no letter, nor a mark on
    one, becomes "_"; filled as characters come (a few hundred: the pages' and their
    composed letters)."""

    def __missing__(self, code: int) -> str:
        ch = chr(code)
        shown = ch if ch.isalpha() or unicodedata.category(ch).startswith("M") else "_"
        self[code] = shown
        return shown


_SHOWN = _Shown()


def read_words(data: bytes, page: str) -> Counter[str]:
    """The words of `data` that have a byte past ASCII (the first _SAMPLE_WORDS), as read in
    `page`: lower case, composed; with how often each comes."""
    return _read(_sample(data), page)


def _sample(data: bytes) -> list[bytes]:
    return [m.group() for m in itertools.islice(_WORD.finditer(data), _SAMPLE_WORDS)]


def _read(words: list[bytes], page: str) -> Counter[str]:
    read: Counter[str] = Counter()
    for word, count in Counter(words).items():
        read[unicodedata.normalize("NFC", word.decode(page).lower())] += count
    return read


@functools.cache
def _pair_levels() -> dict[str, dict[str, int]]:
    """Each language's letter pairs with their levels (PAIRS_FILE)."""
    levels: dict[str, dict[str, int]] = {}
    for line in PAIRS_FILE.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            language, level, *pairs = line.split(" ")
            # languages share many pairs: one string each keeps the table small in memory
            levels.setdefault(language, {}).update(dict.fromkeys(map(sys.intern, pairs),
                                                                 int(level)))
    return levels


def _with_capitals(letters: str) -> frozenset[str]:
    return frozenset(letters) | {c.upper() for c in letters if len(c.upper()) == 1}


def languages() -> list[str]:
    """The languages whose letters the guess knows, of the single-byte pages."""
    return list(_ALPHABETS)


@functools.cache
def _alphabets(page: str) -> list[tuple[str, frozenset[str]]]:
    """The languages written in `page`, with their alphabets."""
    return [(language, _with_capitals(letters)) for language, letters in _ALPHABETS.items()
            if code_page(language) == page]


@functools.cache
def _reads(page: str) -> frozenset[int]:
    """The bytes past ASCII that `page` has a character for."""
    return frozenset(b for b in range(0x80, 0x100) if _decodes(bytes([b]), page))


def _decodes(data: bytes, encoding: str) -> bool:
    try:
        data.decode(encoding)
    except UnicodeDecodeError:
        return False
    return True


def guess(data: bytes) -> str | None:
    """The code page a file that is not UTF-8 was most likely saved in (a Python codec name):
    the single-byte Windows page that reads it whose letters look most like one language's
    (_reading); an East Asian double-byte page only where that one leaves letters unexplained,
    and the double-byte page reads the whole file, looks right (LOOKS_RIGHT) and explains a
    larger share; None where no page explains more letters than it leaves unexplained."""
    present = set(data.translate(None, bytes(range(0x80))))
    words = _sample(data)
    plain = Counter(m.group().lower().decode() for m in
                    itertools.islice(_ASCII_WORD.finditer(data), _SAMPLE_WORDS))
    best, best_reading, letters = None, _Reading(), False
    for page in _SINGLE_BYTE:
        if present <= _reads(page):
            reading = _reading(words, plain, page)
            letters = letters or reading.explained + reading.unexplained > 0
            if reading.explained > reading.unexplained and reading.beats(best_reading):
                best, best_reading = page, reading
    # Thai's page reads Korean and Chinese text as Thai letters, often every one of them: a
    # double-byte page that explains as many goes on being tried (Thai text seldom reads as one)
    thai = best == "cp874"
    if not letters or (best_reading.unexplained == 0 and best_reading.explained and not thai):
        return best  # only punctuation past ASCII ("Don’t"), or every letter explained
    # Chinese and Korean read in a single-byte page often look like Thai, Greek or Arabic
    # letters, most of them in its alphabet: a double-byte page that explains a larger share
    # of its letters wins; a text in a single-byte page seldom reads in one at all (a byte
    # past ASCII followed by a space or a punctuation mark ends its reading)
    double, double_reading = None, _Reading()
    for page in _DOUBLE_BYTE:
        reading = _double_byte_reading(data, page)
        if reading and reading.looks_right and reading.beats(double_reading):
            double, double_reading = page, reading
    if double and (double_reading.share > best_reading.share
                   or thai and double_reading.share == best_reading.share):
        return double
    return best


@dataclass(frozen=True)
class _Reading:
    """How well a file read in a code page looks like a language of it."""

    explained: int = 0  # letters past ASCII in the language's alphabet
    unexplained: int = 0
    # the languages of the page whose alphabets explain as many, and the file's words (with
    # letters past ASCII, as bytes, read in `page`; without, lower case): what `fit` is told from
    languages: tuple[str, ...] = ()
    page: str = ""
    words: list[bytes] = field(default_factory=list, compare=False)
    plain: Counter[str] = field(default_factory=Counter, compare=False)

    def beats(self, other: _Reading) -> bool:
        """Letters first; where they tie, the letter pairs and the commonest words (fit)."""
        if self.letters != other.letters:
            return self.letters > other.letters
        return self.fit > other.fit

    @property
    def letters(self) -> int:
        return self.explained - self.unexplained

    @functools.cached_property
    def fit(self) -> int:
        """How like the likeliest of its languages the words are (_fit); counted only where
        the letters tie, as the pairs take longer to count than the letters."""
        read = _read(self.words, self.page)
        pairs = letter_pairs(read)
        return max((_fit(language, pairs, read, self.plain) for language in self.languages),
                   default=0)

    @property
    def share(self) -> float:
        return self.explained / max(1, self.explained + self.unexplained)

    @property
    def looks_right(self) -> bool:
        return self.explained > 0 and self.share >= LOOKS_RIGHT


def _reading(words: list[bytes], plain: Counter[str], page: str) -> _Reading:
    """The words with letters past ASCII read in `page`, and the ones without (`plain`, lower
    case), by the language of the page they look most like."""
    latin = page in _LATIN
    seen: Counter[str] = Counter()  # letters no word shows wrong
    wrong = 0
    for word in words:
        text = word.decode(page)
        if not latin and len(text) == 1:
            continue  # where Latin pages have a symbol («, ©), the others may have a letter
        mixed = not latin and re.search(rb"[A-Za-z]", word) is not None
        before = " "
        for ch in text:
            if ch > "\x7f" and (ch.isalpha() or unicodedata.category(ch).startswith("M")):
                if mixed or (before.islower() and ch.isupper()) or (
                        unicodedata.category(ch).startswith("M") and not before.isalpha()
                        and not unicodedata.category(before).startswith("M")):
                    wrong += 1  # another script with Latin letters, "aB", a mark on nothing
                else:
                    seen[ch] += 1
            before = ch
    total = wrong + sum(seen.values())
    explained = {language: sum(n for ch, n in seen.items() if ch in alphabet)
                 for language, alphabet in _alphabets(page)}
    most = max(explained.values(), default=0)
    return _Reading(most, total - most, tuple(k for k, n in explained.items() if n == most),
                    page, words, plain)


def _fit(language: str, pairs: Counter[str], read: Counter[str], plain: Counter[str]) -> int:
    """How like `language` a reading is: minus the levels of its letter pairs (the likelier a
    pair, the lower its level), plus COMMON_WORD for each of the language's commonest words
    among its words (`read`: with letters past ASCII; `plain`: without)."""
    levels = _pair_levels().get(language, {})
    return (COMMON_WORD * sum(plain[w] + read[w] for w in _COMMON.get(language, ()))
            - sum(n * levels.get(pair, UNLISTED) for pair, n in pairs.items()))


def _double_byte_reading(data: bytes, page: str) -> _Reading | None:
    """The file read in `page`: its letters past ASCII explained where they are the page's
    most used (_DOUBLE_BYTE); None where the page does not read the file."""
    try:
        text = data.decode(page)
    except UnicodeDecodeError:
        return None
    letters = itertools.islice((ch for ch in text if ch > "\x7f" and ch.isalpha()),
                               _SAMPLE_LETTERS)
    frequent = _DOUBLE_BYTE[page]
    explained = unexplained = 0
    for ch in letters:
        first = ch.encode(page)[0]
        if first in frequent and not (page == "cp932" and first in _NOT_KANJI):
            explained += 1
        else:
            unexplained += 1
    return _Reading(explained, unexplained)
