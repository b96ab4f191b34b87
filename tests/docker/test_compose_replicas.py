"""The compose replica profile: three containers of the service behind the HAProxy container,
under steady client load one replica is stopped (SIGTERM, drain) and started again; no client
request fails, and the restarted replica serves again.

Opt-in like tests/docker/test_container.py (NMT_DOCKER_TESTS=1 and a Docker engine, see
tests/docker/setup_engine.sh), whose image fixture builds the service's image. The balancer's
image is deploy/compose/haproxy.Dockerfile on the same Debian base. This engine runs without
a bridge, so the balancer uses the host network instead of publishing its port (the replicas
join its namespace as shipped) and binds 127.0.0.1 on free ports: every request goes to
loopback, bounded in count and time.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.service import drive
from tests.docker.test_container import (  # noqa: F401 - image and workdir are fixtures
    BUILD_TIMEOUT,
    REPO,
    SERVICE_UID,
    SKIP_REASON,
    Image,
    base_image,
    compose_command,
    container_state,
    docker,
    docker_client,
    free_port,
    image,
    readable_bundles,
    service_uid,
    wait_healthy,
    workdir,
)

COMPOSE = REPO / "deploy" / "compose"
REPLICAS = ["nmt-1", "nmt-2", "nmt-3"]

pytestmark = [
    pytest.mark.docker,
    pytest.mark.slow,
    pytest.mark.timeout(BUILD_TIMEOUT + 900),
    pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or ""),
]


@pytest.fixture(scope="module")
def balancer_image(workdir: Path) -> Iterator[str]:  # noqa: F811 - the imported fixture
    tag = f"nmt-haproxy-test:{uuid.uuid4().hex[:12]}"
    cmd = [docker_client() or "docker", "build", "--network", "host", "-t", tag,
           "-f", str(COMPOSE / "haproxy.Dockerfile")]
    base = base_image()
    if base:
        cmd += ["--build-arg", f"BASE_IMAGE={base}"]
    for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"):
        if os.environ.get(proxy):
            cmd += ["--build-arg", proxy]
    cmd.append(str(COMPOSE))
    log = workdir / "balancer-build.log"
    with log.open("w") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT)
    assert proc.returncode == 0, f"balancer build failed:\n{log.read_text()[-4000:]}"
    try:
        yield tag
    finally:
        docker("image", "rm", "-f", tag, check=False)


def translate_count(port: int) -> float:
    """POST /v1/translate answers this replica gave (its own /metrics, on loopback)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    pattern = r'^nmt_http_requests_total\{[^}]*route="/v1/translate"[^}]*\} (\S+)$'
    return sum(float(value) for value in re.findall(pattern, text, re.M))


def wait_for(predicate, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.5)


def test_a_replica_stops_and_restarts_under_load_and_no_request_fails(
    image: Image, balancer_image: str, workdir: Path  # noqa: F811 - the imported fixtures
) -> None:
    compose = compose_command()
    if compose is None:
        pytest.skip("neither `docker compose` nor docker-compose is installed")
    yaml = pytest.importorskip("yaml")
    bundles = readable_bundles(image.bundles_dir, workdir / "replica-bundles")

    # the file as shipped, but the balancer on the host network (no bridge on this engine)
    spec = yaml.safe_load((COMPOSE / "docker-compose.replicas.yml").read_text())
    balancer = spec["services"]["balancer"]
    assert balancer["ports"][0].startswith("${NMT_PUBLISH_ADDR:-127.0.0.1}:"), balancer["ports"]
    del balancer["ports"], balancer["build"]
    balancer["network_mode"] = "host"
    balancer["environment"]["NMT_BALANCER_ADDR"] = "127.0.0.1"
    for name in REPLICAS:
        assert spec["services"][name]["network_mode"] == "service:balancer"
    compose_file = workdir / "docker-compose.replicas.host-network.yml"
    compose_file.write_text(yaml.safe_dump(spec, sort_keys=False))

    ports = {name: free_port() for name in ["balancer", *REPLICAS]}
    env = {
        **os.environ,
        "NMT_IMAGE": image.tag,
        "NMT_BALANCER_IMAGE": balancer_image,
        "NMT_BUNDLES_PATH": str(bundles),
        "NMT_PORT": str(ports["balancer"]),
        **{f"NMT_REPLICA{i}_PORT": str(ports[name]) for i, name in enumerate(REPLICAS, 1)},
    }
    project = f"nmtreplicas{uuid.uuid4().hex[:8]}"
    base = [*compose, "-p", project, "--project-directory", str(COMPOSE), "-f", str(compose_file)]

    def run(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        proc = subprocess.run([*base, *args], capture_output=True, text=True, env=env,
                              timeout=timeout)
        assert proc.returncode == 0, f"{shlex.join(args)}: {proc.stderr[-3000:]}"
        return proc

    try:
        run("up", "-d", "--no-build")
        cids = {name: run("ps", "-q", name).stdout.strip() for name in ["balancer", *REPLICAS]}
        assert all(cids.values()), cids
        for name in REPLICAS:
            wait_healthy(cids[name])
            host_config = docker("inspect", "--format", "{{json .HostConfig}}",
                                 cids[name]).stdout
            assert f'"NetworkMode":"container:{cids["balancer"]}"' in host_config
            assert '"ReadonlyRootfs":true' in host_config
            assert service_uid(cids[name]) == SERVICE_UID
        assert service_uid(cids["balancer"]) != 0  # HAProxy runs as its package's user

        stop = threading.Event()
        result: dict = {}
        url = f"http://127.0.0.1:{ports['balancer']}"

        def load() -> None:  # 4 clients, one request each at a time; at most 5 minutes
            result.update(asyncio.run(drive(url, 4, 300, 100_000, image.pair[1], stop=stop)))

        loader = threading.Thread(target=load)
        loader.start()
        try:
            wait_for(lambda: all(translate_count(ports[n]) >= 10 for n in REPLICAS),
                     "10 translations on every replica")
            # SIGTERM: readiness turns 503, in-flight requests finish, the container exits 0
            docker("stop", "-t", "30", cids["nmt-2"], timeout=90)
            state = container_state(cids["nmt-2"])
            assert state["ExitCode"] == 0, state
            served_meanwhile = translate_count(ports["nmt-1"]) + translate_count(ports["nmt-3"])
            wait_for(lambda: translate_count(ports["nmt-1"]) + translate_count(ports["nmt-3"])
                     >= served_meanwhile + 20, "20 translations by the other two replicas")
            docker("start", cids["nmt-2"])
            wait_healthy(cids["nmt-2"])
            wait_for(lambda: translate_count(ports["nmt-2"]) >= 10,
                     "10 translations on the restarted replica")
        finally:
            stop.set()
            loader.join(120)
        logs = docker("logs", cids["balancer"], check=False)
        balancer_log = (logs.stdout + logs.stderr)[-6000:]
    finally:
        subprocess.run([*base, "down", "-v", "--remove-orphans"], capture_output=True, env=env,
                       timeout=180)
    print(f"\ncompose replicas, one stopped and restarted under load: {result['requests']} "
          f"requests, {result['errors']} failed {result['failures']}, "
          f"{result['requests_per_s']} req/s, p95 {result['p95_ms']} ms")
    assert result["errors"] == 0, (result["failures"], balancer_log)
    assert result["requests"] >= 100
