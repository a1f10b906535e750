"""The scale-down phase: unneeded nodes, cooldowns, and the DeleteNodes calls CA makes.

The planner (`planner.py`) keeps the unneeded timers; this phase asks each group's options
(GetOptions, memoised within one loop for eligibility, while deletions still ask once per node as
CA's actuator does), applies the cooldowns after a scale-up, delete or failure, and deletes one
node per DeleteNodes call (a zero-or-max group's nodes in one call).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.simulator import limits
from cloudprovider_grpc.simulator.client import GroupInfo, RpcError
from cloudprovider_grpc.simulator.engine.activity import Activity
from cloudprovider_grpc.simulator.engine.cluster_state import ClusterState
from cloudprovider_grpc.simulator.engine.context import RunContext
from cloudprovider_grpc.simulator.engine.group_options import GroupOptionsCache
from cloudprovider_grpc.simulator.engine.scale_down.planner import (
    GroupScaleDownOptions,
    PassResult,
    Removal,
    ScaleDownPlanner,
    Unremovable,
    select_removals,
)
from cloudprovider_grpc.simulator.engine.timeline import Timeline
from cloudprovider_grpc.simulator.model import Node


class ScaleDownPhase:
    """Scale-down of one loop.

    Handed the planner (its unneeded timers outlive a loop), the cluster state (a deleted node
    leaves it and its group is listed again), the times CA last acted (the cooldowns), the
    timeline (the target CA just lowered) and the GetOptions answers."""

    def __init__(
        self,
        ctx: RunContext,
        planner: ScaleDownPlanner,
        cluster: ClusterState,
        activity: Activity,
        timeline: Timeline,
        group_options: GroupOptionsCache,
    ) -> None:
        self.ctx = ctx
        self.o, self.rec, self.world, self.client = ctx.options, ctx.rec, ctx.world, ctx.client
        self.planner = planner
        self.cluster = cluster
        self.activity = activity
        self.timeline = timeline
        self.group_options = group_options
        self._last_cooldown = ""
        self._skip_logged: set[tuple[str, str]] = set()
        #: every distinct options value answered so far, so that a loop's equal answer is the same
        #: object: the planner's kept verdicts then match by identity, not by comparing fields
        self._options_seen: dict[GroupScaleDownOptions, GroupScaleDownOptions] = {}

    def scale_down(
        self,
        groups: list[GroupInfo],
        targets: dict[str, int],
        node_group: dict[str, str | None],
        t: float,
        scaled_up: bool,
    ) -> None:
        """ScaleDown of static_autoscaler.go: update the unneeded nodes, then, outside the
        cooldowns, delete those unneeded long enough."""
        opts = _LoopOptions(self.group_options, self._options_seen)
        candidates = self._candidates(groups, targets, node_group)
        destinations = [n for n in self.world.nodes.values() if n.schedulable]
        result = self.planner.update(
            t, candidates, destinations, opts.get, self.world.pdb_disruptions_allowed(t), self.ctx.interpod
        )
        self._log_unneeded(result, opts.get)
        if not result.unneeded:
            self._last_cooldown = ""
            return
        if self._in_cooldown(t, scaled_up):
            return
        atomic = self.group_options.atomic()
        removals = self._removals(t, result, groups, targets, node_group, opts.get, atomic)
        for batch in _batches(removals, atomic):
            self._delete(batch, targets, t, opts.get, atomic)

    def _candidates(
        self, groups: list[GroupInfo], targets: dict[str, int], node_group: dict[str, str | None]
    ) -> list[Node]:
        """The nodes CA considers for removal: in a group it knows the target of, not being
        deleted, Ready (unless scale-down-unready-enabled), in a group above its min size."""
        gmap = {g.id: g for g in groups}
        # the groups above their min size, once: the loop below runs over every node
        above_min = {gid for gid, target in targets.items() if target > gmap[gid].min_size}
        unready_ok = self.o.scale_down_unready_enabled
        candidates = []
        for n in self.world.nodes.values():
            if node_group.get(n.name) in above_min and not n.to_be_deleted and (n.ready or unready_ok):
                candidates.append(n)
        return candidates

    def _log_unneeded(self, result: PassResult, opts: _Options) -> None:
        """The nodes that became unneeded this loop, with the utilization and threshold that made
        them so."""
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
                    "threshold": opts(u.group).gpu_utilization_threshold
                    if u.resource == "nvidia.com/gpu"
                    else opts(u.group).utilization_threshold,
                    "pods_to_move": u.pods_to_move,
                },
            )

    def _in_cooldown(self, t: float, scaled_up: bool) -> bool:
        """static_autoscaler.go: no deletion in a loop that scaled up, nor within the delays after
        the last scale-up, deletion or failure; a cooldown is logged when it starts or changes."""
        cooldown = ""
        if scaled_up:
            cooldown = "scale-up in this loop"
        elif t - self.activity.last_scale_up < self.o.scale_down_delay_after_add:
            delay = self.o.scale_down_delay_after_add
            cooldown = f"scale-down-delay-after-add ({delay:.0f}s) since the last scale-up"
        elif t - self.activity.last_delete < self.o.scale_down_delay_after_delete:
            cooldown = "scale-down-delay-after-delete"
        elif t - self.activity.last_failure < self.o.scale_down_delay_after_failure:
            cooldown = "scale-down-delay-after-failure"
        if cooldown and cooldown != self._last_cooldown:
            self.rec.line(f"Scale-down in cooldown: {cooldown}")
        self._last_cooldown = cooldown
        return bool(cooldown)

    def _removals(
        self,
        t: float,
        result: PassResult,
        groups: list[GroupInfo],
        targets: dict[str, int],
        node_group: dict[str, str | None],
        opts: _Options,
        atomic: set[str],
    ) -> list[Removal]:
        """The unneeded nodes to delete now, within the groups' min sizes, the parallelism flags
        and the resource minima; the nodes skipped are logged once per reason."""
        gpu_label = self.client.gpu_label()
        used = limits.usage((n.shape for n in self.world.nodes.values()), gpu_label)
        removals, skipped = select_removals(
            t,
            result.unneeded,
            lambda gid: opts(gid).unneeded_time,
            targets,
            {g.id: g.min_size for g in groups},
            self.o.max_scale_down_parallelism,
            self.o.max_drain_parallelism,
            quota=limits.Tracker.for_scale_down(self.o.resource_limits(), used),
            totals=lambda name: limits.node_totals(self.world.nodes[name].shape, gpu_label),
            unready_time=lambda gid: opts(gid).unready_time,
            atomic=atomic,
        )
        self._log_skipped(skipped, node_group, used)
        return removals

    def _log_skipped(
        self, skipped: list[Unremovable], node_group: dict[str, str | None], used: dict[str, int]
    ) -> None:
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

    def _delete(
        self, batch: list[Removal], targets: dict[str, int], t: float, opts: _Options, atomic: set[str]
    ) -> None:
        """One DeleteNodes call: the nodes are marked ToBeDeleted first; on success they leave the
        cluster and their group's target drops, on failure they are unmarked."""
        gid = batch[0].group
        nodes = [self.world.nodes[r.node] for r in batch]
        for r, node in zip(batch, nodes, strict=True):
            util = self.planner.current[r.node]
            with contextlib.suppress(RpcError):  # CA reads the group's options per node before deleting
                self.client.options(r.group, self.group_options.defaults())
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
            self.activity.last_failure = t
            for r, node in zip(batch, nodes, strict=True):
                node.to_be_deleted = False
                self.rec.line(f"Failed to delete {r.node}: {exc.details}")
                self.rec.decide("scale-down-failed", group=r.group, node=r.node, reason=exc.details)
            return
        self.activity.last_delete = t
        self.cluster.invalidate(gid)
        for r, node in zip(batch, nodes, strict=True):
            util = self.planner.current[r.node]
            targets[r.group] -= 1
            self.timeline.saw_target(r.group, targets[r.group])
            self.cluster.remove_deleted(node, t)
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
                    "unneeded_time": opts(r.group).unneeded_time,
                    "pods_rescheduled": r.pods_to_move,
                    **({"zero_or_max": True} if r.group in atomic else {}),
                },
            )


_Options = Callable[[str], GroupScaleDownOptions]


class _LoopOptions:
    """Each group's scale-down options, asked once per loop (GetOptions) for eligibility."""

    def __init__(
        self,
        group_options: GroupOptionsCache,
        seen: dict[GroupScaleDownOptions, GroupScaleDownOptions],
    ) -> None:
        self.group_options = group_options
        self.memo: dict[str, GroupScaleDownOptions] = {}
        self._seen = seen

    def get(self, gid: str) -> GroupScaleDownOptions:
        hit = self.memo.get(gid)
        if hit is None:
            got = self.group_options.ask(gid)
            made = GroupScaleDownOptions(
                got.scale_down_utilization_threshold,
                got.scale_down_gpu_utilization_threshold,
                got.scale_down_unneeded_time,
                got.ignore_daemonsets_utilization,
                got.scale_down_unready_time,
            )
            hit = self.memo[gid] = self._seen.setdefault(made, made)
        return hit


def _batches(removals: list[Removal], atomic: set[str]) -> list[list[Removal]]:
    """One DeleteNodes per node, like CA's actuator; a zero-or-max group's nodes go together in
    one call (actuation/group_deletion_scheduler.go batches atomic groups)."""
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
    return batches
