"""Kubernetes objects (as the API serializes them) into scenario pieces: a pod template into a
workload's fields, live pods into one workload per controller, DaemonSets, PodDisruptionBudgets,
PriorityClasses, the priority expander's ConfigMap, nodes in no group, CA's own pod.

Every converter appends what it cannot model to a shared list of notes instead of dropping it.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from cloudprovider_grpc.k8s.quantity import parse_quantity
from cloudprovider_grpc.simulator.model import PODS
from cloudprovider_grpc.simulator.scenario import ScenarioError

PRIORITY_CONFIGMAP = "cluster-autoscaler-priority-expander"
DEFAULT_SCHEDULER = "default-scheduler"
SYSTEM_PRIORITIES = {"system-cluster-critical": 2000000000, "system-node-critical": 2000001000}
_GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")


class SnapshotError(ScenarioError):
    """A dump or cluster that cannot be read; the message says what and where."""


def meta_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    m = obj.get("metadata")
    if type(m) is dict:  # what JSON parses to: no abstract-class check for each of 100,000 pods
        return m
    return m if isinstance(m, Mapping) else {}


def label_name(text: str) -> str:
    """A workload/static node name the scenario accepts (a DNS label)."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return name[:63].strip("-") or "x"


def _requests(container: Mapping[str, Any]) -> dict[str, str]:
    res = container.get("resources") or {}
    req = dict(res.get("requests") or {})
    for k, v in (res.get("limits") or {}).items():  # a limit without a request is the request
        req.setdefault(k, v)
    return {str(k): str(v) for k, v in sorted(req.items())}


def _matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool | None:
    """A label selector against labels; None when it uses what the simulator cannot evaluate."""
    if selector is None:
        return False
    if selector.get("matchExpressions"):
        return None
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def _tolerations(items: Iterable[Mapping[str, Any]], notes: list[str], where: str) -> list[dict[str, str]]:
    out = []
    for t in items:
        if (t.get("operator") or "Equal") not in ("Equal", "Exists") or (t.get("effect") or "") not in (
            "",
            "NoSchedule",
            "PreferNoSchedule",
            "NoExecute",
        ):
            notes.append(f"not modelled: {where} toleration {dict(t)} (ignored)")
            continue
        entry = {
            "key": t.get("key") or "",
            "operator": t.get("operator") or "Equal",
            "value": t.get("value") or "",
            "effect": t.get("effect") or "",
        }
        out.append({k: v for k, v in entry.items() if v and not (k == "operator" and v == "Equal")})
    return out


def _quantity_count(value: Any, total: int) -> int:
    """An intstr of a PDB: an int, or a percentage of `total` rounded up (as the disruption
    controller does for minAvailable and maxUnavailable)."""
    if isinstance(value, int):
        return value
    text = str(value)
    if text.endswith("%"):
        return math.ceil(int(text[:-1]) * total / 100)
    return int(text)


