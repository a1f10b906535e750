"""Node lifecycle and cluster state: what CA sees of the cloud and the cluster before deciding.

Follows sigs-CA `pkg/core/static_autoscaler.go` RunOnce up to the scale-up:
NodeGroupNodes for groups whose cached listing is stale (2m, as
`pkg/clusterstate/utils/node_instances_cache.go`) or that are scaling up / just deleted nodes;
kubelets register machines the cloud reports running (NotReady for `node_ready_delay`), the
scenario's node events apply, CA's first loop removes ToBeDeleted taints a previous run left
(`cleanUpIfRequired`); templates come from a real ready node of each group, else the cached
real-node template, else NodeGroupTemplateNodeInfo
(`pkg/processors/nodeinfosprovider/mixed_nodeinfos_processor.go`). Cluster state
(`pkg/clusterstate/clusterstate.go`): creation errors back the group off and are deleted
(`deleteCreatedNodesWithErrors`), instances unregistered past `max-node-provision-time` are
deleted, scale-up requests that time out back off, a target above the registered size for longer
than the provision time is decreased (`fixNodeGroupSize`), and too many unready nodes make the
cluster unhealthy (IsClusterHealthy).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.protos import k8s_pb2
from cloudprovider_grpc.simulator.client import GroupInfo, RpcError
from cloudprovider_grpc.simulator.engine.state import CREATING, DELETING, RUNNING, EngineState
from cloudprovider_grpc.simulator.model import TO_BE_DELETED_TAINT, Node, NodeShape, Taint, node_name_for
from cloudprovider_grpc.simulator.scenario import NodeEvent, NodeTaint

INSTANCES_CACHE_REFRESH = 120.0  # node_instances_cache.go background refresh interval
ERROR_CLASS = {1: "OutOfResource", 99: "OtherError"}
MAX_NODE_STARTUP_TIME = 900.0  # clusterstate.go MaxNodeStartupTime
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"  # what a cordon adds


class ClusterStatePhase(EngineState):
    """Listing, registration, readiness, templates and the cluster-state checks of one loop."""

    def _not_started(self, node: Node, t: float) -> bool:
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
        known = self._startup_times.get(gid)
        if known is not None:
            return known
        try:
            answer = self.client.options(gid, self._defaults())
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
        self._startup_times[gid] = known
        return known

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
        """Apply the scenario's due node events to nodes that exist (later ones wait for theirs);
        a group event applies to every node of the group registered when it first finds one."""
        for i, ev in enumerate(self._events):
            if ev.at > t:
                break
            if i in self._events_done:
                continue
            if ev.group:
                targets = [n for n in self.world.nodes.values() if n.group == ev.group]
            else:
                targets = [self.world.nodes[ev.node]] if ev.node in self.world.nodes else []
            if not targets:
                continue
            self._events_done.add(i)
            for node in targets:
                self._node_event(ev, node, t)

    def _node_event(self, ev: NodeEvent, node: Node, t: float) -> None:
        if ev.ready is not None:
            node.ready_override = ev.ready
        if ev.annotations:
            node.annotations.update(ev.annotations)
            self.rec.line(f"world: node {node.name} annotated {dict(sorted(ev.annotations.items()))}")
        taints = list(ev.taints)
        if ev.drain:
            taints.append(NodeTaint(key=UNSCHEDULABLE_TAINT, effect="NoSchedule"))
        if taints or ev.remove_taints:
            drop = set(ev.remove_taints) | {x.key for x in taints}
            kept = tuple(x for x in node.shape.taints if x.key not in drop)
            added = tuple(Taint(x.key, x.value, x.effect) for x in taints)
            node.shape = dataclasses.replace(node.shape, taints=kept + added)
            node.version += 1
            node.to_be_deleted = any(x.key == TO_BE_DELETED_TAINT for x in node.shape.taints)
            self.rec.line(f"world: node {node.name} taints now {[x.key for x in node.shape.taints]}")
        if ev.drain:
            gone = self.world.evict(node.name, t)
            self.rec.line(f"world: node {node.name} drained ({gone} pods evicted)")
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
