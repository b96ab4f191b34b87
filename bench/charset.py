"""How often the code page of a file that is not UTF-8 is guessed right, per language.

    python -m bench.charset [--locales .cache/unpacked] [--files 200] [--short 100] [--seed 1]
        [--against charset.py] [--json out]

Real translated text: the messages of the Debian gettext catalogs unpacked under --locales
(*/LC_MESSAGES/*.mo, where the corpus builder's cache keeps them), per language, of the packages
whose text the guess's letter pair table was not made from (model.corpus.charset_pairs). Each
language's messages that its code page (app.documents.charset.code_page) can hold are made into
--files files of two to five lines, like short subtitles, and --short files of a single line of
at most 40 characters, each encoded in that code page and holding at least one byte past ASCII
(a pure ASCII file reads as UTF-8, right whatever the guess). Each file is read as a document
with the source language "auto" (app.documents.charset.decode without a code page), before
(windows-1252 whatever the bytes), by --against (another revision's charset.py, say main's:
`git show main:app/documents/charset.py > /tmp/charset_main.py`) and now (the code page guessed
from the bytes). A file counts as right when it reads as the text it was made from (both
composed, as Unicode's NFC): a file whose bytes read the same in two code pages (German without
its few letters that differ) is right in either. Reported per language: files, the share right
in each column, the same for the single lines, and the code pages guessed wrong most often; then
the time and the memory the guess takes on a file of 1 MiB of a few languages' messages."""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import sys
import time
import tracemalloc
import unicodedata
from collections import Counter
from pathlib import Path
from types import ModuleType

from app.documents import DocumentError, charset
from model.corpus.charset_pairs import encoded, for_table
from model.corpus.gettext import MoError, read_mo

# the catalogs' language directories measured, and the language code they are read as
LOCALES = {
    "de": "de", "fr": "fr", "es": "es", "it": "it", "pt": "pt", "nl": "nl", "sv": "sv",
    "da": "da", "fi": "fi", "is": "is", "pl": "pl", "cs": "cs", "sk": "sk", "hu": "hu",
    "sl": "sl", "hr": "hr", "ro": "ro", "ru": "ru", "uk": "uk", "bg": "bg", "be": "be",
    "mk": "mk", "el": "el", "tr": "tr", "he": "he", "ar": "ar", "fa": "fa", "et": "et",
    "lt": "lt", "lv": "lv", "vi": "vi", "th": "th", "ja": "ja", "zh_CN": "zh", "zh_TW": "zt",
    "ko": "ko",
}
MAX_CATALOGS = 150  # per language: plenty of distinct messages, read in seconds
# the languages a file of 1 MiB is guessed in (time and memory): a few of each kind of page
LARGE = ("de", "pl", "ru", "he", "lv", "ja")


def messages(root: Path, locale: str) -> list[str]:
    """The distinct one-line translations of the catalogs for `locale`, of the packages whose
    text the letter pair table was not made from (model.corpus.charset_pairs.for_table)."""
    found: dict[str, None] = {}
    paths = sorted(path for path in root.glob(f"*/**/locale/{locale}/LC_MESSAGES/*.mo")
                   if not for_table(path.relative_to(root).parts[0]))
    for path in paths[:MAX_CATALOGS]:
        try:
            catalog = read_mo(path)
        except (MoError, OSError):
            continue
        for message in catalog:
            text = " ".join(message.msgstr[0].split()) if message.msgstr else ""
            if 3 <= len(text) <= 80 and any(ch.isalpha() for ch in text):
                found[text] = None
    return list(found)


def files(lines: list[str], page: str, count: int, short: bool, rng: random.Random
          ) -> list[tuple[str, bytes]]:
    """`count` (text, bytes) files in `page`, each with a byte past ASCII."""
    usable = [(t, b) for t in lines if (b := encoded(t, page)) is not None]
    past_ascii = [(t, b) for t, b in usable if not b.isascii()]
    if not past_ascii:
        return []  # no catalogs of the language (main names it), or none past ASCII
    if short:
        pool = [(t, b) for t, b in past_ascii if len(t) <= 40]
        return rng.sample(pool, min(count, len(pool)))
    out = []
    for _ in range(count):
        picked = [rng.choice(past_ascii)] + rng.sample(usable, rng.randint(1, 4))
        rng.shuffle(picked)
        out.append(("\r\n".join(t for t, _ in picked), b"\r\n".join(b for _, b in picked)))
    return out


def read(data: bytes, legacy: str | None, module: ModuleType = charset
         ) -> tuple[str | None, str | None]:
    """The file's text (composed: windows-1258 reads Vietnamese as letters and combining tone
    marks) and the encoding it was read in, by `module`'s decode (app.documents.charset, or
    the one of --against); (None, None) where it is refused."""
    try:
        text, encoding = module.decode(data, legacy)
    except DocumentError:
        return None, None
    return unicodedata.normalize("NFC", text), encoding


