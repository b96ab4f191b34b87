"""Does a sentence's translation depend on the sentences decoded beside it?

    python -m bench.batch_invariance [--bundle bundles/en-de] [--src data/en-de/test.en]
        [--limit 200] [--variants fp32,int8]

Each variant translates the first --limit sentences one at a time and then all of them in one
call (one running batch, one decode worker), and prints how many came out differently. fp32 should
give none. int8 with run-time activation scales gives some: ONNX Runtime's DynamicQuantizeLinear
quantizes the activations of a whole matrix with one scale, which every row of the running batch
shares. A bundle calibrated by export.calibrate (fixed scales) changes few: the shipped bundle 4
of 200 (24 before it was calibrated), where the fused single-sentence search and a beam step's
choice of cross-attention kernel round differently (README).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from app.engine import Translator


def differences(translator: Translator, texts: list[str]) -> int:
    """How many texts translate differently alone than all together in one call."""
    alone = [translator.translate_batch([text])[0].text for text in texts]
    together = [r.text for r in translator.translate_batch(texts)]
    return sum(a != b for a, b in zip(alone, together, strict=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, default=Path("bundles/en-de"))
    parser.add_argument("--src", type=Path, default=Path("data/en-de/test.en"))
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--variants", default="fp32,int8")
    args = parser.parse_args(argv)
    lines = args.src.read_text(encoding="utf-8").splitlines()
    texts = [line.strip() for line in lines if line.strip()][: args.limit]
    for variant in args.variants.split(","):
        translator = Translator.from_dir(args.bundle, variant=variant, intra_threads=1,
                                         max_batch_size=len(texts), workers=1)
        print(f"{variant}: {differences(translator, texts)} of {len(texts)} sentences "
              "translated differently alone than in one batch")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
