"""The loop: CA's RunOnce on a virtual clock, calling the phases in CA's order.

Loop order follows sigs-CA `pkg/core/static_autoscaler.go` RunOnce:
1. controllers act (workload arrivals, departures, Job completions) - the world, not CA;
2. Refresh (an error aborts the loop), NodeGroups;
3. node lifecycle (`cluster_state`): listings, kubelets, node events, readiness, the scheduler;
4. NodeGroupForNode for every node, templates;
5. cluster state: creation errors, unregistered nodes, request timeouts, fixNodeGroupSize (which
   ends the loop), IsClusterHealthy (which ends it too);
6. scale-up (`scale_up`), then scale-down (`scale_down`) outside its cooldown.

Known simplifications: see README "Not modelled".
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from collections import Counter
from typing import Any

from cloudprovider_grpc.simulator.client import RpcError
from cloudprovider_grpc.simulator.engine.cluster_state import ClusterStatePhase
from cloudprovider_grpc.simulator.engine.scale_down.phase import ScaleDownPhase
from cloudprovider_grpc.simulator.engine.scale_up.phase import ScaleUpPhase
from cloudprovider_grpc.simulator.report import Report
from cloudprovider_grpc.simulator.scenario import ScenarioError

_NAMED = re.compile(r"\b(?:pool|nodepool|group)\s+([^\s(),]+)")


def display_name(gid: str, debug: str) -> str:
    """The name a person knows a group by, where the cloud has one: clouds whose group ids are
    UUIDs (VKE pools, SKS nodepools, Instance Pools) name the group in NodeGroup.debug
    ("vultr pool general (…)"); otherwise the id is the name."""
    if debug and " " not in debug.strip():
        return debug.strip()
    m = _NAMED.search(debug or "")
    return m.group(1) if m else gid


#: what a backend's PricingNodePrice is in, when its cloud's price list says (Vultr: USD per plan)
KNOWN_UNITS = {"vultr": "USD"}


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (no interpolation: every figure is one a pod really had)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def pending_stats(waits: list[float]) -> dict[str, float | int]:
    """How long pods waited between creation and binding; pods still pending at the end count
    with their wait so far."""
    if not waits:
        return {"pods": 0, "p50": 0.0, "p99": 0.0, "max": 0.0}
    return {
        "pods": len(waits),
        "p50": round(percentile(waits, 50), 3),
        "p99": round(percentile(waits, 99), 3),
        "max": round(max(waits), 3),
    }


def node_hours(tl: dict[str, Any]) -> float:
    """Group nodes times time, from the timeline: each sample holds until the next one."""
    ts = tl["t"]
    total = 0.0
    for series in tl["nodes"].values():
        for i in range(len(ts) - 1):
            total += series[i] * (ts[i + 1] - ts[i])
    return round(total / 3600.0, 4)


class Simulation(ClusterStatePhase, ScaleUpPhase, ScaleDownPhase):
    """Runs one scenario; construct with clients bound to a server, then `run()`."""

    def run(self) -> Report:
        interval = self.o.scan_interval
        loops = int(self.s.duration // interval) + 1
        wall_start = time.monotonic()
        for i in range(loops):
            t = i * interval
            if self.pace:  # a server on the real clock: loops start every scan-interval, like CA's
                time.sleep(max(0.0, wall_start + t - time.monotonic()))
            self.clock.set(t)
            self.rec.loop, self.rec.t = i, t
            self.run_once(t)
            self._sample(t)
        with contextlib.suppress(RpcError):  # CA calls Cleanup when it shuts down
            self.client.cleanup()
        return self._report()

    def _check_event_groups(self) -> None:
        """A node event (a `--drain-group`) naming no node group would otherwise do nothing,
        silently: the groups are known only once the server answered, so this runs in loop 0."""
        unknown = sorted({ev.group for ev in self._events if ev.group} - set(self._group_ids))
        if unknown:
            raise ScenarioError(
                f"node_events (--drain-group): no node group {', '.join(map(repr, unknown))} "
                f"(node groups: {', '.join(self._group_ids) or 'none'})"
            )

    def run_once(self, t: float) -> None:
        w = self.world
        w.apply_controllers(t)
        try:
            self.client.refresh()
        except RpcError as exc:
            self.rec.line(f"Failed to refresh cloud provider: {exc}")
            self.rec.decide("loop-aborted", reason=str(exc))
            w.schedule(t)
            return
        groups = self._override(self.client.node_groups())
        self._group_ids = [g.id for g in groups]
        if not self._initialized:
            self._check_event_groups()
        for g in groups:
            self._bounds[g.id] = {"min_size": g.min_size, "max_size": g.max_size}
            name = display_name(g.id, g.debug)
            if name != g.id:
                self._bounds[g.id]["name"] = name
        # CA reads these to recognise GPU nodes; its client caches them after the first success
        self.client.gpu_label()
        self.client.gpu_types()
        self._list_instances(groups, t)
        self._kubelets(groups, t)
        self._node_events(t)
        self._readiness(t)
        if not self._initialized:
            self._clean_up_taints()
        w.schedule(t)
        node_group = self.client.group_ids_for_nodes(w.nodes.values())
        templates = self._templates(groups, node_group)
        self._creation_errors(groups, t)
        targets: dict[str, int] = {}
        for g in groups:
            try:
                targets[g.id] = self._seen_targets[g.id] = self.client.target_size(g.id)
            except RpcError as exc:
                self.rec.line(f"Failed to get target size of node group {g.id}: {exc}")
        registered = Counter(gid for gid in node_group.values() if gid)
        self._unregistered(groups, targets, t)
        self._track_requests(targets, registered, t)
        if self._fix_node_group_sizes(groups, targets, registered, t):
            w.schedule(t)
            return
        if not self._cluster_healthy(t):
            w.schedule(t)
            return
        # clusterstate.go calculateUpcomingNodesInNodeGroup: target - (ready + unready); nodes still
        # starting (NotReady for less than MaxNodeStartupTime since registering) stay upcoming
        started = Counter(
            gid for name, gid in node_group.items() if gid and not self._not_started(w.nodes[name], t)
        )
        upcoming = {gid: max(0, targets[gid] - started[gid]) for gid in targets}
        pod_groups = self._unschedulable(t, templates, upcoming)
        scaled_up = False
        if pod_groups:
            scaled_up = self._scale_up(pod_groups, groups, targets, templates, registered, upcoming, t)
        else:
            self._last_no_scale_up = None
        if self.o.scale_down_enabled:
            self._scale_down(groups, targets, node_group, t, scaled_up)
        w.schedule(t)

    def _sample(self, t: float) -> None:
        """One timeline column: ready nodes and CA's target size per group, pending pods.

        A group that appears later gets zeros (nodes) and None (target: not known yet) before."""
        tl = self.tl
        tl["t"].append(t)
        cols = len(tl["t"])
        counts = Counter(node.group for node in self.world.nodes.values())
        for gid in sorted(set(self._group_ids) | set(tl["nodes"])):
            series = tl["nodes"].setdefault(gid, [0] * (cols - 1))
            series.append(counts.get(gid, 0))
            target = tl["target"].setdefault(gid, [None] * (cols - 1))
            target.append(self._seen_targets.get(gid))
        unready = Counter(node.group for node in self.world.nodes.values() if not node.ready)
        for gid in tl["nodes"]:
            tl.setdefault("unready", {}).setdefault(gid, [0] * (cols - 1)).append(unready.get(gid, 0))
        tl["pending"].append(len(self.world.pending))
        tl["groups"] = {gid: dict(b) for gid, b in sorted(self._bounds.items())}

    def _cost(self, end: float) -> dict[str, Any] | None:
        for pid in sorted(self.lifetimes):
            self._price_lifetime(pid, end)
        if self.cost_unavailable:
            return None
        return {
            "total": round(sum(self.costs.values()), 6),
            "per_group": {k: round(v, 6) for k, v in sorted(self.costs.items())},
            "basis": "PricingNodePrice over each node's registered lifetime",
            "unit": self.s.cost_unit or KNOWN_UNITS.get(self.provider, "price units"),
        }

    def _report(self) -> Report:
        end = self.tl["t"][-1] if self.tl["t"] else 0.0
        cost = self._cost(end)
        for i, ev in enumerate(self._events):
            if i not in self._events_done and ev.at <= end:
                # a typo in a node name must not pass silently as "nothing happened"
                what = ev.node or f"group {ev.group}"
                self.rec.line(f"node event for {what} at {self.rec.stamp(ev.at)} never applied: no such node")
        decisions = self.rec.decisions
        kinds = Counter(d.kind for d in decisions)
        summary = {
            "loops": len(self.tl["t"]),
            "simulated_seconds": end,
            "decisions": dict(sorted(kinds.items())),
            "nodes_added": sum(d.delta for d in decisions if d.kind == "scale-up"),
            "nodes_removed": kinds.get("scale-down", 0),
            "max_pending_pods": max(self.tl["pending"], default=0),
            "final_nodes": {g: s[-1] for g, s in sorted(self.tl["nodes"].items()) if s},
            "jobs_completed": self.world.completed,
            "pod_pending_seconds": pending_stats(
                [*self.world.waits, *(end - p.created for p in self.world.pending.values())]
            ),
            "node_hours": node_hours(self.tl),
        }
        finished = self.world.job_finish_times()
        self.tl["workloads"] = [
            {
                "name": w.name,
                "start": w.start,
                "end": w.end,
                "kind": w.kind,
                **({"finished": finished[w.name]} if w.name in finished else {}),
            }
            for w in self.s.workloads
        ]
        notes = []
        zero = sorted(d.group for d in decisions if d.kind == "startup-time-zero")
        if zero:
            notes.append(
                f"CA {self.o.version} with node groups that answer GetOptions ({', '.join(zero)}): "
                "MaxNodeStartupTime is 0 for them, so a booting node counts as unready at once and "
                "enough of them stop autoscaling (max-total-unready-percentage "
                f"{self.o.max_total_unready_percentage:g}%, ok-total-unready-count "
                f"{self.o.ok_total_unready_count})"
            )
        return Report(
            notes=notes,
            scenario=self.s.name,
            seed=self.seed,
            provider=self.provider,
            start_time=self.s.start_time,
            options=self.o.model_dump(by_alias=True),
            decisions=decisions,
            log=self.rec.lines,
            timeline=self.tl,
            rpc_counts={
                "autoscaler": dict(sorted(self.client.counts.items())),
                "simulator": dict(sorted(self.wclient.counts.items())),
            },
            cost=cost,
            summary=summary,
        )
