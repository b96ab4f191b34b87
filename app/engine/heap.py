"""Give the C heap's free pages back to the system (glibc's malloc_trim).

Loading a model parses and rewrites its graphs (protobuf messages, serialized copies) and lets
them go; glibc keeps most of the freed memory in its arenas, where it counts in the process's
resident memory until something reuses it. A server process trims once it is ready, so what it
holds from then on is what it uses. Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging

log = logging.getLogger("app.engine.heap")


@functools.cache
def _malloc_trim():
    name = ctypes.util.find_library("c")
    try:
        function = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc (musl, macOS)
        return None
    if function is not None:
        function.argtypes, function.restype = [ctypes.c_size_t], ctypes.c_int
    return function


def trim() -> bool:
    """Release the free memory of every malloc arena; False where there is no malloc_trim."""
    function = _malloc_trim()
    if function is None:
        return False
    function(0)
    return True
