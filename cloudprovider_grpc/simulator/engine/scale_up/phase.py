"""The scale-up phase: which pending pods CA acts on, and the IncreaseSize calls it makes.

Upcoming nodes (target - ready - unready: nodes still starting count as upcoming) are injected
and pods that fit them are filtered out (sigs-CA `pkg/core/podlistprocessor/filter_out_schedulable.go`),
as are expendable and too-young pods; what is left goes to the orchestrator (`orchestrator.py`:
estimator, expanders, limits, balancing). A group's zeroOrMaxNodeScaling comes from its last
GetOptions answer instead of a new call (a known simplification).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from cloudprovider_grpc.simulator import limits
from cloudprovider_grpc.simulator.client import GroupInfo, RpcError
from cloudprovider_grpc.simulator.engine.activity import Activity
from cloudprovider_grpc.simulator.engine.cluster_state import ClusterState
from cloudprovider_grpc.simulator.engine.context import RunContext
from cloudprovider_grpc.simulator.engine.group_options import GroupOptionsCache
from cloudprovider_grpc.simulator.engine.pricing import RpcPricing
from cloudprovider_grpc.simulator.engine.scale_up.estimator import PodGroup
from cloudprovider_grpc.simulator.engine.scale_up.expanders import Chain, ExpanderContext
from cloudprovider_grpc.simulator.engine.scale_up.orchestrator import GroupView, ScaleUpPlan, plan_scale_up
from cloudprovider_grpc.simulator.engine.scale_up.requests import ScaleUpRequest, ScaleUpRequests
from cloudprovider_grpc.simulator.engine.timeline import Timeline
from cloudprovider_grpc.simulator.model import NodeShape, Pod, Resources, add_into
from cloudprovider_grpc.simulator.predicates import (
    HOSTNAME,
    StaticFitCache,
    fit_count,
    resources_fit,
    static_fit,
)


class ScaleUpPhase:
    """Filtering the unschedulable pods and acting on the scale-up plan.

    Holds the expander chain, the template fit and free-resource caches, and the scale-ups in
    flight with the groups' back-offs; handed the cluster state (a group CA resized is listed
    again), the times CA last acted, the timeline (the target CA just set) and the GetOptions
    answers (zeroOrMaxNodeScaling)."""

    def __init__(
        self,
        ctx: RunContext,
        requests: ScaleUpRequests,
        cluster: ClusterState,
        activity: Activity,
        timeline: Timeline,
        group_options: GroupOptionsCache,
    ) -> None:
        self.ctx = ctx
        self.s, self.o, self.rec, self.world, self.client = (
            ctx.scenario,
            ctx.options,
            ctx.rec,
            ctx.world,
            ctx.client,
        )
        self.requests = requests
        self.cluster = cluster
        self.activity = activity
        self.timeline = timeline
        self.group_options = group_options
        self.chain = Chain(self.o.expander)
        self.pricing = RpcPricing(ctx.client)
        self.fits = StaticFitCache()
        self._free: dict[int, Resources] = {}
        self._last_no_scale_up: tuple[object, ...] | None = None

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

    def nothing_pending(self) -> None:
        """No pod needs a scale-up this loop: the next "no scale-up" is logged again."""
        self._last_no_scale_up = None

    def unschedulable(
        self, t: float, templates: dict[str, NodeShape], upcoming: dict[str, int]
    ) -> list[PodGroup]:
        """The pending pods CA acts on, by equivalence group: not expendable, old enough, and not
        fitting on the upcoming nodes (filter_out_schedulable.go)."""
        pods = sorted(self.world.pending.values(), key=lambda p: (-p.shape.priority, p.created, p.name))
        if not pods:
            return []
        groups = self._equivalence_groups(t, pods)
        bins: list[tuple[NodeShape, Resources]] = []
        for gid in sorted(upcoming):
            tpl = templates.get(gid)
            if tpl is not None:
                bins.extend((tpl, dict(self.template_free(tpl))) for _ in range(upcoming[gid]))
        absorbed = self._absorb_on_upcoming(groups, bins)
        if absorbed:
            self.rec.line(
                f"{absorbed} pods marked as unschedulable can be scheduled on upcoming nodes. "
                "Ignoring in scale up."
            )
        return [pg for pg in groups if pg.count > 0]

    def _equivalence_groups(self, t: float, pods: list[Pod]) -> list[PodGroup]:
        """The pods by shape, in priority order; expendable pods (below
        expendable-pods-priority-cutoff) are counted and ignored, and pods younger than
        new-pod-scale-up-delay wait."""
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
        return list(groups.values())

    def _absorb_on_upcoming(self, groups: list[PodGroup], bins: list[tuple[NodeShape, Resources]]) -> int:
        """Take from each group the pods that fit on the upcoming nodes (first fit, in group
        order); how many fit. Pods with inter-pod constraints are tried one by one against the
        cluster plus the upcoming nodes (each a fresh hostname), like filter_out_schedulable.go's
        snapshot."""
        view = self.ctx.placement() if any(pg.shape.interpod for pg in groups) else None
        if view is not None:
            view = view.copy()
            for i, (tpl, _) in enumerate(bins):
                view.add_node(
                    f"upcoming-{tpl.group}-{i}", {**tpl.labels, HOSTNAME: f"upcoming-{tpl.group}-{i}"}
                )
        absorbed = 0
        for pg in groups:
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
        return absorbed

    def scale_up(
        self,
        pod_groups: list[PodGroup],
        groups: list[GroupInfo],
        targets: dict[str, int],
        templates: dict[str, NodeShape],
        registered: Counter[str],
        upcoming: dict[str, int],
        t: float,
    ) -> bool:
        """ScaleUp of static_autoscaler.go: plan (`orchestrator.py`), then one IncreaseSize per
        group of the plan; True when one succeeded."""
        now = self.ctx.clock.datetime(t)
        views = self._group_views(groups, targets, templates, t)
        # every node counts against the limits, in a group or not, and so do upcoming nodes (as
        # CA <= 1.34 counted them through target sizes; current CA counts ready nodes only)
        gpu_label = self.client.gpu_label()
        shapes = [n.shape for n in self.world.nodes.values()]
        for gid, n in upcoming.items():
            if n and gid in templates:
                shapes.extend([templates[gid]] * n)
        cluster_nodes = len(self.world.nodes) + sum(upcoming.values())
        ctx = ExpanderContext(self.ctx.rng, now, len(self.world.nodes), self.pricing, self.s.priorities)
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
            self.ctx.placement(),
        )
        pending = sum(pg.count for pg in pod_groups)
        if not plan.increases:
            self._log_no_scale_up(plan, pod_groups, pending)
            return False
        self._last_no_scale_up = None
        self.rec.line(f"{pending} unschedulable pods in {len(pod_groups)} equivalence groups")
        for line in plan.lines:
            self.rec.line(line)
        inputs = _decision_inputs(plan, pod_groups, pending, ctx, self.o.expander)
        any_ok = False
        for gid, delta in plan.increases:
            view = next(v for v in views if v.id == gid)
            any_ok = self._increase(view, delta, plan, inputs, pending, t) or any_ok
        return any_ok

    def _group_views(
        self, groups: list[GroupInfo], targets: dict[str, int], templates: dict[str, NodeShape], t: float
    ) -> list[GroupView]:
        """What the orchestrator sees of each group CA knows the target of: bounds, template and
        its free resources, back-off, zeroOrMaxNodeScaling."""
        views = []
        for g in groups:
            if g.id not in targets:
                continue
            tpl = templates.get(g.id)
            off = self.requests.backoff.backed_off(g.id, t)
            views.append(
                GroupView(
                    g.id,
                    g.min_size,
                    g.max_size,
                    targets[g.id],
                    tpl,
                    self.template_free(tpl) if tpl is not None else {},
                    f"{off.reason} until {self.rec.stamp(off.until)}" if off else None,
                    self.group_options.zero_or_max(g.id),
                )
            )
        return views

    def _log_no_scale_up(self, plan: ScaleUpPlan, pod_groups: list[PodGroup], pending: int) -> None:
        """Why nothing scales up, logged when it changes (the same reason every loop is noise)."""
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

    def _increase(
        self, view: GroupView, delta: int, plan: ScaleUpPlan, inputs: dict[str, Any], pending: int, t: float
    ) -> bool:
        """One IncreaseSize: on success a request in flight (registered by max-node-provision-time,
        or the group backs off) and the group's listing refreshed; on failure the group backs off
        at once (executeScaleUp's RegisterFailedScaleUp)."""
        gid = view.id
        try:
            self.client.increase_size(gid, delta)
        except RpcError as exc:
            until = self.requests.backoff.fail(gid, t, f"OtherError.{exc.code.name}")
            self.activity.last_failure = t
            self.rec.line(f"Failed to increase node group {gid} size by {delta}: {exc.details}")
            self.rec.decide(
                "scale-up-error",
                group=gid,
                delta=delta,
                reason=exc.details,
                inputs={**inputs, "backoff_until": until},
            )
            return False
        self.timeline.saw_target(gid, view.target + delta)
        self.requests.in_flight[gid] = ScaleUpRequest(delta, t, t + self.o.max_node_provision_time)
        self.cluster.invalidate(gid)
        self.activity.last_scale_up = t
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
        return True


def _decision_inputs(
    plan: ScaleUpPlan, pod_groups: list[PodGroup], pending: int, ctx: ExpanderContext, expander: str
) -> dict[str, Any]:
    """A scale-up decision's inputs: the pods, every group CA looked at and what became of it (the
    expander's inputs and verdicts), and the estimate."""
    return {
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
        "considered": [
            {
                "group": o.group,
                "node_count": o.node_count,
                "pods": o.pod_count,
                "verdict": "chosen"
                if plan.best is not None and o.group == plan.best.group
                else ctx.rejected.get(o.group, "not chosen"),
            }
            for o in plan.options
        ],
        "expander": expander,
        "chosen": plan.best.group if plan.best else "",
        "estimated": plan.needed,
    }
