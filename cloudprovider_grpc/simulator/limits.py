"""Cluster-wide resource limits: `--cores-total`, `--memory-total` and `--gpu-total`.

Follows sigs-CA `pkg/resourcequotas/` (tracker.go, factory.go, cache.go) fed by the limiter of
`pkg/context/autoscaling_context.go` NewResourceLimiterFromAutoscalingOptions:
- what one node counts (cache.go totalNodeResources): its cores as `Capacity[cpu].Value()`, which
  rounds up to whole cores (`pkg/core/utils/utils.go` getNodeResource: a 1500m node is 2 cores),
  its memory capacity in bytes, and, when it carries the cloud's GPU label, its allocatable GPUs
  under the label's value as the GPU type (`processors/customresources/gpu_processor.go`);
- usage is summed over every node of the cluster, node-group member or not (usage.go);
- scale-up checks headroom to the maxima (limit - usage), scale-down headroom to the minima
  (usage - limit: the min-quota adapter of provider.go and NewMinQuotasTracker); a delta that
  does not fit is cut to `headroom // per-node amount` nodes, and consuming updates the headroom,
  so several removals in one loop cannot jointly cross a minimum (unneeded/nodes.go
  unremovableReason -> MinimalResourceLimitExceeded).
Memory flags are in GiB on CA's command line and bytes inside (flags.go multiplies by units.GiB).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from cloudprovider_grpc.simulator.model import CPU, GPU_RESOURCE, MEMORY, NodeShape

GIB = 1024**3


def node_totals(shape: NodeShape, gpu_label: str | None) -> dict[str, int]:
    """What one node of this shape counts against the limits (resource -> amount)."""
    out = {
        CPU: math.ceil(shape.capacity.get(CPU, 0) / 1000),  # Quantity.Value() rounds up
        MEMORY: shape.capacity.get(MEMORY, 0),
    }
    if gpu_label and gpu_label in shape.labels:
        gpus = shape.allocatable.get(GPU_RESOURCE, 0)
        if gpus > 0:
            out[shape.labels[gpu_label]] = gpus
    return out


def usage(shapes: Iterable[NodeShape], gpu_label: str | None) -> dict[str, int]:
    """What these nodes count against the limits. A group's nodes share their template's shape,
    so each distinct shape is totalled once, times its nodes: integer sums, the same in any
    order, and the resources appear in the order the nodes first bring them."""
    listed = list(shapes)
    distinct = dict(zip(map(id, listed), listed, strict=True))
    nodes = Counter(map(id, listed))
    total: dict[str, int] = {}
    for key, shape in distinct.items():
        for k, v in node_totals(shape, gpu_label).items():
            total[k] = total.get(k, 0) + v * nodes[key]
    return total


@dataclass(frozen=True)
class Limits:
    """Minimum and maximum per resource ("cpu" in cores, "memory" in bytes, GPU types in GPUs)."""

    minimum: Mapping[str, int] = field(default_factory=dict)
    maximum: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_flags(cls, cores: tuple[int, int], memory_gib: tuple[int, int], gpus: Iterable[str]) -> Limits:
        lo = {CPU: cores[0], MEMORY: memory_gib[0] * GIB}
        hi = {CPU: cores[1], MEMORY: memory_gib[1] * GIB}
        for spec in gpus:
            kind, mn, mx = spec.rsplit(":", 2)
            lo[kind], hi[kind] = int(mn), int(mx)
        return cls(lo, hi)


@dataclass
class Check:
    allowed: int
    exceeded: list[str] = field(default_factory=list)


class Tracker:
    """Headroom per limited resource; `check` how many nodes fit, `consume` what was taken."""

    def __init__(self, headroom: Mapping[str, int]) -> None:
        self.left = dict(headroom)

    @classmethod
    def for_scale_up(cls, limits: Limits, used: Mapping[str, int]) -> Tracker:
        return cls({r: max(0, lim - used.get(r, 0)) for r, lim in limits.maximum.items()})

    @classmethod
    def for_scale_down(cls, limits: Limits, used: Mapping[str, int]) -> Tracker:
        return cls({r: max(0, used.get(r, 0) - lim) for r, lim in limits.minimum.items()})

    def room(self, per_node: Mapping[str, int]) -> dict[str, int]:
        """How many nodes of this shape each limited resource's headroom holds, for the resources
        the shape uses (tracker.go checkQuota's per-resource step)."""
        return {
            res: self.left[res] // amount
            for res, amount in sorted(per_node.items())
            if amount > 0 and res in self.left
        }

    def check(self, per_node: Mapping[str, int], nodes: int) -> Check:
        """tracker.go checkQuota: the largest node count within every headroom."""
        result = Check(nodes)
        for res, fits in self.room(per_node).items():
            if fits < nodes:
                result.allowed = min(result.allowed, fits)
                result.exceeded.append(res)
        return result

    def consume(self, per_node: Mapping[str, int], nodes: int = 1) -> Check:
        """ConsumeQuota: take `nodes` nodes' worth only if all of them fit."""
        result = self.check(per_node, nodes)
        if result.allowed == nodes:
            for res, amount in per_node.items():
                if res in self.left:
                    self.left[res] = max(0, self.left[res] - amount * nodes)
        return result
