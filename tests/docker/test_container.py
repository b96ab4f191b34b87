"""Container smoke test: build the runtime image, run it, translate, stop it cleanly.

Opt-in: runs only with NMT_DOCKER_TESTS=1 and a reachable Docker engine (see
tests/docker/setup_engine.sh, which prepares one on a machine without). Environment:

NMT_DOCKER_TESTS=1       enable this module
NMT_DOCKER               docker client (default /usr/bin/docker when present, else `docker`)
NMT_DOCKER_BASE_IMAGE    BASE_IMAGE build argument (default nmt-base:bookworm when that image
                         exists locally - the stand-in setup_engine.sh builds - else the
                         Dockerfile's own python:3.11-slim)

The image is built from the repository when bundles/ holds a bundle, else from a copy of the
build context with the tiny test bundle (tests/conftest.py) as bundles/en-de. Containers use
the host network and bind 127.0.0.1 on a free port; every request goes to loopback. pip's CA
bundle and index settings from this machine reach the build as BuildKit secrets only.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import shutil
import socket
import stat
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SERVICE_UID = 10001
BUILD_TIMEOUT = 1500  # a cold build downloads the runtime wheels
READY_TIMEOUT = 180
STOP_TIMEOUT = 30  # docker stop -t: longer than the service's grace period


def docker_client() -> str | None:
    if os.environ.get("NMT_DOCKER"):
        return os.environ["NMT_DOCKER"]
    if Path("/usr/bin/docker").exists():  # docker.io's client; a newer one may shadow it
        return "/usr/bin/docker"
    return shutil.which("docker")


def _skip_reason() -> str | None:
    if os.environ.get("NMT_DOCKER_TESTS") != "1":
        return "container smoke test is opt-in: set NMT_DOCKER_TESTS=1 with a Docker engine up"
    client = docker_client()
    if client is None:
        return "NMT_DOCKER_TESTS=1 but no docker client found"
    try:
        info = subprocess.run([client, "info"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"NMT_DOCKER_TESTS=1 but the Docker engine is not reachable: {exc}"
    if info.returncode != 0:
        tail = (info.stderr.strip().splitlines() or ["?"])[-1]
        return f"NMT_DOCKER_TESTS=1 but the Docker engine is not reachable: {tail}"
    return None


SKIP_REASON = _skip_reason()
pytestmark = [
    pytest.mark.docker,
    pytest.mark.slow,
    pytest.mark.timeout(BUILD_TIMEOUT + 600),
    pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or ""),
]


# ------------------------------------------------------------------------------- helpers


def docker(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [docker_client() or "docker", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{shlex.join(cmd)} -> {proc.returncode}\n{proc.stderr[-3000:]}")
    return proc


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http(port: int, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=data,
        method=method,
        headers={"Content-Type": "application/json"} if data else {},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


def world_readable(path: Path) -> bool:
    """Can uid 10001 read this directory tree's root (every parent traversable by others)?"""
    return all(part.stat().st_mode & stat.S_IXOTH for part in [path, *path.parents])


