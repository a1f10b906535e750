"""One simulation: CA's RunOnce loop on a virtual clock, talking to a server through `CAClient`.

Loop order follows sigs-CA `pkg/core/static_autoscaler.go` RunOnce (research notes section 3.1):
1. controllers act (workload arrivals, departures, Job completions) - the world, not CA;
2. Refresh (an error aborts the loop), NodeGroups;
3. NodeGroupNodes for groups whose cached listing is stale (2m, as
   `pkg/clusterstate/utils/node_instances_cache.go`) or that are scaling up / just deleted nodes;
   kubelets register machines the cloud reports running (NotReady for `node_ready_delay`), the
   scenario's node events apply, CA's first loop removes ToBeDeleted taints a previous run left
   (`cleanUpIfRequired`), and the scheduler binds what fits;
4. NodeGroupForNode for every node, templates from a real ready node of each group, else the
   cached real-node template, else NodeGroupTemplateNodeInfo
   (`pkg/processors/nodeinfosprovider/mixed_nodeinfos_processor.go`);
5. cluster state (`pkg/clusterstate/clusterstate.go`): creation errors back the group off and are
   deleted (`deleteCreatedNodesWithErrors`), instances unregistered past
   `max-node-provision-time` are deleted, scale-up requests that time out back off, and a target
   above the registered size for longer than the provision time is decreased (`fixNodeGroupSize`,
   which ends the loop); too many unready nodes end the loop too (IsClusterHealthy);
6. upcoming nodes (target - ready - unready: nodes still starting count as upcoming) are injected
   and pods that fit them are filtered out (`pkg/core/podlistprocessor/filter_out_schedulable.go`),
   as are expendable and too-young pods;
7. scale-up (`scaleup.py`), then scale-down (`scaledown.py`) outside its cooldown, deleting one
   node per DeleteNodes call after a GetOptions call, like CA's actuator (a zero-or-max group's
   nodes in one call).

Known simplifications: GetOptions answers are memoised per group within one loop for eligibility
(CA asks about twice per node), while deletions still call it once per node; scale-up reads a
group's zeroOrMaxNodeScaling from its last GetOptions answer instead of asking again (README
"Not modelled" lists the rest).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.protos import k8s_pb2
from cloudprovider_grpc.simulator import limits
from cloudprovider_grpc.simulator.backoff import Backoff
from cloudprovider_grpc.simulator.client import CAClient, GroupInfo, GroupOptions, InstanceInfo, RpcError
from cloudprovider_grpc.simulator.clock import VirtualClock
from cloudprovider_grpc.simulator.estimator import PodGroup
from cloudprovider_grpc.simulator.expanders import Chain, ExpanderContext
from cloudprovider_grpc.simulator.fit import StaticFitCache, fit_count, resources_fit, static_fit
from cloudprovider_grpc.simulator.interpod import HOSTNAME, Placement
from cloudprovider_grpc.simulator.model import (
    CPU,
    MEMORY,
    TO_BE_DELETED_TAINT,
    Node,
    NodeShape,
    PodShape,
    Resources,
    Taint,
    add_into,
    node_name_for,
    pod_proto,
)
from cloudprovider_grpc.simulator.report import Recorder, Report
from cloudprovider_grpc.simulator.scaledown import (
    DrainRules,
    GroupScaleDownOptions,
    Removal,
    ScaleDownPlanner,
    select_removals,
)
from cloudprovider_grpc.simulator.scaleup import GroupView, plan_scale_up
from cloudprovider_grpc.simulator.scenario import Scenario
from cloudprovider_grpc.simulator.world import World, static_shape

RUNNING, CREATING, DELETING = 1, 2, 3
INSTANCES_CACHE_REFRESH = 120.0  # node_instances_cache.go background refresh interval
ERROR_CLASS = {1: "OutOfResource", 99: "OtherError"}
STABILIZATION_POD = {CPU: "500m", MEMORY: "500Mi"}  # price.go priceStabilizationPod
MAX_NODE_STARTUP_TIME = 900.0  # clusterstate.go MaxNodeStartupTime


@dataclass
class _ScaleUpRequest:
    increase: int
    time: float
    expected_by: float


class RpcPricing:
    """The price expander's pricing model over PricingNodePrice / PricingPodPrice."""

    def __init__(self, client: CAClient) -> None:
        self.client = client

    def node_price(self, template: NodeShape, start: datetime, end: datetime) -> float | None:
        node = pb.ExternalGrpcNode(
            name=f"template-node-for-{template.group}-sim", labels=dict(template.labels)
        )
        return self.client.node_price(node, start, end)

    def pod_price(self, shape: PodShape, start: datetime, end: datetime) -> float | None:
        return self.client.pod_price(
            pod_proto(f"{shape.owner}-x", shape.namespace, shape.containers), start, end
        )

    def stabilization_price(self, start: datetime, end: datetime) -> float | None:
        return self.client.pod_price(pod_proto("stabilize", "default", [STABILIZATION_POD]), start, end)


