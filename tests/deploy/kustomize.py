"""Render a kustomization without a kustomize binary, for the features deploy/kubernetes/ uses.

Supported: `resources` (YAML files and directories holding a kustomization.yaml, in order),
`images` (name -> newName / newTag / digest on every container and init container image) and
`patches` given as a `path` to an RFC 6902 JSON patch (a YAML list of add / replace / remove
operations) with a `target` kind and name. Any other field of a kustomization is refused, so a
manifest change that needs more of kustomize fails here instead of rendering wrongly. Where
kustomize is installed, tests/deploy/test_kubernetes.py checks that both render the same.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

KNOWN_FIELDS = {"apiVersion", "kind", "resources", "images", "patches"}


def render(directory: Path) -> list[dict[str, Any]]:
    """The resources a kustomization directory builds to, in the order of its `resources`."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(kustomization) - KNOWN_FIELDS
    if unknown:
        raise ValueError(f"{directory}/kustomization.yaml: unsupported fields {sorted(unknown)}")
    resources: list[dict[str, Any]] = []
    for entry in kustomization.get("resources", []):
        path = (directory / entry).resolve()
        if path.is_dir():
            resources += render(path)
        else:
            resources += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    for image in kustomization.get("images", []):
        for resource in resources:
            set_image(resource, image)
    for patch in kustomization.get("patches", []):
        if set(patch) != {"path", "target"} or set(patch["target"]) != {"kind", "name"}:
            raise ValueError(f"{directory}: only path + target(kind, name) patches: {patch}")
        operations = yaml.safe_load((directory / patch["path"]).read_text())
        targets = [r for r in resources if r["kind"] == patch["target"]["kind"]
                   and r["metadata"]["name"] == patch["target"]["name"]]
        if not targets:
            raise ValueError(f"{directory}: patch {patch['path']} matches no resource")
        for resource in targets:
            for operation in operations:
                apply_operation(resource, operation)
    return resources


def set_image(resource: dict[str, Any], image: dict[str, str]) -> None:
    spec = resource.get("spec", {}).get("template", {}).get("spec", {})
    for container in spec.get("containers", []) + spec.get("initContainers", []):
        name, tag, digest = split_image(container["image"])
        if name != image["name"]:
            continue
        name = image.get("newName", name)
        if "digest" in image:
            container["image"] = f"{name}@{image['digest']}"
        else:
            tag = image.get("newTag", tag)
            container["image"] = name + (f":{tag}" if tag else f"@{digest}" if digest else "")


def split_image(image: str) -> tuple[str, str | None, str | None]:
    """name, tag, digest of `name[:tag][@digest]` (a registry port's colon is not a tag)."""
    image, _, digest = image.partition("@")
    name, tag = image, None
    if ":" in image.rsplit("/", 1)[-1]:
        name, tag = image.rsplit(":", 1)
    return name, tag, digest or None


def apply_operation(document: dict[str, Any], operation: dict[str, Any]) -> None:
    """One RFC 6902 add / replace / remove, in place."""
    op, keys = operation["op"], pointer(operation["path"])
    parent = document
    for key in keys[:-1]:
        parent = parent[int(key)] if isinstance(parent, list) else parent[key]
    last = keys[-1]
    if op == "remove":
        del parent[int(last) if isinstance(parent, list) else last]
        return
    if op not in ("add", "replace"):
        raise ValueError(f"unsupported JSON patch operation {op!r}")
    value = copy.deepcopy(operation["value"])
    if isinstance(parent, list):
        if op == "add":
            parent.insert(len(parent) if last == "-" else int(last), value)
        else:
            parent[int(last)] = value
    else:
        if op == "replace" and last not in parent:
            raise KeyError(f"replace: {operation['path']} does not exist")
        parent[last] = value


def pointer(path: str) -> list[str]:
    """The reference tokens of a JSON pointer (RFC 6901: ~1 is '/', ~0 is '~')."""
    if not path.startswith("/"):
        raise ValueError(f"a JSON pointer starts with '/': {path!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]
