"""Scale-down eligibility, drainability, rescheduling and removal selection, by hand.

Reproduces CA's scale-down: utilization as the max of cpu and memory requests over allocatable, GPU
nodes by GPU (`simulator/utilization`), the threshold per group (`core/scaledown/eligibility/
eligibility.go`), pods that block a drain (`simulator/drainability/rules/*`: no controller, local
storage, kube-system without PDB, PDBs), unneeded tracking (`core/scaledown/unneeded/nodes.go`) and
the empty-first, bounded removal (`core/scaledown/budgets/budgets.go`)."""

import pytest

from cloudprovider_grpc.simulator.engine.scale_down.drain import DrainRules, blocking_reason, utilization
from cloudprovider_grpc.simulator.engine.scale_down.planner import (
    GroupScaleDownOptions,
    ScaleDownPlanner,
    Unneeded,
    select_removals,
)
from cloudprovider_grpc.simulator.model import Pod

from .helpers import node_with, pod_shape, shape

pytestmark = pytest.mark.unit

DS = pod_shape("kube-proxy", cpu="100m", memory="128Mi", kind="DaemonSet", namespace="kube-system")
OPTS = GroupScaleDownOptions()


def planner(**kw) -> ScaleDownPlanner:
    return ScaleDownPlanner(DrainRules(), kw.get("non_empty", 30), kw.get("recheck", 300.0))


def test_utilization_is_max_of_cpu_and_memory_and_counts_daemonsets():
    n = node_with("n", shape(cpu="4", memory="16Gi"), pod_shape(cpu="1500m", memory="2Gi"), DS)
    # cpu (1500m + 100m) / 4000m = 0.4 ; memory (2Gi + 128Mi) / 16Gi = 0.1328125 -> 0.4 (cpu)
    assert utilization(n, ignore_daemonsets=False) == (pytest.approx(0.4), "cpu")
    # without the DaemonSet pod: 1500/4000 = 0.375
    assert utilization(n, ignore_daemonsets=True) == (pytest.approx(0.375), "cpu")
    m = node_with("m", shape(cpu="4", memory="4Gi"), pod_shape(cpu="500m", memory="3Gi"))
    # memory 3/4 = 0.75 beats cpu 0.125
    assert utilization(m, False) == (pytest.approx(0.75), "memory")


def test_gpu_nodes_use_gpu_utilization():
    gpu_node = shape(cpu="8", memory="32Gi", extra={"nvidia.com/gpu": "2"})
    n = node_with("g", gpu_node, pod_shape(cpu="7", memory="30Gi", extra={"nvidia.com/gpu": "1"}))
    # cpu would be 7/8 = 0.875, but GPU nodes are judged by 1 of 2 GPUs = 0.5
    assert utilization(n, False) == (0.5, "nvidia.com/gpu")


