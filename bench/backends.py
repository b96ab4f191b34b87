"""The engines compared by bench.run, behind one interface, and the worker that measures one
engine in its own process (so its peak RSS is its own):

    python -m bench.backends SPEC.json RESULT.json

Every backend translates texts to texts with the same SentencePiece model, the same source
truncation (max_positions - 1 tokens, then EOS), the same length limit (10 + 1.5 x source tokens,
EOS included, capped by the position table) and the same search: greedy, or beam 4 with length
penalty 1.0 and no repetition rules, no sampling, no banned tokens. Batches are 32 sentences of
similar length (the texts sorted by source length). Our engine applies each sentence's own limit;
CTranslate2 and Transformers take one limit per call, so they get the largest of the batch and
their outputs are then cut to each sentence's own limit. For greedy search that is exactly the
per-sentence rule (greedy output is a prefix of a longer run); for beam search it can differ on
the few outputs that run into the limit (a batch's sentences have about the same length, so the
limits differ by a token or two).

Nothing here imports torch at module level: the ONNX Runtime and CTranslate2 workers never load it.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm

from app.engine.bundle import DEFAULT_DECODING
from bench.common import output_limit, pid_peak_rss_mb

# the engine's length rule and defaults (app/engine/bundle.py), for every engine alike
MAX_LEN_OFFSET = DEFAULT_DECODING["max_len_offset"]
MAX_LEN_RATIO = DEFAULT_DECODING["max_len_ratio"]
LENGTH_PENALTY = DEFAULT_DECODING["length_penalty"]
ENGINES = ("ort-fp32", "ort-int8", "ct2-fp32", "ct2-int8", "hf-fp32")


@dataclass
class Output:
    text: str
    tokens: list[int]  # generated ids without BOS/EOS


class Backend:
    """texts -> Outputs in input order; subclasses implement `_search` on one sorted batch."""

    name = ""

    def __init__(self, tokenizer: Path, max_positions: int, batch_size: int = 32) -> None:
        self.sp = spm.SentencePieceProcessor(model_file=str(tokenizer))
        self.max_positions = max_positions
        self.batch_size = batch_size

    def encode(self, texts: list[str]) -> list[list[int]]:
        return [ids[: self.max_positions - 1] for ids in self.sp.encode(texts)]

    def limit(self, ids: list[int]) -> int:
        return output_limit(len(ids), MAX_LEN_OFFSET, MAX_LEN_RATIO, self.max_positions)

    def translate(self, texts: list[str], beam: int) -> list[Output]:
        sources = self.encode(texts)
        order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
        tokens: list[list[int]] = [[] for _ in sources]
        chunks = [order[start : start + self.batch_size]
                  for start in range(0, len(order), self.batch_size)]
        found = self._search_chunks([[sources[i] for i in chunk] for chunk in chunks], beam)
        for chunk, chunk_ids in zip(chunks, found, strict=True):
            for i, ids in zip(chunk, chunk_ids, strict=True):
                tokens[i] = ids[: self.limit(sources[i])]  # the sentence's own limit (see top)
        return [Output(self.sp.decode(ids), ids) for ids in tokens]

    def _search_chunks(self, chunks: list[list[list[int]]], beam: int) -> list[list[list[int]]]:
        return [self._search(chunk, beam) for chunk in chunks]

    def batch1_alternative(self) -> Callable[[], Backend] | None:
        """What builds another layout of the same engine to time batch-1 latency on as well
        (the lower p50 counts), once this one is let go; None: this layout only."""
        return None

    @property
    def layout(self) -> str:
        return ""

    def _search(self, sources: list[list[int]], beam: int) -> list[list[int]]:
        raise NotImplementedError


class OrtBackend(Backend):
    """Our engine: app.engine.Translator on ONNX Runtime (it sorts and batches by itself)."""

    def __init__(self, bundle: Path, variant: str, threads: int, batch_size: int = 32,
                 provider: str = "cpu", optimization: str = "all") -> None:
        from app.engine import TranslationOptions, Translator

        self.translator = Translator.from_dir(
            bundle,
            variant=variant,
            provider=provider,
            optimization=optimization,
            intra_threads=threads,
            inter_threads=1,
            max_batch_size=batch_size,
        )
        self.options = {
            beam: TranslationOptions(
                beam_size=beam,
                length_penalty=LENGTH_PENALTY,
                max_len_offset=MAX_LEN_OFFSET,
                max_len_ratio=MAX_LEN_RATIO,
                rerank=False,  # the peers have no language model: one search compared
            )
            for beam in (1, 4)
        }
        self.name = f"ort-{variant}"

    def translate(self, texts: list[str], beam: int) -> list[Output]:
        results = self.translator.translate_batch(texts, self.options[beam])
        return [Output(r.text, list(r.tokens)) for r in results]


class Ct2Backend(Backend):
    """CTranslate2's Translator on a model written by bench.convert, in the layout of our
    engine's decode workers: with `workers` > 1, that many CTranslate2 workers (inter_threads, the
    weights shared) with the threads shared out among them, and batches of batch_size / workers
    sentences submitted together, so both engines have the same sentences in flight on the
    same threads."""

    def __init__(self, model_dir: Path, compute_type: str, threads: int, max_positions: int,
                 workers: int = 1, device: str = "cpu"):
        import ctranslate2

        super().__init__(model_dir / "sentencepiece.model", max_positions)
        self.workers = workers
        self.batch_size = -(-self.batch_size // workers)
        self.translator = ctranslate2.Translator(
            str(model_dir),
            device=device,
            compute_type=compute_type,
            intra_threads=max(1, threads // workers),
            inter_threads=workers,
        )
        self.pieces = [self.sp.id_to_piece(i) for i in range(self.sp.get_piece_size())]
        self.index = {p: i for i, p in enumerate(self.pieces)}
        self.name = "ct2-" + {"float32": "fp32"}.get(compute_type, compute_type)
        self._args = (model_dir, compute_type, threads, max_positions)
        self._device = device
        self.threads = threads

    @property
    def layout(self) -> str:
        return f"{self.workers} worker(s) x {max(1, self.threads // self.workers)} thread(s)"

    def batch1_alternative(self) -> Callable[[], Backend] | None:
        """A single sentence runs on one worker, so in the decode worker layout on 1/workers of the
        threads: time it on one worker with all of them too. Which is quicker depends on the
        model's size (one thread was for our 8M-parameter model, two for a 31M one)."""
        return (functools.partial(Ct2Backend, *self._args, workers=1, device=self._device)
                if self.workers > 1 else None)

    def _search_chunks(self, chunks: list[list[list[int]]], beam: int) -> list[list[list[int]]]:
        pending = [  # all queued at once: the workers take them in turn
            self.translator.translate_batch(
                [[self.pieces[t] for t in ids] for ids in chunk],  # EOS added by the model config
                beam_size=beam,
                length_penalty=LENGTH_PENALTY,
                max_decoding_length=max(self.limit(ids) for ids in chunk),
                min_decoding_length=0,
                max_input_length=0,
                asynchronous=True,
            )
            for chunk in chunks
        ]
        return [[[self.index[p] for p in r.result().hypotheses[0]] for r in results]
                for results in pending]


