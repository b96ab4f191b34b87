"""Fetch Debian packages without installing them and read what they ship.

``apt-get download`` writes a package's .deb into the current directory and
needs neither root nor an installation; ``dpkg-deb -x`` unpacks it anywhere.
apt still needs package lists.  When ``apt-cache policy`` shows no candidate
for a package the lists are missing (a fresh container): as root we run
``apt-get update``; otherwise we point apt at private directories inside the
cache (``Dir::State::Lists``, ``Dir::Cache``) and update those, which works
without root because apt then only writes below the cache directory.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

MAX_LICENCE_LEN = 80


def log(message: str) -> None:
    """Progress output on stdout (flushed, so it shows up in pipes and logs)."""
    print(message, flush=True)


class Apt:
    """Thin wrapper around apt-get / apt-cache with optional private state dirs."""

    def __init__(self, cache: Path) -> None:
        self.cache = cache
        self.options: list[str] = []

    def _private_options(self) -> list[str]:
        lists = self.cache / "apt" / "lists"
        archives = self.cache / "apt" / "cache"
        (lists / "partial").mkdir(parents=True, exist_ok=True)
        (archives / "archives" / "partial").mkdir(parents=True, exist_ok=True)
        return [
            "-o",
            f"Dir::State::Lists={lists}",
            "-o",
            f"Dir::Cache={archives}",
            "-o",
            "Debug::NoLocking=1",
            "-o",
            "APT::Sandbox::User=" + _user(),
        ]

    def run(self, tool: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        """Run ``apt-get``/``apt-cache`` with the current options."""
        cmd = [tool, *self.options, *args]
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)

    def available(self, packages: list[str]) -> dict[str, str]:
        """Candidate version of each package apt knows about (missing ones left out)."""
        out = self.run("apt-cache", "policy", *packages).stdout
        found: dict[str, str] = {}
        name = None
        for line in out.splitlines():
            if line and not line.startswith(" ") and line.endswith(":"):
                name = line[:-1]
            elif name and line.strip().startswith("Candidate:"):
                version = line.split(":", 1)[1].strip()
                if version != "(none)":
                    found[name] = version
        return found

    def ensure_lists(self, probe: str) -> None:
        """Make sure apt has package lists, updating them if ``probe`` is unknown."""
        if self.available([probe]):
            return
        if os.geteuid() != 0:
            self.options = self._private_options()
            if self.available([probe]):
                return
        log("apt package lists are empty: running apt-get update ...")
        self.update()
        if not self.available([probe]):
            raise RuntimeError(f"apt knows no package {probe!r} even after apt-get update")

    def update(self) -> None:
        """``apt-get update``: system-wide as root, else into the private cache dirs."""
        if os.geteuid() != 0 and not self.options:
            self.options = self._private_options()
        result = self.run("apt-get", "update")
        if result.returncode != 0:
            raise RuntimeError(f"apt-get update failed:\n{result.stderr[-2000:]}")

    def download(self, packages: list[str], dest: Path) -> dict[str, Path]:
        """Download the candidate .debs of ``packages`` into ``dest`` (cached)."""
        dest.mkdir(parents=True, exist_ok=True)
        have = {pkg: _cached_deb(dest, pkg) for pkg in packages}
        missing = [pkg for pkg, path in have.items() if path is None]
        if missing:
            log(f"apt-get download {len(missing)} package(s) into {dest} ...")
            result = self.run("apt-get", "download", *missing, cwd=dest)
            if result.returncode != 0:
                log("apt-get download failed (stale package lists?): updating and retrying ...")
                self.update()
                result = self.run("apt-get", "download", *missing, cwd=dest)
            if result.returncode != 0:
                raise RuntimeError(f"apt-get download failed:\n{result.stderr[-2000:]}")
        debs = {pkg: _cached_deb(dest, pkg) for pkg in packages}
        return {pkg: path for pkg, path in debs.items() if path is not None}


def _user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):
        return "root"


def _cached_deb(dest: Path, package: str) -> Path | None:
    matches = sorted(dest.glob(f"{package}_*.deb"))
    return matches[-1] if matches else None


def deb_field(deb: Path, field: str) -> str:
    """One control field (e.g. Version) of a .deb file."""
    result = subprocess.run(
        ["dpkg-deb", "-f", str(deb), field], capture_output=True, text=True, check=True
    )
    return result.stdout.strip()


def unpack(deb: Path, root: Path, members: tuple[str, ...] = ()) -> Path:
    """Unpack ``deb`` into ``root/<deb stem>`` once and return that directory.

    ``members``: tar wildcards of the paths to extract (e.g. ``*/LC_MESSAGES/*``);
    empty extracts everything.  Games ship hundreds of MB of images and sounds
    around a few catalogs: extracting only the catalogs saves the disk writes.
    """
    target = root / deb.stem
    marker = target / ".unpacked"
    if not marker.exists():
        target.mkdir(parents=True, exist_ok=True)
        if members:
            tar = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE)
            subprocess.run(
                ["tar", "-x", "-C", str(target), "--wildcards", *members],
                stdin=tar.stdout,
                check=True,
            )
            if tar.wait() != 0:
                raise subprocess.CalledProcessError(tar.returncode, "dpkg-deb --fsys-tarfile")
        else:
            subprocess.run(["dpkg-deb", "-x", str(deb), str(target)], check=True)
        marker.touch()
    return target


def copyright_file(unpacked: Path, package: str) -> Path | None:
    """The package's copyright file inside its unpacked tree (any doc dir as fallback)."""
    direct = unpacked / "usr" / "share" / "doc" / package / "copyright"
    if direct.is_file():
        return direct
    candidates = sorted(
        p for p in (unpacked / "usr" / "share" / "doc").glob("*/copyright") if p.is_file()
    )
    return candidates[0] if candidates else None


