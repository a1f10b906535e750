"""Cluster-wide resource limits (--cores-total, --memory-total, --gpu-total), translated from
cluster-autoscaler's own tests; each test names the upstream test it follows."""

import random
from datetime import UTC, datetime

import pytest

from cloudprovider_grpc.simulator import parse_scenario, run
from cloudprovider_grpc.simulator.engine.scale_down.planner import Unneeded, select_removals
from cloudprovider_grpc.simulator.engine.scale_up.estimator import PodGroup
from cloudprovider_grpc.simulator.engine.scale_up.expanders import Chain, ExpanderContext
from cloudprovider_grpc.simulator.engine.scale_up.orchestrator import GroupView, plan_scale_up
from cloudprovider_grpc.simulator.limits import Limits, Tracker, node_totals, usage
from cloudprovider_grpc.simulator.predicates import StaticFitCache
from cloudprovider_grpc.simulator.scenario import AutoscalerOptions

from .helpers import pod_shape, shape

pytestmark = pytest.mark.integration

GPU_LABEL = "cloud.google.com/gke-accelerator"  # what the test cloud provider's GPULabel() returns
K80 = "nvidia-tesla-k80"  # gpu.DefaultGPUType in CA's test utils


def test_a_fractional_node_counts_as_whole_cores():
    # core/utils/utils.go getNodeResource: Capacity[cpu].Value() rounds up, so 1500m is 2 cores
    assert node_totals(shape(cpu="1500m", memory="1Gi"), None)["cpu"] == 2
    assert usage([shape(cpu="1500m"), shape(cpu="500m"), shape(cpu="2")], None)["cpu"] == 5


def test_gpus_count_under_the_gpu_labels_value():
    # processors/customresources/gpu_processor.go GetNodeGpuTarget: type from the GPU label
    gpu = shape(cpu="1", memory="1Gi", extra={"nvidia.com/gpu": "2"}, labels={GPU_LABEL: K80})
    assert node_totals(gpu, GPU_LABEL) == {"cpu": 1, "memory": 1024**3, K80: 2}
    assert K80 not in node_totals(gpu, None)  # no GPU label known: GPUs are not limited


def _plan(pods, groups, used, **flags):
    opts = AutoscalerOptions.model_validate(flags)
    ctx = ExpanderContext(random.Random(0), datetime(2026, 1, 1, tzinfo=UTC))
    return plan_scale_up(pods, groups, opts, Chain("least-waste"), ctx, 2, used, StaticFitCache(), GPU_LABEL)


def test_scale_up_max_cores_limit_hit():
    # core/scaleup/orchestrator/orchestrator_test.go TestScaleUpMaxCoresLimitHit: n1 (2 cores, ng1)
    # and n2 (4 cores, ng2), max 9 cores; two pending 2000m pods want ng1 +2 but get +1 (6 + 2 = 8)
    ng1 = shape("ng1", cpu="2", memory="100Mi")
    used = usage([ng1, shape("ng2", cpu="4", memory="1000Mi")], None)
    pods = [PodGroup(pod_shape(cpu="2", memory="0"), 2)]
    p = _plan(pods, [GroupView("ng1", 0, 10, 1, ng1, dict(ng1.allocatable))], used, **{"cores-total": "0:9"})
    assert p.needed == 2 and p.increases == [("ng1", 1)]


def test_scale_up_counts_whole_cores_of_fractional_nodes():
    # the same check with a 1500m template: one 1500m node (2 cores) exists, max 5
    # cores, three pending 1500m pods. Millicores would leave 3500m = 2 more nodes; CA counts
    # 5 - 2 = 3 cores left and 2 cores per new node, so it adds one
    g = shape("g", cpu="1500m", memory="4Gi")
    pods = [PodGroup(pod_shape(cpu="1500m", memory="1Gi"), 3)]
    p = _plan(
        pods, [GroupView("g", 0, 10, 1, g, dict(g.allocatable))], usage([g], None), **{"cores-total": "0:5"}
    )
    assert p.needed == 3 and p.increases == [("g", 1)]
    assert "Capping scale-up size due to lack of resources: 3 -> 1" in p.lines


def test_scale_up_gpu_total():
    # the max side of the limiter that legacy_test.go TestScaleDownEmptyMinGpuLimitHit builds from
    # --gpu-total (no upstream scale-up test covers GPU maxima): max 4 GPUs of the type,
    # 2 in use, nodes of 1 GPU -> 2 more at most although 3 are needed
    g = shape("gpu", cpu="8", memory="8Gi", extra={"nvidia.com/gpu": "1"}, labels={GPU_LABEL: K80})
    pods = [PodGroup(pod_shape(cpu="1", memory="1Gi", extra={"nvidia.com/gpu": "1"}), 3)]
    used = usage([g, g], GPU_LABEL)
    p = _plan(
        pods, [GroupView("gpu", 0, 10, 2, g, dict(g.allocatable))], used, **{"gpu-total": [f"{K80}:0:4"]}
    )
    assert p.increases == [("gpu", 2)]
    full = _plan(
        pods, [GroupView("gpu", 0, 10, 2, g, dict(g.allocatable))], used, **{"gpu-total": [f"{K80}:0:2"]}
    )
    assert full.skipped == {"gpu": f"exceeded quota: gpu-total {K80}"} and full.increases == []


