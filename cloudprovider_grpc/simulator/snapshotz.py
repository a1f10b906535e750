"""`simulate --from-snapshotz FILE`: cluster-autoscaler's own debugging snapshot as a start.

CA started with `--debugging-snapshot-enabled` serves, at `/snapshotz` on its metrics port, the
cluster as one of its loops saw it (debuggingsnapshot/debugging_snapshot.go at
cluster-autoscaler-1.36.1, `DebuggingSnapshotImpl`, lines 61-69)::

    {"NodeList": [{"Node": {...v1.Node}, "Pods": [{...v1.Pod}, ...]}, ...],
     "UnscheduledPodsCanBeScheduled": [{...v1.Pod}, ...],
     "TemplateNodes": {"GROUP": {"Node": {...}, "Pods": [...]}, ...},
     "StartTimestamp": "...", "EndTimestamp": "...", "Error": "..."}

The objects are Go's JSON of the API types, without `kind`/`apiVersion`. They become the same
object list `--from-dump` reads: each node, each pod (bound to the node that lists it), the pods
CA held unscheduled as pending pods, and one DaemonSet per DaemonSet whose pods the nodes run (the
snapshot holds pods, not controllers). Node groups come from `--provider` or `--server`, as with
a dump; CA's template nodes name the groups it knew, and a group the backend lacks is noted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cloudprovider_grpc.simulator.cluster_objects import SnapshotError, meta_of


def _typed(obj: Any, kind: str) -> dict[str, Any] | None:
    if not isinstance(obj, dict):
        return None
    return {**obj, "apiVersion": "v1", "kind": kind}


def _daemonset(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The DaemonSet a pod belongs to, rebuilt from the pod (its template is the pod's spec)."""
    meta = meta_of(pod)
    ref = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
    if ref is None or ref.get("kind") != "DaemonSet":
        return None
    spec = {k: v for k, v in (pod.get("spec") or {}).items() if k != "nodeName"}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": ref.get("name"), "namespace": meta.get("namespace") or "default"},
        "spec": {"template": {"metadata": {"labels": dict(meta.get("labels") or {})}, "spec": spec}},
    }


def load_snapshotz(path: Path) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """The snapshot's objects (as `load_dump` gives them), notes, and its template groups."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SnapshotError(f"{path}: cannot read: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise SnapshotError(f"{path}: not JSON: {exc.msg} (line {exc.lineno})") from None
    if not isinstance(data, dict) or not isinstance(data.get("NodeList", []), list):
        raise SnapshotError(f"{path}: not cluster-autoscaler's debugging snapshot (no NodeList)")
    notes: list[str] = []
    if data.get("Error"):
        notes.append(f"the debugging snapshot reports an error: {data['Error']}")
    objects: list[dict[str, Any]] = []
    daemonsets: dict[tuple[str, str], dict[str, Any]] = {}
    for entry in data.get("NodeList") or []:
        node = _typed((entry or {}).get("Node"), "Node")
        if node is None:
            continue
        objects.append(node)
        name = meta_of(node).get("name")
        for raw in entry.get("Pods") or []:
            pod = _typed(raw, "Pod")
            if pod is None:
                continue
            pod["spec"] = {**(pod.get("spec") or {}), "nodeName": name}
            ds = _daemonset(pod)
            if ds is not None:
                daemonsets.setdefault((ds["metadata"]["namespace"], ds["metadata"]["name"]), ds)
            objects.append(pod)
    pending = 0
    for raw in data.get("UnscheduledPodsCanBeScheduled") or []:
        pod = _typed(raw, "Pod")
        if pod is not None:
            pod["spec"] = {k: v for k, v in (pod.get("spec") or {}).items() if k != "nodeName"}
            objects.append(pod)
            pending += 1
    objects.extend(daemonsets[k] for k in sorted(daemonsets))
    if pending:
        notes.append(f"{pending} pod(s) CA held unscheduled in the snapshot start pending")
    templates = sorted(str(g) for g in (data.get("TemplateNodes") or {}))
    return objects, notes, templates
