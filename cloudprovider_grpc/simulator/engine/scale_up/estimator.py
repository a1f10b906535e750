"""The binpacking estimator: how many template nodes a set of pending pods needs.

Port of sigs-CA `pkg/estimator/binpacking_estimator.go` with its ordering from
`pkg/estimator/decreasing_pod_orderer.go` and its node limit from
`pkg/estimator/threshold_based_limiter.go`:

1. Pod equivalence groups are sorted by descending score, score = pod cpu request / template
   allocatable cpu + pod memory request / template allocatable memory (stable for ties).
2. For each group, pods first go to any node already added by this estimate (first fit, in the
   order nodes were added), stopping at the first pod that fits none of them.
3. The remaining pods go only to the *last* added node; when a pod does not fit there a fresh
   template node is added (if the limiter permits) and the pod is tried on it. A pod that does
   not fit even an empty template node ends the group.
4. The estimate is the number of added nodes that received at least one pod.

Pods of one equivalence group are identical, so "place pods one by one" is computed in bulk
(how many more fit on this node) with exactly the same result; that keeps 10,000 pending pods
across 50 groups well inside CA's own time budget.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from cloudprovider_grpc.simulator.model import CPU, MEMORY, NodeShape, PodShape, Resources
from cloudprovider_grpc.simulator.predicates import HOSTNAME, Placement, fit_count


@dataclass
class PodGroup:
    """Pending pods of one equivalence group (same controller and spec), by count."""

    shape: PodShape
    count: int


@dataclass
class Estimate:
    node_count: int
    placed: list[PodGroup] = field(default_factory=list)
    limited: bool = False  # the limiter refused a node that was needed

    @property
    def pod_count(self) -> int:
        return sum(g.count for g in self.placed)


def pod_score(shape: PodShape, template: NodeShape) -> float:
    """decreasing_pod_orderer.go: cpu share + memory share of the template's allocatable."""
    score = 0.0
    for res in (CPU, MEMORY):
        alloc = template.allocatable.get(res, 0)
        if alloc > 0:
            score += shape.requests.get(res, 0) / alloc
    return score


def order_groups(groups: Sequence[PodGroup], template: NodeShape) -> list[PodGroup]:
    return sorted(groups, key=lambda g: -pod_score(g.shape, template))


def estimate(
    groups: Sequence[PodGroup],
    template: NodeShape,
    empty_free: Mapping[str, int],
    max_nodes: int | None = None,
    fits_statically: Callable[[PodShape, NodeShape], bool] | None = None,
    context: Placement | None = None,
) -> Estimate:
    """Binpack `groups` onto fresh copies of `template` whose free resources start at `empty_free`
    (allocatable minus the DaemonSet pods CA adds to sanitized templates). `max_nodes` is the
    limiter's threshold (None = unlimited). `context`: the cluster's nodes and pods, which the
    inter-pod predicates of pods with host ports, pod (anti-)affinity or spread constraints read
    (`predicates.py`); such pods are placed one by one, the rest in bulk."""
    view: Placement | None = None
    if any(g.shape.interpod for g in groups) or (context is not None and context.anti_holders):
        view = context.copy() if context is not None else Placement()
    nodes: list[Resources] = []
    names: list[str] = []
    pods_on: list[int] = []
    placed: list[PodGroup] = []
    limited = False

    def add_node() -> int:
        nodes.append(dict(empty_free))
        pods_on.append(0)
        if view is not None:  # hypothetical nodes get names only when predicates look at them
            names.append(f"template-node-for-{template.group}-{len(names)}")
            view.add_node(names[-1], {**template.labels, HOSTNAME: names[-1]})
        return len(nodes) - 1

    def place(i: int, shape: PodShape, n: int) -> None:
        _take(nodes[i], shape.requests, n)
        pods_on[i] += n
        if view is not None:
            view.add_pod(names[i], shape, n)

    def fits_one(i: int, shape: PodShape) -> bool:
        return fit_count(shape.requests, nodes[i]) > 0 and (view is None or view.allows(shape, names[i]))

    for group in order_groups(groups, template):
        if fits_statically is not None and not fits_statically(group.shape, template):
            continue
        shape = group.shape
        req = shape.requests
        remaining = group.count
        if view is not None and view.relevant(shape):
            remaining = _one_by_one(
                shape, remaining, nodes, pods_on, names, view, fits_one, place, add_node, max_nodes
            )
            if remaining < 0:  # the limiter refused a node
                limited, remaining = True, -remaining - 1
        else:
            # step 2: first fit over the nodes this estimate already added
            for i, free in enumerate(nodes):
                if remaining == 0:
                    break
                n = fit_count(req, free)
                if n:
                    n = min(remaining, n)
                    place(i, shape, n)
                    remaining -= n
            # step 3: last node, then fresh nodes (the last node is already full for this shape)
            while remaining:
                if max_nodes is not None and len(nodes) >= max_nodes:
                    limited = True
                    break
                n = min(remaining, fit_count(req, empty_free))
                if n == 0:
                    break  # does not fit an empty node: the rest of this group will not either
                place(add_node(), shape, n)
                remaining -= n
        if group.count - remaining:
            placed.append(PodGroup(shape, group.count - remaining))
        # a refused node ends only this group: later groups may still fit the nodes added so far
    return Estimate(sum(1 for c in pods_on if c), placed, limited)


def _one_by_one(
    shape: PodShape,
    remaining: int,
    nodes: list[Resources],
    pods_on: list[int],
    names: list[str],
    view: Placement,
    fits_one: Callable[[int, PodShape], bool],
    place: Callable[[int, PodShape, int], None],
    add_node: Callable[[], int],
    max_nodes: int | None,
) -> int:
    """binpacking_estimator.go for pods whose fit depends on other pods, one pod at a time:
    tryToScheduleOnExistingNodes (first fit over the added nodes, stopping at the first pod that
    fits none), then tryToScheduleOnNewNodes (the last added node; on a hostname topology-spread
    failure any other added node; else a new node, unless the last one is still empty or the
    limiter refuses). Returns the pods left, or -(left + 1) when the limiter refused a node."""
    while remaining:
        target = next((i for i in range(len(nodes)) if fits_one(i, shape)), None)
        if target is None:
            break
        place(target, shape, 1)
        remaining -= 1
    while remaining:
        last = len(nodes) - 1
        if last >= 0:
            if fits_one(last, shape):
                place(last, shape, 1)
                remaining -= 1
                continue
            if view.failure_is_spread(shape, names[last]):
                other = next((i for i in range(last) if fits_one(i, shape)), None)
                if other is not None:
                    place(other, shape, 1)
                    remaining -= 1
                    continue
            if pods_on[last] == 0:
                break  # an empty new node did not help: another would not either
        if max_nodes is not None and len(nodes) >= max_nodes:
            return -remaining - 1
        i = add_node()
        if not fits_one(i, shape):
            break  # e.g. zonal spread: a new node in the same zone cannot help this pod
        place(i, shape, 1)
        remaining -= 1
    return remaining


def _take(free: Resources, req: Mapping[str, int], n: int) -> None:
    for k, v in req.items():
        free[k] = free.get(k, 0) - v * n
