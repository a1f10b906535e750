"""Node lifecycle and cluster state: what CA sees of the cloud and the cluster before deciding.

Follows sigs-CA `pkg/core/static_autoscaler.go` RunOnce up to the scale-up:
NodeGroupNodes for groups whose cached listing is stale (2m, as
`pkg/clusterstate/utils/node_instances_cache.go`) or that are scaling up / just deleted nodes;
kubelets register machines the cloud reports running (NotReady for `node_ready_delay`), the
scenario's node events apply (`node_events.py`, called by the loop in between), CA's first loop
removes ToBeDeleted taints a previous run left (`cleanUpIfRequired`); templates come from a real
ready node of each group, else the cached real-node template, else NodeGroupTemplateNodeInfo
(`pkg/processors/nodeinfosprovider/mixed_nodeinfos_processor.go`). Cluster state
(`pkg/clusterstate/clusterstate.go`): creation errors back the group off and are deleted
(`deleteCreatedNodesWithErrors`), instances unregistered past `max-node-provision-time` are
deleted, scale-up requests that time out back off, a target above the registered size for longer
than the provision time is decreased (`fixNodeGroupSize`), and too many unready nodes make the
cluster unhealthy (IsClusterHealthy).

`ClusterState` owns the instance listings and what CA remembers of them (first seen, creation
errors counted, machines it deleted), the templates, and the timers of these checks; it is handed
the scale-ups in flight, the scale-down planner, the node costs and the GetOptions answers.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.protos import k8s_pb2
from cloudprovider_grpc.simulator.client import GroupInfo, InstanceInfo, RpcError
from cloudprovider_grpc.simulator.engine.context import RunContext
from cloudprovider_grpc.simulator.engine.costs import NodeCosts
from cloudprovider_grpc.simulator.engine.group_options import GroupOptionsCache
from cloudprovider_grpc.simulator.engine.scale_down.planner import ScaleDownPlanner
from cloudprovider_grpc.simulator.engine.scale_up.requests import ScaleUpRequests
from cloudprovider_grpc.simulator.model import TO_BE_DELETED_TAINT, Node, NodeShape, node_name_for

RUNNING, CREATING, DELETING = 1, 2, 3  # externalgrpc InstanceState
INSTANCES_CACHE_REFRESH = 120.0  # node_instances_cache.go background refresh interval
ERROR_CLASS = {1: "OutOfResource", 99: "OtherError"}
MAX_NODE_STARTUP_TIME = 900.0  # clusterstate.go MaxNodeStartupTime


class ClusterState:
    """Listing, registration, readiness, templates and the cluster-state checks of one loop.

    Handed the scale-ups in flight (to refresh their groups' listings, time them out and back
    their groups off), the scale-down planner (a node that leaves is forgotten, an unhealthy
    cluster clears the unneeded timers), the node costs (a node's lifetime starts when it
    registers) and the GetOptions answers (MaxNodeStartupTime)."""

    def __init__(
        self,
        ctx: RunContext,
        scale_ups: ScaleUpRequests,
        planner: ScaleDownPlanner,
        costs: NodeCosts,
        group_options: GroupOptionsCache,
    ) -> None:
        self.s, self.o, self.rec, self.world = ctx.scenario, ctx.options, ctx.rec, ctx.world
        self.client, self.wclient = ctx.client, ctx.world_client
        self.scale_ups = scale_ups
        self.planner = planner
        self.costs = costs
        self.group_options = group_options
        self.instances: dict[str, list[InstanceInfo]] = {}  # the cached NodeGroupNodes listings
        self.instances_at: dict[str, float] = {}
        self.invalid: set[str] = set()  # groups whose listing is refreshed next loop
        self.kubelet_listing: dict[str, list[InstanceInfo]] = {}  # the listing each group's kubelets last saw
        self.first_seen: dict[str, float] = {}  # instance id -> when CA first listed it
        self.seen_errors: set[str] = set()  # instances whose creation error was already counted
        self.removed_ids: set[str] = set()  # machines CA deleted: never registered again
        self.real_templates: dict[str, NodeShape] = {}  # the last ready node's shape per group
        self.world_templates: dict[str, NodeShape | None] = {}  # what the kubelets register
        self.shapes: dict[tuple[str, bytes], NodeShape] = {}  # one NodeShape per template answer
        self.incorrect_since: dict[str, float] = {}  # fixNodeGroupSize's timer per group
        self.unknown_overrides: set[str] = set()
        self.initialized = False  # CA's cleanUpIfRequired runs once, in the first loop
        self.healthy = True
        self.startup_times: dict[str, float] = {}  # per group, asked once (MaxNodeStartupTime)
        #: per group, its cached listing and the ids in it not terminating: whether every such
        #: instance is a registered node is then one set comparison, not a loop over the listing
        self._waiting: dict[str, tuple[list[InstanceInfo], frozenset[str]]] = {}

    def invalidate(self, gid: str) -> None:
        """The group's listing is read again next loop (CA changed the group, or someone did)."""
        self.invalid.add(gid)

    def drop_node(self, node: Node, t: float) -> None:
        """A node leaves the cluster: the world, the planner's timers and its priced lifetime."""
        self.world.remove_node(node.name, t)
        self.planner.forget(node.name)
        self.costs.end(node.provider_id, t)

    def remove_deleted(self, node: Node, t: float) -> None:
        """CA deleted the node's machine: it leaves, and its machine never registers again."""
        self.removed_ids.add(node.provider_id)
        self.drop_node(node, t)

    def not_started(self, node: Node, t: float) -> bool:
        """clusterstate.go updateReadinessStats: NotReady and registered less than the group's
        MaxNodeStartupTime ago."""
        return not node.ready and t - node.registered < self._startup_time(node.group)

    def _startup_time(self, gid: str) -> float:
        """MaxNodeStartupTime of a group: 15m up to CA 1.34; on 1.35-1.36, 0 for a group whose
        GetOptions answers options, because their externalgrpc client never fills that field from
        the answer (kubernetes/autoscaler#10245): its booting nodes count as unready at once; from
        1.37, the time the answer carries in options field 11."""
        if not gid or self.o.release() < (1, 35):
            return MAX_NODE_STARTUP_TIME
        known = self.startup_times.get(gid)
        if known is not None:
            return known
        try:
            answer = self.client.options(gid, self.group_options.defaults())
        except RpcError:
            answer = None
        if answer is None:
            known = MAX_NODE_STARTUP_TIME
        elif self.o.release() >= (1, 37):
            sent = answer.max_node_startup_time
            known = MAX_NODE_STARTUP_TIME if sent is None else sent
        else:
            known = 0.0
            self.rec.line(
                f"Node group {gid} answers GetOptions: CA {self.o.version} reads its "
                "MaxNodeStartupTime as 0, so its booting nodes count as unready"
            )
            self.rec.decide(
                "startup-time-zero",
                group=gid,
                reason="GetOptions answers, and CA 1.35-1.36 take MaxNodeStartupTime 0 from it",
                inputs={"version": self.o.version},
            )
        self.startup_times[gid] = known
        return known

    def readiness(self, t: float) -> None:
        """Kubelets turn Ready `node_ready_delay` after registering, unless an event decides."""
        delay = self.s.node_ready_delay
        for node in self.world.nodes.values():
            ready = node.ready_override if node.ready_override is not None else t - node.registered >= delay
            if ready != node.ready:
                node.ready = ready
                node.version += 1
                self.rec.line(f"world: node {node.name} is {'Ready' if ready else 'NotReady'}")

    def clean_up_taints(self) -> None:
        """static_autoscaler.go cleanUpIfRequired: on its first loop CA removes ToBeDeleted taints a
        previous run left on nodes of its node groups (their deletions may still finish)."""
        self.initialized = True
        for node in self.world.nodes.values():
            if not node.group or not any(x.key == TO_BE_DELETED_TAINT for x in node.shape.taints):
                continue
            kept = tuple(x for x in node.shape.taints if x.key != TO_BE_DELETED_TAINT)
            node.shape = dataclasses.replace(node.shape, taints=kept)
            node.to_be_deleted = False
            node.version += 1
            self.rec.line(f"Removed ToBeDeleted taint from node {node.name} (left by a previous run)")

    def cluster_healthy(self, t: float) -> bool:
        """clusterstate.go IsClusterHealthy: too many unready nodes stop the loop (static_autoscaler
        "Cluster is not ready for autoscaling"), and the unneeded timers start over."""
        nodes = self.world.nodes.values()
        unready = sum(1 for n in nodes if not n.ready and not self.not_started(n, t))
        healthy = not (
            unready > self.o.ok_total_unready_count
            and unready > self.o.max_total_unready_percentage / 100.0 * len(self.world.nodes)
        )
        if healthy != self.healthy:
            self.healthy = healthy
            if not healthy:
                self.rec.line(
                    f"Cluster is not ready for autoscaling: {unready} unready nodes "
                    f"(ok-total-unready-count {self.o.ok_total_unready_count}, "
                    f"max-total-unready-percentage {self.o.max_total_unready_percentage:g})"
                )
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

    def override(self, groups: list[GroupInfo]) -> list[GroupInfo]:
        """Apply the scenario's `node_groups` bounds to CA's view of the groups."""
        if not self.s.node_groups:
            return groups
        known = {g.id for g in groups}
        for gid in sorted(set(self.s.node_groups) - known - self.unknown_overrides):
            self.unknown_overrides.add(gid)
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

    def list_instances(self, groups: list[GroupInfo], t: float) -> None:
        for g in groups:
            cached = self.instances.get(g.id)
            due = (
                cached is None
                or g.id in self.invalid
                or g.id in self.scale_ups.in_flight
                or t - self.instances_at.get(g.id, -math.inf) >= INSTANCES_CACHE_REFRESH
                or not self._all_registered(g.id, cached)
            )
            if not due:
                continue
            try:
                self.instances[g.id] = self.client.nodes(g.id)
                self.instances_at[g.id] = t
            except RpcError as exc:
                self.rec.line(f"Failed to list instances of node group {g.id}: {exc}")
        self.invalid.clear()

    def _all_registered(self, gid: str, listing: list[InstanceInfo]) -> bool:
        """Whether every instance of the group's listing that is not terminating is a node."""
        kept = self._waiting.get(gid)
        if kept is None or kept[0] is not listing:
            kept = self._waiting[gid] = (listing, frozenset(i.id for i in listing if i.state != DELETING))
        return self.world.by_provider_id.keys() >= kept[1]

    def kubelets(self, groups: list[GroupInfo], t: float) -> None:
        """Machines the cloud reports running join the cluster; vanished machines leave it."""
        by_group: dict[str, list[Node]] | None = None  # the nodes per group, when a listing is new
        for g in groups:
            listing = self.instances.get(g.id, [])
            if self.kubelet_listing.get(g.id) is listing:
                continue  # the same listing as last loop: everything in it that could join has
            self.kubelet_listing[g.id] = listing
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
                self.costs.start(inst.id, g.id, name, dict(shape.labels), t)
                self.rec.line(f"world: node {name} registered ({inst.id} is running)")
            if self.instances_at.get(g.id) == t:
                alive = {i.id for i in listing if i.state != DELETING}
                if by_group is None:
                    # nodes registered from later groups' listings are in their machines' listings
                    by_group = {}
                    for n in self.world.nodes.values():
                        by_group.setdefault(n.group, []).append(n)
                for node in by_group.get(g.id, []):
                    if node.provider_id not in alive:
                        self.rec.line(f"world: node {node.name} left the cluster (its machine is gone)")
                        self.drop_node(node, t)

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
        shape = self.shapes.get(key)
        if shape is None:
            shape = NodeShape.from_k8s(node, group)
            self.shapes[key] = shape
        return shape

    def templates(self, groups: list[GroupInfo], node_group: dict[str, str | None]) -> dict[str, NodeShape]:
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

    def creation_errors(self, groups: list[GroupInfo], t: float) -> None:
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
                req = self.scale_ups.in_flight.get(g.id)
                if req is not None:
                    until = self.scale_ups.backoff.fail(g.id, t, reason)
                    req.increase -= len(new)
                    if req.increase <= 0:
                        del self.scale_ups.in_flight[g.id]
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

    def unregistered(self, groups: list[GroupInfo], targets: dict[str, int], t: float) -> None:
        limit = self.o.max_node_provision_time
        for g in groups:
            listing = self.instances.get(g.id, [])
            if self._all_registered(g.id, listing):
                continue  # the usual case, no loop over the listing
            for inst in listing:
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

    def track_requests(self, targets: dict[str, int], registered: Counter[str], t: float) -> None:
        for gid, req in list(self.scale_ups.in_flight.items()):
            if gid not in targets:
                continue
            if registered[gid] >= targets[gid]:
                del self.scale_ups.in_flight[gid]
            elif t >= req.expected_by:
                del self.scale_ups.in_flight[gid]
                until = self.scale_ups.backoff.fail(gid, t, "timeout")
                self.rec.line(f"Scale-up timed out for node group {gid} after {t - req.time:.0f}s")
                self.rec.decide(
                    "scale-up-timeout", group=gid, reason="timeout", inputs={"backoff_until": until}
                )

    def fix_node_group_sizes(
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
