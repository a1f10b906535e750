"""The scheduler-framework Filter plugins CA runs in its simulations, in one place.

Every question "may this pod go on this node?" in the simulator is answered here: by the
kube-scheduler of `world.py`, the scale-up phase's filter of pods that fit upcoming nodes, the
binpacking estimator and scale-down's rescheduling, as CA runs the same plugins for all of them
(sigs-CA `pkg/simulator/clustersnapshot/predicate/plugin_runner.go`). Kubernetes
`pkg/scheduler/framework/plugins/`:

Node predicates (the node alone decides):
- NodeResourcesFit: every requested resource (cpu, memory, pods, extended resources such as
  `nvidia.com/gpu`) must be free on the node; a resource the node does not offer has 0 free.
- NodeAffinity: `nodeSelector` labels must all match, and the required node-affinity expressions
  (In, NotIn, Exists, DoesNotExist) must all hold.
- TaintToleration: every NoSchedule and NoExecute taint must be tolerated (PreferNoSchedule
  only affects scoring, so it never filters).
Fit is split into a static part (labels, taints; cacheable per shape and node shape) and a
resource part (changes with every placement), so hot loops only repeat the cheap half.

Inter-pod predicates (the answer depends on the *other pods* in the cluster; `Placement` is the
part of the cluster snapshot they read: nodes' labels and the pods on them, for real nodes and
for the hypothetical nodes a simulation adds):
- NodePorts: a pod cannot land on a node where another pod already uses one of its host ports.
- InterPodAffinity, required terms only: for each affinity term some pod matching its label
  selector must run in the candidate node's topology domain (the value of `topology_key` on the
  node); the first pod of a self-affine group may go anywhere when no pod matches yet
  (`satisfyPodAffinity`'s special case). For each anti-affinity term no matching pod may run in
  the domain, and, symmetrically, no pod already there may have an anti-affinity term matching
  the incoming pod. A node without the topology key satisfies anti-affinity and fails affinity.
- PodTopologySpread, `whenUnsatisfiable: DoNotSchedule` constraints only (ScheduleAnyway is a
  score, never a filter): the node must carry the topology key; domains are the key's values on
  the nodes that pass the pod's nodeSelector and required node affinity (NodeAffinityPolicy
  Honor, the default); skew = matching pods in the candidate's domain + 1 - the minimum over all
  domains (0 while there are fewer domains than `minDomains`) must stay <= maxSkew.
Label selectors are `matchLabels` maps; terms look at the pod's own namespace, as the API does
when a term lists no namespaces.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from itertools import compress
from operator import attrgetter
from typing import Protocol, TypeVar

from cloudprovider_grpc.simulator.model import (
    PODS,
    NodeShape,
    Pod,
    PodShape,
    Requirement,
    Resources,
    SpreadConstraint,
    Taint,
    Term,
    Toleration,
)

HOSTNAME = "kubernetes.io/hostname"

_FILTERING_EFFECTS = ("NoSchedule", "NoExecute")


class NodeView(Protocol):
    """What the predicates read of a node: a registered `model.Node`, or anything shaped like one
    (its name, its schedulable shape, the pods bound to it by name)."""

    @property
    def name(self) -> str: ...

    @property
    def shape(self) -> NodeShape: ...

    @property
    def pods(self) -> Mapping[str, Pod]: ...


_N = TypeVar("_N", bound=NodeView)


# --- node predicates: the node alone decides ---


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """k8s `Toleration.ToleratesTaint`: empty effect matches all effects; empty key with
    Exists matches every taint."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator == "Exists":
        return True
    return toleration.value == taint.value


def requirement_holds(req: Requirement, labels: Mapping[str, str]) -> bool:
    """One required node-affinity match expression against a node's labels."""
    present = req.key in labels
    if req.operator == "In":
        return present and labels[req.key] in req.values
    if req.operator == "NotIn":
        return not present or labels[req.key] not in req.values
    if req.operator == "Exists":
        return present
    if req.operator == "DoesNotExist":
        return not present
    raise ValueError(f"unsupported node selector operator {req.operator!r}")


