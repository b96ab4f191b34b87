"""The engine: texts in, translations out, on ONNX Runtime (no torch).

translate_batch: tokenize -> sort by length -> running batches (one per decode worker) of at most
max_batch_size sentences in all, refilled in length order -> encoder, groups of like lengths ->
greedy or beam search over the decoder's KV cache -> detokenize -> results in input order.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from app.engine.bundle import Bundle, BundleError, load_bundle
from app.engine.fused import FusedDecoder
from app.engine.rerank import Reranker, name_pieces
from app.engine.search import Hypothesis, Search, output_limit
from app.engine.sessions import Seq2SeqSessions, SessionConfig, decode_workers
from app.engine.step import DecodeState, cache_head_dim
from app.engine.tokenizer import (
    Form,
    JointTokenizer,
    SplitTokenizer,
    as_written,
    final_marks,
    in_capitals,
    is_symbol,
    marks_as_source,
    one_final_period,
    written_back,
    written_forms,
)
from app.engine.types import Result, TranslationOptions
from app.engine.worker_processes import ProcessBatch, WorkerProcesses, WorkerSpec

# offline batches take new sentences once 1/16 of their slots are free (one in a decode worker of
# 16): sentences are encoded ahead, so one joining costs no encoder call (quicker than 1/8 in
# alternating passes: BENCHMARKS.md)
REFILL_SHARE = 16
# sentences encoded together have sources at least this share of the longest's length, or at
# most LENGTH_SLACK tokens shorter (for short sources a call costs more than the padding): fewer
# padded positions and less encoder time than fixed groups taken shortest first
LIKE_LENGTHS = 0.9
LENGTH_SLACK = 3
# a greedy call of several sentences starts with the LONGEST_FIRST longest sources per decode
# worker, then takes the others shortest first: the longest outputs then run beside the others
# instead of alone at the end, on one core while the other idles (a long source may loop to its
# length limit long after the other decode worker finished). Not for beam search: there its cache
# holds K rows per sentence at the longest's length (no quicker, and a higher peak memory)
LONGEST_FIRST = 2
# texts whose source ids a translator keeps: the service tokenizes a request's text for its
# length check, the batcher's token count and the engine's admission, within milliseconds
IDS_CACHE = 1024


def load_tokenizer(bundle: Bundle) -> JointTokenizer | SplitTokenizer:
    """The bundle's tokenizer: one joint SentencePiece model, or split source/target models."""
    files = bundle.tokenizer_files
    if "model" in files:
        return JointTokenizer(files["model"])
    try:
        return SplitTokenizer.from_files(files["source"], files["target"], files["vocab"])
    except (ValueError, UnicodeDecodeError, OSError) as exc:  # json errors are ValueErrors
        raise BundleError(f"{files['vocab']}: {exc}") from exc


def check_consistency(
    bundle: Bundle, sessions: Seq2SeqSessions, tokenizer: JointTokenizer | SplitTokenizer
) -> None:
    """The graphs and the tokenizer must be the ones the manifest describes; raise BundleError
    naming the file that disagrees."""
    a, special = bundle.architecture, bundle.special_tokens
    cache = sessions.cache_shape
    cross = next(x for x in sessions.one_thread_encoder.get_outputs() if x.name == "cross_k").shape
    heads, head_dim = a["n_heads"], a["head_dim"]
    for path, what, shape, found, expected in (
        (bundle.decoder_path, "cache", cache, [cache[1], cache[3]],  # (R, H, M, Dp)
         [heads, cache_head_dim(head_dim)]),
        (bundle.encoder_path, "cross_k", cross, [cross[2], cross[4]],  # (L, B, H, S, Dh)
         [heads, head_dim]),
    ):
        if found != expected:
            raise BundleError(
                f"{path}: {what} shape {shape} does not match the manifest's "
                f"architecture (heads, head size = {expected})"
            )
    if cross[0] != a["n_decoder_layers"]:
        raise BundleError(f"{bundle.encoder_path}: cross_k has {cross[0]} layers, the manifest "
                          f"{a['n_decoder_layers']}")
    # a split vocabulary may lack a BOS piece (Marian starts the decoder from pad)
    joint = "model" in bundle.tokenizer_files
    names = ("pad", "bos", "eos", "unk") if joint else ("pad", "eos", "unk")
    ids = (tokenizer.vocab_size, *(tokenizer.piece_id(n) for n in names))
    want = (a["vocab_size"], *(special[f"{n}_id"] for n in names))
    if ids != want:
        where = bundle.tokenizer_files.get("model") or bundle.tokenizer_files["vocab"]
        raise BundleError(
            f"{where}: vocabulary size and {'/'.join(names)} ids {ids} do not "
            f"match the manifest's {want}"
        )


