"""The C heap of a server process: fewer arenas, and free pages given back (glibc).

Loading a model parses and rewrites its graphs (protobuf messages, serialized copies) and lets
them go; glibc keeps most of the freed memory in its arenas, where it counts in the process's
resident memory until something reuses it. A server process trims (malloc_trim) once it is
ready and then now and then, so what it holds is what it uses. glibc also gives a thread that
allocates while another holds an arena an arena of its own (up to eight per core): the decode
workers, the event loop and the helper threads each end up with one, and the free memory of one
is no use to the others. `nmt serve` limits them (mallopt M_ARENA_MAX) before its threads start,
unless MALLOC_ARENA_MAX is set. Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os

log = logging.getLogger("app.engine.heap")


M_ARENA_MAX = -8  # mallopt's parameter (malloc.h)
SERVER_ARENAS = 1  # as many requests/s as with glibc's default, and a lower peak under load


@functools.cache
def _libc_function(name: str, argtypes: tuple):
    library = ctypes.util.find_library("c")
    try:
        function = getattr(ctypes.CDLL(library), name) if library else None
    except (OSError, AttributeError):  # not glibc (musl, macOS)
        return None
    if function is not None:
        function.argtypes, function.restype = list(argtypes), ctypes.c_int
    return function


def _malloc_trim():
    return _libc_function("malloc_trim", (ctypes.c_size_t,))


def limit_arenas(count: int = SERVER_ARENAS) -> bool:
    """At most count malloc arenas from now on, unless the environment sets MALLOC_ARENA_MAX
    (then glibc took that); False where there is no mallopt or it refused."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    function = _libc_function("mallopt", (ctypes.c_int, ctypes.c_int))
    return function is not None and function(M_ARENA_MAX, count) == 1


def trim() -> bool:
    """Release the free memory of every malloc arena; False where there is no malloc_trim."""
    function = _malloc_trim()
    if function is None:
        return False
    function(0)
    return True