def _empty(*names, group="ng1"):
    return [Unneeded(n, group, 0.0, 0.0, "cpu", True) for n in names]


def _select(unneeded, shapes, limits, gpu_label=None):
    used = usage(shapes.values(), gpu_label)
    return select_removals(
        1000.0,
        unneeded,
        lambda g: 600.0,
        {"ng1": len(shapes)},
        {"ng1": 1},  # simpleScaleDownEmpty: provider.AddNodeGroup(name, 1, 10, n)
        10,
        1,
        quota=Tracker.for_scale_down(limits, used),
        totals=lambda name: node_totals(shapes[name], gpu_label),
    )


def test_scale_down_empty_min_cores_limit_hit():
    # core/scaledown/legacy/legacy_test.go TestScaleDownEmptyMinCoresLimitHit (now enforced by
    # unneeded/nodes.go RemovableAt): n1 2000m, n2 1000m, min 2 cores: only n2 may go
    shapes = {"n1": shape(cpu="2000m", memory="1000Mi"), "n2": shape(cpu="1000m", memory="1000Mi")}
    chosen, skipped = _select(_empty("n1", "n2"), shapes, Limits.from_flags((2, 100), (0, 100), []))
    assert [r.node for r in chosen] == ["n2"]
    assert [(s.node, s.reason) for s in skipped] == [("n1", "MinimalResourceLimitExceeded")]


def test_scale_down_empty_min_memory_limit_hit():
    # legacy_test.go TestScaleDownEmptyMinMemoryLimitHit, in GiB (our flag's unit) instead of MiB:
    # 1 + 1 + 1 + 3 GiB, min 4 GiB -> 2 GiB may go: two of n1..n3, never n4
    shapes = {f"n{i}": shape(cpu="1", memory=m) for i, m in enumerate(["1Gi", "1Gi", "1Gi", "3Gi"], 1)}
    chosen, skipped = _select(
        _empty("n1", "n2", "n3", "n4"), shapes, Limits.from_flags((0, 100), (4, 100), [])
    )
    assert len(chosen) == 2 and {r.node for r in chosen} <= {"n1", "n2", "n3"}
    assert {s.reason for s in skipped} == {"MinimalResourceLimitExceeded"}


def test_scale_down_empty_min_gpu_limit_hit():
    # legacy_test.go TestScaleDownEmptyMinGpuLimitHit: six 1-GPU nodes of the default type, min 4
    # of it (and min 5 of another type that no node has, which must not trigger): 2 go
    gpu = shape(cpu="1", memory="1000Mi", extra={"nvidia.com/gpu": "1"}, labels={GPU_LABEL: K80})
    shapes = {f"n{i}": gpu for i in range(1, 7)}
    lim = Limits.from_flags((0, 100), (0, 100), [f"{K80}:4:50", "nvidia-tesla-p100:5:50"])
    chosen, _ = _select(_empty(*shapes), shapes, lim, GPU_LABEL)
    assert len(chosen) == 2


def test_simulation_keeps_the_cluster_above_min_cores():
    # end to end through the gRPC server: a 2-core node may not go under a 2-core
    # minimum, although it is empty and its group's MinSize is 0
    s = parse_scenario(
        {
            "name": "min-cores",
            "duration": "20m",
            "cloud": {
                "groups": [
                    {
                        "id": "a",
                        "min_size": 0,
                        "max_size": 3,
                        "initial_size": 1,
                        "capacity": {"cpu": "2", "memory": "4Gi"},
                    },
                    {
                        "id": "b",
                        "min_size": 0,
                        "max_size": 3,
                        "initial_size": 1,
                        "capacity": {"cpu": "1500m", "memory": "4Gi"},
                    },
                ]
            },
            "autoscaler": {"cores-total": "2:100", "scale-down-delay-after-add": 0},
        }
    )
    r = run(s)
    # 2 + 2 cores; removing either leaves 2 >= 2, removing both would leave 0: exactly one goes
    downs = [d for d in r.decisions if d.kind == "scale-down"]
    assert len(downs) == 1
    blocked = [d for d in r.decisions if d.kind == "scale-down-blocked"]
    assert blocked and blocked[0].reason == "MinimalResourceLimitExceeded"
    assert sum(s[-1] for s in r.timeline["nodes"].values()) == 1


def test_simulation_adds_one_node_for_fractional_cores():
    # one 1500m node, cores-total 0:5, three pending 1500m pods -> CA adds 1 node
    s = parse_scenario(
        {
            "name": "fractional-cores",
            "duration": "2m",
            "cloud": {
                "groups": [
                    {
                        "id": "g",
                        "min_size": 1,
                        "max_size": 10,
                        "initial_size": 1,
                        "capacity": {"cpu": "1500m", "memory": "8Gi"},
                    }
                ]
            },
            "autoscaler": {"cores-total": "0:5"},
            "workloads": [{"name": "w", "replicas": 4, "requests": {"cpu": "1500m", "memory": "1Gi"}}],
        }
    )
    ups = [d for d in run(s).decisions if d.kind == "scale-up"]
    assert [(d.group, d.delta) for d in ups] == [("g", 1)]
