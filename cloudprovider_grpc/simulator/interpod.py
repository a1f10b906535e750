"""Inter-pod scheduling predicates: host ports, required pod (anti-)affinity, topology spread.

These are the Filter plugins whose answer for a node depends on the *other pods* in the cluster,
not just on the node (kubernetes `pkg/scheduler/framework/plugins/`):
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

CA runs exactly these plugins in its scheduling simulations (sigs-CA
`pkg/simulator/clustersnapshot/predicate/plugin_runner.go`): filtering pods that fit existing or
upcoming nodes, the binpacking estimator and scale-down's rescheduling. `Placement` is the part of
the cluster snapshot these predicates read: nodes' labels and the pods on them, for real nodes
and for the hypothetical nodes a simulation adds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from cloudprovider_grpc.simulator import fit
from cloudprovider_grpc.simulator.model import PodShape, SpreadConstraint, Term

HOSTNAME = "kubernetes.io/hostname"


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
    def of(cls, nodes: Iterable[object]) -> Placement:
        """From world nodes (anything with `name`, `shape.labels` and `pods`)."""
        view = cls()
        for n in nodes:
            view.add_node(n.name, n.shape.labels)  # type: ignore[attr-defined]
            for pod in n.pods.values():  # type: ignore[attr-defined]
                view.add_pod(n.name, pod.shape)  # type: ignore[attr-defined]
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
            if domain is None or not fit.selects(shape, labels):
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
