"""Makes the letter pair table of the code page guess (app/documents/charset_pairs.txt).

    python -m model.corpus.charset_pairs --locales .cache/unpacked [--out PATH] [--most 200]

The text is the translated messages of the Debian gettext catalogs that the corpus builder
unpacked (--locales: its cache's unpacked/ folder), of the packages `for_table` picks: a quarter
of them, by a hash of the package's name, so that the same ones are picked whatever else the
cache holds, and bench.charset measures the guess on the others. Each language's messages that
its Windows code page can hold are encoded in it and read back as the guess reads a file
(app.documents.charset.read_words, letter_pairs); the pairs are counted, and the --most commonest
of each language are written with their level (a pair of level k makes about one in 2^k of
the language's pairs; the ones of level UNLISTED or more are left out, as the guess counts
every pair not listed at that level). The file's header names the packages."""

from __future__ import annotations

import argparse
import math
import unicodedata
import zlib
from collections import Counter
from pathlib import Path

from app.documents import charset

from .gettext import MoError, read_mo

OUT = Path(charset.PAIRS_FILE)
MOST = 200


def for_table(package: str) -> bool:
    """Whether the catalogs of `package` (its unpacked folder's name, "gimp-data_2.10..._all",
    or its name) are the table's text; bench.charset measures on the others."""
    return zlib.crc32(package.split("_")[0].encode()) % 4 == 0


def encoded(text: str, page: str) -> bytes | None:
    """`text` in `page` as an older editor saves it, None where the page cannot hold it;
    windows-1258 writes most Vietnamese letters as a base letter and a combining tone mark."""
    try:
        return text.encode(page)
    except UnicodeEncodeError:
        if page != "cp1258":
            return None
    out = []
    for ch in text:
        try:
            out.append(ch.encode(page))
            continue
        except UnicodeEncodeError:
            pass
        base, *marks = unicodedata.normalize("NFD", ch)
        if marks and len(unicodedata.normalize("NFC", base + marks[0])) == 1:
            base, marks = unicodedata.normalize("NFC", base + marks[0]), marks[1:]
        try:
            out.append(base.encode(page) + "".join(marks).encode(page))
        except UnicodeEncodeError:
            return None
    return b"".join(out)


def catalogs(root: Path, locale: str) -> list[Path]:
    """The catalogs of `locale` in the packages `for_table` picks, by path."""
    return sorted(path for path in root.glob(f"*/**/locale/{locale}/LC_MESSAGES/*.mo")
                  if for_table(path.relative_to(root).parts[0]))


def count_pairs(root: Path, language: str) -> tuple[Counter[str], set[str]]:
    """The letter pairs of `language`'s messages read in its code page, and the packages
    they came from."""
    page = charset.code_page(language)
    pairs: Counter[str] = Counter()
    packages: set[str] = set()
    seen: set[str] = set()
    for path in catalogs(root, language):
        try:
            messages = read_mo(path)
        except (MoError, OSError):
            continue
        for message in messages:
            for text in message.msgstr:
                if text in seen:
                    continue  # the same message in several catalogs counts once
                seen.add(text)
                data = encoded(text, page)
                if data and not data.isascii():
                    pairs.update(charset.letter_pairs(charset.read_words(data, page)))
                    packages.add(path.relative_to(root).parts[0])
    return pairs, packages


def levels(pairs: Counter[str], most: int) -> dict[str, int]:
    """The `most` commonest pairs under level UNLISTED, with their levels."""
    total = sum(pairs.values())
    out = {}
    for pair, n in pairs.most_common(most):
        level = round(-math.log2(n / total))
        if level >= charset.UNLISTED:
            break
        out[pair] = level
    return out


def table(root: Path, most: int = MOST) -> tuple[str, dict[str, int]]:
    """The file's text, and the pairs each language's messages had."""
    lines, sizes, packages = [], {}, set()
    for language in charset.languages():
        pairs, used = count_pairs(root, language)
        if not pairs:
            continue
        sizes[language] = sum(pairs.values())
        packages |= used
        by_level: dict[int, list[str]] = {}
        for pair, level in levels(pairs, most).items():
            by_level.setdefault(level, []).append(pair)
        lines += [" ".join([language, str(level), *sorted(found)])
                  for level, found in sorted(by_level.items())]
    header = [
        "# Letter pairs of each language as the code page guess reads them",
        "# (app/documents/charset.py): language, level (a pair of level k makes about one in",
        "# 2^k of its pairs), pairs (\"_\": no letter). Made by",
        f"# python -m model.corpus.charset_pairs --most {most}",
        "# from the translated messages of the gettext catalogs of these Debian packages:",
        *_wrapped(sorted(packages)),
    ]
    return "\n".join(header + lines) + "\n", sizes


def _wrapped(words: list[str], width: int = 96) -> list[str]:
    lines = ["#"]
    for word in words:
        if len(lines[-1]) + 1 + len(word) > width:
            lines.append("#")
        lines[-1] += " " + word
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--locales", type=Path, default=Path(".cache/unpacked"))
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--most", type=int, default=MOST)
    args = ap.parse_args(argv)
    text, sizes = table(args.locales, args.most)
    if not sizes:
        raise SystemExit(f"no gettext catalogs under {args.locales}: build the corpus "
                         "(python -m model.corpus build) or name its cache's unpacked/ folder")
    args.out.write_text(text, encoding="utf-8")
    print(f"{args.out}: {len(text.encode())} bytes; pairs counted per language: "
          + ", ".join(f"{language} {n}" for language, n in sizes.items()))


if __name__ == "__main__":
    main()
