"""The scenario's node events: what happens to nodes outside CA's control.

An event marks a node (or every node of a group: `--drain-group`) Ready or NotReady, annotates or
taints it, cordons and drains it, or deletes its machine through the cloud as an operator (or a CA
that died mid-deletion) would. Events apply in time order once their node exists; the loop checks
in its first loop that every group named exists, and the report names the events that never
applied.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.simulator.client import RpcError
from cloudprovider_grpc.simulator.engine.context import RunContext
from cloudprovider_grpc.simulator.model import TO_BE_DELETED_TAINT, Node, Taint
from cloudprovider_grpc.simulator.scenario import NodeEvent, NodeTaint, ScenarioError

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"  # what a cordon adds


class NodeEvents:
    """The scenario's events in time order, and which of them have applied."""

    def __init__(self, ctx: RunContext, invalidate: Callable[[str], None]) -> None:
        """`invalidate`: marks a group's cached instance listing stale (an outside deletion)."""
        self.rec = ctx.rec
        self.world = ctx.world
        self.wclient = ctx.world_client
        self.invalidate = invalidate
        self.events = sorted(ctx.scenario.node_events, key=lambda e: e.at)
        self.done: set[int] = set()

    def check_groups(self, group_ids: list[str]) -> None:
        """A node event (a `--drain-group`) naming no node group would otherwise do nothing,
        silently: the groups are known only once the server answered, so this runs in loop 0."""
        unknown = sorted({ev.group for ev in self.events if ev.group} - set(group_ids))
        if unknown:
            raise ScenarioError(
                f"node_events (--drain-group): no node group {', '.join(map(repr, unknown))} "
                f"(node groups: {', '.join(group_ids) or 'none'})"
            )

    def report_never_applied(self, end: float) -> None:
        """Log the events due by `end` that found no node: a typo in a node name must not pass
        silently as "nothing happened"."""
        for i, ev in enumerate(self.events):
            if i not in self.done and ev.at <= end:
                what = ev.node or f"group {ev.group}"
                self.rec.line(f"node event for {what} at {self.rec.stamp(ev.at)} never applied: no such node")

    def apply(self, t: float) -> None:
        """Apply the scenario's due node events to nodes that exist (later ones wait for theirs);
        a group event applies to every node of the group registered when it first finds one."""
        for i, ev in enumerate(self.events):
            if ev.at > t:
                break
            if i in self.done:
                continue
            if ev.group:
                targets = [n for n in self.world.nodes.values() if n.group == ev.group]
            else:
                targets = [self.world.nodes[ev.node]] if ev.node in self.world.nodes else []
            if not targets:
                continue
            self.done.add(i)
            for node in targets:
                self._apply_one(ev, node, t)

    def _apply_one(self, ev: NodeEvent, node: Node, t: float) -> None:
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
        self.invalidate(group.id)
        self.rec.line(f"world: deletion of {node.name} in progress (started outside this CA)")
