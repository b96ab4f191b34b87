"""bench/soak.py (not run in CI itself): loopback only, bounded, and its measurements work."""

from __future__ import annotations

import os

import pytest

from app.config import Settings
from app.http.app import create_app
from bench.soak import Soak, listening_pid, loopback_url, process_sample, trend
from tests.app.fakes import fake_model, running


@pytest.mark.parametrize("url", ["http://10.0.0.5:8000", "http://192.168.1.2", "https://127.0.0.1",
                                 "http://example.test:8000", "http://0.0.0.0:8000"])
def test_only_loopback_urls(url):
    with pytest.raises(SystemExit):
        loopback_url(url)
    assert loopback_url("http://127.0.0.1:8000/") == "http://127.0.0.1:8000"
    assert loopback_url("http://[::1]:8000") == "http://[::1]:8000"


def test_a_short_soak_against_a_server_on_loopback():
    app = create_app(Settings(max_wait_ms=1), loader=lambda s: [fake_model()])
    with running(app) as server:
        assert listening_pid(server.port) == os.getpid()  # the server runs in this process
        before = process_sample(os.getpid())
        soak = Soak(server.url, rate=20, seconds=1.0, workers=4, pair=("en", "de"))
        soak.run(on_sample=lambda t: None)
    assert sum(soak.outcomes.values()) == 20  # live requests only: no --document-every
    ok, dropped = soak.outcomes["live", "ok"], soak.outcomes["live", "dropped"]
    assert ok + dropped == 20 and ok > 0
    assert len(soak.latencies["live"]) == ok
    assert before["rss_mib"] > 0 and before["open_fds"] > 0


def test_trend_is_the_slope_after_the_warmup():
    samples = [{"t_s": 0, "rss_mib": 100.0, "open_fds": 10}]  # warm-up: left out
    samples += [{"t_s": t, "rss_mib": 200.0 + t / 360, "open_fds": 12} for t in (60, 120, 180)]
    got = trend(samples, warmup_s=60)
    assert got["rss_growth_mib_per_hour"] == 10.0  # 1/360 MiB per second
    assert (got["fds_after_warmup"], got["fds_end"], got["fds_max"]) == (12, 12, 12)
