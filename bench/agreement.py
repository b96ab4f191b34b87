"""German article-noun agreement in translations: how often a definite article disagrees with the
noun after it, and how often the beam holds a hypothesis without that error.

    python -m bench.agreement [--bundle bundles/en-de] [--src recipes/everyday-dev.en
        --ref recipes/everyday-dev.de] [--ding .cache/unpacked/trans-de-en_1.9-6_all]
        [--limit 0] [--threads 2] [--no-rerank] [--examples 0] [--json out.json]

BLEU counts an error of agreement ("Das Suppe ist zu salzig.") as one wrong word; a reader
stops at it. This counts them. Each noun's genders come from the Ding dictionary's German
entries (`Suppe {f}`, `Strand {m}`, `Bahnhöfe {pl}`); a noun it lacks is read by its longest
known head of four letters or more (`Zugstation` as `Station`), or skipped. A definite article,
at most one adjective and a capitalised noun are checked against the forms German allows (the
adjective's weak ending -e or -en narrows the case): `der nächstgelegene Zugstation` disagrees,
`der nächstgelegenen Zugstation` (dative) does not. Only definite articles are read: the check
misses errors but seldom flags right German; run on the references, its count is the rate of
false alarms.

Each source is translated with the bundle's decoding defaults (beam 4, reranked where the bundle
has a language model), the other hypotheses of the beam asked for too. Reported: the sentences
whose translation has a disagreement, of those how many have another hypothesis without one, and
the references' count.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from collections.abc import Iterable
from pathlib import Path

from bench.common import read_pairs
from model.corpus.ding import DING_FILE

# (article, adjective ending) -> the genders (m, f, n) or plural (pl) of the nouns it may precede
ALLOWED = {
    ("der", ""): {"m", "f", "pl"}, ("die", ""): {"f", "pl"}, ("das", ""): {"n"},
    ("den", ""): {"m", "pl"}, ("dem", ""): {"m", "n"}, ("des", ""): {"m", "n"},
    ("der", "e"): {"m"}, ("die", "e"): {"f"}, ("das", "e"): {"n"},
    ("der", "en"): {"f", "pl"}, ("die", "en"): {"pl"}, ("den", "en"): {"m", "pl"},
    ("dem", "en"): {"m", "n"}, ("des", "en"): {"m", "n"},
}
_ENTRY_RE = re.compile(r"^\s*([A-ZÄÖÜ][a-zäöüß]+) \{(m|f|n|pl)\}")
_PHRASE_RE = re.compile(
    r"(?<![\w-])([Dd](?:er|ie|as|en|em|es))\s+(?:([a-zäöüß]+?(en|e))\s+)?([A-ZÄÖÜ][a-zäöüß]+)(?![\w-])"
)
# words before a noun with an adjective's ending that are not adjectives
_DETERMINER_RE = re.compile(r"(?:d|mein|dein|sein|ihr|unser|eu|ein|kein|dies|jen|welch|all|beid"
                            r"|solch|manch|jed)(?:er|ie|as|en|em|es|e|ren|re)?")
HEAD_MIN = 4  # letters of the shortest head a compound is read by
ENDINGS = ("s", "es", "n", "en", "e", "er", "nen", "se", "ses")  # case and plural endings
# masculine and neuter nouns whose plural is the singular
SAME_IN_PLURAL = ("er", "el", "en", "chen", "lein")


def noun_genders(lines: Iterable[str]) -> dict[str, frozenset[str]]:
    """Ding lines -> each one-word noun's genders and plural marks, from the German side's
    sub-entries and synonyms that begin with it (`Bahnhof {m} | Bahnhöfe {pl} | ...`)."""
    found: dict[str, set[str]] = {}
    for line in lines:
        if line.startswith("#") or "::" not in line:
            continue
        for part in re.split(r"[|;]", line.split("::", 1)[0]):
            m = _ENTRY_RE.match(part)
            if m:
                found.setdefault(m.group(1), set()).add(m.group(2))
    return {noun: frozenset(tags) for noun, tags in found.items()}


def genders(noun: str, lexicon: dict[str, frozenset[str]]) -> frozenset[str] | None:
    """The noun's entry, else its longest known head (a German compound takes its last part's
    gender), else None."""
    if noun in lexicon:
        return lexicon[noun]
    for start in range(1, len(noun) - HEAD_MIN + 1):
        head = noun[start:].capitalize()
        if head in lexicon:
            return lexicon[head]
    return None


def noun_tags(noun: str, lexicon: dict[str, frozenset[str]]) -> set[str] | None:
    """What the noun may be: its genders, and where it is a known noun with an ending
    (`Autos`, `Namen`, `Kriegerinnen`), that noun's genders and the plural too, as the
    dictionary does not list every inflected form. Generous on purpose: a false alarm costs
    more than a miss."""
    tags = set(genders(noun, lexicon) or ())
    if tags & {"m", "n"} and noun.endswith(SAME_IN_PLURAL):
        tags.add("pl")  # der Kämpfer, die Kämpfer
    for ending in ENDINGS:
        if noun.endswith(ending) and len(noun) - len(ending) >= 2:
            stem = genders(noun[: -len(ending)], lexicon)
            if stem:
                tags |= stem | {"pl"}
    return tags or None


def disagreements(text: str, lexicon: dict[str, frozenset[str]]) -> list[str]:
    """The article-(adjective-)noun phrases of text whose article the noun cannot take."""
    out = []
    for m in _PHRASE_RE.finditer(text):
        article, adjective, ending, noun = m.groups()
        if adjective is not None and _DETERMINER_RE.fullmatch(adjective):
            continue  # "der seine Familie", "der den Preis": a pronoun, then a phrase of its own
        tags = noun_tags(noun, lexicon)
        if tags is not None and not ALLOWED.get((article.lower(), ending or ""), set()) & tags:
            out.append(m.group(0))
    return out


def measure(outputs: list[list[str]], refs: list[str] | None,
            lexicon: dict[str, frozenset[str]]) -> dict:
    """outputs: each sentence's hypotheses, the translation first."""
    flagged = [i for i, hyps in enumerate(outputs) if disagreements(hyps[0], lexicon)]
    mendable = [i for i in flagged
                if any(not disagreements(h, lexicon) for h in outputs[i][1:])]
    return {
        "sentences": len(outputs),
        "with_disagreement": len(flagged),
        "another_hypothesis_without": len(mendable),
        "references_with_disagreement": (None if refs is None else
                                         sum(bool(disagreements(r, lexicon)) for r in refs)),
        "flagged": flagged,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", default="bundles/en-de")
    ap.add_argument("--src", type=Path, default=Path("recipes/everyday-dev.en"))
    ap.add_argument("--ref", type=Path, default=None, help="default: --src with .de, if there")
    ap.add_argument("--ding", type=Path, default=Path(".cache/unpacked/trans-de-en_1.9-6_all"),
                    help="the unpacked trans-de-en package")
    ap.add_argument("--limit", type=int, default=0, help="sentences (0: all)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-rerank", action="store_true",
                    help="the beam's own order, without the bundle's language model")
    ap.add_argument("--examples", type=int, default=0, help="print this many flagged outputs")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    from app.engine import Translator

    ding = args.ding / DING_FILE
    if not ding.exists():
        raise SystemExit(f"--ding: no {DING_FILE} under {args.ding}; the corpus build unpacks "
                         "trans-de-en under its --cache (docs/corpus.md), or: apt-get download "
                         "trans-de-en && dpkg -x trans-de-en_*.deb DIR, then --ding DIR")
    lexicon = noun_genders(ding.read_text(encoding="utf-8").splitlines())
    ref_path = args.ref or args.src.with_suffix(".de")
    sources, refs = read_pairs(args.src, ref_path if ref_path.exists() else None,
                               args.limit or None)
    translator = Translator.from_dir(args.bundle, intra_threads=args.threads, inter_threads=1)
    options = translator.default_options
    options = dataclasses.replace(options, num_alternatives=options.beam_size - 1,
                                  rerank=not args.no_rerank)
    results = translator.translate_batch(sources, options)
    outputs = [[r.text, *r.alternatives] for r in results]
    report = measure(outputs, refs, lexicon)
    flagged = report.pop("flagged")
    report.update(nouns=len(lexicon), bundle=str(args.bundle), src=str(args.src),
                  reranked=translator.reranks(options))
    print(json.dumps(report))
    for i in flagged[: args.examples]:
        mended = [h for h in outputs[i][1:] if not disagreements(h, lexicon)]
        print(f"  {disagreements(outputs[i][0], lexicon)} {outputs[i][0]!r}",
              f"-> {mended[0]!r}" if mended else "(no hypothesis without)")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
