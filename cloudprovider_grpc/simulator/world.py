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

import bisect
import heapq
from collections.abc import Iterable

from cloudprovider_grpc.simulator.model import (
    CPU,
    MEMORY,
    PODS,
    Node,
    NodeShape,
    PdbSpec,
    Pod,
    PodShape,
    Requirement,
    Resources,
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
        #: per scheduling key, each node's LeastAllocated score (None: no fit) at its pod version:
        #: a loop's heaps rescore only the nodes whose pods changed since the last loop
        self._scores: dict[tuple[object, ...], dict[str, tuple[Node, int, float | None]]] = {}
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
            wanted = w.replicas_at(now)
            while len(c.pods) < wanted:
                self._new_pod(c, now)
            if len(c.pods) > wanted:
                excess = len(c.pods) - wanted
                live = list(c.pods.values())
                victims = [p for p in live if p.node is None][:excess]
                victims += [p for p in reversed(live) if p.node is not None][: excess - len(victims)]
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
            expected = len(c.pods) if c.workload.kind == "Job" else c.workload.replicas_at(now)
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
        for scores in self._scores.values():
            scores.pop(name, None)
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
        bound = 0
        stuck: set[int] = set()
        candidates: dict[int, list[Node]] = {}
        # one heap per scheduling signature, not per workload: shapes asking the same requests
        # under the same node constraints rank the nodes identically, so 100 Deployments of one
        # pod spec share one heap instead of building 100 over every node
        heaps: dict[tuple[object, ...], list[tuple[float, int, int, Node]]] = {}
        keys: dict[int, tuple[object, ...]] = {}
        rank = {n.name: i for i, n in enumerate(nodes)}  # heap ties go to the earliest node
        view: Placement | None = None  # built only when an inter-pod predicate can matter
        by_cpu: _ByFreeCpu | None = None  # built when the first heap is
        if any(p.shape.interpod for p in order) or self._anti_affinity_bound():
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
                    if by_cpu is None:
                        by_cpu = _ByFreeCpu(nodes)
                    cands = self._fits.fitting(pod.shape, by_cpu.with_room(pod.shape))
                    heap = heaps[key] = self._score_heap(pod.shape, key, cands, rank)
                best = self._pop_best(pod.shape, heap)
            if best is None:
                stuck.add(sid)  # identical pods behind it cannot fit either
                continue
            if view is not None:
                view.add_pod(best.name, pod.shape)
            best.bind(pod)
            heap = heaps.get(keys[sid]) if sid in keys else None
            if heap is not None:  # the node's score for this shape changed with the bind
                score = self._score(pod.shape, best)
                if score is not None:
                    heapq.heappush(heap, (-score, rank[best.name], best.version, best))
            pod.started = now
            self.waits.append(now - pod.created)
            del self.pending[pod.name]
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

    @staticmethod
    def _score(shape: PodShape, n: Node) -> float | None:
        """LeastAllocated's score of `n` for one more pod of `shape`, None when it does not fit
        (the same arithmetic as `_best_node`, so both pick the same node)."""
        req, alloc, used = shape.requests, n.shape.allocatable, n.used
        for k, v in req.items():
            if v > alloc.get(k, 0) - used.get(k, 0):
                return None
        return _least_allocated(alloc, used, req.get(CPU, 0), req.get(MEMORY, 0))

    def _score_heap(
        self, shape: PodShape, key: tuple[object, ...], nodes: list[Node], rank: dict[str, int]
    ) -> list[tuple[float, int, int, Node]]:
        # `_score`'s fit check and `_least_allocated` inlined, term by term in its order (the same
        # floats): this runs for every node with room for each pending pod spec in every loop,
        # the scheduler's largest cost at 5,000 nodes. A node's score for the key depends only on
        # its allocatable and its pods, so one kept from an earlier loop at the node's current
        # version is the score computed again.
        heap = []
        scores = self._scores.setdefault(key, {})
        needs = [(k, v) for k, v in shape.requests.items() if k not in (CPU, MEMORY)]
        cpu, memory = shape.requests.get(CPU, 0), shape.requests.get(MEMORY, 0)
        # a resource not requested rules no node out, even an overcommitted one
        asks_cpu, asks_mem = CPU in shape.requests, MEMORY in shape.requests
        for n in nodes:
            kept = scores.get(n.name)
            if kept is not None and kept[0] is n and kept[1] == n.version:
                score = kept[2]
            else:
                score = None
                alloc, used = n.shape.allocatable, n.used
                a_cpu, a_mem = alloc.get(CPU, 0), alloc.get(MEMORY, 0)
                u_cpu, u_mem = used.get(CPU, 0), used.get(MEMORY, 0)
                if not ((asks_cpu and cpu > a_cpu - u_cpu) or (asks_mem and memory > a_mem - u_mem)):
                    for k, v in needs:
                        if v > alloc.get(k, 0) - used.get(k, 0):
                            break
                    else:
                        score = 0.0
                        if a_cpu:
                            score += (a_cpu - u_cpu - cpu) / a_cpu
                        if a_mem:
                            score += (a_mem - u_mem - memory) / a_mem
                scores[n.name] = (n, n.version, score)
            if score is not None:
                heap.append((-score, rank[n.name], n.version, n))
        heapq.heapify(heap)
        return heap

    def _pop_best(self, shape: PodShape, heap: list[tuple[float, int, int, Node]]) -> Node | None:
        """The best node for `shape` from its heap: the highest score, ties to the earliest node,
        as `_best_node` picks. Within one scheduling pass a node's free resources only shrink, so
        its LeastAllocated score only falls: an entry older than its node (another pod was bound
        there since) is rescored and pushed back, and the first current entry on top is the best.
        Identical pods (thousands of replicas) then cost log(nodes) each instead of a full scan."""
        while heap:
            _, i, version, n = heap[0]
            if version == n.version:
                heapq.heappop(heap)
                return n
            heapq.heappop(heap)
            score = self._score(shape, n)
            if score is not None:
                heapq.heappush(heap, (-score, i, n.version, n))
        return None

    def _best_node(self, shape: PodShape, nodes: list[Node]) -> Node | None:
        req = shape.requests
        best: Node | None = None
        best_score = 0.0
        for n in nodes:
            alloc, used = n.shape.allocatable, n.used
            ok = True
            for k, v in req.items():
                if v > alloc.get(k, 0) - used.get(k, 0):
                    ok = False
                    break
            if not ok:
                continue
            score = _least_allocated(alloc, used, req.get(CPU, 0), req.get(MEMORY, 0))
            if self.most_allocated:
                score = -score
            if best is None or score > best_score:
                best, best_score = n, score
        return best


class _ByFreeCpu:
    """Schedulable nodes sorted by free cpu at the start of a scheduling pass. Binds only shrink
    a node's free cpu, so the nodes short of a pod's cpu request at the start stay short for the
    whole pass: a shape's heap is built from the nodes with enough cpu, not from every node."""

    def __init__(self, nodes: list[Node]) -> None:
        minus_free = [n.used.get(CPU, 0) - n.shape.allocatable.get(CPU, 0) for n in nodes]
        # a stable sort of the indices: ties stay in node order, as sorting (value, index) pairs
        order = sorted(range(len(nodes)), key=minus_free.__getitem__)
        self._nodes = [nodes[i] for i in order]
        self._free = [minus_free[i] for i in order]  # minus free cpu, ascending, for bisect

    def with_room(self, shape: PodShape) -> list[Node]:
        """A superset of the nodes that fit one more pod of `shape` (in no particular order)."""
        cpu = shape.requests.get(CPU)
        if cpu is None:  # not asking for cpu: a node's cpu does not rule it out
            return self._nodes
        return self._nodes[: bisect.bisect_right(self._free, -cpu)]


def _least_allocated(alloc: Resources, used: Resources, cpu: int, memory: int) -> float:
    """LeastAllocated's score once the pod (cpu, memory requests) is added: `World._score`'s
    arithmetic, in the same order so the floats are the same."""
    score = 0.0
    a = alloc.get(CPU, 0)
    if a:
        score += (a - used.get(CPU, 0) - cpu) / a
    a = alloc.get(MEMORY, 0)
    if a:
        score += (a - used.get(MEMORY, 0) - memory) / a
    return score
