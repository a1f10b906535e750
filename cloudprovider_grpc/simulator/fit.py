"""Scheduling fit: the scheduler-framework Filter plugins CA runs in its simulations.

Modelled predicates (kubernetes `pkg/scheduler/framework/plugins/`; CA runs them through
sigs-CA `pkg/simulator/clustersnapshot/predicate/`):
- NodeResourcesFit: every requested resource (cpu, memory, pods, extended resources such as
  `nvidia.com/gpu`) must be free on the node; a resource the node does not offer has 0 free.
- NodeAffinity: `nodeSelector` labels must all match, and the required node-affinity expressions
  (In, NotIn, Exists, DoesNotExist) must all hold.
- TaintToleration: every NoSchedule and NoExecute taint must be tolerated (PreferNoSchedule
  only affects scoring, so it never filters).
Fit is split into a static part (labels, taints; cacheable per shape and node shape) and a
resource part (changes with every placement), so hot loops only repeat the cheap half.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol, TypeVar

from cloudprovider_grpc.simulator.model import PODS, NodeShape, PodShape, Resources, Taint

_FILTERING_EFFECTS = ("NoSchedule", "NoExecute")


def tolerates_all(shape: PodShape, taints: tuple[Taint, ...]) -> bool:
    for taint in taints:
        if taint.effect in _FILTERING_EFFECTS and not any(t.tolerates(taint) for t in shape.tolerations):
            return False
    return True


def selects(shape: PodShape, labels: Mapping[str, str]) -> bool:
    for k, v in shape.node_selector.items():
        if labels.get(k) != v:
            return False
    return all(req.matches(labels) for req in shape.affinity)


def static_fit(shape: PodShape, node: NodeShape) -> bool:
    """Labels and taints only: does this pod shape ever fit this node shape?"""
    return selects(shape, node.labels) and tolerates_all(shape, node.taints)


def static_reason(shape: PodShape, node: NodeShape) -> str:
    """Why static_fit is False, in scheduler terms (for decision logs)."""
    if not selects(shape, node.labels):
        return "node(s) didn't match Pod's node affinity/selector"
    if not tolerates_all(shape, node.taints):
        untolerated = [
            f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}"
            for t in node.taints
            if t.effect in _FILTERING_EFFECTS and not any(x.tolerates(t) for x in shape.tolerations)
        ]
        return f"node(s) had untolerated taint {{{', '.join(untolerated)}}}"
    return ""


def resources_fit(requests: Resources, free: Mapping[str, int]) -> bool:
    return all(v <= free.get(k, 0) for k, v in requests.items())


def fit_count(requests: Resources, free: Mapping[str, int]) -> int:
    """How many more pods with these requests fit in `free` (identical pods, placed one by one)."""
    best: int | None = None
    for k, v in requests.items():
        if v <= 0:
            continue
        n = free.get(k, 0) // v
        if n <= 0:
            return 0
        best = n if best is None or n < best else best
    return best if best is not None else 0


def resource_reason(requests: Resources, free: Mapping[str, int]) -> str:
    short = sorted(k for k, v in requests.items() if v > free.get(k, 0))
    if PODS in short:
        return "Too many pods"
    return ", ".join(f"Insufficient {k}" for k in short)


class _HasShape(Protocol):
    @property
    def shape(self) -> NodeShape: ...


_N = TypeVar("_N", bound=_HasShape)


class StaticFitCache:
    """static_fit memoised per (pod shape, node shape) object pair."""

    def __init__(self) -> None:
        self._cache: dict[tuple[int, int], bool] = {}
        self._keep: list[object] = []  # keep keyed objects alive so ids stay unique

    def __call__(self, shape: PodShape, node: NodeShape) -> bool:
        key = (id(shape), id(node))
        hit = self._cache.get(key)
        if hit is None:
            hit = static_fit(shape, node)
            self._cache[key] = hit
            self._keep.append((shape, node))
        return hit

    def fitting(self, shape: PodShape, nodes: Iterable[_N]) -> list[_N]:
        """The nodes (in order) whose node shape `shape` fits: one look-up per distinct node
        shape (a node group's nodes share their template's), not one per node."""
        verdicts: dict[int, bool] = {}
        out = []
        for n in nodes:
            ok = verdicts.get(id(n.shape))
            if ok is None:
                ok = verdicts[id(n.shape)] = self(shape, n.shape)
            if ok:
                out.append(n)
        return out
