"""What `simulate --record` keeps of each kind of object it watches: the kinds, their list and
watch calls and selectors, and each object compacted to the fields a replay uses (record.py writes
them; replay.py and the reading of CA's own account read them back)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cloudprovider_grpc.simulator.cluster_objects import meta_of

#: the component CA's Events name as their source (cluster-autoscaler/main.go's event recorder)
CA_COMPONENT = "cluster-autoscaler"
#: CA's status ConfigMap (clusterstate/utils/status.go at cluster-autoscaler-1.36.1, data key "status")
CA_STATUS_CONFIGMAP = "cluster-autoscaler-status"


@dataclass(frozen=True)
class Kind:
    name: str
    api_version: str
    #: (api object attribute, list method) on the `kubernetes` client
    api: str
    method: str
    watched: bool = True
    #: a field selector for the list and the watch (e.g. only CA's own Events)
    selector: str = ""
    #: in snapshot.json (CA's account is not part of the cluster it starts from)
    in_snapshot: bool = True
    #: a kind the recorder may be refused (no RBAC for Events): recorded without it, with a warning
    optional: bool = False
    #: an update carries every field, not only the changed ones (an Event's repeat is read alone)
    whole: bool = False


#: every kind read, in listing order; `watched` ones are also watched (the rest: snapshot only)
KINDS = (
    Kind("Node", "v1", "CoreV1Api", "list_node"),
    Kind("Pod", "v1", "CoreV1Api", "list_pod_for_all_namespaces"),
    Kind("Deployment", "apps/v1", "AppsV1Api", "list_deployment_for_all_namespaces"),
    Kind("ReplicaSet", "apps/v1", "AppsV1Api", "list_replica_set_for_all_namespaces"),
    Kind("StatefulSet", "apps/v1", "AppsV1Api", "list_stateful_set_for_all_namespaces"),
    Kind("Job", "batch/v1", "BatchV1Api", "list_job_for_all_namespaces"),
    Kind("DaemonSet", "apps/v1", "AppsV1Api", "list_daemon_set_for_all_namespaces"),
    Kind("PodDisruptionBudget", "policy/v1", "PolicyV1Api", "list_pod_disruption_budget_for_all_namespaces"),
    Kind("PriorityClass", "scheduling.k8s.io/v1", "SchedulingV1Api", "list_priority_class", False),
    Kind("ConfigMap", "v1", "CoreV1Api", "list_config_map_for_all_namespaces", False),
    # CA's own account of its decisions (see ca_account.py): the Events it emits, and its status
    # ConfigMap (CA's --status-config-map-name default, in CA's namespace)
    Kind(
        "Event",
        "v1",
        "CoreV1Api",
        "list_event_for_all_namespaces",
        selector=f"source={CA_COMPONENT}",
        in_snapshot=False,
        optional=True,
        whole=True,
    ),
    Kind(
        "CAStatus",
        "v1",
        "CoreV1Api",
        "list_config_map_for_all_namespaces",
        selector=f"metadata.name={CA_STATUS_CONFIGMAP}",
        in_snapshot=False,
        optional=True,
    ),
)


#: controllers whose pods are not recorded one by one: the controller itself is (a ReplicaSet
#: through its Deployment when one owns it), or its pods are not workloads (DaemonSet; Node: a
#: static pod's mirror)
RECORDED_OWNERS = ("ReplicaSet", "StatefulSet", "Job", "DaemonSet", "Node")


def kind_named(name: str) -> Kind:
    return next(k for k in KINDS if k.name == name)


def controller_of(meta: Mapping[str, Any]) -> Mapping[str, Any] | None:
    refs = [r for r in meta.get("ownerReferences") or [] if r.get("controller")]
    return refs[0] if refs else None


def template_of(tpl: Mapping[str, Any] | None) -> dict[str, Any]:
    """A pod template with only what the simulator reads (and no nodeName: binding is not a change)."""
    tpl = tpl or {}
    meta = meta_of(tpl)
    spec = {k: v for k, v in (tpl.get("spec") or {}).items() if k != "nodeName"}
    out_meta = {k: meta[k] for k in ("labels", "annotations") if meta.get(k)}
    return {"metadata": out_meta, "spec": spec}


def compact(kind: str, obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The fields a replay uses of one object, or None when the object is not recorded (a pod
    some controller owns, a ReplicaSet a Deployment owns: their controller is recorded)."""
    meta, spec, status = meta_of(obj), obj.get("spec") or {}, obj.get("status") or {}
    if kind in ("Deployment", "StatefulSet", "ReplicaSet"):
        if kind == "ReplicaSet" and controller_of(meta) is not None:
            return None
        replicas = spec.get("replicas")
        return {
            "replicas": 1 if replicas is None else int(replicas),
            "template": template_of(spec.get("template")),
        }
    if kind == "Job":
        done = next(
            (
                c.get("type")
                for c in status.get("conditions") or []
                if c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
            ),
            None,
        )
        return {
            "parallelism": int(spec.get("parallelism", 1) or 0),
            "completions": spec.get("completions"),
            "suspend": bool(spec.get("suspend")),
            "done": done,
            "template": template_of(spec.get("template")),
        }
    if kind == "Pod":
        owner = controller_of(meta)
        if owner is not None and owner.get("kind") in RECORDED_OWNERS:
            return None
        phase = status.get("phase")
        fields = {
            "template": template_of({"metadata": meta, "spec": spec}),
            "done": phase if phase in ("Succeeded", "Failed") else None,
        }
        if owner is not None:  # a controller the recorder does not watch (an operator's resource)
            fields["owner"] = str(owner.get("kind"))
        return fields
    if kind == "DaemonSet":
        return {"template": template_of(spec.get("template"))}
    if kind == "PodDisruptionBudget":
        return {"spec": dict(spec)}
    if kind == "Node":
        # what maps a node CA removes to its node group (NodeGroupForNode) when the replay reads
        # CA's account; nothing of a node is replayed
        out: dict[str, Any] = {}
        if spec.get("providerID"):
            out["providerID"] = str(spec["providerID"])
        if meta.get("labels"):
            out["labels"] = dict(meta["labels"])
        return out
    if kind == "Event":
        return event_fields(obj)
    if kind == "CAStatus":
        return {"status": str((obj.get("data") or {}).get("status") or "")}
    return None