def doc_link_target(unpacked: Path, package: str) -> str | None:
    """Package whose doc directory ``usr/share/doc/<package>`` points to (Debian shares them)."""
    doc = unpacked / "usr" / "share" / "doc" / package
    if doc.is_symlink():
        return Path(os.readlink(doc)).name
    return None


def licence(unpacked: Path, package: str) -> str:
    """Short licence name from a DEP-5 copyright file (the ``Files: *`` stanza first)."""
    path = copyright_file(unpacked, package)
    if path is None:
        return "unknown (no copyright file in the .deb)"
    return parse_licence(path.read_text(encoding="utf-8", errors="replace"))


def parse_licence(text: str) -> str:
    """Licence of a copyright file: DEP-5 ``Files: *`` licence, else a guess from the text."""
    stanzas = re.split(r"\n\s*\n", text)
    for stanza in stanzas:
        if re.search(r"^Files:\s*\*\s*$", stanza, re.MULTILINE):
            match = re.search(r"^License:\s*(.+)$", stanza, re.MULTILINE)
            if match and len(match.group(1).split()) <= 8:
                return match.group(1).strip()[:MAX_LICENCE_LEN]
    match = re.search(r"^License:\s*(\S.+)$", text, re.MULTILINE)
    if match and len(match.group(1).split()) <= 6:
        return match.group(1).strip()[:MAX_LICENCE_LEN]
    return _guess_licence(text)


def _guess_licence(text: str) -> str:
    """The licence named first in a free-form copyright file (with its version if given)."""
    guesses = [
        (r"GNU Lesser General Public License|GNU Library General Public License|\bLGPL", "LGPL"),
        (r"GNU (?:General )?Public License|GNU GPL|\bGPL", "GPL"),
        (r"Mozilla Public License", "MPL"),
        (r"\bBSD\b", "BSD"),
        (r"Permission is hereby granted, free of charge|\bMIT\b", "MIT/X11"),
        (r"Apache License", "Apache"),
    ]
    found = []
    for pattern, name in guesses:
        match = re.search(pattern, text)
        if match:
            found.append((match.start(), name, match))
    if not found:
        return "see copyright file"
    start, name, match = min(found, key=lambda item: item[0])
    window = text[match.end() : match.end() + 300]
    version = re.search(r"[Vv]ersion (\d(?:\.\d)?)|-(\d(?:\.\d)?)", window)
    if version:
        return f"{name}-{version.group(1) or version.group(2)}"
    return name
