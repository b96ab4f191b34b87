"""Dynamic batching on the real engine: N concurrent clients are served in fewer than N engine
batches, and each gets exactly the translation it gets when it is alone."""

from __future__ import annotations

import threading

import httpx
import pytest

from app.http.app import create_app
from tests.app.conftest import real_settings
from tests.app.fakes import running
from tests.conftest import toy_pairs

BATCHES = 'nmt_engine_batches_total{model="en-de",outcome="ok"}'


def engine_batches(client: httpx.Client) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(BATCHES + " "):
            return float(line.split()[1])
    return 0.0


def translate(client: httpx.Client, text: str) -> str:
    r = client.post("/v1/translate", json={"text": text, "source": "en", "target": "de"})
    assert r.status_code == 200, r.text
    return r.json()["translations"][0]["text"]


def test_concurrent_requests_share_batches_and_keep_their_own_results(tiny_bundle):
    n = 16
    sentences = list(dict.fromkeys(src for src, _ in toy_pairs(200, seed=7)))[:n]
    app = create_app(real_settings(tiny_bundle, max_wait_ms=100, max_batch_size=32))
    with running(app) as srv, httpx.Client(base_url=srv.url, timeout=30) as client:
        alone = [translate(client, s) for s in sentences]  # one request at a time
        before = engine_batches(client)
        assert before == n  # alone: one batch per request

        barrier = threading.Barrier(n)
        together: list[str | None] = [None] * n

        def worker(i: int) -> None:
            with httpx.Client(base_url=srv.url, timeout=30) as own:
                barrier.wait()
                together[i] = translate(own, sentences[i])

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        used = engine_batches(client) - before
    assert together == alone
    assert 1 <= used < n, f"{n} concurrent requests took {used} engine batches"
    assert any(text for text in alone)


def test_a_short_request_joins_a_running_batch_and_finishes_first(tiny_bundle):
    """Continuous batching on the real engine: a one-sentence request that arrives while a long
    batch decodes joins it at a step boundary and is answered before that batch ends (each step
    is slowed down so the order does not depend on the machine's speed)."""
    import asyncio
    import time

    from app.engine import TranslationOptions, Translator
    from app.translation.batcher import Batcher, BatcherConfig

    translator = Translator.from_dir(tiny_bundle, intra_threads=1)
    step = translator.sessions.step
    steps = []

    def slow_step(state, *args):
        steps.append(state.sentences)
        time.sleep(0.02)
        return step(state, *args)

    translator.sessions.step = slow_step
    options = TranslationOptions(beam_size=2, max_len_offset=40, max_len_ratio=2.0)
    long_texts = [src for src, _ in toy_pairs(40, seed=3)][:8]
    short = "the cat"
    ref_long = [r.text for r in translator.translate_batch(long_texts, options)]
    ref_short = translator.translate_batch([short], options)[0].text
    steps.clear()

    async def scenario():
        batcher = Batcher(BatcherConfig(max_batch_tokens=4096, max_batch_size=32,
                                        document_batch_size=8, max_wait_ms=1, queue_size=100))
        batcher.start()
        finished = []

        async def run(name, texts):
            results = await batcher.translate(translator, texts, options)
            finished.append(name)
            return [r.text for r in results]

        long_task = asyncio.create_task(run("long", long_texts))
        while len(steps) < 3:  # the long batch is decoding
            await asyncio.sleep(0.005)
        short_result = await run("short", [short])
        long_result = await long_task
        batcher.close()
        return finished, long_result, short_result

    finished, long_result, short_result = asyncio.run(scenario())
    assert finished == ["short", "long"]
    assert long_result == ref_long and short_result == [ref_short]  # same as decoded alone
    assert max(steps) == len(long_texts) + 1  # the short sentence ran inside the long batch


def test_an_engine_error_in_a_running_batch_fails_its_requests_only(tiny_bundle):
    """A step that raises fails the requests whose sentences were in that running batch with
    EngineFailure; the next batch runs normally."""
    import asyncio

    import pytest

    from app.engine import TranslationOptions, Translator
    from app.errors import EngineFailure
    from app.translation.batcher import Batcher, BatcherConfig

    translator = Translator.from_dir(tiny_bundle, intra_threads=1)
    step = translator.sessions.step
    fail = {"next": True}

    def failing_step(*args):
        if fail.pop("next", False):
            raise RuntimeError("step failed")
        return step(*args)

    translator.sessions.step = failing_step
    options = TranslationOptions(beam_size=2)

    async def scenario():
        batcher = Batcher(BatcherConfig(max_batch_tokens=4096, max_batch_size=32,
                                        document_batch_size=8, max_wait_ms=1, queue_size=100))
        batcher.start()
        with pytest.raises(EngineFailure):
            await batcher.translate(translator, ["the red car", "a small tree"], options)
        after = await batcher.translate(translator, ["the cat"], options)
        batcher.close()
        return [r.text for r in after]

    after = asyncio.run(scenario())
    assert after == [r.text for r in translator.translate_batch(["the cat"], options)]


