"""The batcher on its own: shared batches, per-request results, limits, failures, cancellation."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from app.config import Settings
from app.engine.types import TranslationOptions
from app.errors import DeadlineExceeded, EngineFailure, Overloaded, Unavailable
from app.translation import batcher as batcher_module
from app.translation.batcher import Batcher, BatcherConfig, Priority
from tests.app.fakes import FakeTranslator, StepBatch, until

GREEDY = TranslationOptions()
SCORED = TranslationOptions(return_scores=True)


def run(coro):
    return asyncio.run(coro)


def make(**kwargs) -> tuple[Batcher, list]:
    stats = []
    batcher = Batcher(BatcherConfig.from_settings(Settings(**kwargs)), on_batch=stats.append)
    batcher.start()
    return batcher, stats


def test_concurrent_requests_share_batches_and_get_their_own_results():
    engine = FakeTranslator()
    batcher, stats = make(max_wait_ms=50, max_batch_size=64)
    texts = [[f"request {i} sentence {j}" for j in range(3)] for i in range(10)]

    async def main():
        return await asyncio.gather(*(batcher.translate(engine, t, GREEDY) for t in texts))

    results = run(main())
    batcher.close()
    for request_texts, request_results in zip(texts, results, strict=True):
        assert [r.text for r in request_results] == [
            " ".join(reversed(t.split())) for t in request_texts
        ]
    assert len(engine.batches) < len(texts)
    assert sum(s.size for s in stats) == 30


def test_batches_respect_size_and_token_budget_and_group_similar_lengths():
    engine = FakeTranslator()
    engine.release.clear()  # hold the worker so everything queues up first
    batcher, stats = make(max_wait_ms=0, max_batch_size=4, max_batch_tokens=40)
    texts = ["w " * n for n in (1, 9, 2, 8, 3, 7, 1, 9, 2, 8)]

    async def main():
        # other options: the queued texts cannot join its running batch, which then ends, so
        # theirs is a batch taken fresh from the queue
        task = asyncio.ensure_future(batcher.translate(engine, ["first"], SCORED))
        await until(lambda: engine.entered == 1)
        rest = asyncio.ensure_future(batcher.translate(engine, texts, GREEDY))
        await until(lambda: batcher.depth == len(texts))
        engine.release.set()
        return await task, await rest

    run(main())
    batcher.close()
    for batch, _ in engine.batches:
        counts = [engine.count_tokens(t) for t in batch]
        assert len(batch) <= 4
        assert max(counts) * len(batch) <= 40 or len(batch) == 1
    lengths = [sorted(map(engine.count_tokens, b)) for b, _ in engine.batches[1:]]
    # a batch taken from the queue: the oldest text and those closest to it in length; then,
    # between steps, the waiting texts join in their order, within the size cap and budget
    assert lengths == [[2, 2, 3, 3], [4, 8, 9, 10], [9, 10]]


def test_different_options_never_share_a_batch():
    engine = FakeTranslator()
    batcher, _ = make(max_wait_ms=50)
    beam = TranslationOptions(beam_size=4)

    async def main():
        return await asyncio.gather(
            batcher.translate(engine, ["a b", "c d"], GREEDY),
            batcher.translate(engine, ["e f"], beam),
        )

    run(main())
    batcher.close()
    assert sorted(len(b) for b, _ in engine.batches) == [1, 2]
    assert {o.beam_size for _, o in engine.batches} == {1, 4}


def test_full_queue_fails_at_once_with_503():
    engine = FakeTranslator()
    engine.release.clear()
    batcher, _ = make(max_wait_ms=0, queue_size=4, max_batch_size=1)

    async def main():
        first = asyncio.ensure_future(batcher.translate(engine, ["x"], GREEDY))
        await until(lambda: engine.entered == 1)  # the worker holds "x"; the queue is empty
        second = asyncio.ensure_future(batcher.translate(engine, ["a", "b", "c"], GREEDY))
        await until(lambda: batcher.depth == 3)
        with pytest.raises(Overloaded) as err:
            await batcher.translate(engine, ["d", "e"], GREEDY)
        assert err.value.retry_after >= 1  # the HTTP layer sends it as Retry-After
        engine.release.set()
        await first, await second

    run(main())
    batcher.close()


def test_engine_error_fails_only_its_batch():
    engine = FakeTranslator()
    engine.fail_next = 1
    batcher, stats = make(max_wait_ms=0)

    async def main():
        with pytest.raises(EngineFailure) as err:
            await batcher.translate(engine, ["boom"], GREEDY)
        assert "secret" not in err.value.message
        return await batcher.translate(engine, ["fine now"], GREEDY)

    assert [r.text for r in run(main())] == ["now fine"]
    batcher.close()
    assert [s.ok for s in stats] == [False, True]


def test_deadline_gives_504_and_drops_queued_items():
    engine = FakeTranslator()
    engine.release.clear()
    batcher, _ = make(max_wait_ms=0, max_batch_size=1)

    async def main():
        held = asyncio.ensure_future(batcher.translate(engine, ["held"], GREEDY))
        await until(lambda: engine.entered == 1)
        with pytest.raises(DeadlineExceeded):
            await batcher.translate(engine, ["late one", "late two"], GREEDY, timeout=0.1)
        assert batcher.depth == 0
        engine.release.set()
        await held

    run(main())
    batcher.close()
    assert [b for b, _ in engine.batches] == [["held"]]


def test_cancelled_request_frees_its_queue_slots():
    engine = FakeTranslator()
    engine.release.clear()
    batcher, _ = make(max_wait_ms=0, max_batch_size=1)

    async def main():
        held = asyncio.ensure_future(batcher.translate(engine, ["held"], GREEDY))
        await until(lambda: engine.entered == 1)
        gone = asyncio.ensure_future(batcher.translate(engine, ["a", "b", "c"], GREEDY))
        await until(lambda: batcher.depth == 3)
        gone.cancel()
        await until(lambda: batcher.depth == 0)
        engine.release.set()
        await held

    run(main())
    batcher.close()
    assert [b for b, _ in engine.batches] == [["held"]]


def test_close_fails_queued_work_with_503():
    engine = FakeTranslator()
    engine.release.clear()
    batcher, _ = make(max_wait_ms=0, max_batch_size=1)

    async def main():
        held = asyncio.ensure_future(batcher.translate(engine, ["held"], GREEDY))
        await until(lambda: engine.entered == 1)
        queued = asyncio.ensure_future(batcher.translate(engine, ["queued"], GREEDY))
        await until(lambda: batcher.depth == 1)
        closing = asyncio.ensure_future(asyncio.to_thread(batcher.close))
        await until(lambda: batcher.depth == 0)  # close() dropped the queued one
        engine.release.set()
        await closing
        with pytest.raises(Unavailable):
            await queued
        await held
        with pytest.raises(Unavailable):
            await batcher.translate(engine, ["after close"], GREEDY)

    run(main())


def test_interactive_items_are_served_before_waiting_background_items():
    engine = FakeTranslator()
    engine.release.clear()  # hold the worker: everything below queues up behind the first batch
    batcher, stats = make(max_wait_ms=0, max_batch_size=32, document_batch_size=4)
    document = [f"document sentence {i}" for i in range(20)]

    async def main():
        first = asyncio.ensure_future(batcher.translate(engine, ["hold"], GREEDY))
        await until(lambda: engine.entered == 1)
        doc = asyncio.ensure_future(
            batcher.translate(engine, document, GREEDY, priority=Priority.BACKGROUND))
        await until(lambda: batcher.depth == 20)
        live = [asyncio.ensure_future(batcher.translate(engine, [f"live {i}"], GREEDY))
                for i in range(3)]
        await until(lambda: batcher.depth == 23)
        engine.release.set()
        return await first, await doc, await asyncio.gather(*live)

    _, doc, live = run(main())
    batcher.close()
    texts = [batch for batch, _ in engine.batches]
    assert texts[0] == ["hold"]
    # the live items, queued after the whole document, join the running batch first; the
    # document's sentences only up to document_batch_size at a time
    assert texts[1][:3] == ["live 0", "live 1", "live 2"]
    assert texts[1][3:] == document[:4]
    assert all(len(batch) <= 4 for batch in texts[2:])  # background batches stay small
    assert [s for batch in texts[1:] for s in batch if s.startswith("doc")] == document
    assert [r.text for r in doc] == [" ".join(reversed(s.split())) for s in document]
    assert [r[0].text for r in live] == ["0 live", "1 live", "2 live"]


def test_interactive_items_join_a_running_background_batch_ahead_of_queued_background():
    engine = FakeTranslator()
    engine.release.clear()
    batcher, _ = make(max_wait_ms=0, max_batch_size=32, document_batch_size=2)

    async def main():
        doc = asyncio.ensure_future(batcher.translate(
            engine, [f"d{i}" for i in range(6)], GREEDY, priority=Priority.BACKGROUND))
        await until(lambda: engine.entered == 1)  # a background batch is running
        live = asyncio.ensure_future(batcher.translate(engine, ["live"], GREEDY))
        await until(lambda: batcher.depth == 5)
        engine.release.set()
        return await doc, await live

    run(main())
    batcher.close()
    texts = [batch for batch, _ in engine.batches]
    assert texts[0] == ["d0", "d1"]
    # at the next step, ahead of the 4 background items queued before it, with as many of them
    # as document_batch_size leaves room for
    assert texts[1] == ["live", "d2", "d3"]
    assert texts[2:] == [["d4", "d5"]]


class LongRunningBatch(StepBatch):
    """A running batch whose sentences that start with "long" run until `finish` is set (like
    sentences that decode to the length limit); the others finish at the next step."""

    def __init__(self, engine: FakeTranslator, options: TranslationOptions,
                 finish: threading.Event) -> None:
        super().__init__(engine.translate_batch, options)
        self.finish, self.held, self.cancelled = finish, [], []
        engine.running_batches.append(self)

    def cancel(self, keys: list) -> None:
        self.cancelled += keys
        self.pending += [(k, t) for k, t in self.held if k in keys]  # they end at this step
        self.held = [(k, t) for k, t in self.held if k not in keys]

    def step(self) -> list:
        taken, self.pending = self.pending, []
        running = [(k, t) for k, t in taken if t.startswith("long") and k not in self.cancelled]
        self.held += running
        done = [(k, t) for k, t in taken if (k, t) not in running]
        if self.finish.is_set():
            done, self.held = done + self.held, []
        time.sleep(0.001)  # a step takes time, as the engine's do
        results = self.translate([t for _, t in done], self.options) if done else []
        return [(key, r) for (key, _), r in zip(done, results, strict=True)]


def test_a_short_request_gets_a_slot_while_a_large_one_fills_the_batch():
    """A request of many sentences that each run for long (text that decodes to the length
    limit) takes a batch's slots but the reserved ones: a one-sentence request that comes
    after it is answered at once, not after the large one's sentences finish."""
    finish = threading.Event()
    engine = FakeTranslator()
    engine.running_batches = []
    engine.start_batch = lambda options, beside=False: LongRunningBatch(engine, options, finish)
    batcher, _ = make(max_wait_ms=0, max_batch_size=16, max_batch_tokens=100_000)
    large = [f"long sentence {i} " + "word " * batcher_module.LONG_SOURCE for i in range(20)]
    short_ones = [f"short sentence {i}" for i in range(20)]  # a large request of short ones

    async def main():
        big = asyncio.ensure_future(batcher.translate(engine, large, GREEDY))
        await until(lambda: engine.running_batches and len(engine.running_batches[0].held) == 14)
        short = await asyncio.wait_for(batcher.translate(engine, ["a short one"], GREEDY), 10)
        two = await asyncio.wait_for(batcher.translate(engine, ["one", "two"], GREEDY), 10)
        three = asyncio.ensure_future(batcher.translate(engine, large[:3], GREEDY))
        await asyncio.sleep(0.2)
        assert not three.done()  # three long sentences: no short request, it waits its turn
        held = len(engine.running_batches[0].held)
        finish.set()
        return short, two, held, await big, await three

    short, two, held, big, three = run(main())
    batcher.close()
    # short sentences free their slots soon: those of a large request take every slot
    finish.clear()
    engine.running_batches.clear()
    engine.batches.clear()
    batcher, _ = make(max_wait_ms=0, max_batch_size=16, max_batch_tokens=100_000)
    assert len(run(batcher.translate(engine, short_ones, GREEDY))) == 20
    batcher.close()
    assert [len(texts) for texts, _ in engine.batches] == [16, 4]
    assert [r.text for r in short] == ["one short a"]
    assert [r.text for r in two] == ["one", "two"]
    assert held == 14  # 16 slots, 2 of them kept for short requests
    assert [r.text for r in big] == [" ".join(reversed(t.split())) for t in large]
    assert [r.text for r in three] == [r.text for r in big[:3]]


def test_sentences_of_a_request_past_its_deadline_stop_decoding():
    """A request that gets its 504 (or whose client left) while its sentences run: the running
    batch is told to end them, so their slots are free at once, not after the length limit."""
    finish = threading.Event()  # never set: only a cancel ends the long sentences
    engine = FakeTranslator()
    engine.running_batches = []
    engine.start_batch = lambda options, beside=False: LongRunningBatch(engine, options, finish)
    batcher, _ = make(max_wait_ms=0, max_batch_size=16, max_batch_tokens=100_000)
    large = [f"long sentence {i} " + "word " * batcher_module.LONG_SOURCE for i in range(5)]

    async def main():
        with pytest.raises(DeadlineExceeded):
            await batcher.translate(engine, large, GREEDY, timeout=0.3)
        batch = engine.running_batches[0]
        await until(lambda: not batch.held)
        after = await asyncio.wait_for(batcher.translate(engine, ["next one"], GREEDY), 10)
        return batch, after

    batch, after = run(main())
    batcher.close()
    assert sorted(batch.cancelled) == sorted(set(batch.cancelled)) and len(batch.cancelled) == 5
    assert [r.text for r in after] == ["one next"]
