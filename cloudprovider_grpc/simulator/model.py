"""The simulated cluster's objects: resource vectors, pod shapes, pods, nodes and node templates.

Resources are integer vectors keyed by Kubernetes resource name: `cpu` in millicores (what the
scheduler compares, `MilliValue()`), `memory` and every other resource in whole units (`Value()`,
rounded up like Kubernetes does), and `pods` counting pod slots. Every pod requests one `pods`
slot, as the scheduler's NodeResourcesFit plugin counts it.

A `PodShape` is everything the scheduler and CA look at for one controller's pods; all replicas
of a workload share one shape object, which is what makes CA's pod equivalence groups
(sigs-CA `pkg/core/scaleup/equivalence/groups.go`: same controller, same spec) a dictionary lookup.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from cloudprovider_grpc.k8s.quantity import parse_quantity
from cloudprovider_grpc.k8s.resources import pod_requests
from cloudprovider_grpc.protos import k8s_pb2

Resources = dict[str, int]

CPU, MEMORY, PODS = "cpu", "memory", "pods"
GPU_RESOURCE = "nvidia.com/gpu"
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
TO_BE_DELETED_TAINT = "ToBeDeletedByClusterAutoscaler"


def resource_units(name: str, text: str) -> int:
    """Integer units for one resource quantity: millicores for cpu, ceil(value) otherwise."""
    value = parse_quantity(text).value
    return math.ceil(value * 1000) if name == CPU else math.ceil(value)


def add_into(total: Resources, extra: Mapping[str, int], sign: int = 1) -> None:
    for k, v in extra.items():
        total[k] = total.get(k, 0) + sign * v


def pod_proto(
    name: str,
    namespace: str,
    containers: Iterable[Mapping[str, str]],
    init_containers: Iterable[Mapping[str, str]] = (),
) -> k8s_pb2.Pod:
    """A `v1.Pod` with these per-container requests (what PricingPodPrice carries as pod_bytes)."""
    pod = k8s_pb2.Pod()
    pod.metadata.name = name
    pod.metadata.namespace = namespace
    for field_name, items in (("containers", containers), ("initContainers", init_containers)):
        for i, requests in enumerate(items):
            c = getattr(pod.spec, field_name).add()
            c.name = f"{field_name[:4]}{i}"
            for k, v in sorted(requests.items()):
                c.resources.requests[k].string = str(v)
    return pod


def effective_requests(
    containers: Iterable[Mapping[str, str]], init_containers: Iterable[Mapping[str, str]] = ()
) -> Resources:
    """Pod requests as the scheduler computes them (`cloudprovider_grpc.k8s.resources.pod_requests`,
    a port of k8s `PodRequests`), in integer units, plus one pod slot."""
    exact = pod_requests(pod_proto("p", "default", containers, init_containers))
    total = {k: math.ceil(v * 1000) if k == CPU else math.ceil(v) for k, v in exact.items() if v}
    total[PODS] = 1
    return total


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, slots=True)
class Toleration:
    """One pod toleration (k8s `Toleration`); `predicates.tolerates` matches it to a taint."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""


