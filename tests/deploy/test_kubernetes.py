"""deploy/kubernetes: every kustomization renders, passes the Kubernetes schemas of each supported
version (strict: unknown fields fail), and agrees with the image and the service it deploys."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from app.config import Settings
from app.http.metrics import Metrics
from tests.deploy.kustomize import render

kubernetes_validate = pytest.importorskip("kubernetes_validate")

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
KUSTOMIZATIONS = sorted(p.parent.relative_to(KUBE).as_posix()
                        for p in KUBE.rglob("kustomization.yaml"))
# the Kubernetes minor versions the manifests are written for (README, "Scale out")
SUPPORTED = [f"1.{minor}" for minor in range(29, 38)]


def by_kind(resources: list[dict]) -> dict[str, dict]:
    kinds = [r["kind"] for r in resources]
    assert len(kinds) == len(set(kinds)), f"one resource per kind expected: {kinds}"
    return {r["kind"]: r for r in resources}


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict]]:
    return {name: render(KUBE / name) for name in KUSTOMIZATIONS}


def test_the_expected_kustomizations_exist():
    assert {"base", "overlays/cuda", "overlays/queue-depth"} <= set(KUSTOMIZATIONS)


@pytest.mark.parametrize("version", SUPPORTED)
def test_every_rendered_resource_passes_the_schemas(rendered, version):
    checked = 0
    for name, resources in rendered.items():
        for resource in resources:
            try:
                kubernetes_validate.validate(resource, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                path = ".".join(map(str, exc.path))
                pytest.fail(f"{name}: {resource['kind']} fails Kubernetes {version}: "
                            f"{path}: {exc.message}")
            checked += 1
    assert checked >= 6 * len(KUSTOMIZATIONS)


def test_the_validator_catches_a_misspelt_field(rendered):
    deployment = copy.deepcopy(by_kind(rendered["base"])["Deployment"])
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, SUPPORTED[-1], strict=True)


def kustomize_command() -> list[str] | None:
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    return None


@pytest.mark.skipif(kustomize_command() is None, reason="neither kustomize nor kubectl installed")
@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_kustomize_builds_what_the_test_renderer_renders(rendered, name):
    out = subprocess.run([*kustomize_command(), str(KUBE / name)], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    built = [doc for doc in yaml.safe_load_all(out) if doc]

    def key(r):
        return r["kind"], r["metadata"]["name"]

    assert sorted(built, key=key) == sorted(rendered[name], key=key)


def dockerfile(name: str) -> str:
    return (ROOT / name).read_text()


def test_base_matches_the_image_and_the_service(rendered):
    kinds = by_kind(rendered["base"])
    config = kinds["ConfigMap"]["data"]
    # every key is a setting of the service and the values pass its validation
    fields = {f"NMT_{name.upper()}": name for name in Settings.model_fields}
    assert set(config) <= set(fields), set(config) - set(fields)
    settings = Settings(**{fields[k]: v for k, v in config.items()})
    assert not settings.is_loopback

    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    image = dockerfile("Dockerfile")
    assert re.search(rf"^EXPOSE {settings.port}$", image, re.M)
    assert [p["containerPort"] for p in container["ports"]] == [settings.port]
    uid, gid = re.search(r"^USER (\d+):(\d+)$", image, re.M).groups()
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (
        int(uid), int(gid))
    assert f"NMT_MODELS_DIR={settings.models_dir}" in image
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    # the root filesystem is read-only: the directory of translated files and document jobs
    # (the image's WORKDIR + the default files_dir) is a volume of its own
    workdir = re.findall(r"^WORKDIR (\S+)$", image, re.M)[-1]  # the runtime stage's
    files_dir = (Path(workdir) / settings.files_dir).parent
    assert re.search(rf"^RUN mkdir -p {files_dir} && chown {uid}:{gid} {files_dir}$", image,
                     re.M)
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert set(mounts) == {"/tmp", str(files_dir)}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert all("emptyDir" in volumes[name] for name in mounts.values())

    # probes on the service's real health routes
    from app.http.routes.health import router
    routes = {route.path for route in router.routes}
    assert container["livenessProbe"]["httpGet"]["path"] == "/health/live"
    assert container["readinessProbe"]["httpGet"]["path"] == "/health/ready"
    assert container["startupProbe"]["httpGet"]["path"] == "/health/ready"
    assert {"/health/live", "/health/ready"} <= routes

    # SIGKILL only after preStop + the service's own grace period
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    assert pod["terminationGracePeriodSeconds"] > float(pre_stop[1]) + settings.grace_period

    # settings from the rendered ConfigMap; API keys from a Secret that is never rendered (so
    # re-applying cannot reset it) and that the pod requires
    sources = {next(iter(e)): e[next(iter(e))] for e in container["envFrom"]}
    assert sources["configMapRef"]["name"] == kinds["ConfigMap"]["metadata"]["name"]
    assert sources["secretRef"] == {"name": "nmt-api-keys", "optional": False}
    assert "Secret" not in kinds
    # what selects the pods selects these labels
    labels = kinds["Deployment"]["spec"]["template"]["metadata"]["labels"]
    for selector in (kinds["Deployment"]["spec"]["selector"]["matchLabels"],
                     kinds["Service"]["spec"]["selector"],
                     kinds["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"],
                     kinds["NetworkPolicy"]["spec"]["podSelector"]["matchLabels"]):
        assert selector.items() <= labels.items()
    port_names = {p["name"] for p in container["ports"]}
    assert kinds["Service"]["spec"]["ports"][0]["targetPort"] in port_names
    assert {p["port"] for rule in kinds["NetworkPolicy"]["spec"]["ingress"]
            for p in rule["ports"]} <= port_names
    assert kinds["NetworkPolicy"]["spec"]["egress"] == []
    target = kinds["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]
    deployment_name = kinds["Deployment"]["metadata"]["name"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment_name)
    assert kinds["HorizontalPodAutoscaler"]["spec"]["minReplicas"] >= 2  # the PDB can act
    assert "replicas" not in kinds["Deployment"]["spec"]  # owned by the HPA


def test_cuda_overlay_runs_the_cuda_image_on_a_gpu(rendered):
    kinds = by_kind(rendered["overlays/cuda"])
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "nmt-service:cuda"
    assert "docker build -f Dockerfile.cuda -t nmt-service:cuda ." in dockerfile("Dockerfile.cuda")
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert pod["nodeSelector"] and pod["tolerations"]
    config = kinds["ConfigMap"]["data"]
    assert config["NMT_PROVIDER"] == "cuda"
    manifest = yaml.safe_load((ROOT / "bundles" / "en-de" / "manifest.json").read_text())
    assert "cuda" in manifest["variants"][config["NMT_VARIANT"]]["providers"]


def test_queue_depth_overlay_scales_on_a_metric_the_service_exports(rendered):
    hpa = by_kind(rendered["overlays/queue-depth"])["HorizontalPodAutoscaler"]
    pods = [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"]
    exported = {metric.name for metric in Metrics().registry.collect()}
    assert pods == ["nmt_queue_depth"]
    assert set(pods) <= exported
