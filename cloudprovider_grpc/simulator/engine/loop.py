"""The loop: CA's RunOnce on a virtual clock, calling the phases in CA's order.

Loop order follows sigs-CA `pkg/core/static_autoscaler.go` RunOnce:
1. controllers act (workload arrivals, departures, Job completions) - the world, not CA;
2. Refresh (an error aborts the loop), NodeGroups;
3. node lifecycle (`cluster_state`): listings, kubelets, node events, readiness, the scheduler;
4. NodeGroupForNode for every node, templates;
5. cluster state: creation errors, unregistered nodes, request timeouts, fixNodeGroupSize (which
   ends the loop), IsClusterHealthy (which ends it too);
6. scale-up (`scale_up`), then scale-down (`scale_down`) outside its cooldown.

`Simulation` builds the run context (`context.py`) and the parts, hands each phase object the
parts it reads, and after the last loop has `summary.py` build the report.

Known simplifications: see README "Not modelled".
"""

from __future__ import annotations

import contextlib
import re
import time
from collections import Counter
from collections.abc import Callable

from cloudprovider_grpc.simulator.client import CAClient, GroupInfo, RpcError
from cloudprovider_grpc.simulator.clock import VirtualClock
from cloudprovider_grpc.simulator.engine.activity import Activity
from cloudprovider_grpc.simulator.engine.cluster_state import ClusterState
from cloudprovider_grpc.simulator.engine.context import RunContext
from cloudprovider_grpc.simulator.engine.costs import NodeCosts
from cloudprovider_grpc.simulator.engine.group_options import GroupOptionsCache
from cloudprovider_grpc.simulator.engine.node_events import NodeEvents
from cloudprovider_grpc.simulator.engine.scale_down.drain import DrainRules
from cloudprovider_grpc.simulator.engine.scale_down.phase import ScaleDownPhase
from cloudprovider_grpc.simulator.engine.scale_down.planner import ScaleDownPlanner
from cloudprovider_grpc.simulator.engine.scale_up.phase import ScaleUpPhase
from cloudprovider_grpc.simulator.engine.scale_up.requests import ScaleUpRequests
from cloudprovider_grpc.simulator.engine.summary import build_report
from cloudprovider_grpc.simulator.engine.timeline import Timeline
from cloudprovider_grpc.simulator.model import NodeShape
from cloudprovider_grpc.simulator.report import Report
from cloudprovider_grpc.simulator.scenario import Scenario

_NAMED = re.compile(r"\b(?:pool|nodepool|group)\s+([^\s(),]+)")


def display_name(gid: str, debug: str) -> str:
    """The name a person knows a group by, where the cloud has one: clouds whose group ids are
    UUIDs (VKE pools, SKS nodepools, Instance Pools) name the group in NodeGroup.debug
    ("vultr pool general (…)"); otherwise the id is the name."""
    if debug and " " not in debug.strip():
        return debug.strip()
    m = _NAMED.search(debug or "")
    return m.group(1) if m else gid


