"""Peak memory of `nmt serve` under a short load: the summed RSS and PSS of its process tree.

Starts `nmt serve` on a loopback port with the NMT_* settings of this environment, waits until
it is ready, then runs `--clients` clients that post LibreTranslate `/translate` requests (two
short texts each) for `--seconds`, sampling the process tree every 0.2 s: RSS from
/proc/PID/status, PSS from /proc/PID/smaps_rollup (pages shared between processes, such as a
memory-mapped weights file, count once in the sum). Prints one JSON line: the peaks over the
whole run, until ready (loading the models) and while serving.

    NMT_PROCESSES=1 NMT_WORKERS=1 python -m bench.service_memory --seconds 40
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import threading
import time
import urllib.request

from bench.common import process_tree

WORDS = ["the", "red", "car", "sees", "a", "dog", "and", "old", "house", "has", "green", "book",
         "while", "we", "open", "file", "save", "new", "window"]
SAMPLE_EVERY = 0.2  # seconds
READY_TIMEOUT = 180.0  # seconds


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


def _wait_ready(url: str, proc: subprocess.Popen) -> float:
    started = time.monotonic()
    while time.monotonic() - started < READY_TIMEOUT:
        if proc.poll() is not None:
            raise RuntimeError(f"nmt serve exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health/ready", timeout=2) as r:
                if r.status == 200:
                    return time.monotonic() - started
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"nmt serve was not ready within {READY_TIMEOUT:g} s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--seconds", type=float, default=40.0)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--source", default="en")
    p.add_argument("--target", default="de")
    args = p.parse_args(argv)
    url = f"http://127.0.0.1:{args.port}"
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1",
                             "--port", str(args.port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = {"rss": 0.0, "pss": 0.0, "processes": 0}
    starting = {"rss": 0.0, "pss": 0.0}  # the peak until ready: loading the models
    serving = {"rss": 0.0, "pss": 0.0}  # the peak from then on, under the clients' load
    ready = threading.Event()
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            now = tree_memory(proc.pid)
            for phase in (peak, serving if ready.is_set() else starting):
                for key in phase:
                    phase[key] = max(phase[key], now[key])
            time.sleep(SAMPLE_EVERY)

    counts = {"requests": 0, "errors": 0}

    def client(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            texts = [" ".join(rng.choices(WORDS, k=rng.randint(4, 25))) + "." for _ in range(2)]
            body = json.dumps({"q": texts, "source": args.source, "target": args.target})
            request = urllib.request.Request(url + "/translate", body.encode(),
                                             {"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=60) as r:
                    r.read()
                counts["requests"] += 1
            except OSError:
                counts["errors"] += 1

    try:
        threading.Thread(target=sample, daemon=True).start()
        ready_s = _wait_ready(url, proc)
        ready.set()
        idle = tree_memory(proc.pid)
        clients = [threading.Thread(target=client, args=(i,), daemon=True)
                   for i in range(args.clients)]
        for c in clients:
            c.start()
        time.sleep(args.seconds)
        stop.set()
        for c in clients:
            c.join()
        end = tree_memory(proc.pid)
    finally:
        stop.set()
        proc.terminate()
        proc.wait(30)
    print(json.dumps({"ready_s": round(ready_s, 1), "processes": peak["processes"],
                      "idle_rss_mib": round(idle["rss"]), "idle_pss_mib": round(idle["pss"]),
                      "peak_rss_sum_mib": round(peak["rss"]),
                      "peak_pss_sum_mib": round(peak["pss"]),
                      "starting_peak_pss_mib": round(starting["pss"]),
                      "serving_peak_pss_mib": round(serving["pss"]),
                      "serving_peak_rss_mib": round(serving["rss"]),
                      "sum_vmhwm_mib": round(end["hwm"]), **counts,
                      "requests_per_s": round(counts["requests"] / args.seconds, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
