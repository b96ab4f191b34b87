"""Do emoji survive translation, and do they change it? Sent as they are against
app.text.protect's default (taken out before the model, put back after).

    python -m bench.emoji [--bundle bundles/en-de] [--src recipes/everyday-dev.en
        data/en-de-v3/test.general.en] [--limit 150] [--threads 1]

Each source sentence (the first --limit of each file) gets one run of emoji (a face, a thumb with
a skin tone, a heart with its selector, a family joined by zero-width joiners, a flag, two in a
row, ...), in turn at its end, at its start and after a random word (seeded). Reported per way:
the sentences whose emoji all come back exactly (as often as sent), and those whose words (the
output without its emoji) are the translation of the sentence without emoji, with chrF against
it.
"""

from __future__ import annotations

import argparse
import random
import re
from pathlib import Path

from app.engine import Translator
from app.text.protect import mask, unmask

EMOJI = ["😊", "👍", "❤️", "🎉🎂", "👨‍👩‍👧", "🇩🇪", "👍🏽", "🙏", "😂😂", "✅", "⭐", "☀️"]


def with_emoji(sentences: list[str], seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i, s in enumerate(sentences):
        e, words = EMOJI[i % len(EMOJI)], s.split()
        if i % 3 == 0:
            out.append(f"{s} {e}")
        elif i % 3 == 1:
            out.append(f"{e} {s}")
        else:
            k = rng.randrange(1, max(2, len(words)))
            out.append(" ".join([*words[:k], e, *words[k:]]))
    return out


def without_emoji(text: str) -> str:
    return re.sub(r" +", " ", "".join(c for c in text if not any(c in e for e in EMOJI))).strip()


def main(argv: list[str] | None = None) -> None:
    import sacrebleu

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", default="bundles/en-de")
    ap.add_argument("--src", type=Path, nargs="+", default=[
        Path("recipes/everyday-dev.en"), Path("data/en-de-v3/test.general.en")])
    ap.add_argument("--limit", type=int, default=150)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    plain = [s for f in args.src for s in f.read_text(encoding="utf-8").splitlines()[: args.limit]]
    sent = with_emoji(plain)
    translator = Translator.from_dir(args.bundle, intra_threads=args.threads, inter_threads=1)

    def run(texts: list[str]) -> list[str]:
        return [r.text for r in translator.translate_batch(texts)]

    reference = run(plain)
    masked = [mask(t) for t in sent]
    ways = {"as sent": run(sent),
            "taken out": [unmask(m, o) for m, o in zip(masked, run([m.text for m in masked]),
                                                       strict=True)]}
    for way, outputs in ways.items():
        kept = sum(all(o.count(e) == t.count(e) for e in EMOJI if e in t)
                   for t, o in zip(sent, outputs, strict=True))
        words = [without_emoji(o) for o in outputs]
        same = sum(w == r for w, r in zip(words, reference, strict=True))
        chrf = sacrebleu.corpus_chrf(words, [reference]).score
        print(f"{way:10} emoji kept {kept}/{len(sent)}  words as without emoji {same}/{len(sent)}"
              f"  chrF against them {chrf:.1f}")


if __name__ == "__main__":
    main()
