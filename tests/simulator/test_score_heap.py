"""The scheduler's heap kept across passes answers what a full scan of the nodes answers.

`score_heap.ScoreHeap` rescores only the nodes whose version changed since it last saw them; these
tests drive it through passes in which pods are bound and unbound, nodes join, leave and turn
unschedulable, and check every pick against the highest LeastAllocated score over all nodes that
fit, ties to the earliest node."""

import random

import pytest

from cloudprovider_grpc.simulator.model import Node, Pod, Taint
from cloudprovider_grpc.simulator.predicates import StaticFitCache, static_fit
from cloudprovider_grpc.simulator.score_heap import ScoreHeap, least_allocated

from .helpers import pod_shape, shape

pytestmark = pytest.mark.unit


def _best(pod, nodes):
    """The reference: a full scan, the highest score, ties to the lowest registration number."""
    scored = [
        (least_allocated(pod, n), -n.seq, n)
        for n in nodes
        if static_fit(pod, n.shape) and least_allocated(pod, n) is not None
    ]
    return max(scored, key=lambda t: (t[0], t[1]))[2] if scored else None


def _node(seq, cpu, tainted=False):
    taints = (Taint("dedicated", "x"),) if tainted else ()
    n = Node(f"n{seq}", f"p://n{seq}", shape(cpu=cpu, taints=taints), 0.0)
    n.seq = seq
    return n


@pytest.mark.parametrize("placing", [False, True], ids=["pop-and-bind", "place"])
def test_picks_match_a_full_scan_across_passes(placing):
    rng = random.Random(3)
    pod = pod_shape(cpu="500m", memory="1Gi")
    other = pod_shape("other", cpu="250m", memory="256Mi")
    nodes = [_node(i, rng.choice(["2", "4", "8"]), tainted=i % 7 == 0) for i in range(40)]
    heap = ScoreHeap(pod, StaticFitCache())
    serial = 0
    picks = 0
    joined = len(nodes)
    for _ in range(30):
        # between passes: pods leave (scores rise), other pods land, nodes join, leave, drain
        for n in nodes:
            for name in [p for p in n.pods if rng.random() < 0.3]:
                n.unbind(n.pods[name])
            if rng.random() < 0.2:
                serial += 1
                n.bind(Pod(f"o{serial}", other, 0.0))
        if rng.random() < 0.5:
            joined += 1
            nodes.append(_node(joined, rng.choice(["2", "16"])))
        if rng.random() < 0.3:
            nodes.pop(rng.randrange(len(nodes)))
        schedulable = [n for n in nodes if rng.random() > 0.1]
        heap.sync(schedulable, [n.version for n in schedulable])
        for _ in range(rng.randrange(5, 60)):
            expected = _best(pod, schedulable)
            serial += 1
            if placing:
                p = Pod(f"p{serial}", pod, 0.0)
                got = heap.place(p)
                assert got is expected
                if got is None:
                    break
                assert p.node == got.name
            else:
                got = heap.pop_best()
                assert got is expected
                if got is None:
                    break
                got.bind(Pod(f"p{serial}", pod, 0.0))
                heap.bound(got)
            picks += 1
            if rng.random() < 0.2:  # a pod of another key lands within the pass
                target = rng.choice(schedulable)
                if least_allocated(other, target) is not None:
                    serial += 1
                    target.bind(Pod(f"o{serial}", other, 0.0))
    assert picks > 300


def test_ties_go_to_the_earliest_node_and_full_nodes_drop_out():
    pod = pod_shape(cpu="1", memory="1Gi")
    a, b = _node(1, "2"), _node(2, "2")
    heap = ScoreHeap(pod, StaticFitCache())
    heap.sync([b, a], [b.version, a.version])
    order = []
    for i in range(5):
        n = heap.pop_best()
        if n is None:
            break
        n.bind(Pod(f"p{i}", pod, 0.0))
        heap.bound(n)
        order.append(n.name)
    assert order == ["n1", "n2", "n1", "n2"]