def event_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    """An Event's reason, message and time (its newest), and how many times it happened (the
    apiserver's event aggregation counts repeats of one message on one object)."""
    series = obj.get("series") or {}
    when = (
        series.get("lastObservedTime")
        or obj.get("lastTimestamp")
        or obj.get("eventTime")
        or obj.get("firstTimestamp")
        or meta_of(obj).get("creationTimestamp")
    )
    involved = obj.get("involvedObject") or {}
    return {
        "reason": str(obj.get("reason") or ""),
        "message": str(obj.get("message") or ""),
        "type": str(obj.get("type") or ""),
        "count": int(series.get("count") or obj.get("count") or 1),
        "time": str(when or ""),
        "object": f"{involved.get('kind', '')}/{involved.get('namespace', '')}/{involved.get('name', '')}",
    }


def digest(value: Any) -> str:
    return hashlib.sha1(
        json.dumps(value, sort_keys=True, default=str).encode(), usedforsecurity=False
    ).hexdigest()


class Known:
    """What the log last said about one object: its fields, and the template's digest."""

    def __init__(self, fields: dict[str, Any], head: dict[str, Any]) -> None:
        self.head = head
        self.fields = {k: v for k, v in fields.items() if k != "template"}
        self.template = digest(fields.get("template"))


def head_of(kind: Kind, obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = meta_of(obj)
    return {
        "kind": kind.name,
        "ns": meta.get("namespace") or "",
        "name": meta.get("name"),
        "uid": str(meta.get("uid")),
    }


def stripped(obj: dict[str, Any], kind: Kind) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    meta.pop("managedFields", None)
    (meta.get("annotations") or {}).pop("kubectl.kubernetes.io/last-applied-configuration", None)
    obj.setdefault("apiVersion", kind.api_version)
    obj.setdefault("kind", kind.name)
    return obj