class HfBackend(Backend):
    """Transformers' MarianMTModel.generate (fp32) on a model written by bench.convert."""

    def __init__(self, model_dir: Path, threads: int, max_positions: int) -> None:
        import torch

        from bench.convert import generation_config, load_hf

        torch.set_num_threads(threads)
        super().__init__(model_dir / "sentencepiece.model", max_positions)
        self.torch = torch
        self.model = load_hf(model_dir)
        self.config = self.model.config
        self.generation_config = generation_config
        self.name = "hf-fp32"

    def _search(self, sources: list[list[int]], beam: int) -> list[list[int]]:
        from bench.convert import strip_eos

        pad, eos = self.config.pad_token_id, self.config.eos_token_id
        rows = [ids + [eos] for ids in sources]
        width = max(len(r) for r in rows)
        ids = self.torch.tensor([r + [pad] * (width - len(r)) for r in rows])  # (B, S)
        with self.torch.inference_mode():
            generated = self.model.generate(
                input_ids=ids,
                attention_mask=ids.ne(pad),
                generation_config=self.generation_config(
                    self.config,
                    num_beams=beam,
                    early_stopping=beam > 1,  # stop once `beam` hypotheses end, as ours does
                    max_new_tokens=max(self.limit(s) for s in sources),
                ),
            )  # (B, 1 + T)
        return [strip_eos(row, eos) for row in generated[:, 1:].tolist()]


