"""The simulated Kubernetes side: controllers, kube-scheduler and kubelets.

CA only observes a cluster; something has to create pods, bind them and register nodes. This
module plays those parts, deterministically:
- controllers: a Deployment (or bare Pod workload) keeps `replicas_at(t)` pods, deleting pending
  pods first and then the newest when it scales in (ReplicaSet's deletion preference); a Job
  starts `replicas` pods once and each completes `run_time` after it started running; pods evicted
  by a drain are recreated by their controller (bare pods are simply gone).
- kube-scheduler: binds pending pods by priority, then age, to a node passing the Filter
  predicates of `predicates.py`, scoring with NodeResourcesFit's LeastAllocated strategy (the default;
  MostAllocated on request), ties to the earliest registered node.
- kubelets: a machine the cloud reports running registers as a node with the shape of its
  group's template, NotReady for the scenario's `node_ready_delay` and Ready after that, and
  DaemonSet pods land on it at once (they tolerate the not-ready taint). Static nodes (in no
  node group) are registered at the start.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from itertools import compress, islice, repeat
from operator import attrgetter, is_, is_not

from cloudprovider_grpc.simulator.model import (
    PODS,
    Node,
    NodeShape,
    PdbSpec,
    Pod,
    PodShape,
    Requirement,
    SpreadConstraint,
    Taint,
    Term,
    Toleration,
    effective_requests,
    resource_units,
)
from cloudprovider_grpc.simulator.predicates import (
    Placement,
    StaticFitCache,
    resources_fit,
    scheduling_key,
    static_fit,
)
from cloudprovider_grpc.simulator.scenario import (
    DaemonSet,
    PodAffinityTerm,
    Scenario,
    StaticNode,
    Workload,
)
from cloudprovider_grpc.simulator.scenario import Toleration as TolerationSpec
from cloudprovider_grpc.simulator.score_heap import ScoreHeap, least_allocated


def _tolerations(items: Iterable[TolerationSpec]) -> tuple[Toleration, ...]:
    return tuple(Toleration(t.key, t.operator, t.value, t.effect) for t in items)


def _terms(items: Iterable[PodAffinityTerm]) -> tuple[Term, ...]:
    return tuple(Term(tuple(sorted(t.label_selector.items())), t.topology_key) for t in items)


def workload_shape(w: Workload) -> PodShape:
    containers = w.container_requests()
    labels = w.pod_labels()
    spread = tuple(
        SpreadConstraint(
            c.max_skew,
            c.topology_key,
            tuple(sorted((c.label_selector if c.label_selector is not None else labels).items())),
            c.min_domains,
        )
        for c in w.topology_spread
        if c.when_unsatisfiable == "DoNotSchedule"  # ScheduleAnyway only scores
    )
    pdb = w.pdb if not isinstance(w.pdb, bool) else None
    return PodShape(
        owner=w.name,
        kind=w.kind,
        namespace=w.namespace,
        requests=effective_requests(containers, [dict(c.requests) for c in w.init_containers]),
        node_selector=dict(w.node_selector),
        affinity=tuple(Requirement(r.key, r.operator, tuple(r.values)) for r in w.node_affinity),
        tolerations=_tolerations(w.tolerations),
        priority=w.priority,
        annotations=dict(w.annotations),
        local_storage=w.local_storage,
        has_pdb=w.pdb is not False,
        containers=tuple(containers),
        labels=labels,
        host_ports=tuple(sorted(set(w.host_ports))),
        pod_affinity=_terms(w.pod_affinity),
        pod_anti_affinity=_terms(w.pod_anti_affinity),
        spread=spread,
        pdb=PdbSpec(pdb.min_available, pdb.max_unavailable) if pdb is not None else None,
    )


def daemonset_shape(d: DaemonSet) -> PodShape:
    return PodShape(
        owner=d.name,
        kind="DaemonSet",
        namespace=d.namespace,
        requests=effective_requests([dict(d.requests)], []),
        node_selector=dict(d.node_selector),
        tolerations=_tolerations(d.tolerations),
        containers=(dict(d.requests),),
    )


def static_shape(n: StaticNode) -> NodeShape:
    """The shape of a node in no node group (its group is "")."""
    res = {k: resource_units(k, v) for k, v in n.capacity.items()}
    res[PODS] = n.pods
    taints = tuple(Taint(t.key, t.value, t.effect) for t in n.taints)
    return NodeShape("", dict(res), dict(res), dict(n.labels), taints)


class _Controller:
    def __init__(self, workload: Workload, shape: PodShape) -> None:
        self.workload = workload
        self.shape = shape
        self.pods: dict[str, Pod] = {}  # live pods, creation order
        self.created = 0
        self.job_started = False
        #: when a Job's last pod completed (or its `end` removed them): the report draws it
        self.job_finished: float | None = None
        # the schedule's steps (in time order) for a bisection: a recorded hour rescales each
        # Deployment every minute, 60 steps read by every loop
        self._step_at = [s.at for s in workload.schedule]
        self._step_replicas = [s.replicas for s in workload.schedule]

    def replicas_at(self, t: float) -> int:
        """`Workload.replicas_at`: the last step at or before t wins, else `replicas`."""
        w = self.workload
        if t < w.start or (w.end is not None and t >= w.end):
            return 0
        i = bisect_right(self._step_at, t)
        return self._step_replicas[i - 1] if i else w.replicas


class World:
    """Pods, nodes and the controllers/scheduler/kubelets acting on them."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.most_allocated = scenario.scheduler == "most-allocated"
        self.controllers = [_Controller(w, workload_shape(w)) for w in scenario.workloads]
        self.daemonsets = [daemonset_shape(d) for d in scenario.daemonsets]
        self.nodes: dict[str, Node] = {}
        self.by_provider_id: dict[str, Node] = {}
        self.pending: dict[str, Pod] = {}
        self.pods: dict[str, Pod] = {}
        self._owner: dict[int, _Controller] = {id(c.shape): c for c in self.controllers}
        self._fits = StaticFitCache()
        #: per scheduling key, the nodes ranked by LeastAllocated score, kept from pass to pass:
        #: a loop's scheduling rescores only the nodes whose pods changed since the last one
        self._heaps: dict[tuple[object, ...], ScoreHeap] = {}
        self._registered = 0  # registration numbers (`Node.seq`), in the order of `nodes`
        self.completed = 0
        self.waits: list[float] = []  # how long each bound pod was pending, in bind order

    # ---- controllers
    def _new_pod(self, c: _Controller, now: float) -> Pod:
        name = f"{c.workload.name}-{c.created}"
        c.created += 1
        pod = Pod(name, c.shape, now)
        c.pods[name] = pod
        self.pods[name] = pod
        self.pending[name] = pod
        return pod

    def _delete_pod(self, pod: Pod) -> None:
        if pod.node is not None:
            self.nodes[pod.node].unbind(pod)
        self.pending.pop(pod.name, None)
        self.pods.pop(pod.name, None)
        owner = self._owner.get(id(pod.shape))
        if owner is not None:
            owner.pods.pop(pod.name, None)

    def apply_controllers(self, now: float) -> None:
        for c in self.controllers:
            w = c.workload
            if w.kind == "Job":
                self._job(c, now)
                continue
            wanted = c.replicas_at(now)
            while len(c.pods) < wanted:
                self._new_pod(c, now)
            if len(c.pods) > wanted:
                excess = len(c.pods) - wanted
                live = list(c.pods.values())
                on = list(map(_NODE, live))  # each pod's node (None: pending), read once, in C
                victims = list(islice(compress(live, map(is_, on, repeat(None))), excess))
                if len(victims) < excess:  # then the newest bound pods
                    newest = compress(reversed(live), map(is_not, reversed(on), repeat(None)))
                    victims += islice(newest, excess - len(victims))
                for p in victims:
                    self._delete_pod(p)

    def _job(self, c: _Controller, now: float) -> None:
        w = c.workload
        if w.end is not None and now >= w.end:
            for p in list(c.pods.values()):
                self._delete_pod(p)
            if c.job_started and c.job_finished is None:
                c.job_finished = now
            return
        if not c.job_started and now >= w.start:
            c.job_started = True
            for _ in range(w.replicas):
                self._new_pod(c, now)
        if w.run_time is not None:
            for p in list(c.pods.values()):
                if p.started is not None and now - p.started >= w.run_time:
                    self._delete_pod(p)
                    self.completed += 1
        if c.job_started and not c.pods and c.job_finished is None:
            c.job_finished = now

    def job_finish_times(self) -> dict[str, float]:
        """When each finished Job ended, by workload name."""
        return {c.workload.name: c.job_finished for c in self.controllers if c.job_finished is not None}

    def pdb_disruptions_allowed(self, now: float) -> dict[PodShape, int]:
        """Per workload with a PDB budget: what the disruption controller would publish as
        status.disruptionsAllowed = healthy pods (running on a Ready node) - desired healthy
        (minAvailable, or expected replicas - maxUnavailable), never below 0."""
        out: dict[PodShape, int] = {}
        for c in self.controllers:
            pdb = c.shape.pdb
            if pdb is None:
                continue
            healthy = sum(1 for p in c.pods.values() if p.node is not None and self.nodes[p.node].ready)
            expected = len(c.pods) if c.workload.kind == "Job" else c.replicas_at(now)
            if pdb.min_available is not None:
                desired = pdb.min_available
            else:
                desired = expected - (pdb.max_unavailable or 0)
            out[c.shape] = max(0, healthy - desired)
        return out

    # ---- kubelets
    def register(self, name: str, provider_id: str, shape: NodeShape, now: float, ready: bool = True) -> Node:
        node = Node(name, provider_id, shape, now)
        node.ready = ready
        old = self.nodes.get(name)
        if old is not None:  # the name keeps its place in `nodes`, so its number too
            node.seq = old.seq
            for heap in self._heaps.values():
                heap.forget(old)
        else:
            self._registered += 1
            node.seq = self._registered
        self.nodes[name] = node
        self.by_provider_id[provider_id] = node
        for ds in self.daemonsets:
            if static_fit(ds, shape) and resources_fit(ds.requests, node.free()):
                pod = Pod(f"{ds.owner}-{name}", ds, now)
                pod.started = now
                node.bind(pod)
        return node

    def remove_node(self, name: str, now: float) -> list[Pod]:
        """The node is gone: DaemonSet pods vanish, controller pods are recreated pending."""
        node = self.nodes.pop(name)
        self.by_provider_id.pop(node.provider_id, None)
        recreated = []
        for pod in list(node.pods.values()):
            node.unbind(pod)
            if pod.shape.is_daemonset:
                continue
            self.pods.pop(pod.name, None)
            owner = self._owner.get(id(pod.shape))
            if owner is None:
                continue
            owner.pods.pop(pod.name, None)
            if pod.shape.controlled:
                recreated.append(self._new_pod(owner, now))
        return recreated

    def evict(self, name: str, now: float) -> int:
        """`kubectl drain`'s evictions: every pod but DaemonSet pods leaves the node; controller
        pods are recreated pending, bare pods are gone. Returns how many pods left."""
        node = self.nodes[name]
        gone = 0
        for pod in [p for p in node.pods.values() if not p.shape.is_daemonset]:
            self._delete_pod(pod)
            gone += 1
            owner = self._owner.get(id(pod.shape))
            if owner is not None and pod.shape.controlled and owner.workload.kind != "Job":
                self._new_pod(owner, now)
        return gone

    # ---- kube-scheduler
    def schedule(self, now: float) -> int:
        """Bind what fits; returns the number of pods bound."""
        if not self.pending:
            return 0
        order = sorted(self.pending.values(), key=lambda p: (-p.shape.priority, p.created, p.name))
        nodes = [n for n in self.nodes.values() if n.schedulable]
        interpod = any(p.shape.interpod for p in order) or self._anti_affinity_bound()
        if not interpod and not self.most_allocated:
            return self._schedule_by_heaps(order, nodes, now)
        bound = 0
        stuck: set[int] = set()
        candidates: dict[int, list[Node]] = {}
        # one heap per scheduling signature, not per workload: shapes asking the same requests
        # under the same node constraints rank the nodes identically, so 100 Deployments of one
        # pod spec share one heap instead of building 100 over every node; the heaps outlive the
        # pass (`score_heap.py`), each synced once per pass in which it is used
        heaps: dict[tuple[object, ...], ScoreHeap] = {}
        keys: dict[int, tuple[object, ...]] = {}
        versions: list[int] | None = None  # the schedulable nodes' versions, for the syncs
        view: Placement | None = None  # built only when an inter-pod predicate can matter
        if interpod:
            view = Placement.of(nodes)
        for pod in order:
            sid = id(pod.shape)
            if sid in stuck:
                continue
            if (view is not None and view.relevant(pod.shape)) or self.most_allocated:
                cands = candidates.get(sid)
                if cands is None:
                    cands = candidates[sid] = self._fits.fitting(pod.shape, nodes)
                if view is not None and view.relevant(pod.shape):
                    cands = [n for n in cands if view.allows(pod.shape, n.name)]
                best = self._best_node(pod.shape, cands)
            else:
                key = keys.get(sid)
                if key is None:
                    key = keys[sid] = scheduling_key(pod.shape)
                heap = heaps.get(key)
                if heap is None:
                    if versions is None:
                        versions = list(map(_VERSION, nodes))
                    heap = heaps[key] = self._synced_heap(key, pod.shape, nodes, versions)
                best = heap.pop_best()
            if best is None:
                stuck.add(sid)  # identical pods behind it cannot fit either
                continue
            if view is not None:
                view.add_pod(best.name, pod.shape)
            best.bind(pod)
            heap = heaps.get(keys[sid]) if sid in keys else None
            if heap is not None:  # the node's score for this shape changed with the bind
                heap.bound(best)
            pod.started = now
            self.waits.append(now - pod.created)
            del self.pending[pod.name]
            bound += 1
        return bound

    def _synced_heap(
        self, key: tuple[object, ...], shape: PodShape, nodes: list[Node], versions: list[int]
    ) -> ScoreHeap:
        """The heap kept for scheduling key `key` (made for `shape` the first time), brought up to
        this pass's schedulable `nodes` (their `versions`): once per key and pass."""
        heap = self._heaps.get(key)
        if heap is None:
            heap = self._heaps[key] = ScoreHeap(shape, self._fits)
        heap.sync(nodes, versions)
        return heap

    def _schedule_by_heaps(self, order: list[Pod], nodes: list[Node], now: float) -> int:
        """`schedule` when resources and node constraints alone decide (no inter-pod predicate,
        LeastAllocated): every pod takes the top of its scheduling key's heap. The same picks as
        the general loop, with the per-pod steps cut to the heap's and the bind's (a snapshot's
        first loop binds 100,000 pods here)."""
        stuck: set[int] = set()
        by_shape: dict[int, ScoreHeap] = {}  # this pass's synced heap of each pod shape
        synced: dict[tuple[object, ...], ScoreHeap] = {}
        versions: list[int] | None = None
        waits, pending = self.waits, self.pending
        bound = 0
        for pod in order:
            sid = id(pod.shape)
            heap = by_shape.get(sid)
            if heap is None:
                if sid in stuck:
                    continue
                key = scheduling_key(pod.shape)
                heap = synced.get(key)
                if heap is None:
                    if versions is None:
                        versions = list(map(_VERSION, nodes))
                    heap = synced[key] = self._synced_heap(key, pod.shape, nodes, versions)
                by_shape[sid] = heap
            if heap.place(pod) is None:
                stuck.add(sid)  # identical pods behind it cannot fit either
                del by_shape[sid]
                continue
            pod.started = now
            waits.append(now - pod.created)
            del pending[pod.name]
            bound += 1
        return bound

    def _anti_affinity_bound(self) -> bool:
        """Whether a pod with anti-affinity terms runs on a schedulable node (its terms then
        constrain every incoming pod). Only controller pods carry such terms, so this reads the
        few workloads that have them rather than every pod of the cluster."""
        nodes = self.nodes
        return any(
            p.node is not None and nodes[p.node].schedulable
            for c in self.controllers
            if c.shape.pod_anti_affinity
            for p in c.pods.values()
        )

    def _best_node(self, shape: PodShape, nodes: list[Node]) -> Node | None:
        best: Node | None = None
        best_score = 0.0
        for n in nodes:
            score = least_allocated(shape, n)
            if score is None:
                continue
            if self.most_allocated:
                score = -score
            if best is None or score > best_score:
                best, best_score = n, score
        return best


_VERSION = attrgetter("version")
_NODE = attrgetter("node")
