"""Work in a thread of its own that stops when nobody waits for it any more.

`asyncio.to_thread` cannot stop its thread: a request cancelled while its document was being
parsed, segmented or rebuilt left the thread running to the end, holding the GIL, and the
event loop of that server process answered slowly or not at all while it ran. Here the
awaiting task's cancellation (client gone, deadline passed, job cancelled) stops the thread:

* `Stop.check()`, called by the work between steps, raises `Stopped` once it is stopped;
* a blocking wait the thread registered (`Stop.waiting`: a concurrent future, say a batch in
  the batcher) is cancelled, so a thread waiting for the engine wakes up at once;
* and, for pure-Python work between checks (a parser, a rebuild), `Stopped` is raised in
  the thread itself (CPython's PyThreadState_SetAsyncExc), at its next bytecode: a library
  call in C finishes first, so the work's steps in C must stay short (the limits of
  app.documents bound them).

Stopped derives from BaseException so that no `except Exception` in a parser swallows it.
A thread is made per call: raising into a pooled thread could hit its next task.

With `collect=True` the thread runs a full garbage collection when the work has ended, after
handing over its outcome. Parsed documents are reference cycles around native memory
(python-docx's package and parts hold each other and their lxml trees): the collector counts
Python objects, not the bytes behind them, so without this a server process held every parsed
document until its next full collection, rare in a long-lived process, and grew by the size of
each one meanwhile. A failure's traceback has its frames' locals cleared first, so the document
is garbage by then.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import gc
import logging
import threading
import traceback
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger("app.translation.stoppable")

T = TypeVar("T")

# how often the thread is asked again while it has not stopped (it was in a C call, or in a
# `finally` when the first request came)
RETRY_SECONDS = 0.05


class Stopped(BaseException):
    """Raised in a stopped thread."""


class Stop:
    """The stop signal one piece of work shares with the thread that runs it."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._waiting: concurrent.futures.Future | None = None

    @property
    def stopped(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        if self._event.is_set():
            raise Stopped

    def waiting(self, future: concurrent.futures.Future) -> concurrent.futures.Future:
        """Register the future the thread is about to wait on: stopping cancels it."""
        with self._lock:
            self._waiting = future
            if self._event.is_set():
                future.cancel()
        return future

    def set(self) -> None:
        self._event.set()
        with self._lock:
            if self._waiting is not None:
                self._waiting.cancel()


class _Worker(threading.Thread):
    """A thread that can be stopped from outside, never after its work has ended."""

    def __init__(self, work: Callable[[], None], name: str) -> None:
        super().__init__(name=name, daemon=True)
        self._work = work
        self._lock = threading.Lock()
        self._ended = False

    def run(self) -> None:
        try:
            self._work()
        except Stopped:
            pass
        finally:
            with self._lock:
                self._ended = True
            # a request that came after the last bytecode of the work is raised here at the
            # latest (a call checks for one) and dropped. Withdrawn instead (SetAsyncExc with
            # no exception), it left the interpreter signalled for good, since CPython clears
            # that signal only where it raises the exception: every thread then took the slow
            # path at each check, and a traced thread never got past its next function's entry
            try:  # noqa: SIM105 (contextlib.suppress's own calls would raise it first)
                _check_pending()
            except Stopped:
                pass

    def interrupt(self) -> None:
        with self._lock:
            if not self._ended and self.ident is not None:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.ident),
                                                           ctypes.py_object(Stopped))


def _check_pending() -> None:
    """Nothing: calling it raises a Stopped requested of this thread and not raised yet."""


async def run_stoppable(fn: Callable[[Stop], T], name: str = "nmt-document",
                        collect: bool = False) -> T:
    """fn(stop) in a new thread; its result or exception. When the awaiting task is cancelled,
    the thread is stopped (see the module doc) and CancelledError goes on at once. collect: a
    full garbage collection in the thread once fn has ended (see the module doc)."""
    loop = asyncio.get_running_loop()
    stop = Stop()
    done: asyncio.Future[T] = loop.create_future()

    def deliver(outcome: Callable[[], None]) -> None:
        if not done.done():
            outcome()

    def target() -> None:
        try:
            result = fn(stop)
        except Stopped:
            return
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            error = exc
            if collect:  # the traceback keeps its lines, not the frames' locals
                traceback.clear_frames(error.__traceback__)
            loop.call_soon_threadsafe(deliver, lambda: done.set_exception(error))
        else:
            loop.call_soon_threadsafe(deliver, lambda: done.set_result(result))
        finally:
            if collect:
                gc.collect()

    thread = _Worker(target, name)
    thread.start()
    try:
        return await done
    except asyncio.CancelledError:
        stop.set()
        thread.interrupt()
        loop.create_task(_until_ended(thread))
        raise


async def _until_ended(thread: _Worker) -> None:
    """Ask again until the thread has ended: an asynchronous exception is lost when it lands
    in a `finally` that raises, and waits while the thread is in a C call."""
    waited = 0.0
    while thread.is_alive():
        await asyncio.sleep(RETRY_SECONDS)
        waited += RETRY_SECONDS
        thread.interrupt()
        if waited >= 10 and waited - RETRY_SECONDS < 10:
            log.warning("a stopped document thread is still running after 10 s")
