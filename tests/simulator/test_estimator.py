"""Binpacking estimator (estimator.py) against hand-computed cases.

Reproduces CA's binpacking estimator (`estimator/binpacking_estimator.go`): pods in decreasing
score order (`decreasing_pod_orderer.go`), first-fit onto the nodes opened so far, new template nodes
while allowed (`threshold_based_limiter.go`)."""

import pytest

from cloudprovider_grpc.simulator.engine.scale_up.estimator import PodGroup, estimate, order_groups, pod_score
from cloudprovider_grpc.simulator.predicates import static_fit

from .helpers import pod_shape, shape

pytestmark = pytest.mark.unit


def test_single_group_fills_nodes_in_order():
    tpl = shape(cpu="4", memory="16Gi")
    # 10 pods x 1 cpu on 4-cpu nodes: 4 + 4 + 2 -> 3 nodes
    est = estimate([PodGroup(pod_shape(cpu="1", memory="1Gi"), 10)], tpl, tpl.allocatable)
    assert est.node_count == 3
    assert est.pod_count == 10
    assert not est.limited


def test_daemonset_overhead_reduces_room_per_node():
    tpl = shape(cpu="4", memory="16Gi")
    free = dict(tpl.allocatable, cpu=4000 - 100)  # a 100m DaemonSet pod on every template node
    # 3900m // 1000m = 3 pods per node; 10 pods -> ceil(10/3) = 4 nodes
    est = estimate([PodGroup(pod_shape(cpu="1"), 10)], tpl, free)
    assert est.node_count == 4


def test_memory_can_be_the_binding_resource():
    tpl = shape(cpu="16", memory="16Gi")
    # 5Gi pods: 16Gi // 5Gi = 3 per node (cpu would allow 16); 7 pods -> 3 + 3 + 1 = 3 nodes
    est = estimate([PodGroup(pod_shape(cpu="100m", memory="5Gi"), 7)], tpl, tpl.allocatable)
    assert est.node_count == 3


def test_pod_slots_limit():
    tpl = shape(cpu="64", memory="256Gi", pods=3)
    # tiny pods, but only 3 pod slots per node: 10 pods -> 3+3+3+1 = 4 nodes
    est = estimate([PodGroup(pod_shape(cpu="10m", memory="10Mi"), 10)], tpl, tpl.allocatable)
    assert est.node_count == 4


def test_extended_resource_gpu():
    tpl = shape(cpu="8", memory="32Gi", extra={"nvidia.com/gpu": "1"})
    # one GPU per node and per pod: 3 pods -> 3 nodes although cpu would fit 8 per node
    est = estimate([PodGroup(pod_shape(cpu="1", extra={"nvidia.com/gpu": "1"}), 3)], tpl, tpl.allocatable)
    assert est.node_count == 3
    # a node without the GPU resource fits none of them
    plain = shape(cpu="8", memory="32Gi")
    assert (
        estimate(
            [PodGroup(pod_shape(cpu="1", extra={"nvidia.com/gpu": "1"}), 3)], plain, plain.allocatable
        ).node_count
        == 0
    )


def test_score_orders_big_pods_first_and_small_pods_backfill():
    tpl = shape(cpu="4", memory="16Gi")
    big = pod_shape("big", cpu="3", memory="1Gi")  # score 3/4 + 1/16 = 0.8125
    small = pod_shape("small", cpu="1", memory="1Gi")  # score 1/4 + 1/16 = 0.3125
    assert pod_score(big, tpl) == 0.8125
    assert pod_score(small, tpl) == 0.3125
    assert [g.shape.owner for g in order_groups([PodGroup(small, 1), PodGroup(big, 1)], tpl)] == [
        "big",
        "small",
    ]
    # big first: node1 = 3 cpu used, node2 = 3 cpu used; the 3 small pods first-fit into the
    # existing nodes (1 cpu left on each: 2 pods), the third opens node3 -> 3 nodes
    est = estimate([PodGroup(small, 3), PodGroup(big, 2)], tpl, tpl.allocatable)
    assert est.node_count == 3
    assert {g.shape.owner: g.count for g in est.placed} == {"big": 2, "small": 3}


def test_limiter_caps_nodes_and_placed_pods():
    tpl = shape(cpu="4", memory="16Gi")
    # need ceil(10/4) = 3 nodes; limit 2 -> 2 nodes holding 8 pods
    est = estimate([PodGroup(pod_shape(cpu="1"), 10)], tpl, tpl.allocatable, max_nodes=2)
    assert (est.node_count, est.pod_count, est.limited) == (2, 8, True)


