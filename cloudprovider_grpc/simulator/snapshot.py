"""A scenario from a real cluster: Kubernetes objects plus the node groups our gRPC API reports.

The objects are what `kubectl get nodes,pods,daemonsets,pdb,priorityclasses,configmaps -A -o json`
prints (`load_dump`), or the same read through the official `kubernetes` client (`read_cluster`).
`build_scenario` turns them into an ordinary scenario mapping:
- each node is matched to its node group by providerID through NodeGroupForNode, as CA does;
  nodes in no group become `static_nodes`;
- the groups come from NodeGroups and NodeGroupTemplateNodeInfo. When the simulation runs on an
  in-process backend (`provider`), the scenario names that backend; when they come from a running
  server, the scenario describes a `sim` twin of its groups (same ids, bounds, templates, prices and
  current node counts), so asking "what if" never changes the live cloud;
- running and pending pods become workloads, one per controller (Deployment via its ReplicaSet,
  StatefulSet, Job, or a bare Pod), with the spec the scheduler and CA read; DaemonSets become
  `daemonsets`; PodDisruptionBudgets, PriorityClasses and the priority expander's ConfigMap are
  applied;
- CA's own pod, when the dump holds one, gives its flags and version (`--autoscaler-flags` wins).

What the simulator cannot model is listed in the returned notes, never dropped silently.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.simulator.client import CAClient, GroupInfo, RpcError
from cloudprovider_grpc.simulator.cluster_objects import (
    ObjectConverter,
    SnapshotError,
    label_name,
    meta_of,
    node_ready,
    static_node,
    workload_from_manifest,
)
from cloudprovider_grpc.simulator.collector import collector_paused
from cloudprovider_grpc.simulator.dump_json import loads_shared
from cloudprovider_grpc.simulator.flags import parse_flags
from cloudprovider_grpc.simulator.model import PODS

__all__ = [
    "Snapshot",
    "SnapshotError",
    "build_scenario",
    "load_dump",
    "read_cluster",
    "workload_from_manifest",
]


@dataclass
class Snapshot:
    """The scenario mapping built from a cluster, and what it could not carry over."""

    scenario: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    #: node name in the cluster -> node group id (None: in no group)
    groups_of_nodes: dict[str, str | None] = field(default_factory=dict)


# ---------------------------------------------------------------------------- reading
def load_dump(path: str | Path) -> list[dict[str, Any]]:
    """The objects of a `kubectl get ... -o json` (or -o yaml) dump: a List, or one object."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SnapshotError(f"{p}: cannot read: {exc.strerror}") from None
    with collector_paused():  # millions of acyclic dicts: see collector.py
        try:
            data = loads_shared(text)  # a third smaller than json.loads': see dump_json.py
        except json.JSONDecodeError:
            try:
                data = yaml.safe_load(text)
            except yaml.YAMLError as exc:
                raise SnapshotError(f"{p}: neither JSON nor YAML: {exc}") from None
    if not isinstance(data, dict):
        raise SnapshotError(f"{p}: expected a Kubernetes List or object at the top level")
    items = data.get("items") if str(data.get("kind", "")).endswith("List") else [data]
    if not isinstance(items, list):
        raise SnapshotError(f"{p}: 'items' is not a list")
    return [i for i in items if isinstance(i, dict)]


