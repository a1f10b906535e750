"""The scale-up orchestrator: from unschedulable pods to IncreaseSize deltas.

Port of sigs-CA `pkg/core/scaleup/orchestrator/orchestrator.go` (ScaleUp), pure over its inputs:
1. Node-group filter (`filterValidScaleUpNodeGroups`): skip groups that are backed off, at max
   size ("max limit reached"), without a template, or whose next node would exceed the
   cores/memory totals.
2. Per valid group, the pod equivalence groups that fit its template (`SchedulablePodGroups`), then
   the binpacking estimate, limited by `max-nodes-per-scaleup`, by the group's (and its similar
   groups') room below MaxSize, and by `max-nodes-total` (`threshold_based_limiter.go` with the
   three thresholds of `pkg/builder/autoscaler_factory.go`).
3. The expander chain picks the best option.
4. Caps after choice: `max-nodes-total` ("Capping size to max cluster total size"), the
   cores/memory totals (`applyLimits`), then balancing across similar groups
   (`pkg/processors/nodegroupset/balancing_processor.go`: cap at the set's room, then one node at
   a time to the currently smallest group) when `balance-similar-node-groups` is on.
The log's "Estimated N nodes needed" shows the uncapped binpacking result (older CA releases
printed it before "Capping size to MAX"), while the options the expanders compare are already
capped by the limiter, as in current CA; both numbers are in the decision's inputs.
Similar groups follow `compare_nodegroups.go`: equal capacity except memory within
`memory-difference-ratio`, allocatable and free resources within their ratios, and equal labels
except hostname, zone/region and `balancing-ignore-label`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from cloudprovider_grpc.simulator.engine.scale_up.estimator import PodGroup, estimate
from cloudprovider_grpc.simulator.engine.scale_up.expanders import Chain, ExpanderContext, Option
from cloudprovider_grpc.simulator.limits import Tracker, node_totals
from cloudprovider_grpc.simulator.model import CPU, MEMORY, NodeShape, PodShape
from cloudprovider_grpc.simulator.predicates import Placement, static_reason
from cloudprovider_grpc.simulator.scenario import AutoscalerOptions

# labels that never make groups dissimilar (compare_nodegroups.go BasicIgnoredLabels)
IGNORED_LABELS = frozenset(
    {
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
        "beta.kubernetes.io/fluentd-ds-ready",
        "kops.k8s.io/instancegroup",
        "cloudprovider-grpc.io/node-group",
    }
)


@dataclass
class GroupView:
    """What the orchestrator knows about one node group this loop."""

    id: str
    min_size: int
    max_size: int
    target: int
    template: NodeShape | None
    template_free: Mapping[str, int] = field(default_factory=dict)
    backed_off: str | None = None  # reason, if backed off
    zero_or_max: bool = False  # NodeGroupGetOptions zeroOrMaxNodeScaling: scale 0 -> max at once


@dataclass
class ScaleUpPlan:
    increases: list[tuple[str, int]] = field(default_factory=list)
    best: Option | None = None
    options: list[Option] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    needed: int = 0  # uncapped estimate for the chosen group
    lines: list[str] = field(default_factory=list)
    reason: str = ""
    pods_triggered: int = 0


def _flag(resource: str) -> str:
    return {CPU: "cores-total", MEMORY: "memory-total"}.get(resource, f"gpu-total {resource}")


def within_ratio(a: int, b: int, ratio: float) -> bool:
    hi, lo = max(a, b), min(a, b)
    return hi == 0 or (hi - lo) / hi <= ratio


def similar(a: GroupView, b: GroupView, opts: AutoscalerOptions) -> bool:
    """compare_nodegroups.go IsCloudProviderNodeInfoSimilar."""
    ta, tb = a.template, b.template
    if ta is None or tb is None:
        return False
    for res in set(ta.capacity) | set(tb.capacity):
        ca, cb = ta.capacity.get(res, 0), tb.capacity.get(res, 0)
        if res == MEMORY:
            if not within_ratio(ca, cb, opts.memory_difference_ratio):
                return False
        elif ca != cb:
            return False
    for res in (CPU, MEMORY):
        if not within_ratio(
            ta.allocatable.get(res, 0), tb.allocatable.get(res, 0), opts.max_allocatable_difference_ratio
        ):
            return False
        if not within_ratio(
            a.template_free.get(res, 0), b.template_free.get(res, 0), opts.max_free_difference_ratio
        ):
            return False
    ignored = IGNORED_LABELS | set(opts.balancing_ignore_label)
    la = {k: v for k, v in ta.labels.items() if k not in ignored}
    lb = {k: v for k, v in tb.labels.items() if k not in ignored}
    return la == lb and sorted(ta.taints, key=repr) == sorted(tb.taints, key=repr)


def balance(groups: Sequence[GroupView], total: int) -> list[tuple[str, int]]:
    """BalanceScaleUpBetweenGroups: cap at the set's room, then +1 to the smallest group."""
    room = {g.id: max(0, g.max_size - g.target) for g in groups}
    total = min(total, sum(room.values()))
    size = {g.id: g.target for g in groups}
    added = dict.fromkeys(size, 0)
    for _ in range(total):
        open_groups = [g.id for g in groups if added[g.id] < room[g.id]]
        gid = min(open_groups, key=lambda x: (size[x], [g.id for g in groups].index(x)))
        size[gid] += 1
        added[gid] += 1
    return [(gid, n) for gid, n in added.items() if n > 0]


