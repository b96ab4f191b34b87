"""The dynamic batcher: sentence-level work items from all requests -> shared engine batches.

Requests submit their sentences with `await batcher.translate(model, sentences, options,
priority=...)`. A worker thread takes the oldest waiting item of the most urgent priority,
waits at most `max_wait_ms` for company (0 by default: a step-wise engine takes newcomers into
its running batch between steps), and packs the items of the same priority, model and
options whose lengths are closest to it into one batch under the token budget (longest source x
batch size) and the size cap. `translate_batch` runs in that thread, never on the event loop;
results go back to each request's future. With `workers` > 1, that many worker threads decode
batches side by side (the engine's decode workers, one per core), and the size cap and the token
budget are shared out among them. With `spill` (one of several server processes,
app.serving.supervisor), the workers after the first running one are spare decode workers: they take
live work
only when the running batches are full and another process idles, so an even load stays on one
decode worker per process and one large request still uses a free core.

Short requests: the long sentences (over LONG_SOURCE tokens) of larger requests leave a running
batch room for `reserve` more sentences (an eighth of its size cap, in slots and in tokens at its
longest source), which only live requests of at most that many sentences may take. A batch full
of long sentences of large requests (texts of many sentences that each decode to the length
limit) would otherwise hold a chat message back until they finish; short sentences free their
slots within a few dozen steps, so they need no reserve and take every slot.

Priority: INTERACTIVE work (live requests, the default) is always served before BACKGROUND work
(document jobs). Background items form a batch only when no interactive item waits, and their
batches hold at most `document_batch_size` sentences, so a live request that arrives during a
document waits for one short batch at most.

Overload never waits: a full queue raises `Overloaded` (503) at once. A request past its deadline
raises `DeadlineExceeded` (504); a cancelled request (client gone, deadline) has its queued items
dropped and its running ones ended at the engine's next step (DecodingBatch.cancel). An engine
exception fails the requests of that batch only.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import enum
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from app.engine.types import Engine, Result, TranslationOptions
from app.errors import DeadlineExceeded, EngineFailure, Overloaded, Unavailable
from app.translation.cache import ResultCache

log = logging.getLogger("app.translation.batcher")
RESERVE_SHARE = 8  # a batch keeps 1/RESERVE_SHARE of its size cap for short requests
LONG_SOURCE = 64  # source tokens beyond which a sentence may hold its slot for hundreds of steps


class Priority(enum.IntEnum):
    """How urgent an item is; lower is served first."""

    INTERACTIVE = 0  # a live request: someone waits for the answer
    BACKGROUND = 1  # a document job: throughput matters, not latency


@dataclass(frozen=True)
class BatcherConfig:
    """The batcher's share of the Settings (app.config), which own the defaults and limits."""

    max_batch_tokens: int
    max_batch_size: int
    document_batch_size: int  # the size cap of a BACKGROUND batch
    max_wait_ms: float
    queue_size: int
    cache_size: int = 0  # sentences per model kept translated (app.translation.cache); 0: off

    @classmethod
    def from_settings(cls, settings: Any) -> BatcherConfig:
        """From app.config.Settings, or anything with attributes of these names."""
        return cls(**{f.name: getattr(settings, f.name) for f in fields(cls)})


@dataclass(frozen=True)
class BatchStats:
    """What the worker reports after each batch (for metrics)."""

    model: str
    size: int
    tokens: int  # padded source tokens: longest x size
    source_tokens: int
    output_tokens: int
    seconds: float
    ok: bool


_DELIVERY = threading.Lock()  # the workers' deliveries to one request
SPILL_RECHECK_S = 0.02  # how often an idle spare decode worker looks again at waiting live work


class Spill(Protocol):
    """When a server process's spare decode workers may take work (app.serving.supervisor.Peers):
    only while another process of the service is idle, so one process uses a free core and never
    takes a busy one's share of the machine."""

    def allowed(self) -> bool: ...

    def report(self, running: int) -> None:
        """This process's sentences in running batches now."""


@dataclass
class _Request:
    """One request's shared state: its future and the results of its items."""

    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    results: list[Result | None]
    remaining: int
    cancelled: bool = False


@dataclass
class _Item:
    seq: int
    text: str
    tokens: int
    index: int
    request: _Request
    priority: Priority
    enqueued: float = field(default_factory=time.monotonic)