def test_two_workers_decode_side_by_side_within_their_share(tiny_bundle):
    """With two batcher workers (the engine's two decode workers), two running batches decode at
    the same time on the decode workers' sessions, each holding at most half of max_batch_size
    sentences, and every request gets the translation it gets alone."""
    import asyncio
    import time

    from app.engine import TranslationOptions, Translator
    from app.translation.batcher import Batcher, BatcherConfig

    translator = Translator.from_dir(tiny_bundle, intra_threads=1, workers=2)
    one_thread_step = translator.sessions.one_thread_step
    lock = threading.Lock()
    seen = {"now": 0, "most": 0, "sentences": 0, "threads": set()}

    def spy(state, *args):
        with lock:
            seen["now"] += 1
            seen["most"] = max(seen["most"], seen["now"])
            seen["sentences"] = max(seen["sentences"], state.sentences)
            seen["threads"].add(threading.current_thread().name)
        time.sleep(0.005)  # long enough for the other decode worker's step to overlap
        try:
            return one_thread_step(state, *args)
        finally:
            with lock:
                seen["now"] -= 1

    translator.sessions.one_thread_step = spy
    options = TranslationOptions(beam_size=2)
    texts = [src for src, _ in toy_pairs(24, seed=5)][:12]
    alone = [translator.translate_batch([t], options)[0].text for t in texts]

    async def scenario():
        batcher = Batcher(BatcherConfig(max_batch_tokens=4096, max_batch_size=6,
                                        document_batch_size=8, max_wait_ms=1, queue_size=100),
                          workers=2)
        batcher.start()
        results = await asyncio.gather(*(batcher.translate(translator, [t], options)
                                         for t in texts))
        batcher.close()
        return [r[0].text for r in results]

    assert asyncio.run(scenario()) == alone
    assert seen["most"] == 2  # two running batches stepped at once
    assert seen["sentences"] <= 3  # half of max_batch_size each
    assert len(seen["threads"]) == 2


class Others:
    """app.translation.batcher.Spill of a process whose peers are idle or busy."""

    def __init__(self, idle: bool) -> None:
        self.idle, self.reports = idle, []

    def allowed(self) -> bool:
        return self.idle

    def report(self, running: int) -> None:
        self.reports.append(running)


@pytest.mark.parametrize("others", ["idle", "busy", "no spill"])
def test_spare_workers_take_live_work_only_when_the_running_batch_is_full(tiny_bundle, others):
    """A server process's spare decode workers (app.serving.supervisor): sentences that arrive while
    a batch runs
    with room join it rather than start a second decode worker; a request larger than one decode
    worker's share runs on both decode workers while another process idles, on one while they are
    busy. Without spill an idle decode worker takes work at once."""
    import asyncio
    import time

    from app.engine import TranslationOptions, Translator
    from app.translation.batcher import Batcher, BatcherConfig

    translator = Translator.from_dir(tiny_bundle, intra_threads=1, workers=2)
    lock = threading.Lock()
    seen = {"now": 0, "most": 0, "threads": set(), "steps": 0}

    # the first worker steps on the engine's own sessions, spare ones on single-thread ones
    def spying(step):
        def spy(state, *args):
            with lock:
                seen["now"] += 1
                seen["steps"] += 1
                seen["most"] = max(seen["most"], seen["now"])
                seen["threads"].add(threading.current_thread().name)
            time.sleep(0.005)
            try:
                return step(state, *args)
            finally:
                with lock:
                    seen["now"] -= 1
        return spy

    sessions = translator.sessions
    sessions.step = spying(sessions.step)
    sessions.one_thread_step = spying(sessions.one_thread_step)
    options = TranslationOptions(beam_size=2)
    texts = [src for src, _ in toy_pairs(24, seed=5)][:8]
    config = BatcherConfig(max_batch_tokens=4096, max_batch_size=8, document_batch_size=8,
                           max_wait_ms=0, queue_size=100)
    spill = None if others == "no spill" else Others(others == "idle")

    async def one_by_one():
        batcher = Batcher(config, workers=2, spill=spill)
        batcher.start()
        first = asyncio.ensure_future(batcher.translate(translator, texts[:1], options))
        while not seen["steps"]:
            await asyncio.sleep(0.001)
        later = []
        for text in texts[1:4]:  # three more, while the first batch (room 3) runs
            later.append(asyncio.ensure_future(batcher.translate(translator, [text], options)))
            await asyncio.sleep(0.002)
        await asyncio.gather(first, *later)
        batcher.close()

    asyncio.run(one_by_one())
    assert (len(seen["threads"]), seen["most"]) == ((2, 2) if spill is None else (1, 1))

    seen.update(most=0, threads=set(), steps=0)

    async def all_at_once():
        batcher = Batcher(config, workers=2, spill=spill)
        batcher.start()
        # 8 sentences: two decode workers' worth
        await batcher.translate(translator, texts, options)
        batcher.close()

    asyncio.run(all_at_once())
    assert seen["most"] == (1 if others == "busy" else 2)
    if spill is not None:  # what it told the other processes: its sentences, then none
        assert max(spill.reports) == (4 if others == "busy" else 8) and spill.reports[-1] == 0