def plan_scale_up(
    pod_groups: Sequence[PodGroup],
    groups: Sequence[GroupView],
    opts: AutoscalerOptions,
    chain: Chain,
    ctx: ExpanderContext,
    cluster_nodes: int,
    usage: Mapping[str, int],
    fits: Callable[[PodShape, NodeShape], bool],
    gpu_label: str | None = None,
    context: Placement | None = None,
) -> ScaleUpPlan:
    """`usage`: what the cluster's nodes (plus upcoming ones) count against the resource limits
    (`limits.usage`); `gpu_label`: the cloud's GPU label, for `--gpu-total`; `context`: the
    cluster's nodes and pods for inter-pod predicates in the estimator (`predicates.py`)."""
    plan = ScaleUpPlan()
    quota = Tracker.for_scale_up(opts.resource_limits(), usage)
    valid, quota_room = _valid_groups(groups, opts, quota, cluster_nodes, gpu_label, plan)
    cluster_room = opts.max_nodes_total - cluster_nodes if opts.max_nodes_total > 0 else None
    if cluster_room is not None and cluster_room < 1:
        plan.reason = f"max-nodes-total ({opts.max_nodes_total}) reached"
        plan.lines.append(f"Max total nodes in cluster reached: {opts.max_nodes_total}")
        return plan
    similar_to = _Similarity(valid, opts)
    fitting = _expansion_options(plan, pod_groups, valid, similar_to, opts, cluster_room, fits, context)
    if not plan.options:
        plan.reason = "No expansion options"
        plan.lines.append("No expansion options")
        return plan

    best = chain.best_option(plan.options, ctx)
    plan.lines.extend(ctx.notes)
    if best is None or best.node_count <= 0:
        plan.reason = "expander chose no option"
        plan.lines.append("No expansion option chosen by the expanders")
        return plan
    plan.best = best
    group = similar_to.by_id[best.group]
    plan.lines.append(f"Best option to resize: {best.group}")
    needed = best.node_count
    if best.debug:  # the limiter cut the estimate: compute the true need for the log
        needed = estimate(
            fitting[best.group],
            best.template,
            group.template_free,
            max_nodes=opts.max_nodes_per_scaleup,
            context=context,
        ).node_count
    plan.needed = needed
    plan.lines.append(f"Estimated {needed} nodes needed in {best.group}")
    new_nodes = _capped(plan, best.node_count, needed, cluster_room, quota_room[group.id], opts)
    _split(plan, group, similar_to, new_nodes, needed, opts)
    plan.pods_triggered = best.pod_count
    return plan


def _valid_groups(
    groups: Sequence[GroupView],
    opts: AutoscalerOptions,
    quota: Tracker,
    cluster_nodes: int,
    gpu_label: str | None,
    plan: ScaleUpPlan,
) -> tuple[list[GroupView], dict[str, dict[str, int]]]:
    """orchestrator.go filterValidScaleUpNodeGroups: the groups that may grow, and each one's
    room within the resource limits (`Tracker.room`); the others go to `plan.skipped`."""
    valid: list[GroupView] = []
    quota_room: dict[str, dict[str, int]] = {}
    for g in groups:
        if g.backed_off:
            plan.skipped[g.id] = f"backed off ({g.backed_off})"
            continue
        if g.target >= g.max_size:
            plan.skipped[g.id] = "max limit reached"
            continue
        if g.template is None:
            plan.skipped[g.id] = "no template"
            continue
        room = quota_room[g.id] = quota.room(node_totals(g.template, gpu_label))
        first = g.max_size - g.target if g.zero_or_max else 1
        if exceeded := [res for res, n in room.items() if n < first]:
            plan.skipped[g.id] = "exceeded quota: " + "/".join(_flag(r) for r in exceeded)
        elif (
            g.zero_or_max
            and opts.max_nodes_total
            and cluster_nodes + g.max_size - g.target > opts.max_nodes_total
        ):
            plan.skipped[g.id] = "atomic scale-up exceeds cluster node count limit"
        else:
            valid.append(g)
    for gid, why in plan.skipped.items():
        plan.lines.append(f"Skipping node group {gid} - {why}")
    return valid, quota_room


