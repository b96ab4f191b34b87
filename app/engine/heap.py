"""Give the C heap's free pages back to the system (glibc's malloc_trim).

Loading a model parses and rewrites its graphs (protobuf messages, serialized copies) and lets
them go; glibc keeps most of the freed memory in its arenas, where it counts in the process's
resident memory until something reuses it. A server process trims once it is ready, so what it
holds from then on is what it uses. glibc also raises its mmap threshold each time a large block
is freed (up to 32 MiB): from then on a batch's large arrays come from the arenas and their
memory stays there after the batch. `nmt serve` fixes the threshold (MMAP_THRESHOLD, unless the
environment sets MALLOC_MMAP_THRESHOLD_), so blocks above it are mapped and unmapped with their
batch. Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

M_MMAP_THRESHOLD = -3  # mallopt's parameter (malloc.h)
MMAP_THRESHOLD = 1 << 20  # bytes: a batch's large arrays, not the many small objects


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


def map_large_blocks(threshold: int = MMAP_THRESHOLD) -> bool:
    """Blocks of threshold bytes or more mapped on their own from now on (glibc's mallopt
    M_MMAP_THRESHOLD, which also stops the threshold from rising), unless the environment sets
    MALLOC_MMAP_THRESHOLD_ (then glibc took that); False where there is no mallopt or it
    refused."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    function = _libc_function("mallopt", (ctypes.c_int, ctypes.c_int))
    return function is not None and function(M_MMAP_THRESHOLD, threshold) == 1


def trim() -> bool:
    """Release the free memory of every malloc arena; False where there is no malloc_trim."""
    function = _malloc_trim()
    if function is None:
        return False
    function(0)
    return True