@dataclass(frozen=True, slots=True)
class Requirement:
    """One required node-affinity match expression (k8s `NodeSelectorRequirement`), checked by
    `predicates.requirement_holds`."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Term:
    """One required pod (anti-)affinity term: pods whose labels match `selector` (matchLabels, in
    the owner's namespace), counted per value of `topology_key` on their nodes."""

    selector: tuple[tuple[str, str], ...]
    topology_key: str


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """One `whenUnsatisfiable: DoNotSchedule` topology spread constraint."""

    max_skew: int
    topology_key: str
    selector: tuple[tuple[str, str], ...]
    min_domains: int = 1


@dataclass(eq=False, slots=True)
class PodShape:
    """What every replica of one controller shares. Identity-hashed: one object per workload."""

    owner: str
    kind: str  # Deployment | Job | Pod | DaemonSet
    namespace: str
    requests: Resources
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: tuple[Requirement, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    priority: int = 0
    annotations: Mapping[str, str] = field(default_factory=dict)
    local_storage: bool = False
    has_pdb: bool = False
    containers: tuple[Mapping[str, str], ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    host_ports: tuple[int, ...] = ()
    pod_affinity: tuple[Term, ...] = ()
    pod_anti_affinity: tuple[Term, ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()
    pdb: PdbSpec | None = None

    @property
    def interpod(self) -> bool:
        """Whether where this pod may go depends on other pods (predicates.py), not only on the node."""
        return bool(self.host_ports or self.pod_affinity or self.pod_anti_affinity or self.spread)

    @property
    def controlled(self) -> bool:
        return self.kind != "Pod"

    @property
    def is_daemonset(self) -> bool:
        return self.kind == "DaemonSet"


@dataclass(frozen=True, slots=True)
class PdbSpec:
    """A PodDisruptionBudget over one workload's pods: exactly one of the two is set."""

    min_available: int | None = None
    max_unavailable: int | None = None


class Pod:
    """One pod. `node` is the name of the node it is bound to, or None while pending."""

    __slots__ = ("created", "name", "node", "shape", "started")

    def __init__(self, name: str, shape: PodShape, created: float) -> None:
        self.name = name
        self.shape = shape
        self.created = created
        self.node: str | None = None
        self.started: float | None = None

    def __repr__(self) -> str:
        return f"Pod({self.name!r}, node={self.node!r})"


@dataclass(frozen=True)
class NodeShape:
    """A node's schedulable shape: what a template Node or a real Node offers."""

    group: str
    capacity: Resources
    allocatable: Resources
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]

    @classmethod
    def from_k8s(cls, node: k8s_pb2.Node, group: str) -> NodeShape:
        """Build from a decoded `v1.Node` (the TemplateNodeInfo answer)."""
        capacity = {k: resource_units(k, q.string) for k, q in node.status.capacity.items()}
        allocatable = {k: resource_units(k, q.string) for k, q in node.status.allocatable.items()}
        if not allocatable:
            allocatable = dict(capacity)
        taints = tuple(Taint(t.key, t.value, t.effect or "NoSchedule") for t in node.spec.taints)
        return cls(group, capacity, allocatable, dict(node.metadata.labels), taints)


class Node:
    """A registered node: its shape, the pods bound to it and what they request."""

    __slots__ = (
        "_free",
        "annotations",
        "ds_used",
        "group",
        "name",
        "pods",
        "provider_id",
        "ready",
        "ready_override",
        "registered",
        "seq",
        "shape",
        "to_be_deleted",
        "used",
        "version",
    )

    def __init__(self, name: str, provider_id: str, shape: NodeShape, registered: float) -> None:
        self.name = name
        self.provider_id = provider_id
        self.group = shape.group
        self.shape = shape
        self.registered = registered
        #: the world's registration number: the scheduler's ties go to the lower (the earlier node)
        self.seq = 0
        self.pods: dict[str, Pod] = {}
        self.used: Resources = {}
        self.ds_used: Resources = {}
        self.to_be_deleted = False  # CA (or a previous CA, by its taint) is deleting it
        self.annotations: dict[str, str] = {}
        self.version = 0  # bumped on every bind/unbind, so derived values can be cached
        self._free: tuple[int, Resources, Resources] | None = None  # version, allocatable, free
        self.ready = True  # the kubelet's Ready condition
        self.ready_override: bool | None = None  # set by a scenario node event, wins over the delay

    @property
    def schedulable(self) -> bool:
        """The scheduler places pods only on Ready nodes (a NotReady node carries the
        node.kubernetes.io/not-ready:NoSchedule taint) that nobody is deleting."""
        return self.ready and not self.to_be_deleted

    @property
    def allocatable(self) -> Resources:
        return self.shape.allocatable

    def free(self) -> Resources:
        """Allocatable less what the pods request: one mapping, read-only to callers, until a pod
        is bound or leaves (the scale-down pass asks it of every destination in every loop)."""
        alloc, cached = self.shape.allocatable, self._free
        if cached is not None and cached[0] == self.version and cached[1] is alloc:
            return cached[2]
        used = self.used
        free = {k: v - used.get(k, 0) for k, v in alloc.items()}
        self._free = (self.version, alloc, free)
        return free

    def bind(self, pod: Pod) -> None:
        self.pods[pod.name] = pod
        self.version += 1
        pod.node = self.name
        shape = pod.shape
        used = self.used
        for k, v in shape.requests.items():  # add_into, inline: every bind runs this
            used[k] = used.get(k, 0) + v
        if shape.kind == "DaemonSet":
            add_into(self.ds_used, shape.requests)

    def unbind(self, pod: Pod) -> None:
        del self.pods[pod.name]
        self.version += 1
        pod.node = None
        add_into(self.used, pod.shape.requests, -1)
        if pod.shape.is_daemonset:
            add_into(self.ds_used, pod.shape.requests, -1)

    def __repr__(self) -> str:
        return f"Node({self.name!r}, group={self.group!r}, pods={len(self.pods)})"


def node_name_for(provider_id: str) -> str:
    """A DNS-label node name derived from the providerID (`sim://general/3` -> `general-3`)."""
    tail = provider_id.split("://", 1)[-1]
    name = "".join(c if c.isalnum() else "-" for c in tail.lower()).strip("-")
    return name or "node"
