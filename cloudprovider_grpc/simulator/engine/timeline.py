"""The report's timeline: per loop, each group's nodes, unready nodes and CA's target size, and
the pending pods.

The groups and their bounds are CA's view after the scenario's `node_groups` overrides; the target
is the size CA last knew (from NodeGroupTargetSize, or the size it just set), so a group CA has
not asked about yet shows None rather than a guess.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from cloudprovider_grpc.simulator.world import World


class Timeline:
    """The timeline being built (`data` is the report's `timeline`)."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {"t": [], "nodes": {}, "target": {}, "pending": []}
        self.group_ids: list[str] = []  # the node groups of the current loop, in the server's order
        self.bounds: dict[str, dict[str, Any]] = {}
        self.targets: dict[str, int] = {}  # target sizes as CA last knew them

    def saw_target(self, gid: str, target: int) -> None:
        self.targets[gid] = target

    def sample(self, t: float, world: World) -> None:
        """One timeline column: ready nodes and CA's target size per group, pending pods.

        A group that appears later gets zeros (nodes) and None (target: not known yet) before."""
        tl = self.data
        tl["t"].append(t)
        cols = len(tl["t"])
        counts = Counter(node.group for node in world.nodes.values())
        for gid in sorted(set(self.group_ids) | set(tl["nodes"])):
            series = tl["nodes"].setdefault(gid, [0] * (cols - 1))
            series.append(counts.get(gid, 0))
            target = tl["target"].setdefault(gid, [None] * (cols - 1))
            target.append(self.targets.get(gid))
        unready = Counter(node.group for node in world.nodes.values() if not node.ready)
        for gid in tl["nodes"]:
            tl.setdefault("unready", {}).setdefault(gid, [0] * (cols - 1)).append(unready.get(gid, 0))
        tl["pending"].append(len(world.pending))
        tl["groups"] = {gid: dict(b) for gid, b in sorted(self.bounds.items())}

    def node_hours(self) -> float:
        """Group nodes times time: each sample holds until the next one."""
        ts = self.data["t"]
        total = 0.0
        for series in self.data["nodes"].values():
            for i in range(len(ts) - 1):
                total += series[i] * (ts[i + 1] - ts[i])
        return round(total / 3600.0, 4)
