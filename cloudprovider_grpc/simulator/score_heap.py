"""The kube-scheduler's ranking of the nodes for one scheduling key, kept from pass to pass.

`World.schedule` binds each pending pod to the node with the highest LeastAllocated score, ties to
the earliest registered node. Pods of one scheduling key (`predicates.scheduling_key`: the same
requests under the same node constraints) rank the nodes identically, so one heap per key answers
"the best node" in log(nodes). Building that heap afresh in every pass scored (or looked up) every
node with room, for each key, in every loop: at 5,000 nodes the scheduler's largest cost, though
between two passes only the nodes whose pods changed (some hundreds) rank differently.

So the heap outlives the pass. Each node's entry is stamped with the node's version (bumped on every
bind, unbind, readiness or taint change); at the start of a pass `sync` compares the schedulable
nodes' versions with the ones the heap judged, with set operations on the two mappings (in C, not
a Python loop over the nodes), and scores again only the nodes that changed, joined or left.
Superseded entries stay in the heap until they surface (or a compaction drops them): an entry
counts only while it carries the version the heap last judged its node at.

The answers are the ones a heap built afresh gives. Within a pass a node's free resources only
shrink, so its score only falls: an entry older than its node (a pod was bound there since) is
rescored when it surfaces and pushed back, and the first entry on top that is current is the best
node. Between passes scores may rise (pods left), which is why every changed node is scored again
at `sync`. Ties go to the lower registration number (`Node.seq`), which orders the nodes as the
world's node dict does.
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush, heapreplace
from itertools import compress
from operator import ne

from cloudprovider_grpc.simulator.model import CPU, MEMORY, Node, Pod, PodShape
from cloudprovider_grpc.simulator.predicates import StaticFitCache

#: (minus the score, the node's registration number, the node version it was scored at, the node)
Entry = tuple[float, int, int, Node]


def least_allocated(shape: PodShape, n: Node) -> float | None:
    """LeastAllocated's score of `n` for one more pod of `shape`, None when it does not fit (every
    requested resource must be free). The terms are added in this order everywhere a score is
    computed, so equal inputs give equal floats."""
    req, alloc, used = shape.requests, n.shape.allocatable, n.used
    for k, v in req.items():
        if v > alloc.get(k, 0) - used.get(k, 0):
            return None
    cpu, memory = req.get(CPU, 0), req.get(MEMORY, 0)
    score = 0.0
    a = alloc.get(CPU, 0)
    if a:
        score += (a - used.get(CPU, 0) - cpu) / a
    a = alloc.get(MEMORY, 0)
    if a:
        score += (a - used.get(MEMORY, 0) - memory) / a
    return score


class ScoreHeap:
    """The nodes one scheduling key's pods fit, best first, across scheduling passes."""

    #: a compaction drops superseded entries once they outnumber the live ones this much
    _SLACK = 1024

    def __init__(self, shape: PodShape, fits: StaticFitCache) -> None:
        self.shape = shape  # one shape of the key: its requests and node constraints are the key's
        self._fits = fits
        self._heap: list[Entry] = []
        #: node -> the version the heap last judged it at; its entry, if it fits, carries it
        self._judged: dict[Node, int] = {}
        req = shape.requests
        # `least_allocated` unrolled for the key's requests (the same terms in the same order):
        # it runs for every node whose pods changed, some hundreds per pass
        self._cpu, self._memory = req.get(CPU, 0), req.get(MEMORY, 0)
        # a resource not requested rules no node out, even an overcommitted one
        self._asks_cpu, self._asks_memory = CPU in req, MEMORY in req
        self._needs = [(k, v) for k, v in req.items() if k not in (CPU, MEMORY)]

    def sync(self, nodes: list[Node], versions: list[int]) -> None:
        """Bring the heap to the start of a pass: `nodes` are the schedulable nodes, `versions`
        theirs. Nodes new or changed are scored again, nodes gone or no longer schedulable are
        forgotten. The comparison runs in C (`map`, `compress`), not as a Python loop."""
        judged = self._judged
        seen = list(map(judged.get, nodes))
        fits, node_fits = self._fits, self.shape
        for n in compress(nodes, map(ne, seen, versions)):
            if fits(node_fits, n.shape):
                self._judge(n, n.version)
            else:
                judged[n] = n.version
        if len(judged) > len(nodes) - seen.count(None):  # some judged nodes left the pass
            schedulable = set(nodes)
            for n in [n for n in judged if n not in schedulable]:
                del judged[n]
        if len(self._heap) > 2 * len(judged) + self._SLACK:
            self._compact()

    def pop_best(self) -> Node | None:
        """The best node for one more pod of the key, taken off the heap (`bound` puts it back
        once the pod is bound there), or None when no node fits."""
        heap, judged = self._heap, self._judged
        while heap:
            _, _, version, n = heappop(heap)
            if judged.get(n) != version:
                continue  # superseded, or its node is gone
            if version == n.version:
                return n
            self._judge(n, n.version)  # a pod was bound there in this pass: its score fell
        return None

    def bound(self, n: Node) -> None:
        """A pod of the key (or of one ruled by the same node constraints) was bound to `n`, a
        node it fits statically: its entry follows."""
        self._judge(n, n.version)

    def forget(self, n: Node) -> None:
        """`n` left the world under a name a new node now takes: drop its entries at once, so that
        no two entries of one registration number and version can meet."""
        self._judged.pop(n, None)
        self._heap = [e for e in self._heap if e[3] is not n]
        heapify(self._heap)

    def place(self, pod: Pod) -> Node | None:
        """Bind `pod` (of the key) to the best node and return it, None when no node fits:
        `pop_best` and `bound` in one, the node's new entry taking the old one's place at the top
        (one sift of the heap instead of two)."""
        heap, judged = self._heap, self._judged
        while heap:
            _, seq, version, n = heap[0]
            if judged.get(n) != version:
                heappop(heap)  # superseded, or its node is gone
                continue
            current = version == n.version
            if current:
                n.bind(pod)
            # bound now, or a pod was bound there earlier in this pass: its score fell
            version = judged[n] = n.version
            score = self._score(n)
            if score is None:
                heappop(heap)
            else:
                heapreplace(heap, (-score, seq, version, n))
            if current:
                return n
        return None

    def _judge(self, n: Node, version: int) -> None:
        """Score `n` (statically fitting) at its current pods and push its entry if it fits."""
        self._judged[n] = version
        score = self._score(n)
        if score is not None:
            heappush(self._heap, (-score, n.seq, version, n))

    def _score(self, n: Node) -> float | None:
        """`least_allocated` for the key's requests, None when `n` has no room for one more pod."""
        alloc, used = n.shape.allocatable, n.used
        a_cpu, a_mem = alloc.get(CPU, 0), alloc.get(MEMORY, 0)
        u_cpu, u_mem = used.get(CPU, 0), used.get(MEMORY, 0)
        cpu, memory = self._cpu, self._memory
        if (self._asks_cpu and cpu > a_cpu - u_cpu) or (self._asks_memory and memory > a_mem - u_mem):
            return None
        for k, v in self._needs:
            if v > alloc.get(k, 0) - used.get(k, 0):
                return None
        score = 0.0
        if a_cpu:
            score += (a_cpu - u_cpu - cpu) / a_cpu
        if a_mem:
            score += (a_mem - u_mem - memory) / a_mem
        return score

    def _compact(self) -> None:
        judged = self._judged
        self._heap = [e for e in self._heap if judged.get(e[3]) == e[2]]
        heapify(self._heap)
