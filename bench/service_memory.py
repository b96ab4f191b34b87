"""Peak memory of `nmt serve` under a short load: the summed RSS and PSS of its process tree,
beside LibreTranslate's on the same weights where it is installed.

Starts `nmt serve` on a loopback port with the NMT_* settings of this environment, waits until
it is ready and has answered a probe translation, then runs `--clients` clients that post
LibreTranslate `/translate` requests (two texts each: runs of a few words, or with `--texts
FILE` lines of that file, e.g. test sentences) for `--seconds`, sampling the
process tree every 0.2 s: RSS from /proc/PID/status, PSS from /proc/PID/smaps_rollup (pages
shared between processes, such as a memory-mapped weights file, count once in the sum). The
peaks are reported over the whole run, for start-up (until the probe came back: LibreTranslate
loads its model on first use, so its load falls here too) and while serving.

With `--libretranslate` (its `libretranslate` executable, or `auto`: on PATH) the same load
runs against LibreTranslate on `--lt-port`, with an Argos package of the bundle's weights
(bench.lt_package, or `--lt-package DIR` made before) in a temporary HOME, so nothing outside
it is read or written and no model is downloaded. LibreTranslate runs with its default settings
(LT_*/ARGOS_* variables of this environment apply). The two alternate which goes first, one
JSON line per round with both results and the ratios ours / LibreTranslate's.

    NMT_PROCESSES=1 NMT_WORKERS=1 python -m bench.service_memory --seconds 40
    python -m bench.service_memory --libretranslate /path/to/venv/bin/libretranslate --rounds 2
    python -m bench.service_memory --texts data/en-de/test.en --texts data/en-de/test.general.en

The test splits' sentences, most of them short interface strings, are answered faster than the
runs of words, so the service runs larger batches, and they touch more of the reranking
language model: for us they give the higher peaks.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import process_tree, read_lines

WORDS = ["the", "red", "car", "sees", "a", "dog", "and", "old", "house", "has", "green", "book",
         "while", "we", "open", "file", "save", "new", "window"]
SAMPLE_EVERY = 0.2  # seconds
READY_TIMEOUT = 180.0  # seconds
# A sentence the shipped en-de model translates with a word that can only be German.
PROBES = {("en", "de"): ("Save the file.", "Datei")}
# LibreTranslate's defaults for the settings that decide its threads, with the variables
# that change them (waitress threads; CTranslate2's inter and intra threads, 0: its default).
LT_SETTINGS = {"LT_THREADS": "4", "ARGOS_INTER_THREADS": "1", "ARGOS_INTRA_THREADS": "0"}


@dataclass(frozen=True)
class Server:
    """How to start one translation service and know it is up."""

    name: str
    argv: list[str]
    ready_path: str
    env: dict[str, str] | None = None
    cwd: str | None = None
    settings: dict[str, str] = field(default_factory=dict)


def _field(pid: int, file: str, name: str) -> float:
    """A kB field of /proc/PID/<file> in MiB; 0 where the process is gone."""
    try:
        with open(f"/proc/{pid}/{file}") as f:
            for line in f:
                if line.startswith(name + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def tree_memory(pid: int) -> dict:
    """Summed RSS, PSS and peak RSS (VmHWM) in MiB of pid and its descendants."""
    pids = process_tree(pid)
    return {"processes": len(pids),
            "rss": sum(_field(p, "status", "VmRSS") for p in pids),
            "pss": sum(_field(p, "smaps_rollup", "Pss") for p in pids),
            "hwm": sum(_field(p, "status", "VmHWM") for p in pids)}


def _wait_ready(url: str, proc: subprocess.Popen, name: str) -> float:
    started = time.monotonic()
    while time.monotonic() - started < READY_TIMEOUT:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return time.monotonic() - started
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{name} was not ready within {READY_TIMEOUT:g} s")


def translate(url: str, texts: list[str], source: str, target: str, timeout: float = 60):
    body = json.dumps({"q": texts, "source": source, "target": target}).encode()
    request = urllib.request.Request(url + "/translate", body,
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as r:
        return json.loads(r.read())["translatedText"]


def check_translates(url: str, name: str, source: str, target: str) -> str:
    """One probe translation; raises unless it came back translated (for a known pair: with
    the word only a translation has)."""
    text, expected = PROBES.get((source, target), ("Save the file.", ""))
    [out] = translate(url, [text], source, target, timeout=READY_TIMEOUT)
    if not out.strip() or out.strip() == text or expected.lower() not in out.lower():
        raise RuntimeError(f"{name} did not translate {text!r} to {target}: {out!r}")
    return out


def measure(server: Server, port: int, seconds: float, clients: int, source: str,
            target: str, texts: list[str] | None = None) -> dict:
    """Start server, probe it, load it with clients for seconds; its memory peaks. Each request
    carries two texts: lines of texts where given, else runs of WORDS."""
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(server.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=server.env, cwd=server.cwd)
    peak = {"rss": 0.0, "pss": 0.0, "processes": 0}
    starting = {"rss": 0.0, "pss": 0.0}  # until the probe came back: loading the models
    serving = {"rss": 0.0, "pss": 0.0}  # from then on, under the clients' load
    ready = threading.Event()
    stop = threading.Event()

    def record(phase: dict) -> None:
        now = tree_memory(proc.pid)
        for seen in (peak, phase):
            for key in seen:
                seen[key] = max(seen[key], now[key])

    def sample() -> None:
        while not stop.is_set():
            record(serving if ready.is_set() else starting)
            time.sleep(SAMPLE_EVERY)

    counts = {"requests": 0, "errors": 0}

    def client(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            sent = ([rng.choice(texts) for _ in range(2)] if texts else
                    [" ".join(rng.choices(WORDS, k=rng.randint(4, 25))) + "." for _ in range(2)])
            try:
                translate(url, sent, source, target)
                counts["requests"] += 1
            except (OSError, ValueError, KeyError):
                counts["errors"] += 1

    try:
        threading.Thread(target=sample, daemon=True).start()
        ready_s = _wait_ready(url + server.ready_path, proc, server.name)
        probe = check_translates(url, server.name, source, target)
        record(starting)  # the probe's last moments may fall between two samples
        ready.set()
        idle = tree_memory(proc.pid)
        threads = [threading.Thread(target=client, args=(i,), daemon=True)
                   for i in range(clients)]
        for c in threads:
            c.start()
        time.sleep(seconds)
        stop.set()
        for c in threads:
            c.join()
        end = tree_memory(proc.pid)
    finally:
        stop.set()
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return {"ready_s": round(ready_s, 1), "probe": probe, "processes": peak["processes"],
            "idle_rss_mib": round(idle["rss"]), "idle_pss_mib": round(idle["pss"]),
            "peak_rss_sum_mib": round(peak["rss"]), "peak_pss_sum_mib": round(peak["pss"]),
            "starting_peak_rss_mib": round(starting["rss"]),
            "starting_peak_pss_mib": round(starting["pss"]),
            "serving_peak_rss_mib": round(serving["rss"]),
            "serving_peak_pss_mib": round(serving["pss"]),
            "sum_vmhwm_mib": round(end["hwm"]), **counts,
            "requests_per_s": round(counts["requests"] / seconds, 1)}


def ratios(ours: dict, theirs: dict) -> dict:
    """Ours peak PSS over LibreTranslate's peak RSS and PSS (whole run, start-up, serving),
    and the request rates."""
    out = {}
    for phase, key in (("peak", "peak_{}_sum_mib"), ("starting", "starting_peak_{}_mib"),
                       ("serving", "serving_peak_{}_mib")):
        for kind in ("rss", "pss"):
            theirs_value = theirs[key.format(kind)]
            out[f"{phase}_pss_over_lt_{kind}"] = (
                round(ours[key.format("pss")] / theirs_value, 3) if theirs_value else None)
    out["requests_per_s"] = (round(ours["requests_per_s"] / theirs["requests_per_s"], 3)
                             if theirs["requests_per_s"] else None)
    return out


def compare(ours: Server, theirs: Server, ports: tuple[int, int], rounds: int, seconds: float,
            clients: int, source: str, target: str, texts: list[str] | None = None):
    """Rounds of both servers, alternating which goes first; yields one record per round."""
    for n in range(rounds):
        sequence = [(ours, ports[0]), (theirs, ports[1])]
        if n % 2:
            sequence.reverse()
        found = {s.name: measure(s, port, seconds, clients, source, target, texts)
                 for s, port in sequence}
        yield {"round": n + 1, "first": sequence[0][0].name,
               "ours": found[ours.name], "libretranslate": found[theirs.name],
               "libretranslate_settings": theirs.settings,
               "ratios_ours_over_lt": ratios(found[ours.name], found[theirs.name])}


def ours_server(port: int, models_dir: Path | None = None) -> Server:
    chosen = ["--models-dir", str(models_dir)] if models_dir is not None else []
    return Server("nmt serve", [sys.executable, "-m", "app.cli", "serve", "--host",
                                "127.0.0.1", "--port", str(port), *chosen], "/health/ready")


def libretranslate_server(executable: str, port: int, home: Path, source: str,
                          target: str) -> Server:
    """LibreTranslate with its default settings, its HOME, data, config and cache directories
    and Argos packages under home; it does not update or download models (its default)."""
    env = {**os.environ, "HOME": str(home), "XDG_DATA_HOME": str(home / "data"),
           "XDG_CONFIG_HOME": str(home / "config"), "XDG_CACHE_HOME": str(home / "cache"),
           "ARGOS_PACKAGES_DIR": str(home / "packages")}
    settings = {k: env.get(k, default) for k, default in LT_SETTINGS.items()}
    return Server("libretranslate", [executable, "--host", "127.0.0.1", "--port", str(port),
                                     "--load-only", f"{source},{target}"],
                  "/languages", env=env, cwd=str(home), settings=settings)


def lt_home(home: Path, package: Path) -> Path:
    """Install the package into home/packages. LibreTranslate fetches the package index
    when fewer than two packages are installed; a second, empty package of another type
    (a sentence-splitter entry that no language uses) keeps it offline."""
    packages = home / "packages"
    shutil.copytree(package, packages / package.name, dirs_exist_ok=True)
    (packages / "offline-marker").mkdir(exist_ok=True)
    (packages / "offline-marker" / "metadata.json").write_text(json.dumps(
        {"package_version": "1.0", "argos_version": "1.9.0", "from_code": "", "to_code": "",
         "type": "sbd", "code": "offline-marker", "name": "offline-marker"}))
    return home


def find_libretranslate(value: str | None) -> str | None:
    """The executable named, or for 'auto' the one on PATH (None where there is none)."""
    if value in (None, "", "none"):
        return None
    if value == "auto":
        return shutil.which("libretranslate")
    if not Path(value).exists():
        raise SystemExit(f"--libretranslate: no executable at {value}")
    return value


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def beside_libretranslate(bundle: Path, executable: str | None, seconds: float, clients: int,
                          tmp: Path, ct2_model: Path | None = None) -> dict:
    """bench.run's memory section: the bundle served by us, and by LibreTranslate where
    executable is given (one round each, ours first). ct2_model: the bundle's weights already
    converted to CTranslate2 int8 (bench.convert), else they are converted here."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    source, target = manifest["source_lang"], manifest["target_lang"]
    port = free_port()
    ours = ours_server(port, bundle)
    if executable is None:
        return {"ours": measure(ours, port, seconds, clients, source, target),
                "libretranslate": None,
                "skipped": "LibreTranslate not found (pass --libretranslate PATH)"}
    from bench.lt_package import from_bundle, write_package

    out = tmp / "lt-package" / manifest["name"]
    if ct2_model is not None:
        package = write_package(ct2_model, ct2_model / "sentencepiece.model", out, source,
                                target, manifest["name"])
    else:
        package = from_bundle(bundle, out)
    lt_port = free_port()
    theirs = libretranslate_server(executable, lt_port, lt_home(tmp / "lt-home", package),
                                   source, target)
    [record] = compare(ours, theirs, (port, lt_port), 1, seconds, clients, source, target)
    return record


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--seconds", type=float, default=40.0)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--source", default="en")
    p.add_argument("--target", default="de")
    p.add_argument("--libretranslate", metavar="PATH",
                   help="LibreTranslate's executable, or 'auto' (on PATH)")
    p.add_argument("--lt-port", type=int, default=8766)
    p.add_argument("--lt-package", type=Path,
                   help="an Argos package made by bench.lt_package (default: made from --bundle)")
    p.add_argument("--bundle", type=Path, default=Path("bundles/en-de"))
    p.add_argument("--rounds", type=int, default=1, help="rounds with LibreTranslate")
    p.add_argument("--texts", type=Path, action="append", default=[], metavar="FILE",
                   help="the clients' texts: lines of these files (default: runs of WORDS)")
    args = p.parse_args(argv)
    texts = [line for path in args.texts for line in read_lines(path)]
    if args.texts and not texts:
        raise SystemExit("--texts: the files hold no text")
    ours = ours_server(args.port, args.bundle)
    executable = find_libretranslate(args.libretranslate)
    if executable is None:
        print(json.dumps(measure(ours, args.port, args.seconds, args.clients, args.source,
                                 args.target, texts)))
        return 0
    with tempfile.TemporaryDirectory(prefix="lt-home-") as tmp_name:
        tmp = Path(tmp_name)
        package = args.lt_package
        if package is None:
            from bench.lt_package import from_bundle

            package = from_bundle(args.bundle, tmp / "build" / args.bundle.name)
        home = lt_home(tmp / "home", package)
        theirs = libretranslate_server(executable, args.lt_port, home, args.source, args.target)
        for record in compare(ours, theirs, (args.port, args.lt_port), args.rounds,
                              args.seconds, args.clients, args.source, args.target, texts):
            print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
