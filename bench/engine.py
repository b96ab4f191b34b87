"""Engine throughput: tokens/s by variant, batch size and search, and by optimization level.

python bench/engine.py --bundle bundles/en-de --sentences test.en [--threads 1]
python bench/engine.py --checkpoint ckpt.pt --sentences test.en     # exports a temporary bundle

Prints, for each precision variant, generated tokens per second (EOS included, best hypothesis
only, tokenization and detokenization included) for batch 1 and 32, greedy and beam 4, then the
effect of ONNX Runtime's graph optimization level. Timings are the best of --repeat runs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.engine import TranslationOptions, Translator, find_bundles  # noqa: E402
from app.engine.bundle import read_manifest  # noqa: E402

FALLBACK_SENTENCES = [
    "Open the file.",
    "Save changes to the document before closing?",
    "The package could not be installed because of unmet dependencies.",
    "Do you want to continue?",
    "Cannot connect to the server.",
    "Select the printer you want to use.",
    "The operation was cancelled by the user.",
    "Insert a new row above the selected cell.",
]


CLOCK = time.perf_counter  # --cpu-time switches to process CPU time


def best_time(run: Callable[[], int], repeat: int) -> tuple[int, float]:
    """(tokens, seconds) of the fastest of `repeat` runs."""
    runs = []
    for _ in range(repeat):
        started = CLOCK()
        tokens = run()
        runs.append((tokens, CLOCK() - started))
    return min(runs, key=lambda r: r[1])


def throughput_table(bundle: Path, texts: list[str], threads: int, repeat: int) -> None:
    print(f"\n## tokens/s ({len(texts)} sentences, intra-op threads {threads or 'default'})")
    print(f"{'variant':8} {'batch':>5} {'search':>8} {'tokens/s':>10} {'sent/s':>8}")
    for variant in read_manifest(bundle)["variants"]:
        entry = read_manifest(bundle)["variants"][variant]
        if "cpu" not in entry["providers"]:
            print(f"{variant:8} skipped (CUDA only)")
            continue
        for batch in (1, 32):
            translator = Translator.from_dir(
                bundle, variant=variant, intra_threads=threads, max_batch_size=batch
            )
            translator.warmup()
            for beam in (1, 4):
                options = TranslationOptions(beam_size=beam)

                def run(t=translator, o=options) -> int:
                    return sum(len(r.tokens) + 1 for r in t.translate_batch(texts, o))

                tokens, seconds = best_time(run, repeat)
                name = "greedy" if beam == 1 else f"beam {beam}"
                print(
                    f"{variant:8} {batch:>5} {name:>8} {tokens / seconds:>10.0f} "
                    f"{len(texts) / seconds:>8.1f}"
                )


def optimization_levels(bundle: Path, texts: list[str], threads: int, repeat: int) -> None:
    print("\n## graph optimization level (fp32, batch 32, greedy)")
    print(f"{'level':9} {'load s':>7} {'tokens/s':>10}")
    for level in ("disable", "basic", "extended", "all"):
        started = time.perf_counter()
        translator = Translator.from_dir(
            bundle, variant="fp32", intra_threads=threads, optimization=level
        )
        load = time.perf_counter() - started
        translator.warmup()
        greedy = TranslationOptions(beam_size=1)

        def run(t=translator, o=greedy) -> int:
            return sum(len(r.tokens) + 1 for r in t.translate_batch(texts, o))

        tokens, seconds = best_time(run, repeat)
        print(f"{level:9} {load:>7.2f} {tokens / seconds:>10.0f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bundle", type=Path, help="bundle directory (default: first in ./bundles)")
    p.add_argument("--checkpoint", type=Path, help="export this checkpoint to a temporary bundle")
    p.add_argument("--sentences", type=Path, help="source sentences, one per line")
    p.add_argument("--limit", type=int, default=64, help="sentences to use (default 64)")
    p.add_argument("--threads", type=int, default=0, help="intra-op threads (0 = ORT default)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument(
        "--cpu-time",
        action="store_true",
        help="time by process CPU time instead of wall clock: steadier on a shared machine "
        "(meaningful with --threads 1)",
    )
    args = p.parse_args(argv)
    global CLOCK
    if args.cpu_time:
        CLOCK = time.process_time

    texts = FALLBACK_SENTENCES
    if args.sentences:
        texts = [t.strip() for t in args.sentences.read_text(encoding="utf-8").splitlines()]
        texts = [t for t in texts if t]
    texts = (texts * (args.limit // len(texts) + 1))[: args.limit]
    with tempfile.TemporaryDirectory() as tmp:
        bundle = args.bundle
        if bundle is None and args.checkpoint is not None:
            from export.bundle import write_bundle  # needs torch

            bundle = write_bundle(args.checkpoint, Path(tmp) / "bench", variants=("fp32", "int8"))
        if bundle is None:
            found = find_bundles("bundles")
            if not found:
                p.error("no bundle: pass --bundle or --checkpoint")
            bundle = found[0]
        clock = "process CPU time" if args.cpu_time else "wall clock"
        print(f"bundle {bundle}; timed by {clock}, best of {args.repeat}")
        throughput_table(bundle, texts, args.threads, args.repeat)
        optimization_levels(bundle, texts, args.threads, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
