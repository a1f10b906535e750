"""What keeps a node from being drained, and how full it is: the node- and pod-level rules the
scale-down planner (planner.py) applies to each candidate.

Modelled on sigs-CA:
- utilization (`pkg/core/scaledown/eligibility/eligibility.go`, `pkg/simulator/utilization/info.go`):
  max(cpu requests / allocatable, memory requests / allocatable), DaemonSet pods counted unless
  `ignore-daemonsets-utilization`; nodes with GPUs use GPU utilization.
- drainability (`pkg/simulator/drainability/rules/*`, FAQ "What types of pods can prevent CA
  from removing a node?"): `safe-to-evict: "false"` blocks; `safe-to-evict: "true"` overrides the
  rules below; pods without a controller, kube-system pods without a PDB (with
  `skip-nodes-with-system-pods`) and pods with local storage (with
  `skip-nodes-with-local-storage`) block; so do pods whose PodDisruptionBudget has no disruption
  left (`pkg/core/scaledown/pdb` CanRemovePods, NotEnoughPdb), the budget being consumed by the
  nodes found removable earlier in the same pass (RemovePods). DaemonSet pods never need moving.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cloudprovider_grpc.simulator.model import CPU, GPU_RESOURCE, MEMORY, SAFE_TO_EVICT, Node, Pod, PodShape


@dataclass(frozen=True)
class DrainRules:
    skip_nodes_with_system_pods: bool = True
    skip_nodes_with_local_storage: bool = True


def utilization(node: Node, ignore_daemonsets: bool) -> tuple[float, str]:
    """(utilization, resource that determined it), as eligibility.go / utilization/info.go."""
    alloc = node.allocatable
    used = node.used
    ds = node.ds_used if ignore_daemonsets else {}
    gpu_alloc = alloc.get(GPU_RESOURCE, 0)
    if gpu_alloc > 0:
        return (used.get(GPU_RESOURCE, 0) - ds.get(GPU_RESOURCE, 0)) / gpu_alloc, GPU_RESOURCE
    best, which = 0.0, CPU
    for res in (CPU, MEMORY):
        a = alloc.get(res, 0)
        if a > 0:
            u = (used.get(res, 0) - ds.get(res, 0)) / a
            if u > best:
                best, which = u, res
    return best, which


def blocking_reason(pod: Pod, rules: DrainRules) -> str | None:
    """Why this pod keeps its node from being drained (drain.BlockingPodReason), or None."""
    shape = pod.shape
    if shape.is_daemonset:
        return None
    evict = shape.annotations.get(SAFE_TO_EVICT)
    if evict == "false":
        return "NotSafeToEvictAnnotation"
    if evict == "true":
        return None
    if not shape.controlled:
        return "NotReplicated"
    if rules.skip_nodes_with_system_pods and shape.namespace == "kube-system" and not shape.has_pdb:
        return "UnmovableKubeSystemPod"
    if rules.skip_nodes_with_local_storage and shape.local_storage:
        return "LocalStorageRequested"
    return None


def pdb_blocked(pods: list[Pod], left: Mapping[PodShape, int]) -> str | None:
    """pdb/basic.go CanRemovePods: a node whose pods are covered by a PDB with no disruption left
    cannot be drained (NotEnoughPdb). More pods than disruptions left is only "at risk": CA still
    drains, evicting one by one (inParallel false), so that does not block here."""
    for p in pods:
        n = left.get(p.shape)
        if n is not None and n < 1:
            return f"pod {p.shape.namespace}/{p.name}: NotEnoughPdb"
    return None


def movable_pods(node: Node) -> list[Pod]:
    return [p for p in node.pods.values() if not p.shape.is_daemonset]


def is_empty(node: Node) -> bool:
    return not any(not p.shape.is_daemonset for p in node.pods.values())