class Simulation:
    """Runs one scenario; construct with clients bound to a server, then `run()`.

    Holds the run context and the parts each phase owns, handing each phase the parts it reads:
    the cluster state (listings, registrations, templates, its checks), the node events, the
    scale-ups in flight with the groups' back-offs, the scale-down planner, the times CA last
    acted, the GetOptions answers, the node costs and the timeline."""

    def __init__(
        self,
        scenario: Scenario,
        client: CAClient,
        world_client: CAClient,
        clock: VirtualClock,
        seed: int = 0,
        provider: str = "sim",
        echo: Callable[[str], None] | None = None,
        pace: bool = False,
    ) -> None:
        ctx = self.ctx = RunContext.start(scenario, client, world_client, clock, seed, provider, echo, pace)
        o = ctx.options
        self.timeline = Timeline()
        self.costs = NodeCosts(world_client, clock)
        self.activity = Activity()
        self.group_options = GroupOptionsCache(client, o)
        self.scale_ups = ScaleUpRequests.for_options(o)
        self.planner = ScaleDownPlanner(
            DrainRules(o.skip_nodes_with_system_pods, o.skip_nodes_with_local_storage),
            o.scale_down_non_empty_candidates_count,
            o.unremovable_node_recheck_timeout,
        )
        self.cluster = ClusterState(ctx, self.scale_ups, self.planner, self.costs, self.group_options)
        self.events = NodeEvents(ctx, self.cluster.invalidate)
        self.scale_up = ScaleUpPhase(
            ctx, self.scale_ups, self.cluster, self.activity, self.timeline, self.group_options
        )
        self.scale_down = ScaleDownPhase(
            ctx, self.planner, self.cluster, self.activity, self.timeline, self.group_options
        )

    def run(self) -> Report:
        ctx = self.ctx
        interval = ctx.options.scan_interval
        loops = int(ctx.scenario.duration // interval) + 1
        wall_start = time.monotonic()
        for i in range(loops):
            t = i * interval
            if ctx.pace:  # a server on the real clock: loops start every scan-interval, like CA's
                time.sleep(max(0.0, wall_start + t - time.monotonic()))
            ctx.clock.set(t)
            ctx.rec.loop, ctx.rec.t = i, t
            self.run_once(t)
            self.timeline.sample(t, ctx.world)
        with contextlib.suppress(RpcError):  # CA calls Cleanup when it shuts down
            ctx.client.cleanup()
        end = self.timeline.data["t"][-1] if self.timeline.data["t"] else 0.0
        self.events.report_never_applied(end)
        return build_report(ctx, self.timeline, self.costs)

    def run_once(self, t: float) -> None:
        """One RunOnce; every early end still lets the scheduler bind what it can."""
        world = self.ctx.world
        world.apply_controllers(t)
        groups = self._refresh_groups()
        if groups is not None:
            self._autoscale(groups, t)
        world.schedule(t)

    def _refresh_groups(self) -> list[GroupInfo] | None:
        """Refresh (an error aborts the loop), then NodeGroups with the scenario's bounds, and
        the GPU label and types CA reads to recognise GPU nodes (its client caches them after the
        first success)."""
        ctx = self.ctx
        try:
            ctx.client.refresh()
        except RpcError as exc:
            ctx.rec.line(f"Failed to refresh cloud provider: {exc}")
            ctx.rec.decide("loop-aborted", reason=str(exc))
            return None
        groups = self.cluster.override(ctx.client.node_groups())
        self.timeline.group_ids = [g.id for g in groups]
        if not self.cluster.initialized:
            self.events.check_groups(self.timeline.group_ids)
        for g in groups:
            bounds = self.timeline.bounds[g.id] = {"min_size": g.min_size, "max_size": g.max_size}
            name = display_name(g.id, g.debug)
            if name != g.id:
                bounds["name"] = name
        ctx.client.gpu_label()
        ctx.client.gpu_types()
        return groups

    def _autoscale(self, groups: list[GroupInfo], t: float) -> None:
        """Node lifecycle, cluster state, then scale-up and scale-down, unless the cluster state
        ends the loop (fixNodeGroupSize acted, or the cluster is unhealthy)."""
        cluster, world = self.cluster, self.ctx.world
        cluster.list_instances(groups, t)
        cluster.kubelets(groups, t)
        self.events.apply(t)
        cluster.readiness(t)
        if not cluster.initialized:
            cluster.clean_up_taints()
        world.schedule(t)
        node_group = self.ctx.client.group_ids_for_nodes(world.nodes.values())
        templates = cluster.templates(groups, node_group)
        cluster.creation_errors(groups, t)
        targets = self._target_sizes(groups)
        registered = Counter(gid for gid in node_group.values() if gid)
        cluster.unregistered(groups, targets, t)
        cluster.track_requests(targets, registered, t)
        if cluster.fix_node_group_sizes(groups, targets, registered, t) or not cluster.cluster_healthy(t):
            return
        upcoming = self._upcoming(node_group, targets, t)
        scaled_up = self._scale_up(groups, targets, templates, registered, upcoming, t)
        if self.ctx.options.scale_down_enabled:
            self.scale_down.scale_down(groups, targets, node_group, t, scaled_up)

    def _target_sizes(self, groups: list[GroupInfo]) -> dict[str, int]:
        """NodeGroupTargetSize per group; a group whose call fails is left out of this loop."""
        targets: dict[str, int] = {}
        for g in groups:
            try:
                targets[g.id] = self.ctx.client.target_size(g.id)
            except RpcError as exc:
                self.ctx.rec.line(f"Failed to get target size of node group {g.id}: {exc}")
                continue
            self.timeline.saw_target(g.id, targets[g.id])
        return targets

    def _upcoming(
        self, node_group: dict[str, str | None], targets: dict[str, int], t: float
    ) -> dict[str, int]:
        """clusterstate.go calculateUpcomingNodesInNodeGroup: target - (ready + unready); nodes
        still starting (NotReady for less than MaxNodeStartupTime since registering) stay upcoming."""
        nodes, not_started = self.ctx.world.nodes, self.cluster.not_started
        # a Ready node has started: only the NotReady ones need the group's startup time
        started = Counter(
            gid
            for name, gid in node_group.items()
            if gid and (nodes[name].ready or not not_started(nodes[name], t))
        )
        return {gid: max(0, targets[gid] - started[gid]) for gid in targets}

    def _scale_up(
        self,
        groups: list[GroupInfo],
        targets: dict[str, int],
        templates: dict[str, NodeShape],
        registered: Counter[str],
        upcoming: dict[str, int],
        t: float,
    ) -> bool:
        """The pods CA acts on, and a scale-up when there are any; True when a group grew."""
        pod_groups = self.scale_up.unschedulable(t, templates, upcoming)
        if not pod_groups:
            self.scale_up.nothing_pending()
            return False
        return self.scale_up.scale_up(pod_groups, groups, targets, templates, registered, upcoming, t)
