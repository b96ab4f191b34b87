"""deploy/compose: the replica profile's HAProxy configuration is the one the replica test proved
(bench/replicas.py), its replicas and `server` lines agree, and HAProxy accepts the file. The
profile itself runs in tests/docker/test_compose_replicas.py where a Docker engine is up."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from app.config import Settings
from bench.replicas import haproxy_binary, haproxy_config

COMPOSE = Path(__file__).resolve().parents[2] / "deploy" / "compose"
SHIPPED = (COMPOSE / "haproxy.cfg").read_text()
SPEC = yaml.safe_load((COMPOSE / "docker-compose.replicas.yml").read_text())
# the lines that hold addresses, which differ by design: where HAProxy listens, where the
# replicas are and where its stats socket lies
ADDRESSES = re.compile(r"^(bind|server|stats socket) ")


def settings(config: str) -> list[str]:
    """A configuration's directives in order, less comments and address lines."""
    lines = [line.split("#", 1)[0].strip() for line in config.splitlines()]
    return [line for line in lines if line and not ADDRESSES.match(line)]


def test_haproxy_settings_are_the_ones_the_replica_test_proved(tmp_path):
    proved = haproxy_config(8000, [8001, 8002, 8003], tmp_path / "haproxy.sock")
    assert settings(SHIPPED) == settings(proved)
    assert len(settings(SHIPPED)) >= 25


def test_the_comparison_sees_a_changed_setting(tmp_path):
    proved = haproxy_config(8000, [8001], tmp_path / "haproxy.sock")
    assert settings(SHIPPED.replace("retries 3", "retries 1")) != settings(proved)


def replicas() -> dict[str, dict]:
    return {name: service for name, service in SPEC["services"].items() if name != "balancer"}


def test_every_replica_is_a_server_of_the_balancer_and_only_reachable_through_it():
    servers = re.findall(r'^\s*server (\S+) "127\.0\.0\.1:\$\{(\w+)\}"$', SHIPPED, re.M)
    port_variables = [variable for _, variable in servers]
    assert len(servers) == len(replicas()) >= 2
    balancer_env = SPEC["services"]["balancer"]["environment"]
    for name, service in replicas().items():
        env = service["environment"]
        assert service["network_mode"] == "service:balancer", name
        assert "ports" not in service, name
        assert env["NMT_HOST"] == "127.0.0.1", name  # the balancer's loopback only
        (variable,) = re.fullmatch(r"\$\{(\w+):-(\d+)\}", env["NMT_PORT"]).groups()[:1]
        assert variable in port_variables, name
        assert balancer_env[variable] == env["NMT_PORT"], name  # same default on both sides
        fields = {f"NMT_{field.upper()}" for field in Settings.model_fields}
        assert set(env) <= fields, set(env) - fields
        assert service["read_only"] and service["cap_drop"] == ["ALL"]
    assert len({s["environment"]["NMT_PORT"] for s in replicas().values()}) == len(replicas())
    published = SPEC["services"]["balancer"]["ports"][0]
    assert published.startswith("${NMT_PUBLISH_ADDR:-127.0.0.1}:")
    assert published.endswith(":${NMT_PORT:-8000}")
    assert balancer_env["NMT_PORT"] == "${NMT_PORT:-8000}"


def test_haproxy_comes_from_debians_package():
    dockerfile = (COMPOSE / "haproxy.Dockerfile").read_text()
    assert "apt-get install -y -q --no-install-recommends haproxy" in dockerfile
    assert "# syntax=" not in dockerfile
    assert re.search(r"^USER haproxy", dockerfile, re.M)
    assert SPEC["services"]["balancer"]["build"]["dockerfile"] == "haproxy.Dockerfile"


@pytest.mark.skipif(haproxy_binary() is None, reason="haproxy is not installed")
def test_haproxy_accepts_the_shipped_configuration():
    env = {"NMT_BALANCER_ADDR": "127.0.0.1", "NMT_PORT": "8000",
           **{f"NMT_REPLICA{i}_PORT": str(8000 + i) for i in range(1, len(replicas()) + 1)}}
    check = subprocess.run([haproxy_binary(), "-c", "-f", str(COMPOSE / "haproxy.cfg")],
                           env=env, capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr
    unset = subprocess.run([haproxy_binary(), "-c", "-f", str(COMPOSE / "haproxy.cfg")],
                           env={}, capture_output=True, text=True, timeout=30)
    assert unset.returncode != 0  # the addresses really come from the environment