class Simulation:
    """Runs one scenario; construct with clients bound to a server, then `run()`."""

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
        self.pace = pace
        self.s = scenario
        self.o = scenario.autoscaler
        self.client = client
        self.wclient = world_client
        self.clock = clock
        self.seed = seed
        self.provider = provider
        self.rng = random.Random(seed)
        self.world = World(scenario)
        self.rec = Recorder(scenario.start_time, echo)
        self.backoff = Backoff(
            self.o.initial_node_group_backoff_duration,
            self.o.max_node_group_backoff_duration,
            self.o.node_group_backoff_reset_timeout,
        )
        self.chain = Chain(self.o.expander)
        self.planner = ScaleDownPlanner(
            DrainRules(self.o.skip_nodes_with_system_pods, self.o.skip_nodes_with_local_storage),
            self.o.scale_down_non_empty_candidates_count,
            self.o.unremovable_node_recheck_timeout,
        )
        self.pricing = RpcPricing(client)
        self.fits = StaticFitCache()
        self.instances: dict[str, list[InstanceInfo]] = {}
        self.instances_at: dict[str, float] = {}
        self.invalid: set[str] = set()
        self.first_seen: dict[str, float] = {}
        self.seen_errors: set[str] = set()
        self.removed_ids: set[str] = set()
        self.requests: dict[str, _ScaleUpRequest] = {}
        self.real_templates: dict[str, NodeShape] = {}
        self.world_templates: dict[str, NodeShape | None] = {}
        self._shapes: dict[tuple[str, bytes], NodeShape] = {}
        self._free: dict[int, Resources] = {}
        self.incorrect_since: dict[str, float] = {}
        self.last_scale_up = -math.inf
        self.last_delete = -math.inf
        self.last_failure = -math.inf
        self.lifetimes: dict[str, dict[str, Any]] = {}
        self.costs: dict[str, float] = {}
        self.cost_unavailable = ""
        self.tl: dict[str, Any] = {"t": [], "nodes": {}, "target": {}, "pending": []}
        self._last_no_scale_up: tuple[Any, ...] | None = None
        self._last_cooldown = ""
        self._skip_logged: set[tuple[str, str]] = set()
        self._group_ids: list[str] = []
        self._bounds: dict[str, dict[str, int]] = {}
        self._seen_targets: dict[str, int] = {}  # target sizes as CA last knew them, for the timeline
        self._unknown_overrides: set[str] = set()
        self._kubelet_listing: dict[
            str, list[InstanceInfo]
        ] = {}  # the listing each group's kubelets last saw
        self._events = sorted(scenario.node_events, key=lambda e: e.at)
        self._events_done: set[int] = set()
        self._initialized = False  # CA's cleanUpIfRequired runs once, in the first loop
        self._healthy = True
        self._options_seen: dict[str, GroupOptions] = {}  # the last NodeGroupGetOptions answer per group
        self._interpod = any(c.shape.interpod for c in self.world.controllers)
        for sn in scenario.static_nodes:
            shape = static_shape(sn)
            for i in range(sn.count):
                name = sn.name if sn.count == 1 else f"{sn.name}-{i}"
                node = self.world.register(name, f"static://{name}", shape, 0.0)
                node.annotations.update(sn.annotations)

    # ------------------------------------------------------------------ driver
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
        for g in groups:
            self._bounds[g.id] = {"min_size": g.min_size, "max_size": g.max_size}
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

    # ------------------------------------------------------------------ node state
    def _not_started(self, node: Node, t: float) -> bool:
        """clusterstate.go updateReadinessStats: NotReady and registered less than
        MaxNodeStartupTime (15m) ago."""
        return not node.ready and t - node.registered < MAX_NODE_STARTUP_TIME

    def _readiness(self, t: float) -> None:
        """Kubelets turn Ready `node_ready_delay` after registering, unless an event decides."""
        delay = self.s.node_ready_delay
        for node in self.world.nodes.values():
            ready = node.ready_override if node.ready_override is not None else t - node.registered >= delay
            if ready != node.ready:
                node.ready = ready
                node.version += 1
                self.rec.line(f"world: node {node.name} is {'Ready' if ready else 'NotReady'}")

    def _node_events(self, t: float) -> None:
        """Apply the scenario's due node events to nodes that exist (later ones wait for theirs)."""
        for i, ev in enumerate(self._events):
            if ev.at > t:
                break
            if i in self._events_done or ev.node not in self.world.nodes:
                continue
            self._events_done.add(i)
            node = self.world.nodes[ev.node]
            if ev.ready is not None:
                node.ready_override = ev.ready
            if ev.annotations:
                node.annotations.update(ev.annotations)
                self.rec.line(f"world: node {node.name} annotated {dict(sorted(ev.annotations.items()))}")
            if ev.taints or ev.remove_taints:
                drop = set(ev.remove_taints) | {x.key for x in ev.taints}
                kept = tuple(x for x in node.shape.taints if x.key not in drop)
                added = tuple(Taint(x.key, x.value, x.effect) for x in ev.taints)
                node.shape = dataclasses.replace(node.shape, taints=kept + added)
                node.version += 1
                node.to_be_deleted = any(x.key == TO_BE_DELETED_TAINT for x in node.shape.taints)
                self.rec.line(f"world: node {node.name} taints now {[x.key for x in node.shape.taints]}")
            if ev.delete:
                self._outside_delete(node)

    def _outside_delete(self, node: Node) -> None:
        """Someone else (an operator, a CA that died mid-deletion) deletes the node's machine through
        the cloud; the call goes over the simulator's own connection, not CA's."""
        group = self.wclient.node_group_for_node(node.name, node.provider_id, node.shape.labels)
        if group is None:
            self.rec.line(f"world: cannot delete {node.name}: it is in no node group")
            return
        ref = pb.ExternalGrpcNode(providerID=node.provider_id, name=node.name, labels=dict(node.shape.labels))
        try:
            self.wclient.delete_nodes(group.id, [ref])
        except RpcError as exc:
            self.rec.line(f"world: deleting {node.name} failed: {exc.details}")
            return
        taints = tuple(x for x in node.shape.taints if x.key != TO_BE_DELETED_TAINT)
        node.shape = dataclasses.replace(
            node.shape, taints=(*taints, Taint(TO_BE_DELETED_TAINT, "", "NoSchedule"))
        )
        node.to_be_deleted = True
        self.invalid.add(group.id)
        self.rec.line(f"world: deletion of {node.name} in progress (started outside this CA)")

    def _clean_up_taints(self) -> None:
        """static_autoscaler.go cleanUpIfRequired: on its first loop CA removes ToBeDeleted taints a
        previous run left on nodes of its node groups (their deletions may still finish)."""
        self._initialized = True
        for node in self.world.nodes.values():
            if not node.group or not any(x.key == TO_BE_DELETED_TAINT for x in node.shape.taints):
                continue
            kept = tuple(x for x in node.shape.taints if x.key != TO_BE_DELETED_TAINT)
            node.shape = dataclasses.replace(node.shape, taints=kept)
            node.to_be_deleted = False
            node.version += 1
            self.rec.line(f"Removed ToBeDeleted taint from node {node.name} (left by a previous run)")

    def _placement(self) -> Placement | None:
        """The schedulable nodes and their pods for inter-pod predicates, or None when no
        workload has such constraints (the common case costs nothing)."""
        if not self._interpod:
            return None
        return Placement.of(n for n in self.world.nodes.values() if n.schedulable)

    def _cluster_healthy(self, t: float) -> bool:
        """clusterstate.go IsClusterHealthy: too many unready nodes stop the loop (static_autoscaler
        "Cluster is not ready for autoscaling"), and the unneeded timers start over."""
        nodes = self.world.nodes.values()
        unready = sum(1 for n in nodes if not n.ready and not self._not_started(n, t))
        healthy = not (
            unready > self.o.ok_total_unready_count
            and unready > self.o.max_total_unready_percentage / 100.0 * len(self.world.nodes)
        )
        if healthy != self._healthy:
            self._healthy = healthy
            if not healthy:
                self.rec.line("Cluster is not ready for autoscaling")
                self.rec.decide(
                    "cluster-unhealthy",
                    reason=f"{unready} of {len(self.world.nodes)} nodes unready",
                    inputs={"unready": unready, "nodes": len(self.world.nodes)},
                )
            else:
                self.rec.line("Cluster is ready for autoscaling again")
        if not healthy:
            self.planner.clear()
        return healthy

    def _override(self, groups: list[GroupInfo]) -> list[GroupInfo]:
        """Apply the scenario's `node_groups` bounds to CA's view of the groups."""
        if not self.s.node_groups:
            return groups
        known = {g.id for g in groups}
        for gid in sorted(set(self.s.node_groups) - known - self._unknown_overrides):
            self._unknown_overrides.add(gid)
            self.rec.line(f"node_groups override for {gid!r} ignored: the server has no such node group")
        out = []
        for g in groups:
            o = self.s.node_groups.get(g.id)
            if o is not None:
                lo = g.min_size if o.min_size is None else o.min_size
                hi = g.max_size if o.max_size is None else o.max_size
                g = GroupInfo(g.id, lo, hi, g.debug)
            out.append(g)
        return out

    # ------------------------------------------------------------------ observation
    def _list_instances(self, groups: list[GroupInfo], t: float) -> None:
        for g in groups:
            cached = self.instances.get(g.id)
            due = (
                cached is None
                or g.id in self.invalid
                or g.id in self.requests
                or t - self.instances_at.get(g.id, -math.inf) >= INSTANCES_CACHE_REFRESH
                or any(i.state != DELETING and i.id not in self.world.by_provider_id for i in cached)
            )
            if not due:
                continue
            try:
                self.instances[g.id] = self.client.nodes(g.id)
                self.instances_at[g.id] = t
            except RpcError as exc:
                self.rec.line(f"Failed to list instances of node group {g.id}: {exc}")
        self.invalid.clear()

    def _kubelets(self, groups: list[GroupInfo], t: float) -> None:
        """Machines the cloud reports running join the cluster; vanished machines leave it."""
        for g in groups:
            listing = self.instances.get(g.id, [])
            if self._kubelet_listing.get(g.id) is listing:
                continue  # the same listing as last loop: everything in it that could join has
            self._kubelet_listing[g.id] = listing
            for inst in listing:
                self.first_seen.setdefault(inst.id, t)
                if inst.error_code or inst.state not in (RUNNING, 0):
                    continue
                if inst.id in self.world.by_provider_id or inst.id in self.removed_ids:
                    continue
                shape = self._world_template(g.id)
                if shape is None:
                    continue
                name = node_name_for(inst.id)
                self.world.register(name, inst.id, shape, t, ready=self.s.node_ready_delay <= 0)
                self.lifetimes[inst.id] = {
                    "group": g.id,
                    "name": name,
                    "labels": dict(shape.labels),
                    "start": t,
                }
                self.rec.line(f"world: node {name} registered ({inst.id} is running)")
            if self.instances_at.get(g.id) == t:
                alive = {i.id for i in listing if i.state != DELETING}
                for node in [n for n in self.world.nodes.values() if n.group == g.id]:
                    if node.provider_id not in alive:
                        self.rec.line(f"world: node {node.name} left the cluster (its machine is gone)")
                        self._drop_node(node, t)

    def _world_template(self, group: str) -> NodeShape | None:
        if group not in self.world_templates:
            try:
                raw = self.wclient.template(group)
            except RpcError:
                raw = None
            self.world_templates[group] = self._shape(group, raw) if raw is not None else None
        return self.world_templates[group]

    def _shape(self, group: str, node: k8s_pb2.Node) -> NodeShape:
        key = (group, node.SerializeToString(deterministic=True))
        shape = self._shapes.get(key)
        if shape is None:
            shape = NodeShape.from_k8s(node, group)
            self._shapes[key] = shape
        return shape

    def _templates(self, groups: list[GroupInfo], node_group: dict[str, str | None]) -> dict[str, NodeShape]:
        found: dict[str, NodeShape] = {}
        for node in self.world.nodes.values():
            gid = node_group.get(node.name)
            if gid and gid not in found and not node.to_be_deleted and node.ready:
                found[gid] = node.shape
        out: dict[str, NodeShape] = {}
        for g in groups:
            if g.id in found:
                out[g.id] = self.real_templates[g.id] = found[g.id]
            elif g.id in self.real_templates:
                out[g.id] = self.real_templates[g.id]
            else:
                try:
                    raw = self.client.template(g.id)
                except (RpcError, ValueError) as exc:
                    self.rec.line(f"Unable to build template for node group {g.id}: {exc}")
                    continue
                if raw is not None:
                    out[g.id] = self._shape(g.id, raw)
        return out

    def template_free(self, shape: NodeShape) -> Resources:
        """Allocatable minus the DaemonSet pods CA adds to a sanitized template node."""
        free = self._free.get(id(shape))
        if free is None:
            free = dict(shape.allocatable)
            for ds in self.world.daemonsets:
                if static_fit(ds, shape) and resources_fit(ds.requests, free):
                    add_into(free, ds.requests, -1)
            self._free[id(shape)] = free
        return free

    # ------------------------------------------------------------------ cluster state
    def _creation_errors(self, groups: list[GroupInfo], t: float) -> None:
        for g in groups:
            errs = [i for i in self.instances.get(g.id, []) if i.state == CREATING and i.error_code]
            if not errs:
                continue
            new = [i for i in errs if i.id not in self.seen_errors]
            self.seen_errors.update(i.id for i in errs)
            if new:
                by_code = Counter((i.error_class, i.error_code) for i in new)
                for (cls, code), n in sorted(by_code.items()):
                    msg = next(i.error_message for i in new if (i.error_class, i.error_code) == (cls, code))
                    self.rec.line(
                        f"Failed adding {n} nodes ({n} unseen previously) to group {g.id} due to "
                        f"{ERROR_CLASS.get(cls, 'OtherError')}.{code}; errorMessages=[{msg!r}]"
                    )
                cls, code = sorted(by_code)[0]
                reason = f"{ERROR_CLASS.get(cls, 'OtherError')}.{code}"
                req = self.requests.get(g.id)
                if req is not None:
                    until = self.backoff.fail(g.id, t, reason)
                    req.increase -= len(new)
                    if req.increase <= 0:
                        del self.requests[g.id]
                    self.rec.line(
                        f"Disabling scale-up for node group {g.id} until {self.rec.stamp(until)}; "
                        f"errorClass={ERROR_CLASS.get(cls, 'OtherError')}; errorCode={code}"
                    )
                    self.rec.decide(
                        "scale-up-failed",
                        group=g.id,
                        delta=-len(new),
                        reason=reason,
                        inputs={"failed_instances": len(new), "backoff_until": until, "error_code": code},
                    )
            fake = [pb.ExternalGrpcNode(providerID=i.id, name=i.id) for i in errs]
            self.rec.line(f"Deleting {len(errs)} from {g.id} node group because of create errors")
            try:
                self.client.delete_nodes(g.id, fake)
            except RpcError as exc:
                self.rec.line(f"Failed to delete nodes with create errors from {g.id}: {exc}")
            self.invalid.add(g.id)

    def _unregistered(self, groups: list[GroupInfo], targets: dict[str, int], t: float) -> None:
        limit = self.o.max_node_provision_time
        for g in groups:
            for inst in self.instances.get(g.id, []):
                if inst.state == DELETING or inst.error_code or inst.id in self.world.by_provider_id:
                    continue
                if inst.id in self.removed_ids or t - self.first_seen.get(inst.id, t) < limit:
                    continue
                if targets.get(g.id, 0) - 1 < g.min_size:
                    continue
                self.rec.line(f"Removing unregistered node {inst.id}")
                try:
                    self.client.delete_nodes(g.id, [pb.ExternalGrpcNode(providerID=inst.id, name=inst.id)])
                except RpcError as exc:
                    self.rec.line(f"Failed to remove node {inst.id}: {exc}")
                    continue
                self.removed_ids.add(inst.id)
                targets[g.id] = targets.get(g.id, 0) - 1
                self.invalid.add(g.id)
                self.rec.decide(
                    "delete-unregistered",
                    group=g.id,
                    delta=-1,
                    reason=f"unregistered for more than max-node-provision-time ({limit:.0f}s)",
                )

    def _track_requests(self, targets: dict[str, int], registered: Counter[str], t: float) -> None:
        for gid, req in list(self.requests.items()):
            if gid not in targets:
                continue
            if registered[gid] >= targets[gid]:
                del self.requests[gid]
            elif t >= req.expected_by:
                del self.requests[gid]
                until = self.backoff.fail(gid, t, "timeout")
                self.rec.line(f"Scale-up timed out for node group {gid} after {t - req.time:.0f}s")
                self.rec.decide(
                    "scale-up-timeout", group=gid, reason="timeout", inputs={"backoff_until": until}
                )

    def _fix_node_group_sizes(
        self, groups: list[GroupInfo], targets: dict[str, int], registered: Counter[str], t: float
    ) -> bool:
        fixed = False
        for g in groups:
            target = targets.get(g.id)
            if target is None or target == registered[g.id]:
                self.incorrect_since.pop(g.id, None)
                continue
            since = self.incorrect_since.setdefault(g.id, t)
            if target > registered[g.id] and t - since >= self.o.max_node_provision_time:
                delta = registered[g.id] - target
                self.rec.line(
                    f"Decreasing size of {g.id}, expected={target} current={registered[g.id]} delta={delta}"
                )
                try:
                    self.client.decrease_target_size(g.id, delta)
                except RpcError as exc:
                    self.rec.line(f"Failed to decrease {g.id}: {exc}")
                    continue
                self.incorrect_since.pop(g.id, None)
                self.invalid.add(g.id)
                self.rec.decide("fix-node-group-size", group=g.id, delta=delta, reason="incorrect size")
                fixed = True
        return fixed

    # ------------------------------------------------------------------ scale-up
    def _unschedulable(
        self, t: float, templates: dict[str, NodeShape], upcoming: dict[str, int]
    ) -> list[PodGroup]:
        pods = sorted(self.world.pending.values(), key=lambda p: (-p.shape.priority, p.created, p.name))
        if not pods:
            return []
        cutoff = self.o.expendable_pods_priority_cutoff
        groups: dict[int, PodGroup] = {}
        expendable = 0
        for p in pods:
            if p.shape.priority < cutoff:
                expendable += 1
            elif t - p.created < self.o.new_pod_scale_up_delay:
                continue  # too young: CA waits new-pod-scale-up-delay before acting on it
            else:
                pg = groups.get(id(p.shape))
                if pg is None:
                    groups[id(p.shape)] = pg = PodGroup(p.shape, 0)
                pg.count += 1
        if expendable:
            self.rec.line(f"{expendable} pods are expendable (priority below {cutoff}); ignored")
        bins: list[tuple[NodeShape, Resources]] = []
        for gid in sorted(upcoming):
            tpl = templates.get(gid)
            if tpl is not None:
                bins.extend((tpl, dict(self.template_free(tpl))) for _ in range(upcoming[gid]))
        # pods with inter-pod constraints are tried one by one against the cluster plus the
        # upcoming nodes (each a fresh hostname), like filter_out_schedulable.go's snapshot
        view = self._placement() if any(pg.shape.interpod for pg in groups.values()) else None
        if view is not None:
            view = view.copy()
            for i, (tpl, _) in enumerate(bins):
                view.add_node(
                    f"upcoming-{tpl.group}-{i}", {**tpl.labels, HOSTNAME: f"upcoming-{tpl.group}-{i}"}
                )
        absorbed = 0
        for pg in groups.values():
            one_by_one = view is not None and view.relevant(pg.shape)
            for i, (tpl, free) in enumerate(bins):
                if pg.count == 0:
                    break
                if not self.fits(pg.shape, tpl):
                    continue
                n = min(pg.count, fit_count(pg.shape.requests, free))
                if one_by_one and view is not None:
                    name = f"upcoming-{tpl.group}-{i}"
                    k = 0
                    while k < n and view.allows(pg.shape, name):
                        view.add_pod(name, pg.shape)
                        k += 1
                    n = k
                if n:
                    for k2, v in pg.shape.requests.items():
                        free[k2] = free.get(k2, 0) - v * n
                    pg.count -= n
                    absorbed += n
        if absorbed:
            self.rec.line(
                f"{absorbed} pods marked as unschedulable can be scheduled on upcoming nodes. "
                "Ignoring in scale up."
            )
        return [pg for pg in groups.values() if pg.count > 0]

    def _scale_up(
        self,
        pod_groups: list[PodGroup],
        groups: list[GroupInfo],
        targets: dict[str, int],
        templates: dict[str, NodeShape],
        registered: Counter[str],
        upcoming: dict[str, int],
        t: float,
    ) -> bool:
        now = self.clock.datetime(t)
        views = []
        for g in groups:
            if g.id not in targets:
                continue
            tpl = templates.get(g.id)
            off = self.backoff.backed_off(g.id, t)
            views.append(
                GroupView(
                    g.id,
                    g.min_size,
                    g.max_size,
                    targets[g.id],
                    tpl,
                    self.template_free(tpl) if tpl is not None else {},
                    f"{off.reason} until {self.rec.stamp(off.until)}" if off else None,
                    self._zero_or_max(g.id),
                )
            )
        # every node counts against the limits, in a group or not, and so do upcoming nodes (as
        # CA <= 1.34 counted them through target sizes; current CA counts ready nodes only)
        gpu_label = self.client.gpu_label()
        shapes = [n.shape for n in self.world.nodes.values()]
        for gid, n in upcoming.items():
            if n and gid in templates:
                shapes.extend([templates[gid]] * n)
        cluster_nodes = len(self.world.nodes) + sum(upcoming.values())
        ctx = ExpanderContext(self.rng, now, len(self.world.nodes), self.pricing, self.s.priorities)
        plan = plan_scale_up(
            pod_groups,
            views,
            self.o,
            self.chain,
            ctx,
            cluster_nodes,
            limits.usage(shapes, gpu_label),
            self.fits,
            gpu_label,
            self._placement(),
        )
        pending = sum(pg.count for pg in pod_groups)
        if not plan.increases:
            key = (plan.reason, tuple(sorted(plan.skipped.items())), pending)
            if key != self._last_no_scale_up:
                self.rec.line(f"{pending} unschedulable pods in {len(pod_groups)} equivalence groups")
                for line in plan.lines:
                    self.rec.line(line)
                self.rec.decide(
                    "no-scale-up",
                    reason=plan.reason,
                    inputs={"pending_pods": pending, "skipped_groups": dict(sorted(plan.skipped.items()))},
                )
            self._last_no_scale_up = key
            return False
        self._last_no_scale_up = None
        self.rec.line(f"{pending} unschedulable pods in {len(pod_groups)} equivalence groups")
        for line in plan.lines:
            self.rec.line(line)
        inputs = {
            "pending_pods": pending,
            "equivalence_groups": [
                {
                    "owner": pg.shape.owner,
                    "pods": pg.count,
                    "requests": dict(sorted(pg.shape.requests.items())),
                }
                for pg in pod_groups
            ],
            "options": [
                {"group": o.group, "node_count": o.node_count, "pods": o.pod_count} for o in plan.options
            ],
            "skipped_groups": dict(sorted(plan.skipped.items())),
            "expander": self.o.expander,
            "chosen": plan.best.group if plan.best else "",
            "estimated": plan.needed,
        }
        any_ok = False
        for gid, delta in plan.increases:
            view = next(v for v in views if v.id == gid)
            try:
                self.client.increase_size(gid, delta)
            except RpcError as exc:
                until = self.backoff.fail(gid, t, f"OtherError.{exc.code.name}")
                self.last_failure = t
                self.rec.line(f"Failed to increase node group {gid} size by {delta}: {exc.details}")
                self.rec.decide(
                    "scale-up-error",
                    group=gid,
                    delta=delta,
                    reason=exc.details,
                    inputs={**inputs, "backoff_until": until},
                )
                continue
            any_ok = True
            self._seen_targets[gid] = view.target + delta
            self.requests[gid] = _ScaleUpRequest(delta, t, t + self.o.max_node_provision_time)
            self.invalid.add(gid)
            self.last_scale_up = t
            reason = f"binpacking needs {plan.needed} node(s) of {plan.best.group if plan.best else gid}"
            if delta < plan.needed:
                reason += f"; +{delta} here (target {view.target}, max size {view.max_size})"
            reason += f"; the chosen option schedules {plan.pods_triggered} of {pending} pending pods"
            self.rec.decide(
                "scale-up",
                group=gid,
                delta=delta,
                reason=reason,
                inputs={**inputs, "target_before": view.target, "max_size": view.max_size},
            )
        return any_ok

    # ------------------------------------------------------------------ scale-down
    def _zero_or_max(self, gid: str) -> bool:
        """The group's zeroOrMaxNodeScaling option. CA reads GetOptions for every group it filters
        for scale-up; the simulator reuses the group's last answer (scale-down asks every loop a
        group has nodes) and asks only for a group it has never asked about."""
        seen = self._options_seen.get(gid)
        if seen is None:
            d = self._defaults()
            try:
                seen = self.client.options(gid, d) or d
            except RpcError:
                return False
            self._options_seen[gid] = seen
        return seen.zero_or_max_node_scaling

    def _defaults(self) -> GroupOptions:
        o = self.o
        return GroupOptions(
            o.scale_down_utilization_threshold,
            o.scale_down_gpu_utilization_threshold,
            o.scale_down_unneeded_time,
            o.scale_down_unready_time,
            o.max_node_provision_time,
            False,
            o.ignore_daemonsets_utilization,
        )

    def _scale_down(
        self,
        groups: list[GroupInfo],
        targets: dict[str, int],
        node_group: dict[str, str | None],
        t: float,
        scaled_up: bool,
    ) -> None:
        gmap = {g.id: g for g in groups}
        memo: dict[str, GroupScaleDownOptions] = {}

        def group_opts(gid: str) -> GroupScaleDownOptions:
            hit = memo.get(gid)
            if hit is None:
                d = self._defaults()
                try:
                    got = self.client.options(gid, d) or d
                    self._options_seen[gid] = got
                except RpcError:
                    got = d
                hit = memo[gid] = GroupScaleDownOptions(
                    got.scale_down_utilization_threshold,
                    got.scale_down_gpu_utilization_threshold,
                    got.scale_down_unneeded_time,
                    got.ignore_daemonsets_utilization,
                    got.scale_down_unready_time,
                )
            return hit

        candidates = []
        for n in self.world.nodes.values():
            gid = node_group.get(n.name)
            if gid is None or gid not in targets or n.to_be_deleted:
                continue
            if not n.ready and not self.o.scale_down_unready_enabled:
                continue
            if targets[gid] <= gmap[gid].min_size:
                continue
            candidates.append(n)
        destinations = [n for n in self.world.nodes.values() if n.schedulable]
        result = self.planner.update(
            t, candidates, destinations, group_opts, self.world.pdb_disruptions_allowed(t), self._interpod
        )
        for u in result.newly_unneeded:
            self.rec.line(f"Node {u.node} - {u.resource} utilization {u.utilization:.6f}")
            self.rec.line(f"Node {u.node} unneeded since {self.rec.stamp(u.since)}")
            self.rec.decide(
                "node-unneeded",
                group=u.group,
                node=u.node,
                reason="empty"
                if u.empty
                else f"{u.resource} utilization {u.utilization:.3f} under threshold",
                inputs={
                    "utilization": round(u.utilization, 6),
                    "resource": u.resource,
                    "threshold": group_opts(u.group).gpu_utilization_threshold
                    if u.resource == "nvidia.com/gpu"
                    else group_opts(u.group).utilization_threshold,
                    "pods_to_move": u.pods_to_move,
                },
            )
        if not result.unneeded:
            self._last_cooldown = ""
            return
        cooldown = ""
        if scaled_up:
            cooldown = "scale-up in this loop"
        elif t - self.last_scale_up < self.o.scale_down_delay_after_add:
            delay = self.o.scale_down_delay_after_add
            cooldown = f"scale-down-delay-after-add ({delay:.0f}s) since the last scale-up"
        elif t - self.last_delete < self.o.scale_down_delay_after_delete:
            cooldown = "scale-down-delay-after-delete"
        elif t - self.last_failure < self.o.scale_down_delay_after_failure:
            cooldown = "scale-down-delay-after-failure"
        if cooldown:
            if cooldown != self._last_cooldown:
                self.rec.line(f"Scale-down in cooldown: {cooldown}")
            self._last_cooldown = cooldown
            return
        self._last_cooldown = ""
        mins = {g.id: g.min_size for g in groups}
        atomic = {gid for gid, o in self._options_seen.items() if o.zero_or_max_node_scaling}
        gpu_label = self.client.gpu_label()
        used = limits.usage((n.shape for n in self.world.nodes.values()), gpu_label)
        removals, skipped = select_removals(
            t,
            result.unneeded,
            lambda gid: group_opts(gid).unneeded_time,
            targets,
            mins,
            self.o.max_scale_down_parallelism,
            self.o.max_drain_parallelism,
            quota=limits.Tracker.for_scale_down(self.o.resource_limits(), used),
            totals=lambda name: limits.node_totals(self.world.nodes[name].shape, gpu_label),
            unready_time=lambda gid: group_opts(gid).unready_time,
            atomic=atomic,
        )
        for s in skipped:
            if (s.node, s.reason) in self._skip_logged:
                continue
            if s.reason == "NodeGroupMinSizeReached":
                self._skip_logged.add((s.node, s.reason))
                self.rec.line(
                    f"Skipping {s.node} from delete consideration - the node group min size reached"
                )
            elif s.reason == "MinimalResourceLimitExceeded":
                self._skip_logged.add((s.node, s.reason))
                self.rec.line(f"Skipping scale down of {s.node} in this batch - would violate minimum limits")
                self.rec.decide(
                    "scale-down-blocked",
                    group=node_group.get(s.node) or "",
                    node=s.node,
                    reason="MinimalResourceLimitExceeded",
                    inputs={
                        "limits": dict(self.o.resource_limits().minimum),
                        "usage": dict(sorted(used.items())),
                    },
                )
        # one DeleteNodes per node, like CA's actuator; a zero-or-max group's nodes go together in
        # one call (actuation/group_deletion_scheduler.go batches atomic groups)
        batches: list[list[Removal]] = []
        by_group: dict[str, list[Removal]] = {}
        for r in removals:
            if r.group in atomic:
                if r.group not in by_group:
                    by_group[r.group] = []
                    batches.append(by_group[r.group])
                by_group[r.group].append(r)
            else:
                batches.append([r])
        for batch in batches:
            gid = batch[0].group
            nodes = [self.world.nodes[r.node] for r in batch]
            for r, node in zip(batch, nodes, strict=True):
                util = self.planner.current[r.node]
                with contextlib.suppress(RpcError):  # CA reads the group's options per node before deleting
                    self.client.options(r.group, self._defaults())
                node.to_be_deleted = True
                if r.empty:
                    self.rec.line(f"Scale-down: removing empty node {r.node}")
                else:
                    self.rec.line(
                        f"Scale-down: removing node {r.node}, utilization: {util.utilization:.3f} "
                        f"({util.resource}), pods to reschedule: {','.join(r.pods_to_move)}"
                    )
            refs = [
                pb.ExternalGrpcNode(providerID=n.provider_id, name=n.name, labels=dict(n.shape.labels))
                for n in nodes
            ]
            try:
                self.client.delete_nodes(gid, refs)
            except RpcError as exc:
                self.last_failure = t
                for r, node in zip(batch, nodes, strict=True):
                    node.to_be_deleted = False
                    self.rec.line(f"Failed to delete {r.node}: {exc.details}")
                    self.rec.decide("scale-down-failed", group=r.group, node=r.node, reason=exc.details)
                continue
            self.last_delete = t
            self.invalid.add(gid)
            for r, node in zip(batch, nodes, strict=True):
                util = self.planner.current[r.node]
                targets[r.group] -= 1
                self._seen_targets[r.group] = targets[r.group]
                self.removed_ids.add(node.provider_id)
                self._drop_node(node, t)
                self.rec.decide(
                    "scale-down",
                    group=r.group,
                    node=r.node,
                    delta=-1,
                    reason="empty" if r.empty else "underutilized",
                    inputs={
                        "utilization": round(util.utilization, 6),
                        "resource": util.resource,
                        "unneeded_for": r.unneeded_for,
                        "unneeded_time": group_opts(r.group).unneeded_time,
                        "pods_rescheduled": r.pods_to_move,
                        **({"zero_or_max": True} if r.group in atomic else {}),
                    },
                )

    def _drop_node(self, node: Node, t: float) -> None:
        self.world.remove_node(node.name, t)
        self.planner.forget(node.name)
        self._price_lifetime(node.provider_id, t)

    def _price_lifetime(self, provider_id: str, end: float) -> None:
        """Price a node's registered lifetime when it ends, while the server still knows it."""
        life = self.lifetimes.pop(provider_id, None)
        if life is None or self.cost_unavailable:
            return
        node = pb.ExternalGrpcNode(providerID=provider_id, name=life["name"], labels=life["labels"])
        price = self.wclient.node_price(node, self.clock.datetime(life["start"]), self.clock.datetime(end))
        if price is None:
            self.cost_unavailable = f"PricingNodePrice failed for {life['name']}"
            return
        self.costs[life["group"]] = self.costs.get(life["group"], 0.0) + price

    # ------------------------------------------------------------------ output
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
        }

    def _report(self) -> Report:
        end = self.tl["t"][-1] if self.tl["t"] else 0.0
        cost = self._cost(end)
        for i, ev in enumerate(self._events):
            if i not in self._events_done and ev.at <= end:
                # a typo in a node name must not pass silently as "nothing happened"
                self.rec.line(
                    f"node event for {ev.node} at {self.rec.stamp(ev.at)} never applied: no such node"
                )
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
        }
        return Report(
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