def make_backend(spec: dict) -> Backend:
    engine, threads, max_positions = spec["engine"], spec["threads"], spec["max_positions"]
    if engine.startswith("ort-"):
        return OrtBackend(Path(spec["bundle"]), engine.split("-", 1)[1], threads)
    if engine.startswith("ct2-"):
        from app.engine.sessions import SessionConfig, decode_workers

        compute = {"ct2-fp32": "float32", "ct2-int8": "int8"}[engine]
        lanes = decode_workers(SessionConfig(intra_op_threads=threads), 32)  # as ours
        return Ct2Backend(Path(spec["model_dir"]), compute, threads, max_positions, lanes)
    if engine == "hf-fp32":
        return HfBackend(Path(spec["model_dir"]), threads, max_positions)
    raise ValueError(f"unknown engine {engine!r}; known: {ENGINES}")


def timed(run) -> tuple[object, float]:
    started = time.perf_counter()
    out = run()
    return out, time.perf_counter() - started


def generated_tokens(outputs: list[Output]) -> int:
    """Target tokens generated, EOS included (one per sentence), as in bench/engine.py."""
    return sum(len(o.tokens) + 1 for o in outputs)


def warm_up(backend: Backend, texts: list[str]) -> None:
    backend.translate(texts[:8], 1)  # lazy initialisation, first allocations
    backend.translate(texts[:8], 4)


def batch1(backend: Backend, texts: list[str], beam: int) -> dict:
    """One pass of single-sentence calls: per-call seconds and the tokens generated."""
    latencies, steps = [], 0
    for text in texts:
        out, s = timed(lambda t=text: backend.translate([t], beam))
        latencies.append(s)
        steps += generated_tokens(out)
    return {"latency_s": latencies, "latency_tokens": steps, "latency_layout": backend.layout}


def measure(spec: dict) -> dict:
    """Load, warm up, then throughput (batch 32, sorted; the fastest of spec["repeat"] passes)
    and batch-1 latency (one pass), greedy and beam 4. An engine with another layout for
    single sentences (Backend.batch1_alternative) has its latency timed in both, the lower p50
    kept; the peak RSS covers both."""
    texts, latency_texts = spec["texts"], spec["latency_texts"]
    backend, load_s = timed(lambda: make_backend(spec))
    warm_up(backend, texts)
    result: dict = {"engine": spec["engine"], "load_s": round(load_s, 3), "searches": {}}
    for beam in spec["beams"]:
        runs = []
        for _ in range(spec.get("repeat", 1)):  # the fastest of `repeat` passes
            gc.collect()
            runs.append(timed(lambda b=beam: backend.translate(texts, b)))
        outputs, seconds = min(runs, key=lambda run: run[1])
        tokens = generated_tokens(outputs)
        result["searches"][str(beam)] = {
            "sentences": len(texts),
            "passes_s": [run[1] for run in runs],
            "tokens": tokens,
            "seconds": seconds,
            "tokens_per_s": tokens / seconds,
            "sentences_per_s": len(texts) / seconds,
            **batch1(backend, latency_texts, beam),
            "hypotheses": [o.text for o in outputs],
            "tokens_out": [o.tokens for o in outputs] if beam == 1 else None,
        }
    make_other = backend.batch1_alternative()
    if make_other is not None:
        del backend  # one copy of the model at a time: the RSS stays the engine's own
        gc.collect()
        other = make_other()
        warm_up(other, texts)
        for beam in spec["beams"]:
            mine, theirs = result["searches"][str(beam)], batch1(other, latency_texts, beam)
            if statistics.median(theirs["latency_s"]) < statistics.median(mine["latency_s"]):
                mine.update(theirs)
    result["peak_rss_mb"] = pid_peak_rss_mb(os.getpid())  # VmHWM: not inherited across exec
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m bench.backends SPEC.json RESULT.json", file=sys.stderr)
        return 2
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    Path(argv[1]).write_text(json.dumps(measure(spec)), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
