"""The Helm chart in deploy/helm/nmt-service: rendered by Helm's own engine where it installs
(helm-python-sdk, Helm's Go SDK behind a C ABI), and read as plain files where it does not.

`as_kustomize` undoes what the chart adds on purpose to the kustomize base's resources (Helm's
standard labels, the release label in selectors, the ConfigMap's checksum on the pod template,
the ConfigMap's release-derived name), so that what remains must be equal, field for field.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "nmt-service"
# labels the chart puts beside the base's app.kubernetes.io/name and component
HELM_LABELS = {"app.kubernetes.io/instance", "app.kubernetes.io/version",
               "app.kubernetes.io/managed-by", "helm.sh/chart"}
CHECKSUM = "checksum/config"


def render(values: dict[str, Any] | None = None, name: str = "nmt-service",
           namespace: str = "default") -> list[dict[str, Any]]:
    """The chart's resources as `helm template` renders them (NOTES.txt left out)."""
    import helm_python as helm

    with helm.Chart.load(str(CHART)) as chart:
        manifests = chart.render(values or {}, name=name, namespace=namespace)
    return [doc for path, text in sorted(manifests.items()) if path.endswith(".yaml")
            for doc in yaml.safe_load_all(text) if doc]


def values(*files: str) -> dict[str, Any]:
    """values.yaml, then each of `files` over it (maps merged deeply, as helm -f does)."""
    merged = yaml.safe_load((CHART / "values.yaml").read_text())
    for name in files:
        merged = merge(merged, yaml.safe_load((CHART / name).read_text()))
    return merged


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def as_kustomize(resources: list[dict[str, Any]], config_name: str) -> list[dict[str, Any]]:
    """The chart's resources less what it adds on purpose (see the module docstring), with the
    ConfigMap named `config_name` as in the base."""
    out = []
    for resource in copy.deepcopy(resources):
        _drop_helm_labels(resource)
        template = resource.get("spec", {}).get("template", {}).get("metadata", {})
        template.get("annotations", {}).pop(CHECKSUM, None)
        if resource["kind"] == "ConfigMap":
            resource["metadata"]["name"] = config_name
        for container in resource.get("spec", {}).get("template", {}).get("spec", {}).get(
                "containers", []):
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    source["configMapRef"]["name"] = config_name
        out.append(resource)
    return out


def _drop_helm_labels(node: Any) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("labels", "matchLabels", "selector") and isinstance(value, dict):
                for label in HELM_LABELS:
                    value.pop(label, None)
            _drop_helm_labels(value)
    elif isinstance(node, list):
        for item in node:
            _drop_helm_labels(item)


def by_identity(resources: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["kind"], r["metadata"]["name"]): r for r in resources}


VALUES_REFERENCE = re.compile(r"\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)")
ALIAS = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)\s*:=\s*\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)")


def referenced_values() -> set[tuple[str, ...]]:
    """Every values path the templates read: `.Values.a.b`, and `$x.c` where `$x := .Values.a`."""
    paths: set[tuple[str, ...]] = set()
    for template in (CHART / "templates").iterdir():
        text = template.read_text()
        paths |= {tuple(m.group(1)[1:].split(".")) for m in VALUES_REFERENCE.finditer(text)}
        for alias, target in ALIAS.findall(text):
            prefix = tuple(target[1:].split("."))
            for m in re.finditer(rf"\${alias}((?:\.[A-Za-z_][A-Za-z0-9_]*)+)", text):
                paths.add(prefix + tuple(m.group(1)[1:].split(".")))
    return paths


def leaf_paths(node: Any, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """The paths of a values tree's leaves (an empty map or a list is a leaf)."""
    if isinstance(node, dict) and node:
        return {path for key, value in node.items() for path in leaf_paths(value, (*prefix, key))}
    return {prefix}