def blank_result(options: TranslationOptions) -> Result:
    """The Result of a blank text: empty, without running the model."""
    return Result(text="", score=0.0 if options.return_scores else None)


class Symbols(NamedTuple):
    """A text's runs of symbols the model does not read (Translator.read), each masked as
    `{N}` (a number the text's own braces do not use): the masks, the symbols, and where each
    mask stood (its start over the masked text's length)."""

    masks: tuple[str, ...]
    originals: tuple[str, ...]
    places: tuple[float, ...]

    @classmethod
    def of(cls, text: str, runs: list[tuple[int, int]]) -> tuple[str, Symbols]:
        """(text with each run masked, the Symbols)."""
        taken, n = set(_BRACES.findall(text)), 0
        out, masks, starts, pos, length = [], [], [], 0, 0
        for start, end in runs:
            n += 1
            while f"{{{n}}}" in taken:
                n += 1
            out.append(text[pos:start])
            length += start - pos
            masks.append(f"{{{n}}}")
            starts.append(length)
            out.append(masks[-1])
            length, pos = length + len(masks[-1]), end
        out.append(text[pos:])
        masked = "".join(out)
        return masked, cls(tuple(masks), tuple(text[a:b] for a, b in runs),
                           tuple(start / max(1, len(masked)) for start in starts))

    def back(self, translation: str) -> str:
        """The translation with each mask's symbols where the model put the mask (once: a
        copy is deleted), or, where it dropped it, at the word boundary nearest the mask's
        place in the source; one pass over the translation."""
        originals = dict(zip(self.masks, self.originals, strict=True))
        placed: set[str] = set()

        def put(m: re.Match) -> str:
            mask = m.group().lstrip(" ")
            if mask not in originals:
                return m.group()  # braces of the text's own
            if mask in placed:
                return ""  # a copy the model made, with the space before it
            placed.add(mask)
            return m.group()[: -len(mask)] + originals[mask]

        out = re.sub(r" ?\{\d+\}", put, translation)
        dropped = [(place, original) for mask, original, place
                   in zip(self.masks, self.originals, self.places, strict=True)
                   if mask not in placed]
        if not dropped:
            return out
        spaces = [0] + [m.start() for m in re.finditer(" ", out)] + [len(out)]
        inserts = []
        for place, original in dropped:
            goal = place * len(out)
            k = bisect.bisect_left(spaces, goal)
            near = min(spaces[max(0, k - 1):k + 1], key=lambda at: abs(at - goal))
            inserts.append((near, original))
        pieces, pos = [], 0
        for at, original in sorted(inserts, key=lambda item: item[0]):
            pieces += [out[pos:at], (f"{original} " if out else original) if at == 0
                       else f" {original}"]
            pos = at
        return "".join(pieces) + out[pos:]


_BRACES = re.compile(r"\{\d+\}")


class Source(NamedTuple):
    """What a sentence's translation needs of its source: the text of its unknown pieces
    (decode writes them), its words the vocabulary reads otherwise (written back as the source
    wrote them: tokenizer.written_forms), whether the translation is given back in capitals
    (in_capitals), its symbols the model does not read, masked (Translator.read), and where
    the bundle reranks, its pieces of names and numbers (app.engine.rerank.keeps), and the run
    of "!" and "?" it ends with (tokenizer.marks_as_source)."""

    unknown: tuple[str, ...] = ()
    forms: tuple[Form, ...] = ()
    capitals: bool = False
    symbols: Symbols | None = None
    names: frozenset[int] = frozenset()
    marks: str = ""


