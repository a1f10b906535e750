"""`simulate --replay DIR`: a recording turned into an ordinary scenario.

The recording's snapshot gives the cluster at the start (nodes, node groups through our gRPC API,
DaemonSets, PriorityClasses, CA's own flags), exactly as `--from-dump` reads it. Its workloads come
from the controllers themselves rather than from their pods, and the event log gives each one a
life over virtual time in the scenario's own terms:

- a Deployment, StatefulSet or ReplicaSet: `replicas` at the start (or when created) and a
  `schedule` step at every recorded change of `spec.replicas`; `end` when deleted;
- a Job: `replicas` = its parallelism (at most its completions), `start` when it was created (or
  unsuspended), `end` when it completed, failed or was deleted: its pods leave at the recorded
  time, however long the simulated ones waited for a node;
- a pod that no controller owns: one replica from its creation to its deletion or end; a pod of a
  controller the recorder does not watch (an operator's custom resource) likewise, as a one-pod
  Deployment so that CA may move it.

Since the result is a scenario, every what-if edit (`--scale` multiplies every schedule step too),
`--write-scenario` and `--compare` apply to a replay unchanged.

Not replayed: nodes. The real autoscaler's (or anyone's) node additions and removals are the
answer being simulated, not an input: the simulation starts from the snapshot's nodes and makes
its own decisions. The log's node counts are reported in a note for comparison. DaemonSets and
PodDisruptionBudgets created or changed during the recording apply from the start, with a note
each (the scenario's DaemonSets and budgets do not vary over time), and so does a template change
(a rollout): the first template is used throughout.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cloudprovider_grpc.simulator.ca_account import CADecision, from_events, from_klog, status_targets
from cloudprovider_grpc.simulator.client import CAClient, RpcError
from cloudprovider_grpc.simulator.cluster_objects import ObjectConverter, SnapshotError, label_name, meta_of
from cloudprovider_grpc.simulator.eventlog import SNAPSHOT, Log, LogError, read
from cloudprovider_grpc.simulator.record_objects import compact
from cloudprovider_grpc.simulator.snapshot import Snapshot, build_scenario, load_dump

CONTROLLERS = ("Deployment", "StatefulSet", "ReplicaSet")
WORKLOAD_KINDS = (*CONTROLLERS, "Job", "Pod")


@dataclass
class Entity:
    """One recorded object (one uid) over the recording."""

    kind: str
    ns: str
    name: str
    fields: dict[str, Any]
    start: float = 0.0
    end: float | None = None
    template: dict[str, Any] = field(default_factory=dict)
    first: dict[str, Any] = field(default_factory=dict)
    #: (t, replicas) at every recorded change of spec.replicas
    steps: list[tuple[float, int]] = field(default_factory=list)
    #: times its template or spec changed (a rollout, an edited budget)
    changes: list[float] = field(default_factory=list)
    #: a Job: when it was first not suspended
    running_from: float | None = None


@dataclass
class Recording:
    """A recording directory read back: the snapshot's objects and the event log."""

    directory: Path
    objects: list[dict[str, Any]]
    log: Log

    def entities(self) -> tuple[dict[str, Entity], dict[str, int]]:
        """Every recorded object by uid with its life, and node counts (start, added, removed)."""
        out: dict[str, Entity] = {}
        nodes = {"start": 0, "added": 0, "removed": 0}
        for obj in self.objects:
            kind, meta = str(obj.get("kind")), meta_of(obj)
            if kind == "Node":
                nodes["start"] += 1
                continue
            fields = compact(kind, obj)
            if fields is None or kind in ("PriorityClass", "ConfigMap"):
                continue
            if kind == "Pod" and meta.get("deletionTimestamp"):
                continue
            if fields.get("done"):  # a Job or pod already finished at the start
                continue
            first = Entity(kind, str(meta.get("namespace") or ""), str(meta.get("name")), dict(fields))
            first.template, first.first = dict(fields.get("template") or {}), dict(fields)
            if kind == "Job" and not fields.get("suspend"):
                first.running_from = 0.0
            out[str(meta.get("uid"))] = first
        for r in self.log.records:
            op, kind, t = r["op"], str(r.get("kind")), float(r["t"])
            if kind == "Node":
                nodes["added" if op == "add" else "removed"] += op in ("add", "delete")
                continue
            if op not in ("add", "update", "delete") or kind not in (
                *WORKLOAD_KINDS,
                "DaemonSet",
                "PodDisruptionBudget",
            ):
                continue
            uid = str(r.get("uid"))
            fields = {k: v for k, v in r.items() if k not in ("t", "op", "kind", "ns", "name", "uid")}
            e = out.get(uid)
            if op == "add" and e is None:
                new = Entity(kind, str(r.get("ns") or ""), str(r.get("name")), dict(fields), start=t)
                new.template, new.first = dict(fields.get("template") or {}), dict(fields)
                out[uid] = new
                if kind == "Job" and not fields.get("suspend"):
                    new.running_from = t
                if fields.get("done"):
                    new.end = t
                continue
            if e is None or e.end is not None:
                continue
            if op == "delete":
                e.end = t
                continue
            if "replicas" in fields and fields["replicas"] != e.fields.get("replicas"):
                e.steps.append((t, int(fields["replicas"])))
            if "template" in fields or "spec" in fields:
                e.changes.append(t)
            if kind == "Job" and e.running_from is None and fields.get("suspend") is False:
                e.running_from = t
            e.fields.update(fields)
            if fields.get("done"):
                e.end = t
        return out, nodes

    def scenario(
        self,
        client: CAClient,
        *,
        provider: str | None,
        name: str = "replay",
        duration: str | None = None,
        flags: list[str] | None = None,
    ) -> Snapshot:
        """The scenario of the replay, with node groups from `client` (see `build_scenario`)."""
        entities, nodes = self.entities()
        notes: list[str] = []
        conv = ObjectConverter(self.objects, notes)
        workloads = _workloads(entities, conv, self.objects)
        length = max(self.log.length, 1.0)
        snap = build_scenario(
            self.objects,
            client,
            provider=provider,
            name=name,
            duration=duration or f"{math.ceil(length)}s",
            flags=flags,
            workloads=workloads,
        )
        started = self.log.header.started.strftime("%Y-%m-%d %H:%M:%S UTC")
        snap.scenario["description"] = (
            f"replay of {math.ceil(length)}s recorded from {started}: "
            f"{len(workloads)} workload(s), {len(self.log.records)} recorded change(s)"
        )
        snap.scenario["start_time"] = self.log.header.started.isoformat()
        later_ds = [e for e in entities.values() if e.kind == "DaemonSet" and e.start > 0]
        if later_ds:
            extra = ObjectConverter(
                [
                    {
                        "kind": "DaemonSet",
                        "metadata": {"name": e.name, "namespace": e.ns},
                        "spec": {"template": e.template},
                    }
                    for e in later_ds
                ],
                notes,
            ).daemonsets()
            snap.scenario.setdefault("daemonsets", []).extend(extra)
            for e in later_ds:
                notes.append(f"DaemonSet {e.ns}/{e.name} created at {e.start:g}s is applied from the start")
        for e in sorted(entities.values(), key=lambda e: (e.kind, e.ns, e.name)):
            if e.kind == "DaemonSet" and (e.changes or e.end is not None):
                notes.append(
                    f"DaemonSet {e.ns}/{e.name} changed or deleted during the recording: "
                    "its first form applies throughout"
                )
            if e.kind == "PodDisruptionBudget" and (e.changes or e.end is not None or e.start > 0):
                notes.append(
                    f"PodDisruptionBudget {e.ns}/{e.name} changed during the recording: "
                    "its first spec applies throughout"
                )
        notes.append(
            f"nodes are not replayed: the recorded cluster had {nodes['start']} node(s) at the start, "
            f"{nodes['added']} added and {nodes['removed']} removed during the recording; "
            "the simulation makes its own decisions from the starting nodes"
        )
        if self.log.end_reason is None:
            notes.append(
                f"the event log ends without its end line (cut short): replayed up to {self.log.length:g}s"
            )
        snap.notes = [*snap.notes, *notes]
        self._groups_of_added_nodes(client, snap.groups_of_nodes)
        return snap

    def _groups_of_added_nodes(self, client: CAClient, groups: dict[str, str | None]) -> None:
        """Add the node groups of the nodes that joined during the recording (NodeGroupForNode on
        their recorded providerID and labels): CA's account names the nodes it removes."""
        for r in self.log.records:
            name = str(r.get("name"))
            if r.get("kind") != "Node" or r.get("op") != "add" or name in groups:
                continue
            try:
                g = client.node_group_for_node(name, str(r.get("providerID") or ""), r.get("labels") or {})
            except RpcError:
                g = None
            groups[name] = g.id if g is not None else None

    def has_ca_account(self) -> bool:
        """Whether the recorder watched CA's Events (a recording from before it did, or without
        the RBAC to list Events, has no account of CA's own)."""
        return "Event" in self.log.header.kinds

    def ca_targets(self) -> list[dict[str, Any]]:
        """CA's target size per node group over the recording, from its status ConfigMap."""
        return status_targets(self.log.records, self.log.header.started)

    def ca_decisions(self, groups: Mapping[str, str | None], ca_log: str | None = None) -> list[CADecision]:
        """CA's decisions over the recording: from `ca_log` (CA's klog output) when given, else
        from the Events the recorder saw."""
        started = self.log.header.started

        def group_of(node: str) -> str:
            return groups.get(node) or ""

        if ca_log is not None:
            return from_klog(ca_log, started, group_of)
        return from_events(self.log.records, started, group_of)