def readable_bundles(bundles: Path, copy_to: Path) -> Path:
    """`bundles`, or a copy at `copy_to` that uid 10001 can read, for a compose volume."""
    if world_readable(bundles):
        return bundles
    shutil.copytree(bundles, copy_to)
    for path in [copy_to, *copy_to.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return copy_to


def pip_settings() -> dict[str, str]:
    """pip's index settings on this machine (environment, then pip config), for the build.

    Only http(s) locations travel: local paths (file:// indexes, find-links) are not in the
    build."""

    def remote(value: str) -> str:
        return " ".join(v for v in value.split() if v.startswith(("http://", "https://")))

    found: dict[str, str] = {}
    keys = {
        "index-url": "PIP_INDEX_URL",
        "extra-index-url": "PIP_EXTRA_INDEX_URL",
        "trusted-host": "PIP_TRUSTED_HOST",
    }
    listed = subprocess.run(
        ["python3", "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60
    )
    for line in listed.stdout.splitlines():  # e.g. global.index-url='https://...'
        name, _, value = line.partition("=")
        key = name.rsplit(".", 1)[-1]
        if key in keys:
            found[keys[key]] = value.strip().strip("'\"")
    for env in keys.values():
        if os.environ.get(env):
            found[env] = os.environ[env]
    settings = {k: remote(v) if k != "PIP_TRUSTED_HOST" else v for k, v in found.items()}
    return {k: v for k, v in settings.items() if v}


def ca_bundle() -> str | None:
    for candidate in (
        os.environ.get("PIP_CERT"),
        os.environ.get("SSL_CERT_FILE"),
        os.environ.get("REQUESTS_CA_BUNDLE"),
        "/etc/ssl/certs/ca-certificates.crt",
    ):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def base_image() -> str | None:
    if os.environ.get("NMT_DOCKER_BASE_IMAGE"):
        return os.environ["NMT_DOCKER_BASE_IMAGE"]
    if docker("image", "inspect", "nmt-base:bookworm", check=False).returncode == 0:
        return "nmt-base:bookworm"
    return None  # the Dockerfile's default


def shipped_bundles() -> list[Path]:
    return sorted(p.parent for p in (REPO / "bundles").glob("*/manifest.json"))


@dataclass
class Image:
    tag: str
    bundles_dir: Path  # the bundles baked in, on this machine (for the compose volume)
    pair: tuple[str, str]
    build_seconds: float


def language_pair(bundle: Path) -> tuple[str, str]:
    manifest = json.loads((bundle / "manifest.json").read_text())
    return str(manifest["source_lang"]), str(manifest["target_lang"])


def build_context(request: pytest.FixtureRequest, workdir: Path) -> Path:
    """The repository, or a copy of what the Dockerfile copies plus the tiny bundle."""
    if shipped_bundles():
        return REPO
    tiny: Path = request.getfixturevalue("tiny_bundle")
    context = workdir / "context"
    context.mkdir()
    for name in ("Dockerfile", ".dockerignore", "pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(REPO / name, context / name)
    shutil.copytree(
        REPO / "app", context / "app", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    shutil.copytree(tiny, context / "bundles" / "en-de")
    for path in [context, *context.rglob("*")]:  # readable by the service user
        path.chmod(0o755 if path.is_dir() else 0o644)
    return context


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="nmt-docker-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def image(request: pytest.FixtureRequest, workdir: Path) -> Iterator[Image]:
    context = build_context(request, workdir)
    tag = f"nmt-service-test:{uuid.uuid4().hex[:12]}"
    cmd = [
        docker_client() or "docker",
        "build",
        "--network",
        "host",
        "--progress",
        "plain",
        "-t",
        tag,
        "-f",
        str(context / "Dockerfile"),
    ]
    base = base_image()
    if base:
        cmd += ["--build-arg", f"BASE_IMAGE={base}"]
    ca = ca_bundle()
    if ca:
        cmd += ["--secret", f"id=ca,src={ca}"]
    settings = pip_settings()
    if settings:
        pipenv = workdir / "pipenv"
        pipenv.write_text("".join(f"{k}={shlex.quote(v)}\n" for k, v in settings.items()))
        pipenv.chmod(0o600)
        cmd += ["--secret", f"id=pipenv,src={pipenv}"]
    for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"):
        if os.environ.get(proxy):  # predefined build args: not kept in the image history
            cmd += ["--build-arg", proxy]
    cmd.append(str(context))

    log = workdir / "build.log"
    start = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.run(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=BUILD_TIMEOUT,
            env={**os.environ, "DOCKER_BUILDKIT": "1"},
        )
    seconds = time.monotonic() - start
    assert proc.returncode == 0, f"docker build failed:\n{log.read_text()[-4000:]}"
    bundles = context / "bundles"
    first = sorted(p.parent for p in bundles.glob("*/manifest.json"))[0]
    try:
        yield Image(tag, bundles, language_pair(first), seconds)
    finally:
        docker("image", "rm", "-f", tag, check=False)


def container_state(cid: str) -> dict:
    return json.loads(docker("inspect", "--format", "{{json .State}}", cid).stdout)


def wait_healthy(cid: str, timeout: float = READY_TIMEOUT) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        state = container_state(cid)
        if not state.get("Running"):
            logs = docker("logs", cid, check=False)
            raise AssertionError(
                f"container exited ({state.get('ExitCode')}):\n"
                f"{(logs.stdout + logs.stderr)[-4000:]}"
            )
        health = (state.get("Health") or {}).get("Status")
        if health == "healthy":
            return time.monotonic() - start
        time.sleep(1)
    logs = docker("logs", cid, check=False)
    raise AssertionError(f"not healthy after {timeout}s:\n{(logs.stdout + logs.stderr)[-4000:]}")


def check_translations(port: int, pair: tuple[str, str]) -> None:
    source, target = pair
    status, body = http(
        port,
        "POST",
        "/v1/translate",
        {"text": "the red car sees a dog", "source": source, "target": target},
    )
    assert status == 200, body
    assert len(body["translations"]) == 1
    assert body["translations"][0]["text"].strip(), body

    status, body = http(
        port, "POST", "/translate", {"q": "open the file", "source": source, "target": target}
    )
    assert status == 200, body
    assert isinstance(body["translatedText"], str) and body["translatedText"].strip(), body
    print(f"\n/translate: 'open the file' -> {body['translatedText']!r}")


def upload(port: int, name: str, data: bytes, fields: dict[str, str]) -> tuple[int, dict]:
    """A multipart POST of one file to /translate_file."""
    boundary = uuid.uuid4().hex
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'
             .encode() for k, v in fields.items()]
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
                 f'filename="{name}"\r\nContent-Type: application/octet-stream\r\n\r\n'
                 .encode() + data + b"\r\n")
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/translate_file", data=b"".join(parts) + f"--{boundary}--\r\n"
        .encode(), method="POST",
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


def check_documents(port: int, pair: tuple[str, str]) -> None:
    """The image reads every document format (its optional dependencies and the PDF's font are
    installed): a .docx and a .pdf come back translated."""
    import docx
    from pypdf import PdfReader
    from reportlab.pdfgen import canvas

    status, body = http(port, "GET", "/frontend/settings")
    assert status == 200, body
    assert {".docx", ".odt", ".pptx", ".odp", ".epub", ".srt", ".po", ".xliff", ".pdf"} <= set(
        body["supportedFilesFormat"]), body["supportedFilesFormat"]
    document = docx.Document()
    document.add_paragraph("The red car sees a dog.")
    word = io.BytesIO()
    document.save(word)
    pdf = io.BytesIO()
    page = canvas.Canvas(pdf)
    page.drawString(72, 720, "The red car sees a dog.")
    page.save()
    source, target = pair
    for name, data in (("letter.docx", word.getvalue()), ("letter.pdf", pdf.getvalue())):
        status, body = upload(port, name, data, {"source": source, "target": target})
        assert status == 200, (name, body)
        with urllib.request.urlopen(body["translatedFileUrl"], timeout=30) as response:
            out = response.read()
        text = (docx.Document(io.BytesIO(out)).paragraphs[0].text if name.endswith(".docx")
                else PdfReader(io.BytesIO(out)).pages[0].extract_text())
        assert text.strip() and text.strip() != "The red car sees a dog.", (name, text)
        print(f"{name}: {text.strip()!r}")


def check_kernels(cid: str, port: int) -> None:
    """The image built our native kernels and its server runs them: its log line at start,
    /v1/models and the metric agree (the build stage has the compiler; the image runs on the
    machine that built it, so on a CPU with what they were built for)."""
    logs = docker("logs", cid, check=False)
    (line,) = [ln for ln in (logs.stdout + logs.stderr).splitlines()
               if "app.server: kernels:" in ln]
    assert "attention, search_tail, beam_walk, greedy_advance" in line and " active" in line
    status, body = http(port, "GET", "/v1/models")
    assert status == 200 and {"attention", "search_tail", "langid"} <= set(
        body["kernels"]["active"]), body
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        metrics = response.read().decode()
    assert 'nmt_kernel_active{kernel="attention"} 1.0' in metrics
    print(f"\n{line.split('app.server: ', 1)[1]}")


def service_uid(cid: str) -> int:
    """The real uid of the container's main process (PID 1), read from /proc."""
    status = docker("exec", cid, "cat", "/proc/1/status").stdout
    uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
    return int(uid_line.split()[1])


# --------------------------------------------------------------------------------- tests


def test_image_is_torch_free_without_toolchain(image: Image) -> None:
    config = json.loads(
        docker("image", "inspect", "--format", "{{json .Config}}", image.tag).stdout
    )
    assert config["User"] == f"{SERVICE_UID}:{SERVICE_UID}"
    assert "/health/ready" in " ".join(config["Healthcheck"]["Test"])
    assert config["Healthcheck"]["StartPeriod"] > 0
    assert config["Cmd"][0] == "nmt"

    probe = (
        "pip show torch >/dev/null 2>&1 && echo torch-installed; "
        "python -c 'import torch' 2>/dev/null && echo torch-importable; "
        "for tool in gcc cc g++ c++ clang make; do "
        "command -v $tool >/dev/null 2>&1 && echo toolchain:$tool; done; "
        "pip show onnxruntime >/dev/null 2>&1 || echo no-onnxruntime; "
        "echo probe-done"
    )
    out = docker(
        "run", "--rm", "--network", "none", "--entrypoint", "sh", image.tag, "-c", probe
    ).stdout
    assert out.strip().splitlines() == ["probe-done"], out

    # nmt doctor in the image: the kernels are in the venv's package and load (no network)
    doctor = docker("run", "--rm", "--network", "none", image.tag, "nmt", "doctor",
                    check=False)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "kernel library:   /opt/venv/lib/" in doctor.stdout
    assert "loads into ONNX Runtime: yes" in doctor.stdout, doctor.stdout

    size = int(docker("image", "inspect", "--format", "{{.Size}}", image.tag).stdout)
    print(f"\nimage {image.tag}: {size / 1e6:.0f} MB, built in {image.build_seconds:.0f}s")


def test_docker_run_serves_and_stops_cleanly(image: Image) -> None:
    port = free_port()
    name = f"nmt-smoke-{uuid.uuid4().hex[:8]}"
    cid = docker(
        "run",
        "-d",
        "--name",
        name,
        "--network",
        "host",
        "--read-only",
        "--tmpfs",
        "/tmp",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges:true",
        "-e",
        "NMT_HOST=127.0.0.1",
        "-e",
        f"NMT_PORT={port}",
        "-e",
        "NMT_FILES_DIR=/tmp/files",  # the one writable place of a read-only container
        "--health-interval",
        "2s",  # the image's check, polled faster than its 10s
        image.tag,
    ).stdout.strip()
    try:
        ready_after = wait_healthy(cid)
        check_translations(port, image.pair)
        check_documents(port, image.pair)
        check_kernels(cid, port)
        status, body = http(port, "GET", "/health/live")
        assert status == 200, body
        assert service_uid(cid) == SERVICE_UID

        start = time.monotonic()
        docker("stop", "-t", str(STOP_TIMEOUT), cid, timeout=STOP_TIMEOUT + 30)
        stop_seconds = time.monotonic() - start
        state = container_state(cid)
        logs = docker("logs", cid, check=False)
        assert state["ExitCode"] == 0, (state, (logs.stdout + logs.stderr)[-3000:])
        assert not state["OOMKilled"]
        assert stop_seconds < STOP_TIMEOUT, "SIGTERM did not stop it: docker stop killed it"
        print(f"\nready after {ready_after:.1f}s, stopped in {stop_seconds:.1f}s")
    finally:
        docker("rm", "-f", "-v", cid, check=False)


def compose_command() -> list[str] | None:
    client = docker_client() or "docker"
    if subprocess.run([client, "compose", "version"], capture_output=True).returncode == 0:
        return [client, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy else None


def test_compose_serves_and_stops_cleanly(image: Image, workdir: Path) -> None:
    compose = compose_command()
    if compose is None:
        pytest.skip("neither `docker compose` nor docker-compose is installed")
    bundles = readable_bundles(image.bundles_dir, workdir / "compose-bundles")
    # The compose file as shipped, but on the host network (this engine runs without a
    # bridge), which excludes published ports; the published address is checked separately.
    yaml = pytest.importorskip("yaml")
    spec = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    service = spec["services"]["nmt"]
    assert service["ports"][0].startswith("${NMT_PUBLISH_ADDR:-127.0.0.1}:"), service["ports"]
    del service["ports"]
    service["network_mode"] = "host"
    service["environment"]["NMT_HOST"] = "127.0.0.1"
    compose_file = workdir / "docker-compose.host-network.yml"
    compose_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    port = free_port()
    project = f"nmtsmoke{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "NMT_IMAGE": image.tag,
        "NMT_PORT": str(port),
        "NMT_PUBLISH_PORT": str(port),
        "NMT_BUNDLES_PATH": str(bundles),
    }
    base = [*compose, "-p", project, "--project-directory", str(REPO), "-f", str(compose_file)]

    def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [*base, *args], capture_output=True, text=True, env=env, timeout=timeout
        )
        assert proc.returncode == 0, f"{shlex.join(args)}: {proc.stderr[-3000:]}"
        return proc

    try:
        run("up", "-d", "--no-build")
        cid = run("ps", "-q", "nmt").stdout.strip()
        assert cid, "compose started no container"
        wait_healthy(cid)
        check_translations(port, image.pair)
        assert service_uid(cid) == SERVICE_UID
        host_config = json.loads(docker("inspect", "--format", "{{json .HostConfig}}", cid).stdout)
        assert host_config["ReadonlyRootfs"] is True
        assert host_config["CapDrop"] == ["ALL"]
        assert "no-new-privileges:true" in host_config["SecurityOpt"]

        run("stop", timeout=90)
        state = container_state(cid)
        assert state["ExitCode"] == 0, state
    finally:
        subprocess.run(
            [*base, "down", "-v", "--remove-orphans"], capture_output=True, env=env, timeout=120
        )
