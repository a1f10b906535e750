"""The bundled simulator against the real CA: the same cluster, workloads and CA flags as a scenario
file, and the same decisions (groups, deltas, removed nodes' groups, in the same order).

Both sides are reduced to the same vocabulary first:
- `("up", group, delta)` for a scale-up;
- `("down", {group: count})` for a run of consecutive node removals: CA removes the empty nodes it
  found in one loop in an order of its own, and whether a set of nodes emptied at once is removed in
  one loop or two depends on when each pod's deletion reached the informer (wall-clock timing), so
  the order *within* such a run is not a decision either side can be held to;
- `("failed", group)` for a scale-up whose machines the cloud could not create (CA: "Failed adding
  ... nodes to group"; the simulator: scale-up-failed).
Which of several equal empty nodes of one group CA removes is compared by group and count, not by
name: CA picks among identical candidates by map iteration order, which no simulator can predict.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from cloudprovider_grpc.simulator import parse_scenario
from cloudprovider_grpc.simulator import run as simulate
from tests.realca.autoscaler import Decision
from tests.realca.workloads import Workload

Step = tuple[Any, ...]

#: CA flags the simulator models, by the same names (scenario.py AutoscalerOptions)
SIMULATED_FLAGS = (
    "scan-interval",
    "expander",
    "scale-down-unneeded-time",
    "scale-down-delay-after-add",
    "scale-down-delay-after-delete",
    "scale-down-delay-after-failure",
    "max-node-provision-time",
    "new-pod-scale-up-delay",
    "skip-nodes-with-local-storage",
    "skip-nodes-with-system-pods",
    "balance-similar-node-groups",
    "initial-node-group-backoff-duration",
)


@dataclass(frozen=True)
class Change:
    """At phase `phase` (phases are `spacing` apart in the scenario), `workload` gets `replicas`."""

    phase: int
    workload: Workload
    replicas: int


def scenario(
    name: str, cloud_yaml: str, flags: Mapping[str, str], changes: Sequence[Change], spacing: int = 600
) -> dict:
    """The simulator's scenario for a real-CA run: each phase starts `spacing` virtual seconds after
    the previous one, long enough for every decision of a phase to have happened."""
    cloud = yaml.safe_load(cloud_yaml)["sim"]
    workloads: dict[str, dict[str, Any]] = {}
    for ch in changes:
        w = ch.workload
        entry = workloads.get(w.name)
        if entry is None:
            entry = {
                "name": w.name,
                "replicas": ch.replicas,
                "start": ch.phase * spacing,
                "requests": {"cpu": w.cpu, "memory": w.memory},
                "node_selector": dict(w.node_selector),
                "tolerations": [dict(t) for t in w.tolerations],
            }
            workloads[w.name] = entry
        else:
            entry.setdefault("schedule", []).append({"at": ch.phase * spacing, "replicas": ch.replicas})
    last = max(ch.phase for ch in changes)
    return {
        "name": name,
        "duration": (last + 1) * spacing,
        "cloud": cloud,
        "autoscaler": {k: _flag(v) for k, v in flags.items() if k in SIMULATED_FLAGS},
        "workloads": list(workloads.values()),
    }


def _flag(value: str) -> Any:
    return {"true": True, "false": False}.get(value, value)


def normalise(items: Sequence[tuple[str, str, int]]) -> list[Step]:
    """(kind, group, delta) in decision order -> the comparison vocabulary (see the module doc)."""
    out: list[Step] = []
    for kind, group, delta in items:
        if kind == "up":
            out.append(("up", group, delta))
        elif kind == "down":
            if out and out[-1][0] == "down":
                out[-1] = ("down", out[-1][1] + Counter({group: 1}))
            else:
                out.append(("down", Counter({group: 1})))
        elif kind == "failed" and ("failed", group) not in out[-1:]:
            out.append(("failed", group))
    return [(s[0], dict(sorted(s[1].items()))) if s[0] == "down" else s for s in out]


def from_ca(decisions: Sequence[Decision], node_groups: Mapping[str, str]) -> list[Step]:
    items: list[tuple[str, str, int]] = []
    for d in decisions:
        if d.kind == "scale-up":
            items.append(("up", d.group, d.delta))
        elif d.kind == "scale-down":
            items.append(("down", node_groups[d.node], 1))
        elif d.kind == "failed-scale-up":
            items.append(("failed", d.group, d.delta))
    return normalise(items)


def from_simulator(data: dict) -> list[Step]:
    report = simulate(parse_scenario(data, source=data["name"]), seed=0)
    items: list[tuple[str, str, int]] = []
    for d in report.decisions:
        if d.kind == "scale-up":
            items.append(("up", d.group, d.delta))
        elif d.kind == "scale-down":
            items.append(("down", d.group, 1))
        elif d.kind == "scale-up-failed":
            items.append(("failed", d.group, d.delta))
    return normalise(items)


def mirror_cloud(
    groups: Mapping[str, tuple[int, int]],
    templates: Mapping[str, Mapping[str, Any]],
    sizes: Mapping[str, int],
    *,
    stockout_group: str,
) -> str:
    """A sim cloud shaped like another backend's node groups, for a simulator run that predicts CA on
    that backend: the same ids, bounds and starting sizes (`sizes`, nodes already up), and template
    Nodes with the same allocatable resources, labels and taints (the only things CA's decisions
    read from a cloud), `stockout_group` unable to create machines. A cloud's own API (tags, pools,
    activities) is our server's business, not CA's, so it does not enter the prediction."""
    specs = []
    for gid, (lo, hi) in sorted(groups.items()):
        tpl = templates[gid]
        allocatable = dict(tpl["allocatable"])
        spec: dict[str, Any] = {
            "id": gid,
            "min_size": lo,
            "max_size": hi,
            "initial_size": sizes.get(gid, 0),
            "capacity": {k: v for k, v in allocatable.items() if k != "pods"},
            "pods": int(allocatable.get("pods", "110")),
            "labels": {k: v for k, v in tpl["labels"].items() if k != "kubernetes.io/hostname"},
            "taints": list(tpl["taints"]),
        }
        # the sim cloud writes these standard labels itself: give it the backend's values
        for key, field in (
            ("node.kubernetes.io/instance-type", "instance_type"),
            ("topology.kubernetes.io/region", "region"),
            ("topology.kubernetes.io/zone", "zone"),
        ):
            if key in tpl["labels"]:
                spec[field] = tpl["labels"][key]
        if gid == stockout_group:
            spec["fail"] = {"stockout_after": 0}
        specs.append(spec)
    return yaml.safe_dump({"sim": {"provisioning_delay": 2, "deletion_delay": 1, "groups": specs}})
