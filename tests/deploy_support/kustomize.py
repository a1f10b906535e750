"""A small kustomize renderer supporting exactly what manifests/ uses.

`kubectl kustomize` is not available where the tests run, so this renders a kustomization the way
kustomize does for the subset of features our manifests rely on, and refuses anything else (an
unknown kustomization field is an error, never silently ignored):

- `resources`: YAML files (multi-document) and directories holding a kustomization.yaml, rendered
  recursively, in order;
- `patches`: entries with `path` only, each file a strategic-merge patch that names its target by
  apiVersion/kind/metadata.name (and namespace);
- `images`: `name` with `newName`, `newTag` and/or `digest`, applied to every container image whose
  name (without tag or digest) equals `name`.

Strategic merge follows the Kubernetes API's `patchMergeKey` markers for the lists we patch
(containers by name, env by name, volumeMounts by mountPath, ...); other lists are replaced, as
kustomize does for lists without a merge key.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

KUSTOMIZATION_FILE = "kustomization.yaml"
_SUPPORTED_FIELDS = {"apiVersion", "kind", "resources", "patches", "images"}

#: list field name -> merge key, from the Kubernetes API types' patchMergeKey markers
#: (k8s.io/api core/v1 types.go: PodSpec.Containers/InitContainers/Volumes/ImagePullSecrets by name,
#: Container.Env by name, Container.VolumeMounts by mountPath, Container.Ports by containerPort).
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "imagePullSecrets": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
}

#: kinds that never carry metadata.namespace
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "Namespace", "CustomResourceDefinition"}


class KustomizeError(ValueError):
    """A kustomization uses something this renderer does not support, or is inconsistent."""


def load_documents(path: Path) -> list[dict[str, Any]]:
    """All non-empty YAML documents of a file."""
    with path.open() as fh:
        return [doc for doc in yaml.safe_load_all(fh) if doc is not None]


def object_key(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    meta = obj.get("metadata") or {}
    return (obj.get("apiVersion", ""), obj.get("kind", ""), meta.get("namespace", ""), meta.get("name", ""))


def render(directory: Path) -> list[dict[str, Any]]:
    """Render the kustomization in `directory` into a list of objects."""
    kfile = directory / KUSTOMIZATION_FILE
    if not kfile.is_file():
        raise KustomizeError(f"{directory}: no {KUSTOMIZATION_FILE}")
    (spec,) = load_documents(kfile)
    unknown = set(spec) - _SUPPORTED_FIELDS
    if unknown:
        raise KustomizeError(f"{kfile}: unsupported fields {sorted(unknown)}")
    if spec.get("kind") != "Kustomization":
        raise KustomizeError(f"{kfile}: kind must be Kustomization")

    objects: list[dict[str, Any]] = []
    for entry in spec.get("resources") or []:
        target = (directory / entry).resolve()
        if target.is_dir():
            objects.extend(render(target))
        elif target.is_file():
            objects.extend(copy.deepcopy(load_documents(target)))
        else:
            raise KustomizeError(f"{kfile}: resource {entry!r} does not exist")
    _check_unique(objects, kfile)

    for patch_entry in spec.get("patches") or []:
        if set(patch_entry) != {"path"}:
            raise KustomizeError(f"{kfile}: only `patches: - path: FILE` is supported, got {patch_entry}")
        for patch in load_documents(directory / patch_entry["path"]):
            _apply_patch(objects, patch, kfile)

    for image in spec.get("images") or []:
        _apply_image(objects, image, kfile)
    return objects


def _check_unique(objects: list[dict[str, Any]], where: Path) -> None:
    seen: set[tuple[str, str, str, str]] = set()
    for obj in objects:
        key = object_key(obj)
        if key in seen:
            raise KustomizeError(f"{where}: duplicate object {key}")
        seen.add(key)


def _apply_patch(objects: list[dict[str, Any]], patch: dict[str, Any], where: Path) -> None:
    key = object_key(patch)
    matches = [i for i, obj in enumerate(objects) if object_key(obj) == key]
    if len(matches) != 1:
        raise KustomizeError(f"{where}: patch target {key} matched {len(matches)} objects")
    objects[matches[0]] = strategic_merge(objects[matches[0]], patch)


def strategic_merge(base: Any, patch: Any, field: str | None = None) -> Any:
    """Merge `patch` into a copy of `base` with strategic-merge-patch semantics (no directives)."""
    if isinstance(patch, dict):
        if any(k.startswith("$") for k in patch):
            raise KustomizeError(f"patch directives are not supported: {sorted(patch)}")
        if not isinstance(base, dict):
            return copy.deepcopy(patch)
        merged = copy.deepcopy(base)
        for k, v in patch.items():
            if v is None:
                merged.pop(k, None)
            else:
                merged[k] = strategic_merge(base.get(k), v, k)
        return merged
    if isinstance(patch, list) and field in MERGE_KEYS and isinstance(base, list):
        return _merge_list(base, patch, MERGE_KEYS[field], field)
    return copy.deepcopy(patch)


def _merge_list(base: list[Any], patch: list[Any], merge_key: str, field: str) -> list[Any]:
    merged = copy.deepcopy(base)
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise KustomizeError(f"patch item in {field!r} lacks merge key {merge_key!r}: {item}")
        for i, existing in enumerate(merged):
            if existing.get(merge_key) == item[merge_key]:
                merged[i] = strategic_merge(existing, item, None)
                break
        else:
            merged.append(copy.deepcopy(item))
    return merged


def _apply_image(objects: list[dict[str, Any]], image: dict[str, Any], where: Path) -> None:
    unknown = set(image) - {"name", "newName", "newTag", "digest"}
    if unknown or "name" not in image:
        raise KustomizeError(f"{where}: unsupported image entry {image}")
    for obj in objects:
        for container in pod_containers(obj):
            name, tag, digest = split_image(container["image"])
            if name != image["name"]:
                continue
            name = image.get("newName", name)
            if "digest" in image:
                container["image"] = f"{name}@{image['digest']}"
            else:
                new_tag = image.get("newTag", tag)
                suffix = f"@{digest}" if digest and "newTag" not in image else ""
                container["image"] = name + (f":{new_tag}" if new_tag else "") + suffix


def split_image(ref: str) -> tuple[str, str | None, str | None]:
    """`registry/name:tag@digest` -> (registry/name, tag, digest); a port in the registry is kept."""
    digest = None
    if "@" in ref:
        ref, digest = ref.split("@", 1)
    tag = None
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        ref, tag = ref.rsplit(":", 1)
    return ref, tag, digest


def pod_spec(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The pod spec inside a workload object, or None for non-workloads."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "Pod":
        return spec
    template = spec.get("template")
    if isinstance(template, dict):
        return template.get("spec")
    return None


def pod_containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod_spec(obj)
    if not spec:
        return []
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