def read_cluster(kubeconfig: str | None = None, context: str | None = None) -> list[dict[str, Any]]:
    """The same objects as `load_dump`, read from a live cluster with the `kubernetes` client.

    Objects are serialized with the client's own `sanitize_for_serialization`, which gives the
    API's field names, so a live read and a dump go through one converter."""
    try:
        from kubernetes import client, config
    except ImportError as exc:  # pragma: no cover - a dependency
        raise SnapshotError(f"--from-cluster needs the 'kubernetes' package: {exc}") from None
    try:
        api_client = config.new_client_from_config(config_file=kubeconfig, context=context)
    except Exception as exc:  # the client raises ConfigException, FileNotFoundError, ...
        raise SnapshotError(f"cannot load the kubeconfig: {exc}") from None
    core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    policy, sched = client.PolicyV1Api(api_client), client.SchedulingV1Api(api_client)
    reads: list[tuple[str, str, Any]] = [
        ("v1", "Node", core.list_node),
        ("v1", "Pod", core.list_pod_for_all_namespaces),
        ("apps/v1", "DaemonSet", apps.list_daemon_set_for_all_namespaces),
        ("policy/v1", "PodDisruptionBudget", policy.list_pod_disruption_budget_for_all_namespaces),
        ("scheduling.k8s.io/v1", "PriorityClass", sched.list_priority_class),
        ("v1", "ConfigMap", core.list_config_map_for_all_namespaces),
    ]
    out: list[dict[str, Any]] = []
    try:
        for api_version, kind, call in reads:
            for item in call().items:
                obj = api_client.sanitize_for_serialization(item)
                obj.setdefault("apiVersion", api_version)
                obj.setdefault("kind", kind)
                out.append(obj)
    except Exception as exc:  # ApiException, urllib3 errors: one line, no traceback
        reason = getattr(exc, "reason", None) or exc
        raise SnapshotError(f"cannot read the cluster: {reason}") from None
    finally:
        api_client.close()
    return out


# ---------------------------------------------------------------------------- helpers
_SIM_FIELDS = {
    "region": ("topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region"),
    "zone": ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone"),
    "instance_type": ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type"),
}
_SIM_OWN = {k for keys in _SIM_FIELDS.values() for k in keys} | {
    "kubernetes.io/hostname",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
}


def _template_group(client: CAClient, gid: str, lo: int, hi: int, count: int) -> dict[str, Any]:
    """A `sim` group mirroring one of the server's groups: bounds, template, price, node count."""
    g: dict[str, Any] = {"id": gid, "min_size": lo, "max_size": hi, "initial_size": min(count, hi)}
    try:
        tpl = client.template(gid)
    except (RpcError, ValueError):
        tpl = None
    if tpl is not None:
        alloc = {k: q.string for k, q in tpl.status.allocatable.items()} or {
            k: q.string for k, q in tpl.status.capacity.items()
        }
        pods = alloc.pop(PODS, "110")
        g["capacity"] = {k: v for k, v in sorted(alloc.items()) if k in ("cpu", "memory")}
        g["pods"] = int(pods)
        labels = dict(tpl.metadata.labels)
        # the well-known labels the sim backend sets itself: carried over through its fields
        for field_name, keys in _SIM_FIELDS.items():
            value = next((labels[k] for k in keys if k in labels), None)
            if value:
                g[field_name] = value
        g["labels"] = {
            k: v
            for k, v in sorted(labels.items())
            if k not in _SIM_OWN and not k.startswith("cloudprovider-grpc.io/")
        }
        g["taints"] = [
            {"key": t.key, "value": t.value, "effect": t.effect or "NoSchedule"} for t in tpl.spec.taints
        ]
        # named as CA names sanitized templates, which is how servers recognise a template node
        node = pb.ExternalGrpcNode(name=f"template-node-for-{gid}-snapshot", labels=dict(tpl.metadata.labels))
        start = datetime(2026, 1, 1, tzinfo=UTC)
        try:
            price = client.node_price(node, start, start + timedelta(hours=1))
        except RpcError:
            price = None
        if price is not None:
            g["price_per_hour"] = round(price, 6)
    return g


def build_scenario(
    objects: list[dict[str, Any]],
    client: CAClient,
    *,
    provider: str | None,
    name: str = "my-cluster",
    duration: str = "2h",
    flags: list[str] | None = None,
    workloads: list[dict[str, Any]] | None = None,
) -> Snapshot:
    """The scenario mapping for these objects, with node groups from `client`.

    `provider`: the in-process backend the simulation will run on (its groups are the ones
    `client` reports), or None when `client` talks to a running server, whose groups are then
    mirrored into a `sim` twin. `workloads`: the scenario's workloads when the caller built them
    (a replay builds them from controllers and their recorded changes), instead of from the pods."""
    with collector_paused():  # walks every object of the cluster: see collector.py
        return _build_scenario(objects, client, provider, name, duration, flags, workloads)