def measure(made: list[tuple[str, bytes]], against: ModuleType | None = None) -> dict:
    made = [(unicodedata.normalize("NFC", text), data) for text, data in made]
    share = {"before": sum(read(data, "cp1252")[0] == text for text, data in made)}
    if against:
        share["against"] = sum(read(data, None, against)[0] == text for text, data in made)
    now, wrong = 0, Counter()
    t0 = time.perf_counter()
    for text, data in made:
        got, page = read(data, None)
        if got == text:
            now += 1
        else:
            wrong[page] += 1
    share["now"] = now
    return {"files": len(made), **{k: round(n / max(1, len(made)), 3) for k, n in share.items()},
            "wrong_pages": dict(wrong.most_common(3)),
            "ms_per_file": round((time.perf_counter() - t0) / max(1, len(made)) * 1000, 3)}


def load(path: Path) -> ModuleType:
    """Another revision's app/documents/charset.py (`git show REV:app/documents/charset.py >
    FILE`), to measure on the same files."""
    spec = importlib.util.spec_from_file_location("charset_against", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def large(lines: list[str], page: str, size: int = 1 << 20) -> bytes:
    """A file of `size` bytes of the messages `page` can hold, one a line."""
    text = b"\r\n".join(b for t in lines if (b := encoded(t, page)) is not None)
    return (text * (size // max(1, len(text)) + 1))[:size]


def timed(modules: dict[str, ModuleType], data: bytes, rounds: int = 5
          ) -> dict[str, tuple[float, int]]:
    """Each module's guess on `data`: (milliseconds, the best of `rounds` taken in turns, so
    that the machine's drift falls on all alike; peak bytes allocated)."""
    best = dict.fromkeys(modules, float("inf"))
    for _ in range(rounds):
        for name, module in modules.items():
            t0 = time.perf_counter()
            module.guess(data)
            best[name] = min(best[name], time.perf_counter() - t0)
    out = {}
    for name, module in modules.items():
        tracemalloc.start()
        module.guess(data)
        out[name] = best[name] * 1000, tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--locales", type=Path, default=Path(".cache/unpacked"))
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--short", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--against", type=Path,
                    help="another revision's charset.py, measured on the same files")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if not any(args.locales.glob("**/LC_MESSAGES/*.mo")):
        raise SystemExit(f"no gettext catalogs under {args.locales}: build the corpus "
                         "(python -m model.corpus build) or name its cache's unpacked/ folder")
    against = load(args.against) if args.against else None
    columns = ("before", "against", "now") if against else ("before", "now")
    heads = " ".join(f"{c:>7}" for c in columns)
    print(f"{'lang':6} {'page':6} {'files':>5} {heads} | {'lines':>5} {heads}"
          "  wrong pages (files, lines)")
    report = {}
    for locale, language in LOCALES.items():
        page = charset.code_page(language)
        lines = messages(args.locales, locale)
        rng = random.Random(f"{args.seed}-{locale}")
        made = files(lines, page, args.files, False, rng)
        single = files(lines, page, args.short, True, rng)
        if not made:
            print(f"{locale:6} {page:6} no messages")
            continue
        row = {"page": page, "files": measure(made, against), "lines": measure(single, against)}
        report[locale] = row
        f, s = row["files"], row["lines"]
        print(f"{locale:6} {page:6} {f['files']:5} "
              + " ".join(f"{f[c]:7.3f}" for c in columns)
              + f" | {s['files']:5} " + " ".join(f"{s[c]:7.3f}" for c in columns)
              + f"  {f['wrong_pages']} {s['wrong_pages']}")
    for kind in ("files", "lines"):
        rows = [r[kind] for r in report.values()]
        count = sum(r["files"] for r in rows)
        mean = {k: round(sum(r[k] * r["files"] for r in rows) / max(1, count), 3)
                for k in columns}
        ms = max(r["ms_per_file"] for r in rows)
        print(f"all {kind}: {count}, right " + ", ".join(f"{k} {v}" for k, v in mean.items())
              + f"; a read {ms} ms at most (a language's mean)")
    modules = {"now": charset, **({"against": against} if against else {})}
    for locale in LARGE:
        page = charset.code_page(LOCALES[locale])
        lines = messages(args.locales, locale)
        if not lines:
            continue
        measured = timed(modules, large(lines, page))
        report.setdefault("large", {})[locale] = measured
        print(f"a 1 MiB file ({locale}, {page}): guess "
              + ", ".join(f"{k} {ms:.1f} ms, {peak / 1024:.0f} KiB at most"
                          for k, (ms, peak) in measured.items()))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