class _Queue:
    """Sentence indices handed out in order to the `workers` decode workers of one call, a few at
    a time."""

    def __init__(self, order: list[int], workers: int = 1,
                 lengths: list[int] | None = None) -> None:
        self.order, self.workers, self.lengths = order, workers, lengths
        self.next, self.lock = 0, threading.Lock()

    def take_share(self, n: int, least: int) -> list[int]:
        """At most n indices, fewer near the end (a fair share of what is left per decode worker, at
        least `least`), so that no decode worker holds sentences back while the others run dry; with
        lengths (the order sorted by them), only sources of about the first's length (they are
        encoded together)."""
        with self.lock:
            left = len(self.order) - self.next
            n = min(n, max(least, -(-left // self.workers)))
            chunk = self.order[self.next : self.next + n]
            if chunk and self.lengths is not None:
                first = self.lengths[chunk[0]]
                chunk = chunk[:1] + list(itertools.takewhile(
                    lambda i: _alike(first, self.lengths[i]), chunk[1:]))
            self.next += len(chunk)
            return chunk


def _alike(a: int, b: int) -> bool:
    """Source lengths close enough to be encoded in one batch (padded to the longer)."""
    return abs(a - b) <= max(LENGTH_SLACK, (1 - LIKE_LENGTHS) * max(a, b))


class _Encoded:
    """Sentences encoded together, handed to a running batch a few at a time: the encoder runs
    on a decode worker's worth of sentences at once while the batch takes in only as many as have
    finished (a greedy decode worker of 16 slots, 250 test sentences: 17 encoder calls instead of
    192)."""

    def __init__(self, ids: list[int], sources: list[list[int]], encoded: tuple) -> None:
        self.ids, self.sources, self.next = ids, sources, 0
        self.cross_k, self.cross_v, self.mask = encoded  # (L, N, H, S, Dh) x 2, (N, S)
        self.lengths = self.mask.sum(axis=1)

    @property
    def left(self) -> int:
        return len(self.ids) - self.next

    def take(self, n: int) -> tuple[list[int], list[list[int]], np.ndarray, np.ndarray,
                                     np.ndarray]:
        """The next n sentences: ids, sources, and their encoder output cut to their longest
        source."""
        i, j = self.next, min(self.next + n, len(self.ids))
        self.next, width = j, int(self.lengths[i:j].max())
        # views: the running batch copies them into its buffers (or, when they start it, makes
        # them contiguous)
        return (self.ids[i:j], self.sources[i:j], self.cross_k[:, i:j, :, :width],
                self.cross_v[:, i:j, :, :width], self.mask[i:j, :width])


class Translator:
    """A loaded bundle variant, ready to translate. Thread-safe: calls share no mutable state.

    A call of several sentences decodes them in `workers` decode workers side by side (on the CPU,
    one per core: app.engine.sessions.decode_workers), each a running batch on its own thread."""

    def __init__(
        self,
        bundle: Bundle,
        session_config: SessionConfig | None = None,
        max_batch_size: int = 32,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.bundle = bundle
        self.max_batch_size = max_batch_size
        config = session_config or SessionConfig()
        self.workers = decode_workers(config, max_batch_size)
        self.sessions = Seq2SeqSessions(
            bundle.encoder_path, bundle.decoder_path, config,
            int(bundle.architecture["n_decoder_layers"]), self.workers,
        )
        self._side_threads = (ThreadPoolExecutor(self.workers - 1, "nmt-decode")
                       if self.workers > 1 else None)
        self.worker_processes: WorkerProcesses | None = None  # see use_worker_processes
        self.tokenizer = load_tokenizer(bundle)
        check_consistency(bundle, self.sessions, self.tokenizer)
        special = bundle.special_tokens
        self.pad_id, self.bos_id, self.eos_id = (
            special["pad_id"],
            special["bos_id"],
            special["eos_id"],
        )
        start = special.get("decoder_start_id")
        self.start_id = self.bos_id if start is None else start  # the decoder's first input
        self.unk_id = special.get("unk_id")
        self.max_positions = int(bundle.architecture["max_positions"])
        # (and the caches of what texts read as)
        self.mask_symbols(bundle.masked_symbols, "masked_symbols" in bundle.manifest)
        a = bundle.architecture
        self.fused = (FusedDecoder(self.sessions.fused_for, int(a["n_decoder_layers"]),
                                   self.start_id, self.eos_id, int(a["vocab_size"]))
                      if self.sessions.fused else None)
        self.reranker = Reranker.of(bundle)
        # (a bundle with a language model has a joint vocabulary: export.lm)
        self._name_pieces = (self.tokenizer.name_pieces() if bundle.language_model_path
                             else None)
        d = bundle.decoding
        self.default_options = TranslationOptions(
            beam_size=int(d["beam_size"]),
            length_penalty=float(d["length_penalty"]),
            max_len_offset=int(d["max_len_offset"]),
            max_len_ratio=float(d["max_len_ratio"]),
        )

    @classmethod
    def from_dir(
        cls,
        path: str | Path,
        variant: str | None = None,
        provider: str = "cpu",
        intra_threads: int = 0,
        inter_threads: int = 0,
        optimization: str = "all",
        max_batch_size: int = 32,
        verify_checksums: bool = True,
        workers: int = 0,
        cross_by_length: bool = True,
        fused: bool | None = None,
        worker_processes: bool = False,
    ) -> Translator:
        """Load and validate the bundle at path (if variant is None, its default variant, or on
        CUDA the first one made for it: app.engine.bundle.variant_for);
        workers: decode workers (0 = one per core), cross_by_length and fused: see
        SessionConfig; worker_processes: see use_worker_processes."""
        bundle = load_bundle(path, variant, verify_checksums=verify_checksums, provider=provider)
        config = SessionConfig(provider, intra_threads, inter_threads, optimization,
                               workers=workers, cross_by_length=cross_by_length, fused=fused)
        translator = cls(bundle, config, max_batch_size)
        if translator.sessions.providers[0] != "CPUExecutionProvider":
            reference = "fp32" if "fp32" in bundle.manifest["variants"] else None
            check_provider(translator, cls.from_dir(path, reference, verify_checksums=False))
        if worker_processes:
            translator.use_worker_processes()
        return translator

    def use_worker_processes(self) -> None:
        """Run the running batches that `start_batch(beside=True)` gives (the service's decode
        workers) in worker processes (app.engine.worker_processes), so that they never wait for
        the server's event loop at the GIL; offline calls (translate_batch) stay in this process.
        Only on the CPU with two decode workers or more (`worker_processes` stays None
        otherwise)."""
        config = self.sessions.config
        if self.workers > 1 and config.provider == "cpu" and self.worker_processes is None:
            size = -(-self.max_batch_size // self.workers)
            self.worker_processes = WorkerProcesses(
                WorkerSpec(str(self.bundle.path), self.variant, config, size))

    def worker_process_counts(self) -> tuple[int, int] | None:
        pool = self.worker_processes
        return None if pool is None else (pool.alive, pool.started)

    def close(self) -> None:
        """End the worker processes, if any (the translator itself needs no closing)."""
        if self.worker_processes is not None:
            self.worker_processes.close()

    @property
    def name(self) -> str:
        return self.bundle.name

    @property
    def source_lang(self) -> str:
        return self.bundle.source_lang

    @property
    def target_lang(self) -> str:
        return self.bundle.target_lang

    @property
    def variant(self) -> str:
        return self.bundle.variant

    @property
    def manifest(self) -> dict[str, Any]:
        return self.bundle.manifest

    @property
    def max_source_tokens(self) -> int:
        """Source tokens the encoder sees at most (EOS excluded); longer inputs are truncated."""
        return self.max_positions - int(self.tokenizer.add_source_eos)

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Texts -> source ids (no EOS), truncated to max_source_tokens; the ids of the last
        IDS_CACHE texts are kept, so a text measured and then translated is tokenized once."""
        return [list(self._ids(text)) for text in texts]

    def mask_symbols(self, symbols: frozenset[str], unknown: bool = True) -> None:
        """Mask these symbols (and, with `unknown`, those the vocabulary lacks) from now on
        (Translator.read); at first the bundle's `masked_symbols`, and those it lacks where
        the bundle has that list (export.symbols measured its model)."""
        self.masked_symbols = frozenset(symbols)
        self.mask_unknown = unknown
        self._unread = functools.lru_cache(maxsize=1 << 16)(self._unread_symbol)
        self.read = functools.lru_cache(maxsize=IDS_CACHE)(self._read)
        self._ids = functools.lru_cache(maxsize=IDS_CACHE)(self._source_ids)

    def _as_encoded(self, text: str) -> str:
        """The text as the tokenizer gets it (read)."""
        return self.read(text)[0]

    def _read(self, text: str) -> tuple[str, Symbols | None]:
        """(the text as the tokenizer gets it, its symbols' masks): in written case where the
        bundle says so, each run of symbols the model does not read (_unread_symbol) masked
        (Symbols): as themselves, the model wrote words for them or nothing ("Die Toleranz ist
        SCHÄTZER0.5 mm." for "The tolerance is ±0.5 mm."); masked, it copies the mask, as it
        does app.text.protect's, and the symbols go back where it stands."""
        written = as_written(text)[0] if self.bundle.capitalize_lowercase else text
        if written.isascii():
            return written, None
        runs: list[tuple[int, int]] = []
        for i, c in enumerate(written):
            if not c.isascii() and self._unread(c):
                if runs and runs[-1][1] == i:
                    runs[-1] = (runs[-1][0], i + 1)
                else:
                    runs.append((i, i + 1))
        if not runs:
            return written, None
        return Symbols.of(written, runs)

    def _unread_symbol(self, c: str) -> bool:
        """Whether c is a symbol the model does not read: one the bundle names (measured by
        export.symbols), or (mask_symbols' `unknown`) a symbol or mark (tokenizer.is_symbol)
        the vocabulary lacks and reads as itself; a letter it lacks stays in its word, an
        unknown piece (decode), and one read as others ("™" as "TM") is written back
        (tokenizer.written_forms)."""
        return c in self.masked_symbols or (
            self.mask_unknown and is_symbol(c)
            and self.tokenizer.plain(c) == c  # (not one read as others: "™")
            and bool(self.tokenizer.unknown_pieces(c)))

    def in_capitals(self, text: str) -> bool:
        """Whether text's translation is given back in capitals (tokenizer.as_written)."""
        return self.bundle.capitalize_lowercase and in_capitals(text)

    def source(self, text: str) -> Source:
        """What text's translation needs of it (Source)."""
        encoded, symbols = self.read(text)
        return Source(self.unknowns(text), written_forms(encoded, self.tokenizer.plain),
                      self.in_capitals(text), symbols,
                      name_pieces(self._ids(text), *self._name_pieces)
                      if self._name_pieces else frozenset(), final_marks(text))

    def _source_ids(self, text: str) -> tuple[int, ...]:
        return tuple(self.tokenizer.encode([self._as_encoded(text)])[0][: self.max_source_tokens])

    def count_tokens(self, text: str) -> int:
        """The encoder positions text takes (its SentencePiece tokens plus EOS; 0 if blank)."""
        if not text.strip():
            return 0
        return len(self.encode([text])[0]) + int(self.tokenizer.add_source_eos)

    def unknowns(self, text: str) -> tuple[str, ...]:
        """The text of each piece of text's source ids that the vocabulary lacks, in order:
        what decode writes for the unknown pieces the model outputs."""
        ids = self._ids(text)
        if self.unk_id is None or self.unk_id not in ids:
            return ()
        pieces = self.tokenizer.unknown_pieces(self._as_encoded(text))
        return tuple(pieces[: ids.count(self.unk_id)])

    def decode(self, ids: list[int], unknown: tuple[str, ...] | None = None) -> str:
        special = (self.pad_id, self.bos_id, self.eos_id, self.start_id)
        return self.tokenizer.decode([i for i in ids if i not in special], unknown)

    def warmup(self) -> None:
        """Run the graphs once, greedy and with the default beam size, one sentence alone (the
        fused search) and two (decoder steps, as the service runs them), so the first request
        does not pay for lazy initialisation (sessions are made per beam width). With worker
        processes, only they are started, each warming up its own sessions: the service's
        batches run there, and this process's sessions stay as loaded (offline calls still
        work, paying the lazy initialisation once; less memory here)."""
        if self.worker_processes is not None:
            self.worker_processes.start(self.workers)
            return
        for beams in sorted({1, self.default_options.beam_size}):
            options = TranslationOptions(beam_size=beams, max_len_offset=2, max_len_ratio=0.0)
            self.translate_batch(["warm up"], options)
            self.translate_batch(["warm up", "warm up"], options)

    def translate_ids(
        self, sources: list[list[int]], options: TranslationOptions | None = None
    ) -> list[list[Hypothesis]]:
        """Source ids (no EOS) -> per source its 1 + num_alternatives hypotheses, best first.
        Sentences are fed shortest first (greedy: after the few longest, LONGEST_FIRST) to
        running batches, one per decode worker (at most
        max_batch_size sentences in all): as sentences finish, the next ones take their slots
        (a few at a time; encoded a batch's worth of like lengths at a time), and no sentence
        waits for the longest of its batch. (Longest first was no quicker, and it holds the
        longest outputs' positions for all of a decode worker's rows at once: a much higher
        peak memory.)"""
        options = options or self.default_options
        if len(sources) == 1 and self.fused is not None:
            return [self._fused(sources, options)]
        results: list[list[Hypothesis]] = [[] for _ in sources]
        workers = max(1, min(self.workers, len(sources)))
        lengths = [len(ids) for ids in sources]
        order = sorted(range(len(sources)), key=lambda i: lengths[i])
        first = LONGEST_FIRST * workers
        if options.beam_size == 1 and len(order) > 2 * first:  # greedy: see LONGEST_FIRST
            order = order[-first:][::-1] + order[:-first]
        queue = _Queue(order, workers, lengths)
        # a fair share per decode worker
        size = -(-min(self.max_batch_size, len(sources)) // workers)
        if workers == 1:
            self._decode(queue, sources, options, size, results, beside=False)
            return results
        others = [self._side_threads.submit(self._decode, queue, sources, options, size, results,
                                            True)
                  for _ in range(workers - 1)]
        self._decode(queue, sources, options, size, results, beside=True)
        for other in others:
            other.result()
        return results

    def _fused(self, sources: list[list[int]], options: TranslationOptions) -> list[Hypothesis]:
        """One sentence, its whole search in one ONNX Runtime call (app.engine.fused): quicker
        than by steps at batch 1. Its encoder pass runs on the single-thread session where there
        is one: one sentence's products are too small to share out between threads."""
        cross_k, cross_v, src_mask = self.sessions.encode(self.source_array(sources), beside=True)
        return self.fused.search(cross_k, cross_v, src_mask,
                                 int(self.output_limits(sources, options)[0]),
                                 options.beam_size, options.length_penalty,
                                 self.n_best(options))

    def _decode(self, queue: _Queue, sources: list[list[int]], options: TranslationOptions,
                size: int, results: list, beside: bool) -> None:
        """One running batch of at most `size` sentences, fed from queue until it is empty:
        sentences are encoded up to `size` at a time (groups of like lengths) and join the batch
        as slots free up."""
        refill = max(1, size // REFILL_SHARE)
        search = self.start_search(options, beside, planned=size)
        encoded: _Encoded | None = None
        while True:
            free = size - search.running
            if free >= refill or not search.running:
                if encoded is None or not encoded.left:
                    ids = queue.take_share(size, refill)
                    chunk = [sources[i] for i in ids]
                    encoded = (_Encoded(ids, chunk, self.sessions.encode(
                        self.source_array(chunk), beside)) if ids else None)
                if encoded is not None:
                    keys, chunk, cross_k, cross_v, mask = encoded.take(free)
                    search.admit(keys, self.output_limits(chunk, options), cross_k, cross_v,
                                 mask)
            if not search.running:
                return
            for i, hyps in search.step():
                results[i] = hyps

    def translate_batch(
        self, texts: list[str], options: TranslationOptions | None = None
    ) -> list[Result]:
        """One Result per text, in order. Blank texts give an empty translation without running
        the model."""
        options = options or self.default_options
        todo = [i for i, text in enumerate(texts) if text.strip()]
        hyps = self.translate_ids(self.encode([texts[i] for i in todo]), options)
        results = [blank_result(options) for _ in texts]
        for i, found in zip(todo, hyps, strict=True):
            results[i] = self.result(found, options, self.source(texts[i]))
        return results

    def reranks(self, options: TranslationOptions) -> bool:
        """Whether a search with these options has its hypotheses ranked again by the bundle's
        language model (app.engine.rerank)."""
        return self.reranker is not None and options.rerank and options.beam_size > 1

    def n_best(self, options: TranslationOptions) -> int:
        """The hypotheses a search keeps per sentence: those asked for, or the reranker's
        candidates (at most the beam size)."""
        n = 1 + options.num_alternatives
        if self.reranks(options):
            n = max(n, min(self.reranker.candidates, options.beam_size))
        return n

    def result(self, hyps: list[Hypothesis], options: TranslationOptions,
               source: Source = Source()) -> Result:
        """The Result of a sentence's hypotheses (best first, ranked again where the bundle's
        language model reranks), each text as `source` (what Translator.source found in the
        sentence) asks."""
        if self.reranks(options):
            hyps = self.reranker.order(hyps, source.names)
        best, others = hyps[0], hyps[1 : 1 + options.num_alternatives]

        def text(tokens: list[int]) -> str:
            decoded = self.decode(tokens, source.unknown)
            if source.symbols is not None:
                decoded = source.symbols.back(decoded)
            decoded = one_final_period(written_back(decoded, source.forms))
            decoded = marks_as_source(decoded, source.marks)
            return decoded.upper() if source.capitals else decoded

        return Result(
            text=text(best.tokens),
            score=best.normalized if options.return_scores else None,
            alternatives=[text(h.tokens) for h in others],
            alternative_scores=[h.normalized for h in others] if options.return_scores else [],
            tokens=best.tokens,
        )

    def source_array(self, sources: list[list[int]]) -> np.ndarray:
        """Source id lists -> (B, S) int64, EOS appended to each (unless the tokenizer says the
        model takes none), padded with pad_id."""
        eos = int(self.tokenizer.add_source_eos)
        width = max(1, max(len(ids) for ids in sources) + eos)
        src = np.full((len(sources), width), self.pad_id, dtype=np.int64)  # (B, S)
        for row, ids in enumerate(sources):
            src[row, : len(ids)] = ids
            if eos:
                src[row, len(ids)] = self.eos_id
        return src

    def output_limits(self, sources: list[list[int]], options: TranslationOptions) -> np.ndarray:
        """(B,) the most tokens each source may generate, EOS included."""
        a, b = options.max_len_offset, options.max_len_ratio
        return np.array(
            [output_limit(len(ids), a, b, self.max_positions) for ids in sources], dtype=np.int64
        )

    def start_search(self, options: TranslationOptions, beside: bool = False,
                     planned: int = 0) -> Search:
        """An empty running batch for these options; sentences join it with `admit`. decode worker:
        it runs beside other decode workers (on single-thread sessions on the CPU). planned: the
        batch's size when known up front (its cache then holds that many sentences from the
        start)."""
        a = self.bundle.architecture
        state = DecodeState(int(a["n_decoder_layers"]), int(a["n_heads"]),
                            self.sessions.cache_head_dim, int(a["head_dim"]),
                            np.dtype(self.sessions.kv_dtype),
                            planned=(planned * options.beam_size, planned))
        step = self.sessions.one_thread_step if beside else self.sessions.step
        advance = None
        if self.sessions.greedy_advance:  # greedy bookkeeping in the step graph
            advance = self.sessions.one_thread_advance if beside else self.sessions.advance
        self.sessions.prepare(options.beam_size, beside)
        return Search(step, state, self.start_id, self.eos_id,
                      int(a["vocab_size"]), beam_size=options.beam_size,
                      length_penalty=options.length_penalty,
                      n_best=self.n_best(options), advance=advance)

    def admit(self, search: Search, keys: list, sources: list[list[int]],
              options: TranslationOptions, beside: bool = False) -> None:
        """Encode sources (ids without EOS) and add them to a running search under keys."""
        cross_k, cross_v, src_mask = self.sessions.encode(self.source_array(sources), beside)
        search.admit(keys, self.output_limits(sources, options), cross_k, cross_v, src_mask)

    def start_batch(self, options: TranslationOptions,
                    beside: bool = False) -> RunningBatch | ProcessBatch:
        """A running batch of texts for the batcher: texts join between decoder steps. beside:
        it runs beside other running batches (one per batcher worker), in a worker process
        of its own where use_worker_processes is on. The caller closes it when done."""
        if beside and self.worker_processes is not None:
            return self.worker_processes.batch(options)
        return RunningBatch(self, options, beside)


class RunningBatch:
    """Texts in, Results out, over one running Search (continuous batching): `admit` adds texts
    under the caller's keys at any step boundary, `step` advances every running sentence by one
    token and returns the (key, Result) pairs that finished. Blank texts finish at once."""

    def __init__(self, translator: Translator, options: TranslationOptions,
                 beside: bool = False) -> None:
        self.translator, self.options, self.beside = translator, options, beside
        self.search = translator.start_search(options, beside)
        self._ready: list[tuple[Any, Result]] = []  # blank texts, returned by the next step
        self._sources: dict[Any, Source] = {}  # by key: those that ask for more than none

    @property
    def running(self) -> int:
        return self.search.running + len(self._ready)

    def admit(self, keys: list, texts: list[str]) -> None:
        todo = [i for i, text in enumerate(texts) if text.strip()]
        self._ready += [(keys[i], blank_result(self.options))
                        for i, text in enumerate(texts) if not text.strip()]
        if todo:
            sources = self.translator.encode([texts[i] for i in todo])
            for i in todo:
                if (source := self.translator.source(texts[i])) != Source():
                    self._sources[keys[i]] = source
            self.translator.admit(self.search, [keys[i] for i in todo], sources, self.options,
                                  self.beside)

    def close(self) -> None:
        """Nothing to give back (a ProcessBatch gives back its decode worker)."""

    def cancel(self, keys: list) -> None:
        """These sentences end at the next step (Search.cancel); their results still come."""
        self.search.cancel(keys)

    def step(self) -> list[tuple[Any, Result]]:
        done, self._ready = self._ready, []
        if self.search.running:
            done += [(key, self._result(key, hyps)) for key, hyps in self.search.step()]
        return done

    def _result(self, key: Any, hyps: list[Hypothesis]) -> Result:
        return self.translator.result(hyps, self.options, self._sources.pop(key, Source()))


# Sentences a translator on another provider must translate about as the CPU does. The CUDA
# provider once gave this engine's graphs wrong numbers while loading and running without an
# error (docs/cuda.md): such output shares almost no tokens with the CPU's, while rounding
# (TF32, fp16) changes a token here and there.
PROBE_SENTENCES = ("The file could not be saved.", "Open the settings and choose a language.",
                   "Thank you very much for your help.")
PROBE_MIN_OVERLAP = 0.5


def check_provider(translator: Translator, cpu: Translator) -> None:
    """Raise BundleError unless translator's greedy output of the probe sentences shares at
    least PROBE_MIN_OVERLAP of its tokens with the CPU translator's (the same bundle, fp32
    where it has that variant)."""
    from collections import Counter

    options = TranslationOptions(beam_size=1)
    got = translator.translate_batch(list(PROBE_SENTENCES), options)
    want = cpu.translate_batch(list(PROBE_SENTENCES), options)
    cpu.close()
    overlaps = [sum((Counter(a.tokens) & Counter(b.tokens)).values())
                / max(1, len(a.tokens), len(b.tokens)) for a, b in zip(got, want, strict=True)]
    if sum(overlaps) / len(overlaps) < PROBE_MIN_OVERLAP:
        worst = min(range(len(overlaps)), key=overlaps.__getitem__)
        provider = translator.sessions.providers[0]
        raise BundleError(
            f"{translator.bundle.path}: on {provider} the {translator.variant} graphs translate "
            f"differently from the CPU: {PROBE_SENTENCES[worst]!r} -> {got[worst].text!r}, "
            f"on the CPU {want[worst].text!r}. Serve this bundle on the CPU (provider cpu); "
            "docs/cuda.md has the CUDA provider's state")