def _unique(name: str, ns: str, used: set[str]) -> str:
    out = label_name(name)
    if out in used:
        out = label_name(f"{ns}-{name}")
    base, n = out, 2
    while out in used:
        out = label_name(f"{base[:58]}-{n}")
        n += 1
    used.add(out)
    return out


def _workloads(
    entities: dict[str, Entity], conv: ObjectConverter, objects: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The scenario workloads of the recorded controllers, Jobs and bare pods."""
    pdbs = [o for o in objects if o.get("kind") == "PodDisruptionBudget"]
    pdbs += [
        {
            "kind": "PodDisruptionBudget",
            "metadata": {"name": e.name, "namespace": e.ns},
            "spec": e.first.get("spec") or {},
        }
        for e in entities.values()
        if e.kind == "PodDisruptionBudget" and e.start > 0
    ]
    used: set[str] = set()
    out: list[dict[str, Any]] = []
    order = sorted(entities.values(), key=lambda e: (e.start, e.kind, e.ns, e.name))
    for e in order:
        if e.kind not in WORKLOAD_KINDS:
            continue
        where = f"{e.kind.lower()}/{e.name} in {e.ns}"
        start = e.start if e.kind != "Job" else e.running_from
        if start is None or (e.end is not None and e.end <= start):
            continue  # a Job never unsuspended, or an object gone the moment it came
        tpl = e.template
        tmeta = {**meta_of(tpl), "namespace": e.ns or "default"}
        w = conv.pod_spec_workload(tpl.get("spec") or {}, tmeta, where)
        if e.kind in CONTROLLERS:
            replicas, kind = int(e.first.get("replicas", 1)), "Deployment"
        elif e.kind == "Job":
            par, comp = int(e.first.get("parallelism", 1)), e.first.get("completions")
            replicas, kind = (par if comp is None else min(par, int(comp))), "Job"
        elif e.first.get("owner"):
            # recreated elsewhere when drained, as CA expects of a controller's pod
            replicas, kind = 1, "Deployment"
            conv.note_once(
                f"owner:{e.first['owner']}",
                f"pods of {e.first['owner']} controllers are replayed one by one, as one-pod Deployments",
            )
        else:
            replicas, kind = 1, "Pod"
        entry: dict[str, Any] = {"name": _unique(e.name, e.ns, used), "kind": kind, "replicas": replicas, **w}
        if start > 0:
            entry["start"] = start
        if e.end is not None:
            entry["end"] = e.end
        steps: dict[float, int] = {}
        for t, n in e.steps:
            steps[max(t, start)] = n
        if steps:
            entry["schedule"] = [{"at": t, "replicas": n} for t, n in sorted(steps.items())]
        if e.changes and e.kind in (*CONTROLLERS, "Job"):
            conv.notes.append(
                f"{where}: its pod template changed {len(e.changes)} time(s) (a rollout?); the first is used"
            )
        pdb = conv._pdb(pdbs, e.ns or "default", w.get("labels", {}), replicas, where)
        if pdb is not None:
            entry["pdb"] = pdb
        out.append(entry)
    return out


def load_recording(directory: Path) -> Recording:
    """A recording directory (`snapshot.json` and `events.jsonl.gz`), read and checked."""
    if not directory.is_dir():
        raise SnapshotError(f"{directory}: not a directory (give the DIR that --record wrote)")
    try:
        log = read(directory)
    except LogError as exc:
        raise SnapshotError(str(exc)) from None
    return Recording(directory, load_dump(directory / SNAPSHOT), log)
