"""app.translation.stoppable: work in a thread of its own that stops when its awaiting task is
cancelled, whether it is in pure-Python work that never checks, in a check, or waiting on a
future."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time

import pytest

from app.translation.stoppable import Stop, Stopped, run_stoppable


class Spin:
    """Pure-Python work that never ends and never checks; `ended` once it has stopped."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.ended = threading.Event()

    def __call__(self, *args: object) -> None:
        self.started.set()
        try:
            n = 0
            while True:
                try:
                    n += 1
                except Exception:  # noqa: SIM105 - a parser's catch-all, which must not
                    n = 0  # swallow the stop
        finally:
            self.ended.set()


async def cancel_after_start(task: asyncio.Task, started: threading.Event) -> float:
    """Cancel `task` once the work has started; seconds until the task is done."""
    while not started.is_set():
        await asyncio.sleep(0.005)
    began = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return time.monotonic() - began


def test_pure_python_work_stops_within_a_second_of_the_cancel():
    spin = Spin()

    async def main() -> float:
        task = asyncio.ensure_future(run_stoppable(lambda stop: spin()))
        return await cancel_after_start(task, spin.started)

    assert asyncio.run(main()) < 0.5  # the task itself ends at once
    assert spin.ended.wait(1.0)  # and the thread within a second


def test_a_thread_waiting_on_a_registered_future_wakes_and_stops():
    waiting = concurrent.futures.Future()
    started, ended = threading.Event(), threading.Event()

    def work(stop: Stop) -> None:
        started.set()
        try:
            stop.waiting(waiting).result()  # a blocking wait: no bytecode runs meanwhile
        finally:
            ended.set()

    async def main() -> None:
        task = asyncio.ensure_future(run_stoppable(work))
        await cancel_after_start(task, started)

    asyncio.run(main())
    assert ended.wait(1.0) and waiting.cancelled()


def test_results_and_errors_come_back_and_check_raises_once_stopped():
    async def main() -> None:
        assert await run_stoppable(lambda stop: 6 * 7) == 42
        with pytest.raises(ValueError, match="bad"):
            await run_stoppable(lambda stop: (_ for _ in ()).throw(ValueError("bad")))

    asyncio.run(main())
    stop = Stop()
    stop.check()  # not stopped: nothing
    stop.set()
    with pytest.raises(Stopped):
        stop.check()
    assert not issubclass(Stopped, Exception)  # `except Exception` does not catch it
    late = concurrent.futures.Future()
    stop.waiting(late)  # registered after the stop: cancelled at once
    assert late.cancelled()
