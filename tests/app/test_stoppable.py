"""app.translation.stoppable: work in a thread of its own that stops when its awaiting task is
cancelled, whether it is in pure-Python work that never checks, in a check, or waiting on a
future."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
import traceback
import weakref

import pytest

from app.translation.stoppable import Stop, Stopped, run_stoppable
from tests.app.fakes import wait_until


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


class Parsed:
    """A parsed document's shape: objects that hold each other, so that only the collector
    frees them (python-docx's package and parts do, around their lxml trees)."""

    def __init__(self) -> None:
        self.me = self


def _thread_gone(name: str) -> bool:
    return not any(t.name == name for t in threading.enumerate())


@pytest.mark.parametrize("fails", [False, True])
@pytest.mark.parametrize("collect", [True, False])
def test_collect_frees_what_the_work_left_in_cycles_once_it_ends(collect, fails, collector_off):
    """collect=True: a full collection in the thread after the work; a failure's frames give
    up their locals first. Without it the cycle outlives the work (automatic collection off,
    as it effectively is for a long-lived server process's old objects)."""
    refs: list[weakref.ref] = []

    def work(stop: Stop) -> str:
        parsed = Parsed()
        refs.append(weakref.ref(parsed))
        if fails:
            raise ValueError("unreadable")
        return "rebuilt"

    async def main() -> None:
        call = run_stoppable(work, name="nmt-collect-test", collect=collect)
        if fails:
            with pytest.raises(ValueError, match="unreadable") as caught:
                await call
            assert "work" in "".join(traceback.format_tb(caught.value.__traceback__))
            del caught
        else:
            assert await call == "rebuilt"

    asyncio.run(main())
    wait_until(lambda: _thread_gone("nmt-collect-test"), 5)
    assert (refs[0]() is None) is collect


AFTER_WORK = """
import asyncio, sys
from app.translation.stoppable import Stop, Stopped, run_stoppable

async def main():
    assert await run_stoppable(lambda stop: 42) == 42  # ended, never stopped
    async def cancelled():
        task = asyncio.ensure_future(run_stoppable(lambda stop: [0 for _ in iter(int, 1)]))
        await asyncio.sleep(0.2)
        task.cancel()
    await cancelled()
    await asyncio.sleep(0.5)

asyncio.run(main())
sys.settrace(lambda frame, event, arg: None)  # a debugger, a coverage tool, a line counter
(lambda: None)()
sys.settrace(None)
print("went on")
"""


def test_the_interpreter_goes_on_as_before_once_the_work_has_ended():
    """A thread that ended left the interpreter signalled that a stop was pending for good
    (it withdrew a request that never came: CPython clears that signal only where it raises
    one): every thread took the slow path at each check from then on, and one being traced
    never got past the entry of its next function (a test that counts lines hung)."""
    import subprocess
    import sys

    try:
        done = subprocess.run([sys.executable, "-c", AFTER_WORK], capture_output=True,
                              text=True, timeout=30, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("the traced call never returned")
    assert done.stdout.strip() == "went on", done.stderr[-2000:]