def two_worker_batcher():
    """A started batcher with two workers (decode workers), joining quickly."""
    from app.translation.batcher import Batcher, BatcherConfig

    batcher = Batcher(BatcherConfig(max_batch_tokens=4096, max_batch_size=32,
                                    document_batch_size=8, max_wait_ms=1, queue_size=100),
                      workers=2)
    batcher.start()
    return batcher


def test_a_worker_process_that_dies_fails_its_requests_only(tiny_bundle):
    """With decode workers in processes of their own, a worker process that dies while it holds a
    running batch fails that batch's requests with EngineFailure; the next request is served
    by a decode worker started again, with the translation it gets alone."""
    import asyncio

    import pytest

    from app.engine import TranslationOptions, Translator
    from app.errors import EngineFailure

    translator = Translator.from_dir(tiny_bundle, intra_threads=1, workers=2,
                                     worker_processes=True)
    pool = translator.worker_processes
    take, kill, killed = pool.batch, {"next": True}, []

    def dying(options):
        batch = take(options)
        if kill.pop("next", False):
            batch.proc.process.kill()
            killed.append(batch.proc.process.wait())
        return batch

    pool.batch = dying
    options = TranslationOptions(beam_size=2)

    async def scenario():
        batcher = two_worker_batcher()
        with pytest.raises(EngineFailure):
            await batcher.translate(translator, ["the red car", "a small tree"], options)
        after = await batcher.translate(translator, ["the cat"], options)
        batcher.close()
        return [r.text for r in after]

    try:
        after = asyncio.run(scenario())
        assert killed and after == [r.text for r in translator.translate_batch(["the cat"],
                                                                                 options)]
    finally:
        translator.close()


def test_a_worker_process_that_cannot_start_fails_its_requests_and_the_workers_go_on(
        tiny_bundle, tmp_path):
    """A worker process that cannot load its bundle (here: a directory that is not one) fails the
    requests of the batch it was for, at once, and both batcher workers go on serving."""
    import asyncio
    import dataclasses

    import pytest

    from app.engine import TranslationOptions, Translator
    from app.errors import EngineFailure

    translator = Translator.from_dir(tiny_bundle, intra_threads=1, workers=2,
                                     worker_processes=True)
    pool = translator.worker_processes
    good = pool.spec
    pool.spec = dataclasses.replace(good, path=str(tmp_path))  # no decode worker started yet
    options = TranslationOptions(beam_size=2)

    async def scenario():
        batcher = two_worker_batcher()
        for text in ["the red car", "a small tree"]:  # one per worker, at most
            with pytest.raises(EngineFailure):
                await asyncio.wait_for(batcher.translate(translator, [text], options), 60)
        pool.spec = good
        after = await asyncio.wait_for(asyncio.gather(
            *(batcher.translate(translator, [text], options) for text in ["the cat", "a dog"])),
            60)
        batcher.close()
        return [r[0].text for r in after]

    try:
        after = asyncio.run(scenario())
        assert after == [r.text for r in translator.translate_batch(["the cat", "a dog"],
                                                                    options)]
    finally:
        translator.close()