class _Similarity:
    """Which valid groups are similar to a group (`similar`), computed once per group and only
    with balance-similar-node-groups on; in the order of the valid groups."""

    def __init__(self, valid: list[GroupView], opts: AutoscalerOptions) -> None:
        self.valid = valid
        self.by_id = {g.id: g for g in valid}
        self.opts = opts
        self._of: dict[str, list[GroupView]] = {}

    def of(self, g: GroupView) -> list[GroupView]:
        found = self._of.get(g.id)
        if found is None:
            found = self._of[g.id] = [
                o
                for o in self.valid
                if o.id != g.id and self.opts.balance_similar_node_groups and similar(g, o, self.opts)
            ]
        return found


def _expansion_options(
    plan: ScaleUpPlan,
    pod_groups: Sequence[PodGroup],
    valid: list[GroupView],
    similar_to: _Similarity,
    opts: AutoscalerOptions,
    cluster_room: int | None,
    fits: Callable[[PodShape, NodeShape], bool],
    context: Placement | None,
) -> dict[str, list[PodGroup]]:
    """orchestrator.go ComputeExpansionOption per valid group: the pod groups that fit its
    template (returned by group), the binpacking estimate within the limiter's room (the group's
    and its similar groups' room below MaxSize, max-nodes-per-scaleup, max-nodes-total), into
    `plan.options`."""
    fitting_by_group: dict[str, list[PodGroup]] = {}
    for g in valid:
        tpl = g.template
        assert tpl is not None
        fitting = fitting_by_group[g.id] = [pg for pg in pod_groups if fits(pg.shape, tpl)]
        if not fitting:
            reasons = sorted({static_reason(pg.shape, tpl) for pg in pod_groups} - {""})
            plan.skipped[g.id] = "no pod fits: " + "; ".join(reasons) if reasons else "no pod fits"
            continue
        room = g.max_size - g.target + sum(s.max_size - s.target for s in similar_to.of(g))
        limit = min(opts.max_nodes_per_scaleup, room)
        if cluster_room is not None:
            limit = min(limit, max(0, cluster_room))
        est = estimate(fitting, tpl, g.template_free, max_nodes=limit, context=context)
        if est.node_count == 0:
            plan.skipped[g.id] = "estimator placed no pod (pods do not fit an empty template node)"
            continue
        node_count = est.node_count
        if g.zero_or_max:
            # orchestrator.go ComputeExpansionOption: the only valid count is the group's max size
            node_count = g.max_size - g.target
        opt = Option(g.id, node_count, est.placed, tpl)
        opt.debug = f"limited to {limit}" if est.limited and not g.zero_or_max else ""
        plan.options.append(opt)
    return fitting_by_group


def _capped(
    plan: ScaleUpPlan,
    new_nodes: int,
    needed: int,
    cluster_room: int | None,
    quota_room: Mapping[str, int],
    opts: AutoscalerOptions,
) -> int:
    """The chosen option's node count after max-nodes-total and the resource limits
    (orchestrator.go applyLimits)."""
    if cluster_room is not None and needed > cluster_room:
        plan.lines.append(f"Capping size to max cluster total size ({opts.max_nodes_total})")
        new_nodes = min(new_nodes, cluster_room)
    quota_nodes = min([new_nodes, *quota_room.values()])
    if quota_nodes < new_nodes:
        plan.lines.append(f"Capping scale-up size due to lack of resources: {new_nodes} -> {quota_nodes}")
        new_nodes = quota_nodes
    return new_nodes


def _split(
    plan: ScaleUpPlan,
    group: GroupView,
    similar_to: _Similarity,
    new_nodes: int,
    needed: int,
    opts: AutoscalerOptions,
) -> None:
    """The increases: balanced across the chosen group and its similar groups
    (balancing_processor.go; never for zero-or-max groups), else the chosen group capped at its
    MaxSize."""
    similar_groups = [group]
    if not group.zero_or_max:  # orchestrator.go: no balancing for zero-or-max groups
        similar_groups += [o for o in similar_to.of(group) if not o.zero_or_max]
    if len(similar_groups) > 1:
        plan.lines.append(
            f"Found {len(similar_groups) - 1} similar node groups: "
            f"{', '.join(o.id for o in similar_groups[1:])}"
        )
        plan.increases = balance(similar_groups, new_nodes)
        if len(plan.increases) > 1:
            plan.lines.append(
                f"Splitting scale-up between {len(plan.increases)} similar node groups: "
                f"{{{', '.join(g for g, _ in plan.increases)}}}"
            )
    else:
        room = group.max_size - group.target
        if needed > room:
            plan.lines.append(f"Capping size to MAX ({group.max_size})")
        plan.increases = [(group.id, min(new_nodes, room))]
    for gid, n in plan.increases:
        g = next(x for x in similar_groups if x.id == gid)
        plan.lines.append(
            f"Scale-up: setting group {gid} size to {g.target + n} instead of {g.target} (max: {g.max_size})"
        )
