"""Three real `python -m app.server` replicas behind a real HAProxy on loopback: under steady
client load one replica gets SIGTERM, drains and exits, starts again and rejoins; no client
request fails. HAProxy comes from Debian's package (.ci/run installs it); without it the test
is skipped."""

from __future__ import annotations

import asyncio
import signal
import threading
from pathlib import Path

import pytest

from bench.replicas import cluster, haproxy_binary, haproxy_config
from bench.service import drive, start_server

needs_haproxy = pytest.mark.skipif(
    haproxy_binary() is None, reason="haproxy is not installed (Debian: apt-get install haproxy)"
)


@needs_haproxy
@pytest.mark.slow
def test_sigterm_and_restart_of_a_replica_under_load_fails_no_request(tiny_bundle,
                                                                      tiny_sentences):
    with cluster(str(tiny_bundle), 3) as (balancer, procs):
        stop = threading.Event()
        result: dict = {}

        def load() -> None:  # 4 clients, one request each at a time; at most 5 minutes
            result.update(asyncio.run(drive(balancer.url, 4, 300, 100_000, "de",
                                            tiny_sentences, stop=stop)))

        loader = threading.Thread(target=load)
        loader.start()
        try:
            served = balancer.wait(lambda s: all(int(r["stot"]) >= 20 for r in s.values()),
                                   "20 requests on every replica")
            port = int(balancer.servers()["r2"]["addr"].rsplit(":", 1)[1])
            procs[1].send_signal(signal.SIGTERM)
            assert procs[1].wait(60) == 0
            balancer.wait(lambda s: s["r2"]["status"].startswith("DOWN"), "r2 DOWN")
            before = int(balancer.servers()["r2"]["stot"])
            procs[1] = start_server(str(tiny_bundle), ["--log-level", "warning"], 1, port)[0]
            balancer.wait(lambda s: s["r2"]["status"] == "UP", "r2 UP again")
            after = balancer.wait(lambda s: int(s["r2"]["stot"]) >= before + 20,
                                  "20 requests on the restarted replica")
        finally:
            stop.set()
            loader.join(120)
        log = balancer.log.read_text()
    retried = sum(int(r["wretr"] or 0) + int(r["wredis"] or 0) for r in after.values())
    print(f"\nreplica restart under load: {result['requests']} requests, "
          f"{result['errors']} failed {result['failures']}, {result['requests_per_s']} req/s, "
          f"p95 {result['p95_ms']} ms; HAProxy retries + redispatches {retried}; "
          f"before the restart {[int(r['stot']) for r in served.values()]} per replica")
    assert result["errors"] == 0, (result["failures"], log[-6000:])
    assert result["requests"] >= 100


def test_docs_show_the_tested_haproxy_configuration(tmp_path):
    readme = (Path(__file__).resolve().parents[2] / "docs" / "deploy.md").read_text()
    block = readme.split("```\ndefaults\n", 1)[1].split("```", 1)[0]
    shown = [line.split("#")[0].strip() for line in ("defaults\n" + block).splitlines()]
    config = haproxy_config(8000, [8001, 8002], tmp_path / "haproxy.sock")
    tested = {line.strip() for line in config.splitlines()}
    missing = [line for line in shown if line and line != "..." and line not in tested]
    assert not missing
    assert len([line for line in shown if line]) >= 10
