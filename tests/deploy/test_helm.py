"""deploy/helm/nmt-service: the chart's files agree with each other and with the service (always),
and Helm's own engine renders it to the kustomize manifests, the overlays and deploy/monitoring,
passing the Kubernetes schemas (where helm-python-sdk, Helm's Go SDK for Python, installs)."""

from __future__ import annotations

import copy
import json
import re
import tomllib

import jsonschema
import pytest
import yaml

from app.config import Settings
from tests.deploy import helm
from tests.deploy.kustomize import render as kustomize
from tests.deploy.test_kubernetes import KUBE, SUPPORTED

MONITORING = helm.ROOT / "deploy" / "monitoring"
SCHEMA = json.loads((helm.CHART / "values.schema.json").read_text())
MONITORING_ON = {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}


# ---------------------------------------------------------------- the chart's files, no helm


def test_chart_metadata_names_this_service_and_its_kubernetes_versions():
    chart = yaml.safe_load((helm.CHART / "Chart.yaml").read_text())
    project = tomllib.loads((helm.ROOT / "pyproject.toml").read_text())["project"]
    assert chart["apiVersion"] == "v2" and chart["type"] == "application"
    assert chart["name"] == helm.CHART.name == project["name"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", chart["version"])
    assert chart["appVersion"] == project["version"]
    # the oldest Kubernetes the manifests are validated against, and no newer floor
    assert chart["kubeVersion"] == f">={SUPPORTED[0]}.0-0"


@pytest.mark.parametrize("files", [(), ("values-cuda.yaml",)])
def test_values_files_pass_the_charts_schema(files):
    jsonschema.validate(helm.values(*files), SCHEMA)


def test_the_schema_refuses_a_misspelt_setting_and_an_unquoted_one():
    for wrong in ({"settings": {"NMT_QUEUE_SIZ": "5"}}, {"settings": {"NMT_QUEUE_SIZE": 5}},
                  {"imag": {"tag": "x"}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(helm.merge(helm.values(), wrong), SCHEMA)


def test_the_schema_knows_every_setting_of_the_service_but_the_api_keys():
    allowed = set(SCHEMA["properties"]["settings"]["propertyNames"]["enum"])
    settings = {f"NMT_{name.upper()}" for name in Settings.model_fields}
    # NMT_API_KEYS comes from the Secret, never from the chart's ConfigMap
    assert allowed == settings - {"NMT_API_KEYS"}


@pytest.mark.parametrize("files", [(), ("values-cuda.yaml",)])
def test_settings_in_the_values_are_valid_settings_of_the_service(files):
    config = helm.values(*files)["settings"]
    fields = {f"NMT_{name.upper()}": name for name in Settings.model_fields}
    settings = Settings(**{fields[key]: value for key, value in config.items()})
    assert not settings.is_loopback
    assert config == kustomize_config(files)


def kustomize_config(files: tuple[str, ...]) -> dict[str, str]:
    name = "overlays/cuda" if files else "base"
    (config,) = [r for r in kustomize(KUBE / name) if r["kind"] == "ConfigMap"]
    return config["data"]


def test_every_value_the_templates_read_exists_and_every_value_is_read():
    defaults = helm.values()
    referenced = helm.referenced_values()
    for path in referenced:
        node = defaults
        for key in path:
            assert isinstance(node, dict) and key in node, f".Values.{'.'.join(path)} is unset"
            node = node[key]
    unused = {path for path in helm.leaf_paths(defaults)
              if not any(path[:len(ref)] == ref for ref in referenced)}
    assert not unused, f"values no template reads: {sorted(unused)}"
    assert len(referenced) >= 30


def test_the_reference_check_catches_a_misspelt_value(tmp_path, monkeypatch):
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "x.yaml").write_text("a: {{ .Values.image.tagg }}\n"
                                      "{{- $r := .Values.prometheusRule }}{{ $r.enabld }}")
    monkeypatch.setattr(helm, "CHART", tmp_path)
    assert helm.referenced_values() == {("image", "tagg"), ("prometheusRule",),
                                        ("prometheusRule", "enabld")}


# ------------------------------------------------------------- rendered by Helm's engine


@pytest.fixture(scope="module")
def helm_python():
    return pytest.importorskip("helm_python", reason="helm-python-sdk (the dev extra) is not "
                               "installed: the chart is checked as files only")


def test_helm_lint_finds_nothing_worse_than_advice(helm_python):
    for values in ({}, helm.values("values-cuda.yaml"), MONITORING_ON):
        report = helm_python.lint(str(helm.CHART), values, strict=True)
        assert report["errors"] == [], report
        worse = [m for m in report["messages"] if m["severity"] >= 2]
        assert not worse, worse


@pytest.mark.parametrize(("files", "overrides", "kustomization"), [
    ((), {}, "base"),
    (("values-cuda.yaml",), {}, "overlays/cuda"),
    ((), {"autoscaling": {"queueDepth": {"enabled": True}}}, "overlays/queue-depth"),
])
def test_the_chart_renders_what_kustomize_renders(helm_python, files, overrides,
                                                  kustomization):
    values = helm.merge(helm.values(*files), overrides)
    rendered = helm.as_kustomize(helm.render(values), config_name="nmt-config")
    expected = kustomize(KUBE / kustomization)
    assert helm.by_identity(rendered).keys() == helm.by_identity(expected).keys()
    for key, resource in helm.by_identity(expected).items():
        assert helm.by_identity(rendered)[key] == resource, key


def test_the_comparison_sees_a_changed_field(helm_python):
    """as_kustomize drops only what the chart adds: a changed resource limit still differs."""
    values = helm.merge(helm.values(), {"resources": {"limits": {"cpu": "3"}}})
    rendered = helm.by_identity(helm.as_kustomize(helm.render(values), "nmt-config"))
    expected = helm.by_identity(kustomize(KUBE / "base"))
    assert rendered[("Deployment", "nmt-service")] != expected[("Deployment", "nmt-service")]


def test_monitoring_toggles_render_deploy_monitoring(helm_python):
    rendered = helm.by_identity(helm.as_kustomize(helm.render(MONITORING_ON), "nmt-config"))
    for resource in kustomize(MONITORING):
        assert rendered[(resource["kind"], resource["metadata"]["name"])] == resource
    default_kinds = {kind for kind, _ in helm.by_identity(helm.render())}
    assert not default_kinds & {"ServiceMonitor", "PrometheusRule"}  # opt-in: CRDs needed


def test_the_queue_alert_follows_the_queue_size(helm_python):
    values = helm.merge(MONITORING_ON, {"settings": {"NMT_QUEUE_SIZE": "200"},
                                        "prometheusRule": {"queueSaturatedPercent": 90}})
    (rule,) = [r for r in helm.render(values) if r["kind"] == "PrometheusRule"]
    (alert,) = [a for a in rule["spec"]["groups"][0]["rules"]
                if a["alert"] == "NmtQueueSaturated"]
    assert alert["expr"].endswith("> 180")


@pytest.mark.parametrize("version", [SUPPORTED[0], SUPPORTED[-1]])
def test_rendered_resources_pass_the_kubernetes_schemas(helm_python, version):
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    variants = [{}, helm.values("values-cuda.yaml"), {"autoscaling": {"enabled": False}},
                {"image": {"digest": "sha256:" + "0" * 64}}]
    checked = 0
    for values in variants:
        for resource in helm.render(values):
            kubernetes_validate.validate(resource, version, strict=True)
            checked += 1
    assert checked >= 6 * len(variants) - 1  # no HPA without autoscaling


def test_another_release_gets_its_own_names_and_selects_only_its_pods(helm_python):
    resources = helm.by_identity(helm.render(MONITORING_ON, name="translate"))
    name = "translate-nmt-service"
    assert {n for _, n in resources} == {name, f"{name}-config"}
    deployment = resources[("Deployment", name)]
    pod = deployment["spec"]["template"]
    assert pod["metadata"]["labels"]["app.kubernetes.io/instance"] == "translate"
    service = resources[("Service", name)]
    for selector in (deployment["spec"]["selector"]["matchLabels"], service["spec"]["selector"],
                     resources[("PodDisruptionBudget", name)]["spec"]["selector"]["matchLabels"],
                     resources[("NetworkPolicy", name)]["spec"]["podSelector"]["matchLabels"]):
        assert selector["app.kubernetes.io/instance"] == "translate"
        assert selector.items() <= pod["metadata"]["labels"].items()
    (container,) = pod["spec"]["containers"]
    assert container["envFrom"][0]["configMapRef"]["name"] == f"{name}-config"
    assert resources[("HorizontalPodAutoscaler", name)]["spec"]["scaleTargetRef"]["name"] == name
    monitor = resources[("ServiceMonitor", name)]["spec"]
    assert monitor["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    # the alerts select the job Prometheus gives this Service's targets: its name
    rules = resources[("PrometheusRule", name)]["spec"]["groups"][0]["rules"]
    assert all(f'job="{name}"' in rule["expr"] for rule in rules)


def test_without_the_autoscaler_the_deployment_owns_the_replica_count(helm_python):
    resources = helm.render({"autoscaling": {"enabled": False}, "replicaCount": 3})
    kinds = {r["kind"]: r for r in resources}
    assert "HorizontalPodAutoscaler" not in kinds
    assert kinds["Deployment"]["spec"]["replicas"] == 3


def test_a_settings_change_rolls_the_pods(helm_python):
    def checksum(values):
        (deployment,) = [r for r in helm.render(values) if r["kind"] == "Deployment"]
        return deployment["spec"]["template"]["metadata"]["annotations"][helm.CHECKSUM]

    changed = copy.deepcopy({"settings": {"NMT_QUEUE_SIZE": "2048"}})
    assert checksum({}) != checksum(changed)
    assert checksum({}) == checksum({})


def test_helm_refuses_values_the_schema_refuses(helm_python):
    for wrong in ({"settings": {"NMT_QUEUE_SIZ": "5"}}, {"settings": {"NMT_PORT": 8000}}):
        with pytest.raises(helm_python.HelmError, match="schema"):
            helm.render(wrong)