@pytest.mark.parametrize(
    "pod, reason",
    [
        (pod_shape(kind="Pod"), "NotReplicated"),
        (
            pod_shape(annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}),
            "NotSafeToEvictAnnotation",
        ),
        (pod_shape(namespace="kube-system"), "UnmovableKubeSystemPod"),
        (pod_shape(namespace="kube-system", has_pdb=True), None),
        (pod_shape(local_storage=True), "LocalStorageRequested"),
        (pod_shape(kind="Pod", annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"}), None),
        (
            pod_shape(
                local_storage=True, annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"}
            ),
            None,
        ),
        (DS, None),
        (pod_shape(), None),
        (pod_shape(kind="Job"), None),
    ],
)
def test_blocking_rules(pod, reason):
    assert blocking_reason(Pod("p", pod, 0.0), DrainRules()) == reason


def test_blocking_rules_follow_flags():
    local = Pod("p", pod_shape(local_storage=True), 0.0)
    system = Pod("q", pod_shape(namespace="kube-system"), 0.0)
    relaxed = DrainRules(skip_nodes_with_system_pods=False, skip_nodes_with_local_storage=False)
    assert blocking_reason(local, relaxed) is None
    assert blocking_reason(system, relaxed) is None


def test_unneeded_nodes_empty_and_reschedulable():
    s = shape(cpu="4", memory="16Gi")
    light = node_with("light", s, pod_shape(cpu="800m"), DS)  # (800+100)/4000 = 0.225 <= 0.5
    busy = node_with("busy", s, pod_shape(cpu="2400m"), DS)  # 2500/4000 = 0.625 > 0.5; 1500m free
    empty = node_with("empty", s, DS)  # 100/4000 = 0.025
    nodes = [light, busy, empty]
    res = planner().update(100.0, nodes, nodes, lambda g: OPTS)
    assert {u.node: u.empty for u in res.unneeded} == {"light": False, "empty": True}
    assert {u.node for u in res.newly_unneeded} == {"light", "empty"}
    assert {u.node: u.reason for u in res.unremovable} == {"busy": "NotUnderutilized"}
    assert next(u for u in res.unneeded if u.node == "light").pods_to_move == ["light-p0"]


def test_unneeded_since_is_kept_across_loops_and_reset_when_needed_again():
    s = shape(cpu="4", memory="16Gi")
    a, b = node_with("a", s), node_with("b", s)
    p = planner()
    p.update(10.0, [a, b], [a, b], lambda g: OPTS)
    res = p.update(20.0, [a, b], [a, b], lambda g: OPTS)
    assert {u.node: u.since for u in res.unneeded} == {"a": 10.0, "b": 10.0}
    assert res.newly_unneeded == []
    a.bind(Pod("big", pod_shape(cpu="3"), 20.0))  # 3000/4000 = 0.75: needed again
    res = p.update(30.0, [a, b], [a, b], lambda g: OPTS)
    assert [u.node for u in res.unneeded] == ["b"]
    a.unbind(next(iter(a.pods.values())))
    res = p.update(40.0, [a, b], [a, b], lambda g: OPTS)
    assert {u.node: u.since for u in res.unneeded} == {"a": 40.0, "b": 10.0}


def test_no_place_to_move_and_recheck_timeout():
    s = shape(cpu="4", memory="16Gi")
    lonely = node_with("lonely", s, pod_shape(cpu="1500m"))  # 0.375, but 1500m fits nowhere:
    full = node_with("full", s, pod_shape(cpu="3"))  # 1000m free only
    p = planner(recheck=300.0)
    res = p.update(0.0, [lonely], [lonely, full], lambda g: OPTS)
    assert res.unneeded == []
    assert [(u.node, u.reason) for u in res.unremovable] == [("lonely", "NoPlaceToMovePods")]
    # not rechecked for 300 s even if room appears
    roomy = node_with("roomy", s)
    res = p.update(299.0, [lonely], [lonely, full, roomy], lambda g: OPTS)
    assert [(u.node, u.reason) for u in res.unremovable] == [("lonely", "RecentlyUnremovable")]
    res = p.update(300.0, [lonely], [lonely, full, roomy], lambda g: OPTS)
    assert [u.node for u in res.unneeded] == ["lonely"]


def test_removals_reserve_room_so_the_set_can_go_together():
    s = shape(cpu="4", memory="16Gi")
    a = node_with("a", s, pod_shape(cpu="1500m"))  # 1500/4000 = 0.375
    b = node_with("b", s, pod_shape(cpu="1500m"))  # 0.375
    big = node_with("big", s, pod_shape(cpu="2200m"))  # 0.55, not underutilized; 1800m free
    # a first: its 1500m pod first-fits on b (2500m free). b then holds 1500m + a's 1500m = 3000m
    # to move; a is going, big has only 1800m free -> b must stay.
    res = planner().update(0.0, [a, b, big], [a, b, big], lambda g: OPTS)
    assert [u.node for u in res.unneeded] == ["a"]
    assert sorted((u.node, u.reason) for u in res.unremovable) == [
        ("b", "NoPlaceToMovePods"),
        ("big", "NotUnderutilized"),
    ]
    # with 3500m free on "roomy" (500m used, 0.125 -> itself a candidate, checked last by name)
    # a -> b, then b's 3000m -> roomy (3500m free): a and b can both go; roomy now holds 3500m
    # of moved pods plus its own 500m and has nowhere to send them
    roomy = node_with("roomy", s, pod_shape(cpu="500m"))
    res = planner().update(0.0, [a, b, roomy], [a, b, roomy], lambda g: OPTS)
    assert [u.node for u in res.unneeded] == ["a", "b"]
    assert [(u.node, u.reason) for u in res.unremovable] == [("roomy", "NoPlaceToMovePods")]


def test_empty_nodes_are_judged_before_they_receive_moved_pods():
    s = shape(cpu="4", memory="16Gi")
    light = node_with("a-light", s, pod_shape(cpu="1"))  # sorts first by name, 0.25
    empty = node_with("b-empty", s)
    # empty nodes go first: b-empty is unneeded as empty; a-light's pod cannot use it (it is
    # being removed) and no other node exists -> a-light stays
    res = planner().update(0.0, [light, empty], [light, empty], lambda g: OPTS)
    assert [(u.node, u.empty) for u in res.unneeded] == [("b-empty", True)]
    assert [(u.node, u.reason) for u in res.unremovable] == [("a-light", "NoPlaceToMovePods")]


def test_per_group_threshold_and_disabled_annotation():
    s = shape("gpuish", cpu="4", memory="16Gi")
    n = node_with("n", s, pod_shape(cpu="1600m"))  # 0.4
    strict = GroupScaleDownOptions(utilization_threshold=0.3)
    res = planner().update(0.0, [n], [n], lambda g: strict)
    assert [(u.node, u.reason) for u in res.unremovable] == [("n", "NotUnderutilized")]
    n2 = node_with("n2", s)
    n2.annotations["cluster-autoscaler.kubernetes.io/scale-down-disabled"] = "true"
    res = planner().update(0.0, [n2], [n2], lambda g: OPTS)
    assert [(u.node, u.reason) for u in res.unremovable] == [("n2", "ScaleDownDisabledAnnotation")]


def U(node, group="g", since=0.0, empty=True):
    return Unneeded(node, group, since, 0.1, "cpu", empty, [] if empty else [f"{node}-pod"])


def test_select_waits_for_unneeded_time():
    # unneeded since 0; at 599 s the 600 s timer has not run out, at 600 s it has
    assert select_removals(599.0, [U("a")], lambda g: 600.0, {"g": 3}, {"g": 0}, 10, 1)[0] == []
    chosen, _ = select_removals(600.0, [U("a")], lambda g: 600.0, {"g": 3}, {"g": 0}, 10, 1)
    assert [r.node for r in chosen] == ["a"]


def test_select_never_goes_below_min_size():
    # group target 3, min 1: at most 3 - 1 = 2 of the 3 unneeded nodes go
    chosen, skipped = select_removals(
        1000.0, [U("a"), U("b"), U("c")], lambda g: 600.0, {"g": 3}, {"g": 1}, 10, 1
    )
    assert [r.node for r in chosen] == ["a", "b"]
    assert [(s.node, s.reason) for s in skipped] == [("c", "NodeGroupMinSizeReached")]


def test_select_budgets_empty_first_and_one_drain():
    nodes = [U("d1", empty=False), U("e1"), U("d2", empty=False), U("e2")]
    chosen, skipped = select_removals(1000.0, nodes, lambda g: 600.0, {"g": 10}, {"g": 0}, 10, 1)
    # empty nodes first (e1, e2), then only one drain (max-drain-parallelism 1)
    assert [(r.node, r.empty) for r in chosen] == [("e1", True), ("e2", True), ("d1", False)]
    assert [s.node for s in skipped] == ["d2"]
    # total parallelism 2: only the two empty nodes
    chosen, _ = select_removals(1000.0, nodes, lambda g: 600.0, {"g": 10}, {"g": 0}, 2, 1)
    assert [r.node for r in chosen] == ["e1", "e2"]


def test_select_uses_per_group_unneeded_time():
    nodes = [U("fast", group="gpu"), U("slow", group="general")]
    times = {"gpu": 300.0, "general": 600.0}
    chosen, _ = select_removals(400.0, nodes, times.__getitem__, {"gpu": 2, "general": 2}, {}, 10, 1)
    assert [r.node for r in chosen] == ["fast"]


def test_gpu_utilization_as_upstream_calculate():
    # pkg/simulator/utilization/info_test.go TestCalculate, its GPU case: a 2-cpu node with one
    # GPU running two 100m pods and one 100m pod using the GPU is judged by its GPU: 1/1 = 1.0,
    # so the GPU threshold (not cpu's 0.15) decides whether it is underutilized
    gpu_node = shape(cpu="2", memory="2000000", extra={"nvidia.com/gpu": "1"})
    n = node_with(
        "gpu_node",
        gpu_node,
        pod_shape(cpu="100m", memory="200000"),
        pod_shape(cpu="100m", memory="200000"),
        pod_shape("gpu", cpu="100m", memory="200000", extra={"nvidia.com/gpu": "1"}),
    )
    assert utilization(n, False) == (1.0, "nvidia.com/gpu")
    res = planner().update(0.0, [n], [n], lambda g: GroupScaleDownOptions(gpu_utilization_threshold=0.5))
    assert [(u.node, u.reason) for u in res.unremovable] == [("gpu_node", "NotUnderutilized")]
