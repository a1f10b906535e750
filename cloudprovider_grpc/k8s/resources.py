"""A Pod's effective resource requests, computed the way the scheduler and kubelet do.

Port of `PodRequests` with default options from kubernetes/component-helpers `resource/helpers.go`
(also kubernetes/kubernetes staging/src/k8s.io/component-helpers/resource/helpers.go), read at
kubernetes/component-helpers 1961876 (2026-07):

1. regular containers are summed;
2. init containers, in order: a restartable init container (`restartPolicy: Always`, a sidecar)
   is added to the sum and to a running total of sidecars; every init container's "use while it
   runs" is its own requests plus the sidecars started before it (for a sidecar: the running
   total including itself), and the pod needs the maximum of those uses and the sum
   (KEP-753 "exposing pod resource requirements");
3. pod-level `spec.resources.requests` replace the aggregate for the resources pod-level
   resources support (cpu, memory, hugepages-*), and only when at least one of those is set;
4. `spec.overhead` is added last.

Status-based resize handling and DRA claim accounting are behind options that default to off and
are not ported. Values are exact Fractions in base units: cores for cpu, bytes for memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction

from google.protobuf.message import DecodeError

from cloudprovider_grpc.k8s.quantity import parse_quantity
from cloudprovider_grpc.protos import k8s_pb2

__all__ = ["is_pod_level_resource", "parse_pod", "pod_requests"]

ResourceList = dict[str, Fraction]


def is_pod_level_resource(name: str) -> bool:
    """helpers.go IsSupportedPodLevelResource: cpu, memory and hugepages-<size>."""
    return name in ("cpu", "memory") or name.startswith("hugepages-")


def _value(what: str, name: str, quantity: k8s_pb2.Quantity) -> Fraction:
    """The exact value of one quantity; ValueError naming the field for anything Go refuses.

    The Quantity message is proto2, whose strings are not checked for UTF-8 while parsing: a string
    that is not UTF-8 comes back as bytes, and Go's decoder refuses it as well."""
    text = quantity.string
    try:
        if not isinstance(text, str):
            raise ValueError(f"invalid quantity {text!r}: not valid UTF-8")
        return parse_quantity(text).value
    except ValueError as exc:
        raise ValueError(f"{what}[{name!r}]: {exc}") from None


def _values(what: str, quantities: Mapping[str, k8s_pb2.Quantity]) -> ResourceList:
    return {name: _value(what, name, quantity) for name, quantity in quantities.items()}


def _add(total: ResourceList, more: ResourceList) -> None:
    for name, value in more.items():
        total[name] = total.get(name, Fraction(0)) + value


def _raise_to(total: ResourceList, candidate: ResourceList) -> None:
    """helpers.go maxResourceList: each resource of `candidate` at least as large in `total`."""
    for name, value in candidate.items():
        if name not in total or value > total[name]:
            total[name] = value


def _container_requests(
    containers: Iterable[k8s_pb2.Container], what: str
) -> list[tuple[bool, ResourceList]]:
    return [
        (c.restartPolicy == "Always", _values(f"{what}[{i}].resources.requests", c.resources.requests))
        for i, c in enumerate(containers)
    ]


def pod_requests(pod: k8s_pb2.Pod) -> ResourceList:
    """The pod's effective requests per resource name (Fraction cores / bytes / counts)."""
    spec = pod.spec
    result: ResourceList = {}
    for _, requests in _container_requests(spec.containers, "spec.containers"):
        _add(result, requests)

    sidecars: ResourceList = {}
    init_peak: ResourceList = {}
    for restartable, requests in _container_requests(spec.initContainers, "spec.initContainers"):
        if restartable:
            _add(result, requests)
            _add(sidecars, requests)
            in_use = dict(sidecars)
        else:
            in_use = dict(requests)
            _add(in_use, sidecars)
        _raise_to(init_peak, in_use)
    _raise_to(result, init_peak)

    pod_level = _values("spec.resources.requests", spec.resources.requests)
    if any(is_pod_level_resource(name) for name in pod_level):
        result.update({name: value for name, value in pod_level.items() if is_pod_level_resource(name)})

    _add(result, _values("spec.overhead", spec.overhead))
    return result


def parse_pod(raw: bytes) -> k8s_pb2.Pod:
    """Parse `v1.Pod` bytes (pod_bytes / legacy pod); invalid quantities fail it, as in Go.

    Only the quantities of fields the subset declares are checked (requests, limits, overhead,
    pod-level resources); Go would also reject a bad one elsewhere (an emptyDir sizeLimit, say).
    Values too large to compute with ("1e2000") are rejected too, so that `pod_requests` of a
    parsed pod cannot fail.
    """
    pod = k8s_pb2.Pod()
    try:
        pod.ParseFromString(raw)
    except DecodeError as exc:
        raise ValueError(f"not a serialized v1.Pod: {exc}") from None
    spec = pod.spec
    lists: list[tuple[str, Mapping[str, k8s_pb2.Quantity]]] = [
        ("spec.overhead", spec.overhead),
        ("spec.resources.requests", spec.resources.requests),
        ("spec.resources.limits", spec.resources.limits),
    ]
    for what, containers in (
        ("spec.containers", spec.containers),
        ("spec.initContainers", spec.initContainers),
    ):
        for i, container in enumerate(containers):
            lists.append((f"{what}[{i}].resources.requests", container.resources.requests))
            lists.append((f"{what}[{i}].resources.limits", container.resources.limits))
    for what, quantities in lists:
        _values(what, quantities)
    return pod
