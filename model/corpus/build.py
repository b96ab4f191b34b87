"""Build the English-German corpus: fetch, extract, clean, deduplicate, split, write."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from . import debian, ding, gettext, langcheck, libreoffice, normalize, sources, split
from .debian import log

SPLITS = ("train", "dev", "test")
DROP_SAMPLES = 12  # dropped pairs kept per language-identification reason, for review
# Licences the copyright files state in prose the generic reader can't parse.
KNOWN_LICENCES = {
    **{pkg: sources.HELP_LICENCE for pkg in sources.HELP_PACKAGES},
    ding.DING_PACKAGE: ding.DING_LICENCE,
}
HELP_SOURCE = sources.HELP_SOURCE


@dataclass
class SourceStats:
    """Counters for one source (a gettext package or the LibreOffice help)."""

    raw: int = 0
    kept: int = 0
    new_unique: int = 0
    new_words_en: int = 0  # word types (lower-cased) no earlier source had, English side
    new_words_de: int = 0
    files: int = 0
    rejected: Counter = field(default_factory=Counter)


def german_catalogs(unpacked: Path) -> list[Path]:
    """German .mo files of an unpacked package (``.../de/LC_MESSAGES/*.mo``)."""
    return sorted(
        path
        for path in unpacked.rglob("*.mo")
        if path.parent.name == "LC_MESSAGES"
        and path.parent.parent.name in sources.GERMAN_LOCALES
        and path.is_file()
    )


_QUALIFIER_RE = re.compile(r"^\?[\w -]+:(?=\S)")


def strip_qualifier(src: str, tgt: str) -> tuple[str, str]:
    """Drop disambiguation prefixes left in a msgid.

    glib's ``Q_("Context|String")`` and freeciv's ``"?context:String"`` encode a
    context inside the msgid; the translation never carries it.
    """
    match = _QUALIFIER_RE.match(src)
    if match and not _QUALIFIER_RE.match(tgt):
        return src[match.end() :], tgt
    head, bar, rest = src.partition("|")
    if bar and "|" not in tgt and head and " " not in head and rest:
        return rest, tgt
    return src, tgt


_OPTION_RE = re.compile(r"^\s*(-{1,2}[\w?#]|\S+\s*=)")


def _entries(paragraph: str) -> list[str]:
    """Lines of a paragraph grouped into entries: an option line plus its continuations."""
    entries: list[str] = []
    for line in paragraph.split("\n"):
        if not line.strip():
            continue
        if entries and not _OPTION_RE.match(line):
            entries[-1] += " " + line.strip()
        else:
            entries.append(line.strip())
    return entries


def _option_key(entry: str) -> str:
    return entry.split()[0] if _OPTION_RE.match(entry) else ""


def split_paragraph(src: str, tgt: str) -> list[tuple[str, str]]:
    """Pair option-table entries (``-a, --all  text``) one by one, else keep the whole block.

    Wrapped prose is never split at line breaks, because the German text wraps
    at different words; only entries that start with the same option on both
    sides, in the same order, are separated.
    """
    src_entries, tgt_entries = _entries(src), _entries(tgt)
    if len(src_entries) > 1 and len(src_entries) == len(tgt_entries):
        keys = [_option_key(e) for e in src_entries]
        if keys == [_option_key(e) for e in tgt_entries] and sum(map(bool, keys)) >= 1:
            return list(zip(src_entries, tgt_entries, strict=True))
    return [(src, tgt)]


def split_lines(src: str, tgt: str) -> list[tuple[str, str]]:
    """Split multi-line messages into aligned paragraphs and option entries."""
    if "\n" not in src.strip() and "\n" not in tgt.strip():
        return [(src, tgt)]
    src_pars = [p for p in re.split(r"\n\s*\n", src) if p.strip()]
    tgt_pars = [p for p in re.split(r"\n\s*\n", tgt) if p.strip()]
    if len(src_pars) != len(tgt_pars):
        return [(src, tgt)]
    out: list[tuple[str, str]] = []
    for src_par, tgt_par in zip(src_pars, tgt_pars, strict=True):
        out.extend(split_paragraph(src_par, tgt_par))
    return out


def gettext_pairs(catalogs: Iterable[Path]) -> Iterator[tuple[str, str]]:
    """Raw (English, German) pairs from .mo catalogs."""
    for path in catalogs:
        try:
            messages = gettext.read_mo(path)
        except (gettext.MoError, OSError) as err:
            log(f"  skipping {path.name}: {err}")
            continue
        for src, tgt in gettext.message_pairs(messages):
            yield from split_lines(*strip_qualifier(src, tgt))


def filter_pairs(
    pairs: Iterable[tuple[str, str]],
    stats: SourceStats,
    check: langcheck.LanguageCheck | None = None,
    drops: dict[str, list] | None = None,
) -> Iterator[tuple[str, str]]:
    """Normalise pairs, counting rejections by reason, and yield the kept ones.

    ``check``: language identification of both sides, after the rule-based filters;
    the first ``DROP_SAMPLES`` pairs it drops per reason go into ``drops``.
    """
    for raw_src, raw_tgt in pairs:
        stats.raw += 1
        src, tgt = normalize.clean_pair(raw_src, raw_tgt)
        reason = normalize.reject_reason(src, tgt)
        if not reason and check is not None:
            reason = check.reject_reason(src, tgt)
            if reason and drops is not None and len(drops.setdefault(reason, [])) < DROP_SAMPLES:
                drops[reason].append([src, tgt])
        if reason:
            stats.rejected[reason] += 1
            continue
        stats.kept += 1
        yield src, tgt


_WORD_RE = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")


def words(text: str) -> set[str]:
    """Lower-cased word types of a segment (letters only, inner apostrophes and hyphens kept)."""
    return {w.lower() for w in _WORD_RE.findall(text)}


@dataclass
class Corpus:
    """Unique pairs with the source that first contributed each."""

    pairs: dict[tuple[str, str], str] = field(default_factory=dict)
    stats: dict[str, SourceStats] = field(default_factory=dict)
    check: langcheck.LanguageCheck | None = None
    drops: dict[str, list] = field(default_factory=dict)  # sample of language-id drops
    vocab_en: set[str] = field(default_factory=set)
    vocab_de: set[str] = field(default_factory=set)

    def add(self, name: str, pairs: Iterable[tuple[str, str]]) -> None:
        """Add the kept pairs of one source, crediting new unique pairs and words to it."""
        stats = self.stats.setdefault(name, SourceStats())
        for pair in filter_pairs(pairs, stats, self.check, self.drops):
            if pair not in self.pairs:
                self.pairs[pair] = name
                stats.new_unique += 1
                new_en, new_de = words(pair[0]) - self.vocab_en, words(pair[1]) - self.vocab_de
                stats.new_words_en += len(new_en)
                stats.new_words_de += len(new_de)
                self.vocab_en |= new_en
                self.vocab_de |= new_de


def fetch(cache: Path, packages: list[str]) -> dict[str, dict]:
    """Download and unpack packages; return name -> {version, licence, dir, deb}."""
    apt = debian.Apt(cache)
    apt.ensure_lists(sources.HELP_EN)
    known = apt.available(packages)
    for pkg in packages:
        if pkg not in known:
            log(f"  warning: {pkg} is not available from apt, skipped")
    debs = apt.download([p for p in packages if p in known], cache / "debs")
    info = {}
    for i, (pkg, deb) in enumerate(sorted(debs.items()), 1):
        if i % 20 == 0 or i == len(debs):
            log(f"  unpacked {i}/{len(debs)}")
        target = debian.unpack(deb, cache / "unpacked", sources.members_of(pkg))
        info[pkg] = {
            "version": debian.deb_field(deb, "Version"),
            "licence": debian.licence(target, pkg),
            "dir": target,
            "deb": deb.name,
        }
    _linked_licences(apt, cache, info)
    return info


def _linked_licences(apt: debian.Apt, cache: Path, info: dict[str, dict]) -> None:
    """Read licences from the package a symlinked doc directory points to (gcc-12-base, ...)."""
    links = {pkg: debian.doc_link_target(meta["dir"], pkg) for pkg, meta in info.items()}
    links = {pkg: target for pkg, target in links.items() if target and target not in info}
    if not links:
        return
    available = apt.available(sorted(set(links.values())))
    debs = apt.download(sorted(available), cache / "debs")
    for pkg, target in links.items():
        if target in debs:
            unpacked = debian.unpack(debs[target], cache / "unpacked")
            info[pkg]["licence"] = debian.licence(unpacked, target)
            info[pkg]["licence_from"] = target


def add_catalogs(corpus: Corpus, info: dict[str, dict], packages: list[str], kind: str) -> None:
    """Add the German gettext catalogs of each package in ``packages`` that was fetched."""
    present = [p for p in packages if p in info]
    log(f"reading German gettext catalogs of {len(present)} {kind} packages ...")
    for i, pkg in enumerate(present, 1):
        catalogs = german_catalogs(info[pkg]["dir"])
        corpus.add(pkg, gettext_pairs(catalogs))
        corpus.stats[pkg].files = len(catalogs)
        if i % 20 == 0 or i == len(present):
            log(f"  {i}/{len(present)} packages, {len(corpus.pairs)} unique pairs so far")


def add_data_sources(corpus: Corpus, info: dict[str, dict]) -> None:
    """Add the general-domain packages whose German is in other files (.po, Lua, keyed)."""
    present = [p for p in sources.DATA_SOURCES if p in info]
    log(f"reading German data files of {len(present)} general-domain packages ...")
    for pkg in present:
        corpus.add(pkg, _split_all(sources.DATA_SOURCES[pkg].read(info[pkg]["dir"])))
    log(f"  {len(corpus.pairs)} unique pairs so far")


def _split_all(pairs: Iterable[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    for src, tgt in pairs:
        yield from split_lines(src, tgt)


def collect(info: dict[str, dict], check: langcheck.LanguageCheck | None = None) -> Corpus:
    """Extract and filter pairs from the help, the dictionary and every package.

    The in-domain sources come first: a pair keeps the first source that had it, so
    the general sources only add, and the in-domain dev/test splits lose only what
    ``check`` (language identification) drops.
    """
    corpus = Corpus(check=check)
    if sources.HELP_EN in info and sources.HELP_DE in info:
        log("aligning LibreOffice help pages ...")
        en = libreoffice.help_root(info[sources.HELP_EN]["dir"], "en-US")
        de = libreoffice.help_root(info[sources.HELP_DE]["dir"], "de")
        corpus.add(HELP_SOURCE, libreoffice.align_help(en, de))
    add_catalogs(corpus, info, sources.GETTEXT_PACKAGES, "software")
    if ding.DING_PACKAGE in info:
        log("reading the Ding dictionary ...")
        corpus.add(ding.DING_PACKAGE, ding.read_ding(info[ding.DING_PACKAGE]["dir"]))
    add_catalogs(corpus, info, sources.GENERAL_GETTEXT_PACKAGES, "general-domain")
    add_data_sources(corpus, info)
    return corpus


def assign_splits(corpus: Corpus) -> dict[str, list[tuple[str, str, str]]]:
    """Split unique pairs by source hash; dev/test keep one target per source."""
    by_split: dict[str, list[tuple[str, str, str]]] = {name: [] for name in SPLITS}
    seen_eval: set[str] = set()
    for (src, tgt), origin in corpus.pairs.items():
        name = split.assign(src)
        if name != "train":
            if src in seen_eval:
                continue
            seen_eval.add(src)
        by_split[name].append((src, tgt, origin))
    for rows in by_split.values():
        rows.sort(key=lambda row: split.source_hash(row[0] + "\t" + row[1]))
    return by_split


def write_split(out: Path, name: str, rows: list[tuple[str, str, str]]) -> None:
    """Write ``<name>.en`` and ``<name>.de`` with one segment per line."""
    with (
        (out / f"{name}.en").open("w", encoding="utf-8") as en,
        (out / f"{name}.de").open("w", encoding="utf-8") as de,
    ):
        for src, tgt, _origin in rows:
            en.write(src + "\n")
            de.write(tgt + "\n")


def split_files(by_split: dict) -> dict[str, list[tuple[str, str, str]]]:
    """File prefix -> rows: what the corpus directory holds.

    ``train`` has every domain (``train.domain`` labels its lines); ``dev`` and
    ``test`` hold the in-domain pairs (software and documentation, the first
    corpus's evaluation sets); ``dev.<domain>`` and ``test.<domain>`` one domain each.
    """
    files = {"train": by_split["train"]}
    for name in ("dev", "test"):
        rows = by_split[name]
        files[name] = [r for r in rows if sources.domain_of(r[2]) in sources.IN_DOMAIN]
        for domain in sources.DOMAINS:
            files[f"{name}.{domain}"] = [r for r in rows if sources.domain_of(r[2]) == domain]
    return files


def summary(corpus: Corpus, by_split: dict, info: dict, seconds: float) -> dict:
    """The corpus.json document."""
    per_source: dict[str, dict] = {}
    split_by_source: dict[str, Counter] = defaultdict(Counter)
    for name, rows in by_split.items():
        for _src, _tgt, origin in rows:
            split_by_source[origin][name] += 1
    for name, stats in corpus.stats.items():
        per_source[name] = {
            "raw_pairs": stats.raw,
            "kept_pairs": stats.kept,
            "new_unique_pairs": stats.new_unique,
            "new_words_en": stats.new_words_en,
            "new_words_de": stats.new_words_de,
            "catalogs": stats.files,
            "splits": dict(split_by_source[name]),
            "rejected": dict(stats.rejected.most_common()),
            "domain": sources.domain_of(name),
            "licence": _source_licence(name, info),
        }
    rejected: Counter = Counter()
    for stats in corpus.stats.values():
        rejected.update(stats.rejected)
    domains = {domain: Counter() for domain in sources.DOMAINS}
    for name, rows in by_split.items():
        for _src, _tgt, origin in rows:
            domains[sources.domain_of(origin)][name] += 1
    packages = {
        pkg: {
            "version": meta["version"],
            "deb": meta["deb"],
            "licence": KNOWN_LICENCES.get(pkg, meta["licence"]),
            **({"licence_from": meta["licence_from"]} if "licence_from" in meta else {}),
        }
        for pkg, meta in sorted(info.items())
    }
    return {
        "pair": "en-de",
        "counts": {name: len(rows) for name, rows in by_split.items()},
        "unique_pairs": len(corpus.pairs),
        "domains": {domain: dict(counts) for domain, counts in domains.items()},
        "files": {name: len(rows) for name, rows in split_files(by_split).items()},
        "sources": per_source,
        "packages": packages,
        "split": {
            "hash": "sha256(source)[:8] % 10000",
            "dev_buckets": split.DEV_BUCKETS,
            "test_buckets": split.TEST_BUCKETS,
            "min_eval_words": split.MIN_EVAL_WORDS,
        },
        "filters": {
            "max_chars": normalize.MAX_CHARS,
            "max_words": normalize.MAX_WORDS,
            "langid": dataclasses.asdict(corpus.check.config) if corpus.check else None,
            "rejected": dict(rejected.most_common()),
            "langid_drop_samples": corpus.drops,
        },
        "train_labels": train_label_shares(by_split["train"]),
        "build_seconds": round(seconds, 1),
    }


def _source_licence(name: str, info: dict) -> str:
    package = sources.HELP_EN if name == HELP_SOURCE else name
    meta = info.get(package, {})
    return KNOWN_LICENCES.get(package, meta.get("licence", "unknown"))


def train_label_shares(rows: list[tuple[str, str, str]]) -> dict[str, dict]:
    """Per ``train.domain`` label: pairs, German words and their share of all German words
    (what a recipe's ``domain_sample`` weighs)."""
    pairs: Counter = Counter()
    tokens: Counter = Counter()
    for src, tgt, origin in rows:
        label = sources.train_label(origin, src)
        pairs[label] += 1
        tokens[label] += len(tgt.split())
    total = sum(tokens.values()) or 1
    return {
        label: {"pairs": pairs[label], "de_words": tokens[label],
                "de_word_share": round(tokens[label] / total, 4)}
        for label in sorted(pairs)
    }


def print_table(doc: dict) -> None:
    """Human-readable summary of corpus.json."""
    log(
        f"\n{'source':28} {'domain':8} {'raw':>7} {'kept':>7} {'new':>7} {'words':>6} "
        f"{'train':>7} {'dev':>5} {'test':>5} {'langid':>6}"
    )
    for name, row in sorted(doc["sources"].items(), key=lambda kv: -kv[1]["new_unique_pairs"]):
        sp = row["splits"]
        langid_drops = sum(n for r, n in row["rejected"].items() if r.startswith("langid"))
        log(
            f"{name:28} {row['domain'][:8]:8} {row['raw_pairs']:7} {row['kept_pairs']:7} "
            f"{row['new_unique_pairs']:7} {row['new_words_en']:6} {sp.get('train', 0):7} "
            f"{sp.get('dev', 0):5} {sp.get('test', 0):5} {langid_drops:6}"
        )
    counts = doc["counts"]
    log(
        f"{'total':28} {'':8} {'':7} {'':7} {doc['unique_pairs']:7} {'':6} {counts['train']:7} "
        f"{counts['dev']:5} {counts['test']:5}"
    )
    log("\nrejected pairs by filter:")
    for reason, count in doc["filters"]["rejected"].items():
        log(f"  {reason:32} {count:8}")
    log("training pairs by train.domain label:")
    for label, row in doc["train_labels"].items():
        log(f"  {label:16} {row['pairs']:8} pairs {row['de_word_share']:7.1%} of German words")


def write_corpus(out: Path, by_split: dict, doc: dict) -> None:
    """Write all files into a temporary sibling directory, then swap it into place.

    A reader of ``out`` (e.g. a training run) never sees a half-written corpus.
    """
    tmp = out.with_name(out.name + ".tmp")
    old = out.with_name(out.name + ".old")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name, rows in split_files(by_split).items():
        write_split(tmp, name, rows)
    domains = "".join(sources.train_label(origin, src) + "\n"
                      for src, _t, origin in by_split["train"])
    (tmp / "train.domain").write_text(domains, encoding="utf-8")
    text = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    (tmp / "corpus.json").write_text(text, encoding="utf-8")
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        out.rename(old)
    tmp.rename(out)
    shutil.rmtree(old, ignore_errors=True)


def _source_name(package: str) -> str:
    """The corpus source a package feeds (both help packages feed one)."""
    return HELP_SOURCE if package in sources.HELP_PACKAGES else package


def build(
    out: Path, cache: Path, pair: str = "en-de", domains: tuple[str, ...] = sources.DOMAINS
) -> dict:
    """Build the corpus into ``out`` from the sources of ``domains``; return corpus.json."""
    if pair != "en-de":
        raise ValueError(f"unsupported language pair {pair!r} (only en-de)")
    start = time.time()
    packages = [
        *sources.HELP_PACKAGES,
        *sources.GETTEXT_PACKAGES,
        ding.DING_PACKAGE,
        *sources.GENERAL_GETTEXT_PACKAGES,
        *sources.DATA_SOURCES,
    ]
    sources.check_not_reserved(packages)
    unknown = sorted(set(domains) - set(sources.DOMAINS))
    if unknown:
        raise ValueError(f"unknown domains {unknown}: choose from {list(sources.DOMAINS)}")
    packages = [p for p in packages if sources.domain_of(_source_name(p)) in domains]
    info = fetch(cache, packages)
    corpus = collect(info, langcheck.LanguageCheck())
    by_split = assign_splits(corpus)
    doc = summary(corpus, by_split, info, time.time() - start)
    write_corpus(out, by_split, doc)
    print_table(doc)
    log(f"wrote {out} in {doc['build_seconds']:.0f}s")
    return doc
