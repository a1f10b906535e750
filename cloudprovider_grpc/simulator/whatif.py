"""What-if edits on a scenario mapping, before it is validated: the same edits apply to a scenario
file and to one built from a cluster.

- `scale("deployment/web=2x")`: a workload's replicas (and every step of its schedule) times a
  factor, or set to a number (`=10`); the kind is optional and `ns/` may prefix it;
- `add_workloads(path)`: workloads from a YAML file, either Kubernetes manifests (Deployment,
  StatefulSet, ReplicaSet, Job, Pod) or scenario `workloads` entries;
- `drain_group("G")`: `kubectl drain` on every node of node group G at the start (cordon, evict);
- `set_value("autoscaler.scale-down-unneeded-time=5m")`: any scenario key by its dotted path
  (list items by index), the value read as YAML.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from cloudprovider_grpc.simulator.scenario import ScenarioError

_KINDS = {
    "deployment": "Deployment",
    "deploy": "Deployment",
    "statefulset": "Deployment",
    "sts": "Deployment",
    "replicaset": "Deployment",
    "rs": "Deployment",
    "job": "Job",
    "pod": "Pod",
    "po": "Pod",
}


def scale(data: dict[str, Any], spec: str) -> None:
    m = re.fullmatch(r"(?:([a-z0-9-]+)/)??(?:([a-z]+)/)?([a-z0-9.-]+)=(\d+(?:\.\d+)?)(x?)", spec.strip())
    if not m:
        raise ScenarioError(f"--scale {spec!r}: expected [NAMESPACE/][KIND/]NAME=FACTORx or =REPLICAS")
    ns, kind, name, number, times = m.groups()
    if ns and not kind:
        ns, kind = None, ns
    want_kind = _KINDS.get(kind) if kind else None
    if kind and want_kind is None:
        raise ScenarioError(f"--scale {spec!r}: unknown kind {kind!r} (deployment, statefulset, job, pod)")
    hits = [
        w
        for w in data.get("workloads") or []
        if w.get("name") in (name, re.sub(r"[^a-z0-9-]+", "-", name))
        and (want_kind is None or w.get("kind", "Deployment") == want_kind)
        and (ns is None or w.get("namespace", "default") == ns)
    ]
    if not hits:
        known = ", ".join(sorted(str(w.get("name")) for w in data.get("workloads") or [])) or "none"
        raise ScenarioError(f"--scale {spec!r}: no such workload (workloads: {known})")
    value = float(number)
    for w in hits:

        def new(n: int) -> int:
            return round(n * value) if times else int(value)

        w["replicas"] = new(int(w.get("replicas", 1)))
        for step in w.get("schedule") or []:
            step["replicas"] = new(int(step["replicas"]))


def add_workloads(data: dict[str, Any], path: str | Path) -> None:
    from cloudprovider_grpc.simulator.snapshot import workload_from_manifest

    p = Path(path)
    try:
        docs = [d for d in yaml.safe_load_all(p.read_text(encoding="utf-8")) if d is not None]
    except (OSError, yaml.YAMLError) as exc:
        raise ScenarioError(f"--add-workload {p}: cannot read: {exc}") from None
    items: list[Any] = []
    for d in docs:
        if isinstance(d, dict) and d.get("kind") == "List":
            items.extend(d.get("items") or [])
        elif isinstance(d, dict) and "workloads" in d:
            items.extend(d["workloads"] or [])
        elif isinstance(d, list):
            items.extend(d)
        else:
            items.append(d)
    added = data.setdefault("workloads", [])
    for item in items:
        if not isinstance(item, dict):
            raise ScenarioError(f"--add-workload {p}: expected manifests or workload mappings")
        added.append(workload_from_manifest(item, str(p)) if "apiVersion" in item else item)


def drain_group(data: dict[str, Any], group: str) -> None:
    data.setdefault("node_events", []).append({"at": 0, "group": group, "drain": True})


def set_value(data: dict[str, Any], spec: str) -> None:
    path, eq, text = spec.partition("=")
    if not eq or not path:
        raise ScenarioError(f"--set {spec!r}: expected KEY.PATH=VALUE")
    value = yaml.safe_load(text) if text else ""
    keys = path.split(".")
    node: Any = data
    for k in keys[:-1]:
        node = node[_index(node, k, spec)] if isinstance(node, list) else node.setdefault(k, {})
    last = keys[-1]
    if isinstance(node, list):
        node[_index(node, last, spec)] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise ScenarioError(f"--set {spec!r}: {'.'.join(keys[:-1])} is not a mapping")


def _index(items: list[Any], key: str, spec: str) -> int:
    if not key.isdigit() or int(key) >= len(items):
        raise ScenarioError(f"--set {spec!r}: {key!r} is not an index of a list of {len(items)}")
    return int(key)


def apply(
    data: dict[str, Any],
    *,
    scales: Sequence[str] = (),
    add: Sequence[str] = (),
    drain: Sequence[str] = (),
    sets: Sequence[str] = (),
) -> dict[str, Any]:
    """All edits, in a fixed order (added workloads can be scaled; `--set` last, so it wins)."""
    for path in add:
        add_workloads(data, path)
    for spec in scales:
        scale(data, spec)
    for g in drain:
        drain_group(data, g)
    for spec in sets:
        set_value(data, spec)
    return data