_GroupKey = tuple[Priority, int, TranslationOptions]  # (priority, id of the engine, options)


class Batcher:
    def __init__(
        self,
        config: BatcherConfig,
        on_batch: Callable[[BatchStats], None] | None = None,
        on_queue: Callable[[int], None] | None = None,
        workers: int = 1,
        spill: Spill | None = None,
        on_cache: Callable[[int, int], None] | None = None,
    ) -> None:
        """spill: the workers after the first running one are spare decode workers: they take live
        work only when the running batches of its model and options are full and `spill` allows.
        on_cache(hits, misses) after each request's cache lookups: sentences answered without
        decoding (from the cache, or sent twice in the request) and sentences decoded."""
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.config = config
        self.workers = workers
        self.spill = spill
        self._worker = threading.local()  # .index: which worker this thread is
        self._running: dict[int, tuple[int, TranslationOptions, int]] = {}  # worker -> its
        # running batch's engine, options and sentences (step-wise engines)
        # one worker's share of the caps
        self._size_cap = -(-config.max_batch_size // workers)
        self._budget = -(-config.max_batch_tokens // workers)
        self._reserve = self._size_cap // RESERVE_SHARE  # slots for short requests only
        self._on_batch = on_batch or (lambda stats: None)
        self._on_queue = on_queue or (lambda depth: None)
        self._on_cache = on_cache or (lambda hits, misses: None)
        self._cond = threading.Condition()
        self._groups: dict[_GroupKey, list[_Item]] = {}  # FIFO per priority, engine, options
        self._engines: dict[int, Engine] = {}
        self._depth = 0
        self._busy = 0  # workers running a batch
        self._closed = False
        self._seq = itertools.count()
        self._threads: list[threading.Thread] = []
        self.batches = 0  # engine calls so far
        self.cache = ResultCache(config.cache_size)

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._threads = [threading.Thread(target=self._run, args=(i,), name=f"nmt-batcher-{i}",
                                          daemon=True)
                         for i in range(self.workers)]
        for thread in self._threads:
            thread.start()

    def close(self, timeout: float = 5.0) -> None:
        """Stop taking work; fail what is still queued; join the workers."""
        with self._cond:
            self._closed = True
            dropped = [item for items in self._groups.values() for item in items]
            self._groups.clear()
            self._depth = 0
            self._cond.notify_all()
        for request in {id(i.request): i.request for i in dropped}.values():
            _fail(request, Unavailable("the server is shutting down"))
        until = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, until - time.monotonic()))

    @property
    def depth(self) -> int:
        return self._depth

    @property
    def idle(self) -> bool:
        with self._cond:
            return not self._depth and not self._busy

    # ------------------------------------------------------------ the async side

    async def translate(
        self,
        engine: Engine,
        texts: list[str],
        options: TranslationOptions,
        timeout: float | None = None,
        priority: Priority = Priority.INTERACTIVE,
    ) -> list[Result]:
        """Translate `texts` in shared batches; raises Overloaded, DeadlineExceeded,
        EngineFailure or Unavailable. Cancelling the awaiting task drops the queued items.
        With a cache (config.cache_size), sentences translated before with these options are
        answered from it, and a sentence sent twice is queued once."""
        if not texts or not self.cache.size:
            return await self._translate(engine, texts, options, timeout, priority)
        found = [self.cache.get(engine, options, text) for text in texts]
        todo = list(dict.fromkeys(t for t, r in zip(texts, found, strict=True) if r is None))
        self._on_cache(len(texts) - len(todo), len(todo))
        done = dict(zip(todo, await self._translate(engine, todo, options, timeout, priority),
                        strict=True))
        for text, result in done.items():
            self.cache.put(engine, options, text, result)
        return [r if r is not None else done[t] for t, r in zip(texts, found, strict=True)]

    async def _translate(self, engine: Engine, texts: list[str], options: TranslationOptions,
                         timeout: float | None, priority: Priority) -> list[Result]:
        if not texts:
            return []
        loop = asyncio.get_running_loop()
        request = _Request(loop, loop.create_future(), [None] * len(texts), len(texts))
        counts = [engine.count_tokens(text) for text in texts]
        self._enqueue(engine, texts, counts, options, request, Priority(priority))
        try:
            return await asyncio.wait_for(asyncio.shield(request.future), timeout)
        except TimeoutError:
            self._cancel(request)
            raise DeadlineExceeded(
                f"the translation took longer than the request timeout of {timeout:g} s",
                field="request_timeout",
                limit=timeout,
            ) from None
        except asyncio.CancelledError:
            self._cancel(request)
            raise

    def _enqueue(
        self,
        engine: Engine,
        texts: list[str],
        counts: list[int],
        options: TranslationOptions,
        request: _Request,
        priority: Priority,
    ) -> None:
        with self._cond:
            if self._closed:
                raise Unavailable("the server is shutting down")
            if self._depth and self._depth + len(texts) > self.config.queue_size:
                raise Overloaded(
                    f"the queue is full ({self._depth} sentences waiting, limit "
                    f"{self.config.queue_size}); retry later",
                    retry_after=1 + self._depth / max(1, self.config.max_batch_size) * 0.05,
                )
            self._engines[id(engine)] = engine
            group = self._groups.setdefault((priority, id(engine), options), [])
            for index, (text, count) in enumerate(zip(texts, counts, strict=True)):
                group.append(_Item(next(self._seq), text, count, index, request, priority))
            self._depth += len(texts)
            self._cond.notify_all()
        self._on_queue(self._depth)

    def _cancel(self, request: _Request) -> None:
        request.future.cancel()  # on the loop thread: nothing settles it afterwards
        with self._cond:
            request.cancelled = True
            for key, items in list(self._groups.items()):
                kept = [item for item in items if item.request is not request]
                self._depth -= len(items) - len(kept)
                if kept:
                    self._groups[key] = kept
                else:
                    del self._groups[key]
        self._on_queue(self._depth)

    # ------------------------------------------------------------ the worker threads

    def _run(self, index: int) -> None:
        self._worker.index = index
        while True:
            taken = self._next_batch()
            if taken is None:
                return
            engine, options, items = taken
            try:
                self._decode(engine, options, items)
            finally:
                with self._cond:
                    self._busy -= 1
                    self._set_running(None)
                    self._cond.notify_all()

    def _next_batch(self) -> tuple[Engine, TranslationOptions, list[_Item]] | None:
        wait_s = self.config.max_wait_ms / 1000
        with self._cond:
            while True:
                if self._closed:
                    return None
                if not self._groups:
                    self._cond.wait()
                    continue
                # the most urgent priority first, then the oldest item
                key = min(self._groups, key=lambda k: (k[0], self._groups[k][0].seq))
                group = self._groups[key]
                oldest = group[0]
                remaining = oldest.enqueued + wait_s - time.monotonic()
                if remaining > 0 and not self._full(group):
                    self._cond.wait(remaining)
                    continue
                if self.spill is not None and self._running and not self._may_spill(
                        key, len(group)):
                    self._cond.wait(SPILL_RECHECK_S)  # the running batches take them
                    continue
                items = self._pick(group)
                picked = {id(item) for item in items}
                kept = [item for item in group if id(item) not in picked]
                if kept:
                    self._groups[key] = kept
                else:
                    del self._groups[key]
                self._depth -= len(items)
                self._busy += 1
                self._set_running((key[1], key[2], len(items)))  # it takes newcomers
                depth = self._depth
                break
        self._on_queue(depth)
        return self._engines[key[1]], key[2], items

    def _set_running(self, entry: tuple[int, TranslationOptions, int] | None) -> None:
        """This worker's running batch (None: none); reported to `spill`. Under the lock. Only
        spill reads them: without it, nothing to keep."""
        if self.spill is None:
            return
        if entry is None:
            self._running.pop(self._worker.index, None)
        else:
            self._running[self._worker.index] = entry
        self.spill.report(sum(n for _, _, n in self._running.values()))

    def _room_before(self, engine: int, options: TranslationOptions, worker: int | None) -> int:
        """Free slots of the running batches of this engine and options on the workers before
        `worker` (None: on every worker)."""
        return sum(self._size_cap - n for index, (e, o, n) in self._running.items()
                   if (e, o) == (engine, options) and (worker is None or index < worker))

    def _may_spill(self, key: _GroupKey, waiting: int) -> bool:
        """Whether an idle worker, a spare decode worker while others run, starts a batch of this
        group: only while `spill` allows it, and of live work only what the running batches have no
        room for. Under the lock."""
        assert self.spill is not None
        if key[0] is not Priority.INTERACTIVE:  # the running batches take a few between theirs
            return self.spill.allowed()
        return waiting > self._room_before(key[1], key[2], None) and self.spill.allowed()

    def _cap(self, group: list[_Item]) -> int:
        if group[0].priority is Priority.BACKGROUND:
            return min(self.config.document_batch_size, self._size_cap)
        return self._size_cap

    def _full(self, group: list[_Item]) -> bool:
        if len(group) >= self._cap(group):
            return True
        longest = max(item.tokens for item in group)
        return longest * len(group) >= self._budget

    def _pick(self, group: list[_Item]) -> list[_Item]:
        """The oldest item plus the items closest to it in length, within the budget."""
        by_length = sorted(group, key=lambda item: (item.tokens, item.seq))
        keys = [(item.tokens, item.seq) for item in by_length]
        start = bisect.bisect_left(keys, (group[0].tokens, group[0].seq))
        lo, hi = start, start + 1
        shortest = longest = by_length[start].tokens
        cap, budget = self._cap(group), self._budget
        while hi - lo < cap:
            below = by_length[lo - 1] if lo > 0 else None
            above = by_length[hi] if hi < len(by_length) else None
            if below is None and above is None:
                break
            take_below = above is None or (
                below is not None and shortest - below.tokens <= above.tokens - longest
            )
            candidate = below if take_below else above
            new_longest = max(longest, candidate.tokens)
            if new_longest * (hi - lo + 1) > budget:
                break
            if take_below:
                lo -= 1
                shortest = candidate.tokens
            else:
                hi += 1
                longest = new_longest
        picked: list[_Item] = []
        for item in sorted(by_length[lo:hi], key=lambda item: item.seq):  # the oldest first
            if not picked or self._fits(item, longest, len(picked) + 1, cap):
                picked.append(item)
        return picked

    def _short(self, item: _Item) -> bool:
        """Whether the item's request may take a batch's reserved room: a live request of at
        most `reserve` sentences."""
        return item.priority is Priority.INTERACTIVE and len(item.request.results) <= self._reserve

    def _fits(self, item: _Item, longest: int, size: int, cap: int) -> bool:
        """Whether a batch of `size` sentences with this item among them, its longest source
        `longest` tokens, is within `cap` (the batch's own), the size cap and the token budget,
        leaving the reserved room free when the item is a long sentence of a larger request."""
        long = item.tokens > LONG_SOURCE and not self._short(item)
        room = size + self._reserve if long else size
        return size <= cap and room <= self._size_cap and longest * room <= self._budget

    def _decode(self, engine: Engine, options: TranslationOptions, items: list[_Item]) -> None:
        """Continuous batching: run a batch step by step; between steps, waiting items of the
        same engine and options join it (interactive ones first, background ones up to
        document_batch_size), and finished sentences go back to their requests at once."""
        started = time.perf_counter()
        batch = None
        running: dict[int, _Item] = {}
        told: set[int] = set()  # sentences whose request went away, told to the batch to end
        stats = {"size": 0, "tokens": 0, "source_tokens": 0, "output_tokens": 0}
        ok = True
        try:
            # a decode worker beside others; with spill, the first worker mostly runs alone on
            # its core, on the engine's own sessions: quicker there (BENCHMARKS.md)
            beside = self.workers > 1 and not (self.spill is not None and self._worker.index == 0)
            batch = engine.start_batch(options, beside=beside)
            while items or running:
                live = [item for item in items if not item.request.cancelled]
                if live:
                    batch.admit([item.seq for item in live], [item.text for item in live])
                    running.update((item.seq, item) for item in live)
                    for key, value in _source_stats(live).items():
                        stats[key] += value
                items = []  # admitted (or cancelled)
                # a request gone (client left, deadline, job stopped): its sentences end now
                # rather than decode to their limit in a slot someone else could use
                gone = [seq for seq, item in running.items()
                        if item.request.cancelled and seq not in told]
                if gone:
                    batch.cancel(gone)
                    told.update(gone)
                for seq, result in batch.step():
                    stats["output_tokens"] += len(result.tokens)
                    item = running.pop(seq)
                    told.discard(seq)
                    if not item.request.cancelled:
                        _deliver(item, result)
                items = self._join(engine, options, running)
        except Exception:
            log.exception("engine batch of %d sentences failed", len(running) + len(items))
            ok = False
            _fail_all([*running.values(), *items])  # items: taken from the queue, not admitted
        finally:
            if batch is not None:
                batch.close()  # a worker process goes back to its pool
        with self._cond:
            self.batches += 1
        self._on_batch(BatchStats(model=engine.name,
                                  seconds=time.perf_counter() - started, ok=ok, **stats))

    def _join(self, engine: Engine, options: TranslationOptions,
              running: dict[int, _Item]) -> list[_Item]:
        """Waiting items that may join the running batch now: same engine and options, within
        the size cap and the token budget. None while an item of another engine or options has
        waited longer than max_wait_ms: the batch then drains, and that group goes next."""
        now = time.monotonic()
        wait_s = self.config.max_wait_ms / 1000
        with self._cond:
            mine = [k for k in self._groups if k[1] == id(engine) and k[2] == options]
            others = [g[0] for k, g in self._groups.items() if k not in mine]
            if self._closed or not mine or any(now - item.enqueued > wait_s for item in others):
                self._set_running((id(engine), options, len(running)))
                return []
            free = self._size_cap - len(running)
            live = free
            if self.spill is not None and any(i < self._worker.index for i in self._running):
                # a spare decode worker: only while spill allows it (else it drains and ends), and
                # of live work only what the decode workers before it have no room for
                if not self.spill.allowed():
                    self._set_running((id(engine), options, len(running)))
                    return []
                waiting = sum(len(self._groups[k]) for k in mine
                              if k[0] is Priority.INTERACTIVE)
                live = min(free, max(0, waiting - self._room_before(id(engine), options,
                                                                     self._worker.index)))
            background = sum(i.priority is Priority.BACKGROUND for i in running.values())
            longest = max((i.tokens for i in running.values()), default=0)
            taken: list[_Item] = []
            for key in sorted(mine):  # interactive first
                group = self._groups[key]
                room = free - len(taken)
                if key[0] is Priority.BACKGROUND:
                    room = min(room, self.config.document_batch_size - background)
                else:
                    room = min(room, live - len(taken))
                chosen: list[_Item] = []
                large = True  # large requests' items still join (in their order)
                for item in group:
                    if len(chosen) >= room:
                        break
                    if not (large or self._short(item)):
                        continue
                    size = len(running) + len(taken) + len(chosen) + 1
                    if self._fits(item, max(longest, item.tokens), size, self._size_cap):
                        longest = max(longest, item.tokens)
                        chosen.append(item)
                    elif not self._short(item):
                        large = False  # none after it jumps ahead; short requests still may
                taken += chosen
                if len(chosen) == len(group):
                    del self._groups[key]
                elif chosen:
                    joined = {id(item) for item in chosen}
                    self._groups[key] = [item for item in group if id(item) not in joined]
            self._depth -= len(taken)
            self._set_running((id(engine), options, len(running) + len(taken)))
            depth = self._depth
        if taken:
            self._on_queue(depth)
        return taken


def _source_stats(items: list[_Item]) -> dict[str, int]:
    """BatchStats' source side of a group of items: size, padded and real source tokens."""
    return {"size": len(items), "tokens": max(item.tokens for item in items) * len(items),
            "source_tokens": sum(item.tokens for item in items)}


def _fail_all(items) -> None:
    """Fail, with EngineFailure, every request that has one of these items (each once)."""
    for request in {id(i.request): i.request for i in items}.values():
        _fail(request, EngineFailure())


def _deliver(item: _Item, result: Result) -> None:
    request = item.request
    with _DELIVERY:  # a request's items may be in several workers' batches
        request.results[item.index] = result
        request.remaining -= 1
        done = request.remaining == 0
    if done:
        _resolve(request, request.results)


def _fail(request: _Request, error: Exception) -> None:
    with _DELIVERY:
        request.remaining = -1  # never resolves with results afterwards
    request.cancelled = True  # its other queued items are skipped
    _resolve(request, error)


def _resolve(request: _Request, outcome: Any) -> None:
    def settle() -> None:
        if request.future.done():
            return
        if isinstance(outcome, Exception):
            request.future.set_exception(outcome)
        else:
            request.future.set_result(outcome)

    with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
        request.loop.call_soon_threadsafe(settle)