def test_refused_node_ends_only_that_group():
    tpl = shape(cpu="4", memory="16Gi")
    big = pod_shape("big", cpu="3")  # 3 pods, one per node
    small = pod_shape("small", cpu="1")  # backfills the 1 cpu left on each node
    # limit 2: big gets 2 nodes (third refused); small still fits the 2 existing nodes (1 each)
    est = estimate([PodGroup(big, 3), PodGroup(small, 2)], tpl, tpl.allocatable, max_nodes=2)
    assert est.node_count == 2
    assert {g.shape.owner: g.count for g in est.placed} == {"big": 2, "small": 2}


def test_pod_larger_than_a_node_places_nothing_but_others_continue():
    tpl = shape(cpu="4", memory="16Gi")
    huge = pod_shape("huge", cpu="5")
    ok = pod_shape("ok", cpu="2")
    # huge never fits (5 > 4); ok: 2 per node, 3 pods -> 2 nodes
    est = estimate([PodGroup(huge, 2), PodGroup(ok, 3)], tpl, tpl.allocatable)
    assert est.node_count == 2
    assert [g.shape.owner for g in est.placed] == ["ok"]


def test_static_filter_skips_groups_that_cannot_land():
    tpl = shape(labels={"pool": "a"})
    wants_b = pod_shape("b", node_selector={"pool": "b"})
    est = estimate([PodGroup(wants_b, 4)], tpl, tpl.allocatable, fits_statically=static_fit)
    assert est.node_count == 0


# ---- inter-pod predicates in the estimator: cases of sigs-CA estimator/binpacking_estimator_test.go
# TestBinpackingEstimate. Its snapshot holds "oldnode" (zone-jupiter, 100m cpu, 100 MiB, no pods);
# the template node is in zone-mars with 10 pod slots; pods are labelled app=estimatee.
ZONE = "topology.kubernetes.io/zone"


def _upstream_case(cpu: str, memory: str, pods: int, **constraints):
    from cloudprovider_grpc.simulator.predicates import Placement

    context = Placement()
    context.add_node("oldnode", {"kubernetes.io/hostname": "oldnode", ZONE: "zone-jupiter"})
    tpl = shape("ng", cpu="1", memory="5000Mi", pods=10, labels={ZONE: "zone-mars"})
    ps = pod_shape("estimatee", cpu=cpu, memory=memory, labels={"app": "estimatee"}, **constraints)
    return estimate([PodGroup(ps, pods)], tpl, dict(tpl.allocatable), context=context)


def test_hostport_conflict_forces_pod_per_node():
    # "hostport conflict forces pod-per-node": 8 pods of 200m with hostPort 5555 -> 8 nodes
    est = _upstream_case("200m", "1000Mi", 8, host_ports=(5555,))
    assert (est.node_count, est.pod_count) == (8, 8)


def test_hostname_topology_spreading_with_max_skew_2_forces_2_pods_per_node():
    # maxSkew 2 on the hostname: oldnode is a domain with 0 matching pods, so each new node
    # takes 2 of the 8 pods (resources would allow 5) -> 4 nodes
    from cloudprovider_grpc.simulator.model import SpreadConstraint

    spread = (SpreadConstraint(2, "kubernetes.io/hostname", (("app", "estimatee"),), 1),)
    est = _upstream_case("200m", "200", 8, spread=spread)
    assert (est.node_count, est.pod_count) == (4, 8)


def test_zonal_topology_spreading_with_max_skew_2_only_allows_2_pods():
    # every new node is in zone-mars; jupiter has 0 -> only 2 pods can ever be placed: 1 node
    from cloudprovider_grpc.simulator.model import SpreadConstraint

    spread = (SpreadConstraint(2, ZONE, (("app", "estimatee"),), 1),)
    est = _upstream_case("20m", "100", 8, spread=spread)
    assert (est.node_count, est.pod_count) == (1, 2)


def test_required_anti_affinity_on_hostname_puts_one_pod_per_node():
    # the anti-affinity form of the hostport case (predicates InterPodAffinity instead of
    # NodePorts): 5 pods that repel their own label on kubernetes.io/hostname -> 5 nodes
    from cloudprovider_grpc.simulator.model import Term

    anti = (Term((("app", "estimatee"),), "kubernetes.io/hostname"),)
    est = _upstream_case("100m", "100Mi", 5, pod_anti_affinity=anti)
    assert (est.node_count, est.pod_count) == (5, 5)
    zonal = _upstream_case("100m", "100Mi", 5, pod_anti_affinity=(Term((("app", "estimatee"),), ZONE),))
    assert (zonal.node_count, zonal.pod_count) == (1, 1)  # one per zone, and all new nodes share one
