"""Which symbols a bundle's model does not copy, and so the engine masks:

    python -m export.symbols bundles/en-de [--record]

A symbol the training data hardly had ("±", "≠", "®", "←", "★") is a piece of the vocabulary
whose embedding the model barely learned: it wrote a word for it ("Die Toleranz ist
SCHÄTZER0.5 mm." for "The tolerance is ±0.5 mm."), or nothing. Each candidate (a piece of one
character, a symbol or mark beyond ASCII: `candidates`) is put into FRAMES and translated
with the bundle's default variant and decoding, none masked; one that any frame loses is
named. --record writes them into the manifest as `masked_symbols` (and so the card): the engine
then masks them before the model and puts them back where it puts the mask
(app.engine.translator.Translator.read), and symbols the vocabulary lacks too (the unknown
piece the model then reads is no better). A bundle without the list (an imported one) is read
as before.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from app.engine.bundle import MANIFEST
from app.engine.tokenizer import is_symbol
from app.engine.translator import Translator
from export.bundle import save_manifest

# short sentences of the kinds symbols stand in: a value, a key to press, an operator
FRAMES = ("The value {} is shown here.", "Press {} to continue.",
          "Use {} between the two numbers.")


def candidates(translator: Translator) -> list[str]:
    """The vocabulary's pieces of one symbol or mark (app.engine.tokenizer.is_symbol)."""
    tokenizer = translator.tokenizer
    pieces = ([tokenizer.sp.id_to_piece(i) for i in range(tokenizer.vocab_size)]
              if hasattr(tokenizer, "sp") else list(tokenizer.vocab))
    chars = {p.lstrip("\u2581") for p in pieces}
    return sorted(c for c in chars if len(c) == 1 and is_symbol(c))


def uncopied(translator: Translator, chars: list[str]) -> list[str]:
    """The chars that some frame's translation loses, translated with none masked."""
    translator.mask_symbols(frozenset(), unknown=False)
    texts = [frame.format(c) for c in chars for frame in FRAMES]
    outputs = iter(r.text for r in translator.translate_batch(texts))
    lost = []
    for c in chars:
        kept = [c in next(outputs) for _ in FRAMES]
        if not all(kept):
            lost.append(c)
    return lost


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m export.symbols", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--record", action="store_true",
                        help="write the symbols into the manifest as masked_symbols")
    args = parser.parse_args(argv)
    translator = Translator.from_dir(args.bundle)
    chars = candidates(translator)
    lost = uncopied(translator, chars)
    print(f"{len(chars)} symbols in the vocabulary; {len(lost)} lost by some frame: "
          f"{''.join(lost)}")
    if args.record:
        path = args.bundle / MANIFEST
        manifest = json.loads(path.read_text(encoding="utf-8"))
        manifest["masked_symbols"] = "".join(lost)
        save_manifest(args.bundle, manifest)
        print(f"recorded in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
