"""Translated files kept for download (LibreTranslate's /translate_file -> /download_file).

Each file is `<32 hex digits>.<the uploaded name, made safe>` under one directory; a name is
unguessable, so holding it is what grants the download. Files older than `expiry` seconds are
neither served nor kept: every `put` deletes the expired ones.
"""

from __future__ import annotations

import re
import secrets
import time
from pathlib import Path, PurePath

from app.errors import NotFound

_STORED = re.compile(r"^[0-9a-f]{32}\.[\w.-]{1,120}$")
_UNSAFE = re.compile(r"[^\w.-]+")


def safe_name(filename: str) -> str:
    """The last component of an uploaded file name, in letters, digits, '_', '-' and '.'."""
    name = _UNSAFE.sub("_", PurePath(filename.replace("\\", "/")).name).strip("._")
    return name[-120:] or "file"


class FileStore:
    def __init__(self, root: Path, expiry: float) -> None:
        self.root = Path(root)
        self.expiry = expiry

    def put(self, filename: str, data: bytes) -> str:
        """Keep `data`; returns the stored name to download it by."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.sweep()
        name = f"{secrets.token_hex(16)}.{safe_name(filename)}"
        partial = self.root / f".{name}.part"
        try:
            partial.write_bytes(data)
            partial.replace(self.root / name)  # whole or absent, never half-written
        except BaseException:  # a full disk, or the request stopped (app.translation.stoppable)
            partial.unlink(missing_ok=True)  # sweep never sees dot files: none is left
            raise
        return name

    def check(self) -> None:
        """Raises OSError unless files can be written here (run once, at start)."""
        self.root.mkdir(parents=True, exist_ok=True)
        probe = self.root / f".probe-{secrets.token_hex(8)}"
        probe.write_bytes(b"")
        probe.unlink()

    def path(self, name: str) -> Path:
        """The stored file of that name; NotFound when there is none or it has expired."""
        path = self.root / name
        if not _STORED.match(name) or not path.is_file() or self._expired(path):
            raise NotFound("no such file: it never existed or has expired", field="filename")
        return path

    @staticmethod
    def download_name(name: str) -> str:
        return name.split(".", 1)[1]

    def sweep(self) -> int:
        """Delete the expired files; returns how many."""
        removed = 0
        for path in self.root.glob("*"):
            if path.is_file() and self._expired(path):
                path.unlink(missing_ok=True)
                removed += 1
        return removed

    def _expired(self, path: Path) -> bool:
        try:
            return time.time() - path.stat().st_mtime > self.expiry
        except FileNotFoundError:
            return True
