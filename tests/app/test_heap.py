"""app.engine.heap: freed memory that glibc keeps in its arenas goes back to the system."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from app.engine import heap

SCRIPT = """
import numpy as np
from app.engine import heap

def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

blocks = [np.ones(20_000, dtype=np.uint8) for _ in range(10_000)]  # 200 MB in 20 kB blocks
kept = blocks[::50]  # one block in 50 stays: the freed ones are not at the heap's top
del blocks
held = rss_mib()
heap.trim()
print(held, rss_mib())
"""


def test_trim_gives_freed_blocks_back():
    if not heap.trim():
        pytest.skip("no malloc_trim here (not glibc)")
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    held, trimmed = map(float, out.split())
    assert held > 150  # the freed blocks were still resident
    assert held - trimmed > 100


def test_large_blocks_are_mapped_unless_the_environment_says_otherwise():
    """With the threshold fixed, a large block freed goes back to the system at once (glibc
    would otherwise raise its threshold after the first one and keep the next in its heap)."""
    if not heap.trim():
        pytest.skip("no mallopt here (not glibc)")
    script = """
import numpy as np
from app.engine import heap

def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

print(heap.map_large_blocks())
kept = []
for _ in range(3):  # the first free raises glibc's own threshold above these blocks
    blocks = [np.ones(4 << 20, dtype=np.uint8) for _ in range(10)]
    kept.append(blocks[-1])  # a live block above the freed ones: the heap cannot shrink
    del blocks
print(rss_mib())
"""
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, env=env, timeout=60).stdout.split()
    assert out[0] == "True"
    mapped = float(out[1])
    env["MALLOC_MMAP_THRESHOLD_"] = str(64 << 20)  # the operator's choice stands: kept in heap
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, env=env, timeout=60).stdout.split()
    assert out[0] == "False"
    assert float(out[1]) - mapped > 25  # 36 MB of freed blocks still resident