def tolerates_all(shape: PodShape, taints: tuple[Taint, ...]) -> bool:
    for taint in taints:
        if taint.effect in _FILTERING_EFFECTS and not any(tolerates(t, taint) for t in shape.tolerations):
            return False
    return True


def selects(shape: PodShape, labels: Mapping[str, str]) -> bool:
    for k, v in shape.node_selector.items():
        if labels.get(k) != v:
            return False
    return all(requirement_holds(req, labels) for req in shape.affinity)


def static_fit(shape: PodShape, node: NodeShape) -> bool:
    """Labels and taints only: does this pod shape ever fit this node shape?"""
    return selects(shape, node.labels) and tolerates_all(shape, node.taints)


def scheduling_key(shape: PodShape) -> tuple[object, ...]:
    """Everything a node's fit and LeastAllocated score for one more pod of `shape` depend on,
    apart from other pods: the requests and `static_fit`'s inputs (selector, affinity,
    tolerations). Workloads with equal keys rank and rule out the nodes identically, so the
    scheduler and the scale-down pass keep one candidate list per key, not one per workload."""
    return (
        tuple(sorted(shape.requests.items())),
        tuple(sorted(shape.node_selector.items())),
        shape.affinity,
        shape.tolerations,
    )


def static_reason(shape: PodShape, node: NodeShape) -> str:
    """Why static_fit is False, in scheduler terms (for decision logs)."""
    if not selects(shape, node.labels):
        return "node(s) didn't match Pod's node affinity/selector"
    if not tolerates_all(shape, node.taints):
        untolerated = [
            f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}"
            for t in node.taints
            if t.effect in _FILTERING_EFFECTS and not any(tolerates(x, t) for x in shape.tolerations)
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


_SHAPE = attrgetter("shape")


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
        shape (a node group's nodes share their template's), not one per node.

        It runs over every node for each pod spec in every scheduling and scale-down pass, so
        the per-node steps are C's (`map`, `zip`, `compress`), and when every node shape fits,
        as for a pod without node constraints, the list is the nodes as they are."""
        nodes = list(nodes)
        shapes = list(map(_SHAPE, nodes))
        distinct = dict(zip(map(id, shapes), shapes, strict=True))
        verdicts = {key: self(shape, node_shape) for key, node_shape in distinct.items()}
        if all(verdicts.values()):
            return nodes
        return list(compress(nodes, map(verdicts.__getitem__, map(id, shapes))))


# --- inter-pod predicates: the other pods on the cluster's nodes decide ---


def term_matches(term: Term | SpreadConstraint, owner: PodShape, other: PodShape) -> bool:
    """Does `other` match a selector written in `owner`'s spec (same namespace, all labels)?"""
    if other.namespace != owner.namespace or other.is_daemonset:
        return False
    labels = other.labels
    return all(labels.get(k) == v for k, v in term.selector)


