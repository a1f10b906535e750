"""The simulated Kubernetes side: controllers, kube-scheduler scoring, DaemonSets, evictions.

Not CA's own logic but what CA reacts to: pods placed as kube-scheduler would (CA's
`core/podlistprocessor/filter_out_schedulable.go` drops pods that fit existing nodes), DaemonSet pods
on every new node (CA's template nodes carry them, `simulator/node_info_utils.go`), evictions on
scale-down (`core/scaledown/actuation`)."""

import pytest

from cloudprovider_grpc.simulator import parse_scenario, run
from cloudprovider_grpc.simulator.model import Taint
from cloudprovider_grpc.simulator.world import World

from .helpers import shape

pytestmark = pytest.mark.integration


def world(workloads, **kw):
    return World(parse_scenario({"name": "w", "duration": 60, "workloads": workloads, **kw}))


def test_deployment_scales_in_pending_first_then_newest():
    w = world(
        [{"name": "web", "replicas": 3, "schedule": [{"at": 100, "replicas": 1}], "requests": {"cpu": "1"}}]
    )
    w.register("n", "p://n", shape(cpu="2"), 0)
    w.apply_controllers(0)
    w.schedule(0)
    # 2 cpu: web-0 and web-1 bound, web-2 pending
    assert sorted(w.nodes["n"].pods) == ["web-0", "web-1"] and list(w.pending) == ["web-2"]
    w.apply_controllers(100)  # 3 -> 1: the pending pod goes first, then the newest bound one
    assert sorted(w.pods) == ["web-0"]
    assert not w.pending


def test_least_allocated_spreads_and_most_allocated_packs():
    for policy, expected in (("least-allocated", {"a": 1, "b": 1}), ("most-allocated", {"a": 2, "b": 0})):
        w = world([{"name": "web", "replicas": 2, "requests": {"cpu": "1"}}], scheduler=policy)
        w.register("a", "p://a", shape("g", cpu="4"), 0)
        w.register("b", "p://b", shape("g", cpu="4"), 0)
        w.apply_controllers(0)
        w.schedule(0)
        assert {n: len(node.pods) for n, node in w.nodes.items()} == expected, policy


def test_priority_goes_first():
    w = world(
        [
            {"name": "low", "replicas": 1, "priority": 0, "requests": {"cpu": "2"}},
            {"name": "high", "replicas": 1, "priority": 100, "requests": {"cpu": "2"}},
        ]
    )
    w.register("n", "p://n", shape(cpu="2"), 0)
    w.apply_controllers(0)
    w.schedule(0)
    assert list(w.nodes["n"].pods) == ["high-0"] and list(w.pending) == ["low-0"]


def test_daemonsets_follow_taints_and_jobs_complete():
    w = world(
        [{"name": "job", "kind": "Job", "replicas": 1, "run_time": 50, "requests": {"cpu": "1"}}],
        daemonsets=[
            {"name": "everywhere", "requests": {"cpu": "100m"}},
            {"name": "picky", "requests": {"cpu": "100m"}, "tolerations": []},
        ],
    )
    w.register("plain", "p://plain", shape(cpu="4"), 0)
    w.register("tainted", "p://t", shape(cpu="4", taints=(Taint("dedicated", "x"),)), 0)
    assert sorted(p.shape.owner for p in w.nodes["plain"].pods.values()) == ["everywhere", "picky"]
    assert [p.shape.owner for p in w.nodes["tainted"].pods.values()] == ["everywhere"]
    w.apply_controllers(0)
    w.schedule(0)
    w.apply_controllers(49)
    assert "job-0" in w.pods
    w.apply_controllers(50)
    assert "job-0" not in w.pods and w.completed == 1


def test_removed_node_recreates_controller_pods_only():
    w = world(
        [
            {"name": "web", "replicas": 1, "requests": {"cpu": "1"}},
            {"name": "bare", "kind": "Pod", "replicas": 1, "requests": {"cpu": "1"}},
        ],
        daemonsets=[{"name": "ds", "requests": {"cpu": "100m"}}],
    )
    w.register("n", "p://n", shape(cpu="4"), 0)
    w.apply_controllers(0)
    w.schedule(0)
    recreated = w.remove_node("n", 10)
    assert [p.name for p in recreated] == ["web-1"]
    assert sorted(w.pods) == ["web-1"] and list(w.pending) == ["web-1"]


def test_in_process_transport_makes_the_same_decisions_as_grpc():
    from pathlib import Path

    from cloudprovider_grpc.simulator import load_scenario

    s = load_scenario(Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "priority.yaml")
    over_grpc = run(s, seed=1)
    direct = run(s, seed=1, transport="in-process")
    assert direct.to_json() == over_grpc.to_json()