# ---------------------------------------------------------------------------- the converter
class ObjectConverter:
    def __init__(self, objects: list[dict[str, Any]], notes: list[str]) -> None:
        self.notes = notes
        self.by_kind: dict[str, list[dict[str, Any]]] = {}
        for o in objects:
            self.by_kind.setdefault(str(o.get("kind", "")), []).append(o)
        self.priority_classes = dict(SYSTEM_PRIORITIES)
        for pc in self.by_kind.get("PriorityClass", []):
            self.priority_classes[str(meta_of(pc).get("name"))] = int(pc.get("value", 0))
        self._counted: Counter[str] = Counter()

    def note_once(self, key: str, text: str) -> None:
        self._counted[key] += 1
        if self._counted[key] == 1:
            self.notes.append(text)

    def kinds(self, kind: str) -> list[dict[str, Any]]:
        return self.by_kind.get(kind, [])

    # ---- pods -> workloads
    def pod_spec_workload(
        self, spec: Mapping[str, Any], meta: Mapping[str, Any], where: str
    ) -> dict[str, Any]:
        """The scenario fields of one pod template (everything but name, kind and replicas)."""
        w: dict[str, Any] = {"namespace": meta.get("namespace") or "default"}
        containers = [c for c in spec.get("containers") or [] if isinstance(c, Mapping)]
        w["containers"] = [
            {"name": label_name(c.get("name", "main")), "requests": _requests(c)} for c in containers
        ]
        inits = [c for c in spec.get("initContainers") or [] if isinstance(c, Mapping)]
        if inits:
            w["init_containers"] = [
                {"name": label_name(c.get("name", "init")), "requests": _requests(c)} for c in inits
            ]
        if spec.get("nodeSelector"):
            w["node_selector"] = dict(spec["nodeSelector"])
        tol = _tolerations(spec.get("tolerations") or [], self.notes, where)
        if tol:
            w["tolerations"] = tol
        prio = spec.get("priority")
        if prio is None and spec.get("priorityClassName"):
            prio = self.priority_classes.get(spec["priorityClassName"])
            if prio is None:
                self.note_once(
                    f"pc:{spec['priorityClassName']}",
                    f"{where}: PriorityClass {spec['priorityClassName']!r} not found; priority 0 used",
                )
        if prio:
            w["priority"] = int(prio)
        ann = {
            k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith("cluster-autoscaler.")
        }
        if ann:
            w["annotations"] = ann
        labels = {k: v for k, v in (meta.get("labels") or {}).items() if k != "pod-template-hash"}
        if labels:  # without labels the scenario's default ({app: <name>}) applies
            w["labels"] = labels
        volumes = [v for v in spec.get("volumes") or [] if isinstance(v, Mapping)]
        if any("emptyDir" in v and (v["emptyDir"] or {}).get("medium") != "Memory" for v in volumes):
            w["local_storage"] = True
        if any("hostPath" in v for v in volumes):
            w["local_storage"] = True
        claims = [v for v in volumes if "persistentVolumeClaim" in v or "ephemeral" in v]
        if claims:
            self.notes.append(
                f"not modelled: {where} mounts {len(claims)} persistent volume(s); CA checks volume "
                "topology and attach limits for them, the simulator does not"
            )
        scheduler = spec.get("schedulerName") or DEFAULT_SCHEDULER
        if scheduler != DEFAULT_SCHEDULER:
            self.notes.append(
                f"not modelled: {where} is placed by scheduler {scheduler!r}; "
                "the simulator schedules it like kube-scheduler"
            )
        ports = sorted({p["hostPort"] for c in containers for p in c.get("ports") or [] if p.get("hostPort")})
        if ports:
            w["host_ports"] = ports
        self._affinity(spec.get("affinity") or {}, w, where)
        spread = []
        for c in spec.get("topologySpreadConstraints") or []:
            sel = c.get("labelSelector") or {}
            if sel.get("matchExpressions"):
                self.notes.append(f"not modelled: {where} spread constraint with matchExpressions (ignored)")
                continue
            entry: dict[str, Any] = {
                "max_skew": int(c.get("maxSkew", 1)),
                "topology_key": c.get("topologyKey"),
            }
            if c.get("whenUnsatisfiable") == "ScheduleAnyway":
                entry["when_unsatisfiable"] = "ScheduleAnyway"
            if sel.get("matchLabels"):
                entry["label_selector"] = dict(sel["matchLabels"])
            if c.get("minDomains"):
                entry["min_domains"] = int(c["minDomains"])
            spread.append(entry)
        if spread:
            w["topology_spread"] = spread
        return w

    def _affinity(self, aff: Mapping[str, Any], w: dict[str, Any], where: str) -> None:
        node = (aff.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}
        terms = node.get("nodeSelectorTerms") or []
        if terms:
            if len(terms) > 1:
                self.notes.append(
                    f"not modelled: {where} has {len(terms)} OR-ed node selector terms; the first is used"
                )
            reqs = []
            for e in terms[0].get("matchExpressions") or []:
                if e.get("operator") in ("In", "NotIn", "Exists", "DoesNotExist"):
                    reqs.append(
                        {"key": e["key"], "operator": e["operator"], "values": list(e.get("values") or [])}
                    )
                else:
                    self.notes.append(
                        f"not modelled: {where} node affinity operator {e.get('operator')!r} (ignored)"
                    )
            if terms[0].get("matchFields"):
                self.notes.append(f"not modelled: {where} node affinity matchFields (ignored)")
            if reqs:
                w["node_affinity"] = reqs
        for src, dst in (("podAffinity", "pod_affinity"), ("podAntiAffinity", "pod_anti_affinity")):
            out = []
            for t in (aff.get(src) or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or []:
                sel = t.get("labelSelector") or {}
                if sel.get("matchExpressions") or not sel.get("matchLabels") or t.get("namespaces"):
                    self.notes.append(
                        f"not modelled: {where} {src} term beyond matchLabels in its own namespace (ignored)"
                    )
                    continue
                out.append({"label_selector": dict(sel["matchLabels"]), "topology_key": t.get("topologyKey")})
            if out:
                w[dst] = out

    def workloads(self) -> list[dict[str, Any]]:
        """One workload per controller, counting its live pods."""
        owners: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        skipped = Counter[str]()
        for pod in self.kinds("Pod"):
            meta, status = meta_of(pod), pod.get("status") or {}
            if status.get("phase") in ("Succeeded", "Failed") or meta.get("deletionTimestamp"):
                continue
            refs = [r for r in meta.get("ownerReferences") or [] if r.get("controller")]
            ref = refs[0] if refs else None
            kind, name = (
                ("Pod", meta.get("name", "pod")) if ref is None else (ref.get("kind"), ref.get("name"))
            )
            if kind == "DaemonSet":
                continue
            if kind == "Node":  # a static pod's mirror
                skipped["static pod (its requests are not counted)"] += 1
                continue
            if kind == "ReplicaSet":
                hash_ = (meta.get("labels") or {}).get("pod-template-hash")
                kind = "Deployment"
                if hash_ and name.endswith(f"-{hash_}"):
                    name = name[: -len(hash_) - 1]
            owners.setdefault((str(kind), str(meta.get("namespace") or "default"), str(name)), []).append(pod)
        for what, n in sorted(skipped.items()):
            self.notes.append(f"not modelled: {n} {what}")
        out: list[dict[str, Any]] = []
        used: set[str] = set()
        pdbs = self.kinds("PodDisruptionBudget")
        for (kind, ns, name), pods in sorted(owners.items()):
            where = f"{kind.lower()}/{name} in {ns}"
            first = pods[0]
            w = self.pod_spec_workload(first.get("spec") or {}, meta_of(first), where)
            scenario_kind = {"Job": "Job", "Pod": "Pod"}.get(kind, "Deployment")
            if scenario_kind == "Job":
                self.notes.append(
                    f"{where}: its {len(pods)} pods run to the end of the simulation "
                    "(a cluster does not say when they finish; set the workload's run_time)"
                )
            if kind not in ("Deployment", "Job", "Pod"):
                self.note_once(
                    f"kind:{kind}", f"{kind} pods are modelled as a Deployment's (recreated elsewhere)"
                )
            wname = label_name(name)
            if wname in used:
                wname = label_name(f"{ns}-{name}")
            used.add(wname)
            specs = _distinct_containers(pods)
            if len(specs) > 1:
                self.notes.append(
                    f"{where}: {len(pods)} pods with {len(specs)} different specs (a rollout?); "
                    "the first is used"
                )
            entry: dict[str, Any] = {"name": wname, "kind": scenario_kind, "replicas": len(pods), **w}
            pdb = self._pdb(pdbs, ns, w.get("labels", {}), len(pods), where)
            if pdb is not None:
                entry["pdb"] = pdb
            out.append(entry)
        return out

    def _pdb(
        self, pdbs: list[dict[str, Any]], ns: str, labels: Mapping[str, str], replicas: int, where: str
    ) -> Any:
        for p in pdbs:
            if (meta_of(p).get("namespace") or "default") != ns:
                continue
            spec = p.get("spec") or {}
            hit = _matches(spec.get("selector"), labels)
            if hit is None:
                self.notes.append(
                    f"not modelled: PDB {meta_of(p).get('name')} selects with matchExpressions (ignored)"
                )
                continue
            if not hit:
                continue
            if spec.get("minAvailable") is not None:
                return {"min_available": _quantity_count(spec["minAvailable"], replicas)}
            if spec.get("maxUnavailable") is not None:
                return {"max_unavailable": _quantity_count(spec["maxUnavailable"], replicas)}
            return True
        return None

    def daemonsets(self) -> list[dict[str, Any]]:
        out = []
        for ds in sorted(
            self.kinds("DaemonSet"),
            key=lambda d: (meta_of(d).get("namespace", ""), meta_of(d).get("name", "")),
        ):
            meta = meta_of(ds)
            tpl = (ds.get("spec") or {}).get("template") or {}
            spec = tpl.get("spec") or {}
            total: dict[str, float] = {}
            for c in spec.get("containers") or []:
                for k, v in _requests(c).items():
                    total[k] = total.get(k, 0.0) + float(parse_quantity(v).value)
            entry: dict[str, Any] = {
                "name": label_name(str(meta.get("name", "ds"))),
                "namespace": meta.get("namespace") or "default",
                "requests": {k: _plain(k, v) for k, v in sorted(total.items())},
            }
            if spec.get("nodeSelector"):
                entry["node_selector"] = dict(spec["nodeSelector"])
            entry["tolerations"] = _tolerations(
                spec.get("tolerations") or [], self.notes, f"daemonset {meta.get('name')}"
            )
            if (spec.get("affinity") or {}).get("nodeAffinity"):
                self.notes.append(
                    f"not modelled: daemonset {meta.get('name')} node affinity "
                    "(it lands on every node its selector allows)"
                )
            out.append(entry)
        return out

    def priorities(self) -> dict[int, list[str]]:
        for cm in self.kinds("ConfigMap"):
            if meta_of(cm).get("name") != PRIORITY_CONFIGMAP:
                continue
            text = (cm.get("data") or {}).get("priorities")
            try:
                data = yaml.safe_load(text) if text else None
            except yaml.YAMLError:
                data = None
            if not isinstance(data, dict):
                self.notes.append(f"ConfigMap {PRIORITY_CONFIGMAP} has no readable 'priorities'; ignored")
                return {}
            return {int(k): [str(x) for x in v] for k, v in data.items() if isinstance(v, list)}
        return {}

    def autoscaler_pod(self) -> tuple[list[str], str | None]:
        """CA's flags and version from its own pod, when the dump has it."""
        for pod in self.kinds("Pod"):
            for c in (pod.get("spec") or {}).get("containers") or []:
                image = str(c.get("image", ""))
                # the substring test first: a cheap no for each of 100,000 application pods
                if "cluster-autoscaler" not in image or "cluster-autoscaler" not in image.rsplit("/", 1)[-1]:
                    continue
                args = [str(a) for a in (c.get("command") or []) + (c.get("args") or [])]
                m = re.search(r":v?(\d+\.\d+)(?:\.\d+)?", image.rsplit("/", 1)[-1])
                return args, (m.group(1) if m else None)
        return [], None


def _distinct_containers(pods: list[dict[str, Any]]) -> set[str]:
    """The distinct container specs among one controller's pods, each as canonical JSON.

    Only a pod whose containers differ from the first pod's is serialized: equal parsed JSON
    is equal canonical JSON (the values are JSON's own types, and an API server writes a field
    in one type), and a controller's pods almost always share one spec, so 100,000 pods cost
    100,000 comparisons rather than 100,000 serializations."""

    def canonical(containers: Any) -> str:
        return json.dumps(containers, sort_keys=True, default=str)

    first = pods[0].get("spec", {}).get("containers")
    out = {canonical(first)}
    for p in pods[1:]:
        containers = p.get("spec", {}).get("containers")
        if containers is not first and containers != first:
            out.add(canonical(containers))
    return out


def _plain(name: str, value: float) -> str:
    """A quantity back as text: millicores for cpu, whole units otherwise."""
    if name == "cpu":
        return f"{round(value * 1000)}m"
    whole = math.ceil(value)
    for suffix, size in (("Gi", 2**30), ("Mi", 2**20)):
        if whole and whole % size == 0:
            return f"{whole // size}{suffix}"
    return str(whole)


def static_node(node: Mapping[str, Any]) -> dict[str, Any]:
    meta, status, spec = meta_of(node), node.get("status") or {}, node.get("spec") or {}
    alloc = dict(status.get("allocatable") or status.get("capacity") or {})
    pods = int(str(alloc.pop(PODS, "110")))
    entry: dict[str, Any] = {
        "name": label_name(str(meta.get("name", "node"))),
        "capacity": {
            k: str(v) for k, v in sorted(alloc.items()) if k in ("cpu", "memory") or k in _GPU_RESOURCES
        },
        "pods": pods,
        "labels": dict(meta.get("labels") or {}),
    }
    taints = [
        {"key": t["key"], "value": t.get("value") or "", "effect": t.get("effect") or "NoSchedule"}
        for t in spec.get("taints") or []
        if t.get("effect") in ("NoSchedule", "PreferNoSchedule", "NoExecute")
    ]
    if taints:
        entry["taints"] = taints
    if spec.get("unschedulable"):
        entry.setdefault("taints", []).append(
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
        )
    return entry


def workload_from_manifest(obj: Mapping[str, Any], source: str) -> dict[str, Any]:
    """A scenario workload from one Kubernetes manifest (Deployment, StatefulSet, ReplicaSet, Job,
    Pod); what it cannot carry over raises, since the user asked for exactly this workload."""
    kind = str(obj.get("kind", ""))
    meta, spec = meta_of(obj), obj.get("spec") or {}
    notes: list[str] = []
    b = ObjectConverter([], notes)
    if kind in ("Deployment", "StatefulSet", "ReplicaSet"):
        tpl = spec.get("template") or {}
        replicas, skind = int(spec.get("replicas", 1)), "Deployment"
    elif kind == "Job":
        tpl = spec.get("template") or {}
        replicas, skind = int(spec.get("parallelism", 1)), "Job"
    elif kind == "Pod":
        tpl, replicas, skind = {"metadata": meta, "spec": spec}, 1, "Pod"
    else:
        raise SnapshotError(f"{source}: {kind or 'an object without kind'} is not a workload")
    tmeta = dict(meta_of(tpl))
    tmeta.setdefault("namespace", meta.get("namespace") or "default")
    where = f"{kind.lower()}/{meta.get('name')}"
    w = b.pod_spec_workload(tpl.get("spec") or {}, tmeta, where)
    if notes:
        raise SnapshotError(f"{source}: " + "; ".join(notes))
    return {"name": label_name(str(meta.get("name", "added"))), "kind": skind, "replicas": replicas, **w}


def node_ready(node: Mapping[str, Any]) -> bool:
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return bool(c.get("status") == "True")
    return True