def _build_scenario(
    objects: list[dict[str, Any]],
    client: CAClient,
    provider: str | None,
    name: str,
    duration: str,
    flags: list[str] | None,
    workloads: list[dict[str, Any]] | None,
) -> Snapshot:
    notes: list[str] = []
    b = ObjectConverter(objects, notes)
    pod_flags, version = b.autoscaler_pod()
    options, flag_notes = parse_flags(pod_flags + list(flags or []))
    notes.extend(flag_notes)
    if version and "version" not in options:
        options["version"] = version
    client.refresh()
    groups = client.node_groups()
    nodes = sorted(b.kinds("Node"), key=lambda n: str(meta_of(n).get("name")))
    group_of = _groups_of_nodes(client, nodes)
    counts = Counter(g for g in group_of.values() if g)
    static = [static_node(n) for n in nodes if group_of[str(meta_of(n).get("name"))] is None]
    data: dict[str, Any] = {
        "name": label_name(name),
        "description": (
            f"snapshot of {len(nodes)} nodes, {sum(counts.values())} in {len(counts)} node group(s)"
        ),
        "duration": duration,
    }
    _node_groups(data, client, groups, counts, provider, notes)
    unready = [str(meta_of(n).get("name")) for n in nodes if not node_ready(n)]
    if unready:
        notes.append(
            f"{len(unready)} node(s) NotReady at snapshot time start Ready: {', '.join(unready[:5])}"
        )
    _cluster_sections(data, b, options, workloads, static, notes)
    return Snapshot(data, notes, group_of)


def _groups_of_nodes(client: CAClient, nodes: list[dict[str, Any]]) -> dict[str, str | None]:
    """NodeGroupForNode for every node, as CA asks it: node name -> group id, None outside."""
    group_of: dict[str, str | None] = {}
    for n in nodes:
        meta = meta_of(n)
        nname = str(meta.get("name"))
        pid = str((n.get("spec") or {}).get("providerID") or "")
        try:
            g = client.node_group_for_node(nname, pid, dict(meta.get("labels") or {}))
        except RpcError as exc:
            raise SnapshotError(f"NodeGroupForNode failed for node {nname}: {exc}") from None
        group_of[nname] = g.id if g is not None else None
    return group_of


def _node_groups(
    data: dict[str, Any],
    client: CAClient,
    groups: list[GroupInfo],
    counts: Counter[str],
    provider: str | None,
    notes: list[str],
) -> None:
    """The scenario's backend: a `sim` twin of a running server's groups (their templates and the
    cluster's node counts), or the in-process backend itself, noting where the cluster and the
    backend's listings disagree."""
    known = {g.id for g in groups}
    if provider is None:
        data["provider"] = "sim"
        data["cloud"] = {
            "provisioning_delay": 60,
            "groups": [_template_group(client, g.id, g.min_size, g.max_size, counts[g.id]) for g in groups],
        }
        for g in groups:
            if counts[g.id] > g.max_size:
                notes.append(
                    f"group {g.id}: {counts[g.id]} nodes in the cluster, above its max size {g.max_size}"
                )
    else:
        data["provider"] = provider
        for g in groups:
            try:
                listed = len(client.nodes(g.id))
            except RpcError:
                listed = -1
            if listed >= 0 and listed != counts[g.id]:
                notes.append(
                    f"group {g.id}: the cluster has {counts[g.id]} of its nodes, the {provider} backend "
                    f"lists {listed}; the simulation starts from the backend's"
                )
    for gid in sorted(set(counts) - known):
        notes.append(f"NodeGroupForNode names group {gid!r}, which NodeGroups does not list")


def _cluster_sections(
    data: dict[str, Any],
    b: ObjectConverter,
    options: dict[str, Any],
    workloads: list[dict[str, Any]] | None,
    static: list[dict[str, Any]],
    notes: list[str],
) -> None:
    """CA's options, the priority expander's ConfigMap, DaemonSets, workloads and the nodes
    outside every group, each section only when there is something in it."""
    if options:
        data["autoscaler"] = options
    prios = b.priorities()
    if prios:
        data["priorities"] = prios
    ds = b.daemonsets()
    if ds:
        data["daemonsets"] = ds
    wl = b.workloads() if workloads is None else workloads
    if wl:
        data["workloads"] = wl
    if static:
        data["static_nodes"] = static
    if "priority" in str(options.get("expander", "")) and not prios:
        notes.append("expander 'priority' without its ConfigMap: 'least-waste' used instead")
        data["autoscaler"]["expander"] = "least-waste"
