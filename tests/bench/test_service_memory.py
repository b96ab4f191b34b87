"""bench.service_memory without LibreTranslate: two stand-in servers (a loopback HTTP server
answering /translate) measured in alternation, the process tree summed, the ratios and the
probe check."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bench import service_memory
from bench.service_memory import Server, free_port

STANDIN = Path(__file__).with_name("translate_standin.py")


def standin(name: str, port: int, *flags: str) -> Server:
    return Server(name, [sys.executable, str(STANDIN), "--port", str(port), *flags],
                  "/health/ready", settings={"LT_THREADS": "4"})


def test_rounds_alternate_and_report_both_sides_with_ratios():
    ports = (free_port(), free_port())
    ours = standin("ours", ports[0], "--child")
    theirs = standin("theirs", ports[1])
    records = list(service_memory.compare(ours, theirs, ports, rounds=2, seconds=0.6,
                                          clients=2, source="en", target="de"))
    assert [r["first"] for r in records] == ["ours", "theirs"]
    for record in records:
        json.dumps(record)  # one JSON line
        mine, lt = record["ours"], record["libretranslate"]
        assert mine["processes"] == 2 and lt["processes"] == 1  # the child is in the tree
        assert mine["probe"] == "Die Datei speichern."
        for side in (mine, lt):
            assert side["requests"] > 0 and side["errors"] == 0
            assert 0 < side["starting_peak_pss_mib"] <= side["starting_peak_rss_mib"]
            assert side["peak_rss_sum_mib"] >= side["serving_peak_rss_mib"] > 0
        r = record["ratios_ours_over_lt"]
        assert r["peak_pss_over_lt_rss"] == round(
            mine["peak_pss_sum_mib"] / lt["peak_rss_sum_mib"], 3)
        assert r["serving_pss_over_lt_pss"] == round(
            mine["serving_peak_pss_mib"] / lt["serving_peak_pss_mib"], 3)
        assert r["starting_pss_over_lt_rss"] == round(
            mine["starting_peak_pss_mib"] / lt["starting_peak_rss_mib"], 3)
        # two interpreters against one: the tree's sum counts the child
        assert mine["peak_rss_sum_mib"] > lt["peak_rss_sum_mib"]
        assert record["libretranslate_settings"] == {"LT_THREADS": "4"}


def test_a_service_that_does_not_translate_is_refused():
    port = free_port()
    with pytest.raises(RuntimeError, match="did not translate"):
        service_memory.measure(standin("echo", port, "--echo"), port, 0.2, 1, "en", "de")


def test_clients_send_the_texts_given(tmp_path):
    port, log = free_port(), tmp_path / "requests.jsonl"
    texts = ["The weather is nice today.", "Where is the station?"]
    found = service_memory.measure(standin("ours", port, "--log", str(log)), port, 0.4, 2,
                                   "en", "de", texts)
    sent = [json.loads(line) for line in log.read_text().splitlines()]
    assert sent[0] == ["Save the file."]  # the probe
    assert len(sent) == found["requests"] + 1
    assert all(len(q) == 2 and set(q) <= set(texts) for q in sent[1:])


def test_ratios_without_a_peer_rate():
    ours = {"peak_pss_sum_mib": 300, "starting_peak_pss_mib": 200, "serving_peak_pss_mib": 300,
            "requests_per_s": 10.0}
    theirs = {"peak_rss_sum_mib": 250, "peak_pss_sum_mib": 240, "starting_peak_rss_mib": 0,
              "starting_peak_pss_mib": 0, "serving_peak_rss_mib": 250,
              "serving_peak_pss_mib": 240, "requests_per_s": 0.0}
    r = service_memory.ratios(ours, theirs)
    assert r["peak_pss_over_lt_rss"] == 1.2 and r["peak_pss_over_lt_pss"] == 1.25
    assert r["starting_pss_over_lt_rss"] is None and r["requests_per_s"] is None


def test_libretranslate_home_keeps_it_offline(tmp_path):
    package = tmp_path / "en_de"
    package.mkdir()
    (package / "metadata.json").write_text("{}")
    home = service_memory.lt_home(tmp_path / "home", package)
    server = service_memory.libretranslate_server("/bin/lt", 5001, home, "en", "de")
    installed = sorted(p.name for p in (home / "packages").iterdir())
    assert installed == ["en_de", "offline-marker"]  # two packages: no index fetch
    assert server.env["HOME"] == str(home) and server.cwd == str(home)
    assert server.env["ARGOS_PACKAGES_DIR"] == str(home / "packages")
    assert server.argv[-2:] == ["--load-only", "en,de"]


@pytest.mark.slow
def test_bench_run_section_serves_the_bundle_beside_a_standin(tmp_path):
    """beside_libretranslate as bench.run calls it: nmt serve on the shipped bundle, the
    stand-in started the way LibreTranslate is (its flags, its HOME, its package installed)."""
    from bench.run import memory_text

    bundle = Path(__file__).resolve().parents[2] / "bundles" / "en-de"
    executable = tmp_path / "libretranslate"
    executable.write_text(f"#!/bin/sh\nexec {sys.executable} {STANDIN} \"$@\"\n")
    executable.chmod(0o755)
    ct2 = tmp_path / "ct2"
    ct2.mkdir()
    (ct2 / "model.bin").write_bytes(b"weights")
    (ct2 / "sentencepiece.model").write_bytes(b"sp")
    record = service_memory.beside_libretranslate(bundle, str(executable), 1.0, 2, tmp_path,
                                                  ct2)
    assert record["ours"]["probe"].lower().count("datei") == 1
    assert record["ours"]["requests"] > 0 and record["libretranslate"]["requests"] > 0
    installed = tmp_path / "lt-home" / "packages" / "en-de"
    assert (installed / "model" / "model.bin").read_bytes() == b"weights"
    text = "\n".join(memory_text(record))
    assert "| nmt serve |" in text and "| LibreTranslate |" in text
    assert f"peak RSS: {record['ratios_ours_over_lt']['peak_pss_over_lt_rss']}" in text
