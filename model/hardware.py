"""The CPU this process runs on, as recorded in checkpoints, model cards and benchmark reports.

Nothing here imports torch."""

from __future__ import annotations

import contextlib
import os
import platform
from pathlib import Path


def cpu_info() -> tuple[str, str]:
    """(model name, flags line) from /proc/cpuinfo; the platform's name and "" elsewhere."""
    name, flags = "", ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and not name:
                name = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = line
    return name or platform.processor() or "unknown CPU", flags


def machine() -> str:
    """CPU model and logical core count, e.g. "AMD EPYC, 2 cores"."""
    return f"{cpu_info()[0]}, {os.cpu_count()} cores"