class Placement:
    """Nodes by name with their labels and the pod shapes (with counts) placed on them."""

    def __init__(self) -> None:
        self.labels: dict[str, Mapping[str, str]] = {}
        self.pods: dict[str, Counter[PodShape]] = {}
        self.anti_holders = 0  # placed pods carrying anti-affinity terms (they constrain others)

    @classmethod
    def of(cls, nodes: Iterable[NodeView]) -> Placement:
        """From world nodes: their labels and the pods bound to them."""
        view = cls()
        for n in nodes:
            view.add_node(n.name, n.shape.labels)
            for pod in n.pods.values():
                view.add_pod(n.name, pod.shape)
        return view

    def copy(self) -> Placement:
        other = Placement()
        other.labels = dict(self.labels)
        other.pods = {k: Counter(v) for k, v in self.pods.items()}
        other.anti_holders = self.anti_holders
        return other

    def add_node(self, name: str, labels: Mapping[str, str]) -> None:
        # every node is its own hostname domain (the kubelet sets the label to the node name; a
        # template's value is a placeholder that real nodes do not share)
        if labels.get(HOSTNAME) != name:
            labels = {**labels, HOSTNAME: name}
        self.labels[name] = labels
        self.pods[name] = Counter()

    def remove_node(self, name: str) -> None:
        for shape, n in self.pods.pop(name, Counter()).items():
            if shape.pod_anti_affinity:
                self.anti_holders -= n
        self.labels.pop(name, None)

    def add_pod(self, node: str, shape: PodShape, n: int = 1) -> None:
        self.pods[node][shape] += n
        if shape.pod_anti_affinity:
            self.anti_holders += n

    def remove_pod(self, node: str, shape: PodShape, n: int = 1) -> None:
        c = self.pods[node]
        c[shape] -= n
        if c[shape] <= 0:
            del c[shape]
        if shape.pod_anti_affinity:
            self.anti_holders -= n

    def relevant(self, shape: PodShape) -> bool:
        """Whether placing this shape needs `allows` at all (else resources alone decide)."""
        return shape.interpod or self.anti_holders > 0

    def _domain(self, node: str, key: str) -> str | None:
        return self.labels[node].get(key)

    def allows(self, shape: PodShape, node: str) -> bool:
        labels = self.labels[node]
        here = self.pods[node]
        if shape.host_ports:
            ports = set(shape.host_ports)
            if any(ports.intersection(other.host_ports) for other in here if other.host_ports):
                return False
        if self.anti_holders > 0 or shape.pod_anti_affinity:
            for other_node, pods in self.pods.items():
                other_labels = self.labels[other_node]
                for other in pods:
                    for term in shape.pod_anti_affinity:
                        value = labels.get(term.topology_key)
                        if (
                            value is not None
                            and other_labels.get(term.topology_key) == value
                            and term_matches(term, shape, other)
                        ):
                            return False
                    for term in other.pod_anti_affinity:
                        value = other_labels.get(term.topology_key)
                        if (
                            value is not None
                            and labels.get(term.topology_key) == value
                            and term_matches(term, other, shape)
                        ):
                            return False
        for term in shape.pod_affinity:
            value = labels.get(term.topology_key)
            if value is None:
                return False
            in_domain = any_match = False
            for other_node, pods in self.pods.items():
                for other in pods:
                    if term_matches(term, shape, other):
                        any_match = True
                        if self.labels[other_node].get(term.topology_key) == value:
                            in_domain = True
                            break
                if in_domain:
                    break
            if not in_domain and (any_match or not term_matches(term, shape, shape)):
                return False
        return all(self._spread_ok(shape, c, node) for c in shape.spread)

    def _spread_ok(self, shape: PodShape, c: SpreadConstraint, node: str) -> bool:
        value = self.labels[node].get(c.topology_key)
        if value is None:
            return False
        counts: dict[str, int] = {}
        for name, labels in self.labels.items():
            domain = labels.get(c.topology_key)
            if domain is None or not selects(shape, labels):
                continue
            matching = sum(n for other, n in self.pods[name].items() if term_matches(c, shape, other))
            counts[domain] = counts.get(domain, 0) + matching
        lowest = min(counts.values()) if len(counts) >= c.min_domains else 0
        self_match = 1 if term_matches(c, shape, shape) else 0
        return counts.get(value, 0) + self_match - lowest <= c.max_skew

    def failure_is_spread(self, shape: PodShape, node: str) -> bool:
        """Would the pod fit here but for a hostname topology-spread constraint? (the case where
        CA's estimator retries the other new nodes: binpacking_estimator.go
        isPodUsingHostNameTopologyKey / hasTopologyConstraintError)"""
        return any(c.topology_key == HOSTNAME for c in shape.spread) and any(
            not self._spread_ok(shape, c, node) for c in shape.spread
        )
