"""The scale-down phase: unneeded nodes, cooldowns, and the DeleteNodes calls CA makes.

The planner (`planner.py`) keeps the unneeded timers; this phase asks each group's options
(GetOptions, memoised within one loop for eligibility, while deletions still ask once per node as
CA's actuator does), applies the cooldowns after a scale-up, delete or failure, and deletes one
node per DeleteNodes call (a zero-or-max group's nodes in one call).
"""

from __future__ import annotations

import contextlib

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.simulator import limits
from cloudprovider_grpc.simulator.client import GroupInfo, RpcError
from cloudprovider_grpc.simulator.engine.scale_down.planner import (
    GroupScaleDownOptions,
    Removal,
    select_removals,
)
from cloudprovider_grpc.simulator.engine.state import EngineState


class ScaleDownPhase(EngineState):
    """Scale-down of one loop."""

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
