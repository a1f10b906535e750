"""The scale-down planner: which nodes are unneeded, for how long, and which may be removed now.

Modelled on sigs-CA `pkg/core/scaledown/`:
- eligibility (`eligibility/eligibility.go`): utilization = max(cpu requests / allocatable,
  memory requests / allocatable), DaemonSet pods counted unless `ignore-daemonsets-utilization`
  (per group via NodeGroupGetOptions); nodes with GPUs use GPU utilization and the GPU threshold;
  the node is underutilized when utilization <= the threshold. Nodes annotated
  `cluster-autoscaler.kubernetes.io/scale-down-disabled=true` and nodes being deleted are skipped.
- drainability and utilization: see `drain.py`.
- rescheduling (`pkg/simulator/cluster.go` SimulateNodeRemoval): the node's movable pods must fit
  on the remaining nodes; nodes found removable in the same pass are taken out of the snapshot and
  their pods' new homes are reserved, so the whole unneeded set can go together.
- timers (`unneeded/nodes.go`): a node must stay unneeded for `scale-down-unneeded-time` (per
  group), an unready node for `scale-down-unready-time`; nodes found unremovable are not
  rechecked for `unremovable-node-recheck-timeout`. Only Ready nodes receive moved pods.
- budgets (`budgets/budgets.go`): at most `max-scale-down-parallelism` removals per pass, of which
  at most `max-drain-parallelism` non-empty; the group size guard keeps every group above MinSize.
- limits (`unneeded/nodes.go` unremovableReason, `pkg/resourcequotas`): no removal may take the
  cluster below the minimum of `--cores-total`, `--memory-total` or `--gpu-total`
  (MinimalResourceLimitExceeded); see `limits.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from cloudprovider_grpc.simulator.engine.scale_down.drain import (
    DrainRules,
    blocking_reason,
    is_empty,
    movable_pods,
    pdb_blocked,
    utilization,
)
from cloudprovider_grpc.simulator.limits import Tracker
from cloudprovider_grpc.simulator.model import (
    GPU_RESOURCE,
    SCALE_DOWN_DISABLED,
    Node,
    Pod,
    PodShape,
    Resources,
)
from cloudprovider_grpc.simulator.predicates import Placement, StaticFitCache, fit_count, scheduling_key


@dataclass(frozen=True)
class GroupScaleDownOptions:
    """Per-group values CA reads through NodeGroupGetOptions (falling back to the flags)."""

    utilization_threshold: float = 0.5
    gpu_utilization_threshold: float = 0.5
    unneeded_time: float = 600.0
    ignore_daemonsets_utilization: bool = False
    unready_time: float = 1200.0


@dataclass
class Unneeded:
    node: str
    group: str
    since: float
    utilization: float
    resource: str
    empty: bool
    pods_to_move: list[str] = field(default_factory=list)
    ready: bool = True  # unready nodes wait scale-down-unready-time instead of the unneeded time


@dataclass
class Unremovable:
    node: str
    reason: str
    detail: str = ""


@dataclass
class PassResult:
    unneeded: list[Unneeded]
    unremovable: list[Unremovable]
    newly_unneeded: list[Unneeded]


class ScaleDownPlanner:
    """Keeps the unneeded-since timers across loops; one `update` per loop, then `select`."""

    def __init__(self, rules: DrainRules, non_empty_candidates: int, recheck_timeout: float) -> None:
        self.rules = rules
        self.non_empty_candidates = non_empty_candidates
        self.recheck_timeout = recheck_timeout
        self.unneeded_since: dict[str, float] = {}
        self.unremovable_until: dict[str, float] = {}
        self.current: dict[str, Unneeded] = {}
        self._fits = StaticFitCache()
        self._util: dict[str, tuple[int, GroupScaleDownOptions, float, str, Unremovable | None]] = {}
        #: destinations with room per scheduling key (`predicates.scheduling_key`): workloads
        #: of one pod spec share a list, as they rule out the same full nodes
        self._open: dict[tuple[object, ...], list[Node]] = {}
        self._keys: dict[int, tuple[object, ...]] = {}

    def update(
        self,
        now: float,
        candidates: Sequence[Node],
        destinations: Sequence[Node],
        options: Callable[[str], GroupScaleDownOptions],
        pdb_left: dict[PodShape, int] | None = None,
        interpod: bool = False,
    ) -> PassResult:
        """Find the unneeded nodes among `candidates` (nodes of groups above MinSize);
        `destinations` are all ready, schedulable nodes the evicted pods may move to.
        `pdb_left`: disruptions each PDB-covered workload still allows (consumed by the nodes
        found removable in this pass, like CA's RemainingPdbTracker); `interpod`: some pods have
        host ports, pod (anti-)affinity or spread constraints, so moves check `predicates.py`."""
        unremovable: list[Unremovable] = []
        underutilized = self._underutilized(now, candidates, options, unremovable)
        if not underutilized:
            return self._finish([], unremovable)
        found = self._removable(now, underutilized, candidates, destinations, pdb_left, interpod, unremovable)
        return self._finish(found, unremovable)

    def _underutilized(
        self,
        now: float,
        candidates: Sequence[Node],
        options: Callable[[str], GroupScaleDownOptions],
        unremovable: list[Unremovable],
    ) -> list[tuple[Node, float, str]]:
        """The candidates under their group's utilization threshold (unneeded/nodes.go
        UpdateUnneededNodes, eligibility.go), in the order CA tries them: empty nodes first (they
        need no room elsewhere), then previously unneeded nodes (kept stable like
        unneeded/nodes.go), then by name. The others are added to `unremovable` with why."""
        underutilized: list[tuple[Node, float, str]] = []
        group_opts: dict[str, GroupScaleDownOptions] = {}
        util_cache = self._util  # a local: this loop runs over 5,000 nodes in every loop
        # the nodes still within their recheck timeout (a few dozen at most), as a set
        recent = {name for name, until in self.unremovable_until.items() if until > now}
        for node in candidates:
            if node.to_be_deleted:
                continue
            name = node.name
            if node.annotations and node.annotations.get(SCALE_DOWN_DISABLED) == "true":
                unremovable.append(Unremovable(name, "ScaleDownDisabledAnnotation"))
                continue
            if name in recent:
                unremovable.append(Unremovable(name, "RecentlyUnremovable"))
                continue
            opts = group_opts.get(node.group)
            if opts is None:
                opts = group_opts[node.group] = options(node.group)
            # the verdict only changes when the node's pods or its group's options do: a day of
            # 500 busy nodes re-judges only the nodes whose pods changed
            cached = util_cache.get(name)
            if cached is not None and cached[0] == node.version and (cached[1] is opts or cached[1] == opts):
                verdict = cached[4]
                if verdict is not None:
                    unremovable.append(verdict)
                    continue
                util, res = cached[2], cached[3]
            else:
                util, res = utilization(node, opts.ignore_daemonsets_utilization)
                threshold = (
                    opts.gpu_utilization_threshold if res == GPU_RESOURCE else opts.utilization_threshold
                )
                verdict = (
                    Unremovable(name, "NotUnderutilized", f"{res} {util:.3f} > {threshold}")
                    if util > threshold
                    else None
                )
                util_cache[name] = (node.version, opts, util, res, verdict)
                if verdict is not None:
                    unremovable.append(verdict)
                    continue
            underutilized.append((node, util, res))

        underutilized.sort(
            key=lambda t: (not is_empty(t[0]), t[0].name not in self.unneeded_since, t[0].name)
        )
        return underutilized

    def _removable(
        self,
        now: float,
        underutilized: list[tuple[Node, float, str]],
        candidates: Sequence[Node],
        destinations: Sequence[Node],
        pdb_left: dict[PodShape, int] | None,
        interpod: bool,
        unremovable: list[Unremovable],
    ) -> list[Unneeded]:
        """The underutilized nodes whose pods can all move elsewhere in CA's snapshot
        (simulator/removal.go FindNodesToRemove), up to scale-down-non-empty-candidates-count
        non-empty ones; blocked nodes are rechecked after unremovable-node-recheck-timeout."""
        free = {n.name: n.free() for n in destinations if not n.to_be_deleted}
        self._open = {}  # destinations per scheduling key with room, for this pass's `free` only
        self._keys = {}
        view: Placement | None = None
        if interpod:
            view = Placement.of({n.name: n for n in [*destinations, *candidates]}.values())
        pdb = dict(pdb_left or {})
        removed: set[str] = set()
        # pods moved onto a node earlier in this pass live there in CA's snapshot: removing that
        # node as well means moving them again
        moved_in: dict[str, list[PodShape]] = {}
        found: list[Unneeded] = []
        non_empty_checked = 0
        for node, util, res in underutilized:
            pods = movable_pods(node)
            extra = moved_in.get(node.name, [])
            if pods or extra:
                if non_empty_checked >= self.non_empty_candidates:
                    continue
                non_empty_checked += 1
                blocked = self._blocked(pods) or pdb_blocked(pods, pdb)
                if blocked is not None:
                    unremovable.append(Unremovable(node.name, "BlockedByPod", blocked))
                    self.unremovable_until[node.name] = now + self.recheck_timeout
                    continue
                shapes = [p.shape for p in pods] + extra
                if not self._reschedule(node, shapes, free, removed, moved_in, destinations, view):
                    unremovable.append(Unremovable(node.name, "NoPlaceToMovePods"))
                    if pods:
                        self.unremovable_until[node.name] = now + self.recheck_timeout
                    continue
            removed.add(node.name)
            for p in pods:
                if p.shape in pdb:
                    pdb[p.shape] -= 1
            since = self.unneeded_since.get(node.name, now)
            found.append(
                Unneeded(
                    node.name,
                    node.group,
                    since,
                    util,
                    res,
                    not pods,
                    sorted(p.name for p in pods),
                    node.ready,
                )
            )

        return found

    def _finish(self, found: list[Unneeded], unremovable: list[Unremovable]) -> PassResult:
        newly = [u for u in found if u.node not in self.unneeded_since]
        self.unneeded_since = {u.node: u.since for u in found}
        self.current = {u.node: u for u in found}
        return PassResult(found, unremovable, newly)

    def _blocked(self, pods: list[Pod]) -> str | None:
        for p in pods:
            reason = blocking_reason(p, self.rules)
            if reason is not None:
                return f"pod {p.shape.namespace}/{p.name}: {reason}"
        return None

    def _reschedule(
        self,
        node: Node,
        shapes: list[PodShape],
        free: dict[str, Resources],
        removed: set[str],
        moved_in: dict[str, list[PodShape]],
        destinations: Sequence[Node],
        view: Placement | None = None,
    ) -> bool:
        """Place the node's pods elsewhere (first fit in node order); commit only if all fit.
        With `view`, pods whose fit depends on other pods go one at a time through its
        predicates, and the view follows every move (undone when the node cannot be emptied)."""
        by_shape: dict[int, tuple[PodShape, int]] = {}
        for shape in shapes:
            _, n = by_shape.get(id(shape), (shape, 0))
            by_shape[id(shape)] = (shape, n + 1)
        tentative: dict[str, Resources] = {}
        landed: list[tuple[str, PodShape, int]] = []
        saved = None
        if view is not None:
            saved = (view.labels.get(node.name), view.pods.get(node.name))
            view.remove_node(node.name)  # its pods are leaving
        ok = True
        for shape, count in by_shape.values():
            remaining = count
            one_by_one = view is not None and view.relevant(shape)
            full: set[str] = set()
            opened = self._open_destinations(shape, destinations, free)
            visited = 0  # the destinations looked at: the full ones are among them
            for dest in opened:
                if remaining == 0:
                    break
                visited += 1
                if dest.name == node.name or dest.name in removed:
                    continue
                cur = tentative.get(dest.name)
                if cur is None:
                    if not fit_count(shape.requests, free[dest.name]):
                        full.add(dest.name)
                        continue
                    cur = dict(free[dest.name])
                n = min(remaining, fit_count(shape.requests, cur))
                if one_by_one and view is not None:
                    k = 0
                    while k < n and view.allows(shape, dest.name):
                        view.add_pod(dest.name, shape)
                        k += 1
                    n = k
                elif n and view is not None:
                    view.add_pod(dest.name, shape, n)
                if n:
                    for k2, v in shape.requests.items():
                        cur[k2] = cur.get(k2, 0) - v * n
                    tentative[dest.name] = cur
                    landed.append((dest.name, shape, n))
                    remaining -= n
            if full:  # only the part looked at is filtered; the thousands after it are kept
                opened[:visited] = [d for d in opened[:visited] if d.name not in full]
            if remaining:
                ok = False
                break
        if not ok:
            if view is not None and saved is not None:
                for dest_name, shape, n in landed:
                    view.remove_pod(dest_name, shape, n)
                labels, pods = saved
                if labels is not None:
                    view.add_node(node.name, labels)
                    for shape, n in (pods or {}).items():
                        view.add_pod(node.name, shape, n)
            return False
        free.update(tentative)
        for dest_name, shape, n in landed:
            moved_in.setdefault(dest_name, []).extend([shape] * n)
        return True

    def _open_destinations(
        self, shape: PodShape, destinations: Sequence[Node], free: Mapping[str, Resources]
    ) -> list[Node]:
        """The destinations (in their order) that pods of `shape` may still move to in this pass:
        statically fitting, not being deleted, and not yet found full. Within a pass committed
        free resources only shrink, so a node found without room for one pod of the shape stays
        so, and later nodes of the pass skip it instead of re-checking a thousand full nodes."""
        key = self._key(shape)
        found = self._open.get(key)
        if found is None:
            found = self._fits.fitting(shape, (d for d in destinations if d.name in free))
            self._open[key] = found
        return found

    def _key(self, shape: PodShape) -> tuple[object, ...]:
        key = self._keys.get(id(shape))  # for this pass, whose shapes all stay alive
        if key is None:
            key = self._keys[id(shape)] = scheduling_key(shape)
        return key

    def clear(self) -> None:
        """Forget every unneeded timer (CA's CleanUpUnneededNodes, e.g. while the cluster is
        unhealthy)."""
        self.unneeded_since.clear()
        self.current.clear()

    def forget(self, node_name: str) -> None:
        self._util.pop(node_name, None)
        self.unneeded_since.pop(node_name, None)
        self.unremovable_until.pop(node_name, None)
        self.current.pop(node_name, None)


@dataclass
class Removal:
    node: str
    group: str
    empty: bool
    pods_to_move: list[str]
    unneeded_for: float


def _threshold(
    u: Unneeded, unneeded_time: Callable[[str], float], unready_time: Callable[[str], float] | None
) -> float:
    """unneeded/nodes.go lookupAndSetRemovalThreshold: unready nodes use the unready time."""
    return unneeded_time(u.group) if u.ready or unready_time is None else unready_time(u.group)


def select_removals(
    now: float,
    unneeded: Sequence[Unneeded],
    unneeded_time: Callable[[str], float],
    group_sizes: Mapping[str, int],
    group_min: Mapping[str, int],
    max_parallelism: int,
    max_drain_parallelism: int,
    in_flight: int = 0,
    quota: Tracker | None = None,
    totals: Callable[[str], Mapping[str, int]] | None = None,
    unready_time: Callable[[str], float] | None = None,
    atomic: Collection[str] = (),
) -> tuple[list[Removal], list[Unremovable]]:
    """Which unneeded nodes to delete this loop: timers, MinSize guard, the cluster-wide minimum
    resource limits (`quota`: headroom above the minima, `totals`: what a node counts, by node
    name) and budgets (empty first), in the order of unneeded/nodes.go unremovableReason."""
    chosen: list[Removal] = []
    skipped: list[Unremovable] = []
    remaining_size = dict(group_sizes)
    budget = max(0, max_parallelism - in_flight)
    drain_budget = min(max_drain_parallelism, budget)
    ordered = sorted(unneeded, key=lambda u: (not u.empty, u.since, u.node))
    # zero-or-max groups go all at once or not at all (processors/nodes/scale_down_set_processor.go
    # FilterUnremovableNodes: removable only if every node of the group is; budgets.go counts
    # the group as one unit)
    for gid in sorted(set(atomic)):
        members = [u for u in ordered if u.group == gid]
        if not members:
            continue
        ready = [u for u in members if now - u.since >= _threshold(u, unneeded_time, unready_time)]
        drains = sum(1 for u in ready if not u.empty)
        if len(ready) == group_sizes.get(gid, -1) and len(ready) <= budget and drains <= drain_budget:
            for u in ready:
                chosen.append(Removal(u.node, u.group, u.empty, u.pods_to_move, now - u.since))
            budget -= len(ready)
            drain_budget -= drains
        else:
            skipped.extend(Unremovable(u.node, "AtomicScaleDownFailed") for u in ready)
    ordered = [u for u in ordered if u.group not in atomic]
    for u in ordered:
        waited = now - u.since
        if waited < _threshold(u, unneeded_time, unready_time):
            continue
        if remaining_size.get(u.group, 0) - 1 < group_min.get(u.group, 0):
            skipped.append(Unremovable(u.node, "NodeGroupMinSizeReached"))
            continue
        if quota is not None and totals is not None and quota.consume(totals(u.node)).allowed < 1:
            skipped.append(Unremovable(u.node, "MinimalResourceLimitExceeded"))
            continue
        if budget <= 0 or (not u.empty and drain_budget <= 0):
            skipped.append(Unremovable(u.node, "ScaleDownBudgetExhausted"))
            continue
        chosen.append(Removal(u.node, u.group, u.empty, u.pods_to_move, waited))
        remaining_size[u.group] -= 1
        budget -= 1
        if not u.empty:
            drain_budget -= 1
    return chosen, skipped
