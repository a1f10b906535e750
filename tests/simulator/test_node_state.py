"""Node state and the cluster around the node groups, end to end through our gRPC server (sim
backend): readiness, annotations, taints, nodes in no group, outside deletions, PDBs and inter-pod
constraints. Each test names the cluster-autoscaler test (or source) it translates."""

import pytest

from cloudprovider_grpc.simulator import parse_scenario, run
from cloudprovider_grpc.simulator.engine.scale_down.drain import pdb_blocked
from cloudprovider_grpc.simulator.engine.scale_down.planner import Unneeded, select_removals
from cloudprovider_grpc.simulator.model import Pod, PodShape

pytestmark = pytest.mark.integration


def group(gid, initial=0, lo=0, hi=10, cpu="1", memory="1Gi", **kw):
    return {
        "id": gid,
        "min_size": lo,
        "max_size": hi,
        "initial_size": initial,
        "capacity": {"cpu": cpu, "memory": memory},
        **kw,
    }


def scenario(duration, groups, **kw):
    return parse_scenario({"name": "t", "duration": duration, "cloud": {"groups": groups}, **kw})


def kinds(report, kind):
    return [d for d in report.decisions if d.kind == kind]


def test_no_scale_down_unready():
    # core/scaledown/legacy/legacy_test.go TestNoScaleDownUnready: ng1 (min 1) has n1 unready and
    # empty and n2 ready with an 800m pod of 1000m; unneeded time 1m, unready time 1h. n1 is kept
    # while it has been unneeded for less than the unready time, and removed once it has.
    s = scenario(
        "62m",
        [group("ng1", initial=2, lo=1)],
        autoscaler={"scale-down-unneeded-time": "1m", "scale-down-unready-time": "1h"},
        workloads=[{"name": "p2", "requests": {"cpu": "800m", "memory": "100Mi"}}],
        node_events=[{"at": 0, "node": "ng1-0", "ready": False}],
    )
    r = run(s)
    downs = kinds(r, "scale-down")
    assert [d.node for d in downs] == ["ng1-0"]
    assert downs[0].t >= 3600 and downs[0].inputs["unneeded_for"] >= 3600


def test_nodes_still_starting_count_as_upcoming():
    # clusterstate.go calculateUpcomingNodesInNodeGroup (clusterstate_test.go TestUpcomingNodes):
    # registered but NotReady nodes younger than MaxNodeStartupTime are still upcoming, so the
    # pods waiting for them trigger no second scale-up while the kubelets come up (3 minutes)
    s = scenario(
        "8m",
        [group("g", cpu="2", memory="4Gi")],
        cloud={"provisioning_delay": 30, "groups": [group("g", cpu="2", memory="4Gi")]},
        node_ready_delay="3m",
        workloads=[{"name": "w", "replicas": 4, "requests": {"cpu": "1", "memory": "1Gi"}}],
    )
    r = run(s)
    assert [(d.group, d.delta) for d in kinds(r, "scale-up")] == [("g", 2)]
    assert any("world: node g-0 is Ready" in line for line in r.log)
    assert r.summary["max_pending_pods"] == 4 and r.timeline["pending"][-1] == 0


def test_scale_down_disabled_annotation_and_being_deleted_taint():
    # core/scaledown/eligibility/eligibility_test.go TestFilterOutUnremovable: a node annotated
    # cluster-autoscaler.kubernetes.io/scale-down-disabled=true and a node carrying the
    # ToBeDeleted taint are never unneeded; an ordinary empty node is
    s = scenario(
        "15m",
        [group("ng1", initial=3)],
        autoscaler={"scale-down-unneeded-time": "1m", "scale-down-delay-after-add": 0},
        node_events=[
            {
                "at": 0,
                "node": "ng1-0",
                "annotations": {"cluster-autoscaler.kubernetes.io/scale-down-disabled": "true"},
            },
            {"at": "30s", "node": "ng1-1", "taints": [{"key": "ToBeDeletedByClusterAutoscaler"}]},
        ],
    )
    r = run(s)
    assert [d.node for d in kinds(r, "scale-down")] == ["ng1-2"]
    # ng1-1 was unneeded in the first loops, before its taint came at 30s; ng1-0 never
    assert "ng1-0" not in {d.node for d in kinds(r, "node-unneeded")}
    assert r.summary["final_nodes"] == {"ng1": 2}


def test_to_be_deleted_taints_of_a_previous_run_are_cleaned_at_start():
    # static_autoscaler.go cleanUpIfRequired (static_autoscaler_test.go
    # TestStaticAutoscalerRunOnceWithBypassedSchedulers's cleanup of old taints): the taint a dead
    # CA left is removed in the first loop, so the node takes pods again
    s = scenario(
        "2m",
        [group("ng1", initial=1, lo=1, cpu="2")],
        node_events=[{"at": 0, "node": "ng1-0", "taints": [{"key": "ToBeDeletedByClusterAutoscaler"}]}],
        workloads=[{"name": "w", "requests": {"cpu": "1", "memory": "100Mi"}}],
    )
    r = run(s)
    assert any("Removed ToBeDeleted taint from node ng1-0" in line for line in r.log)
    assert r.timeline["pending"][0] == 0 and not kinds(r, "scale-up")


def test_scale_up_max_cores_limit_hit_with_not_autoscaled_group():
    # core/scaleup/orchestrator/orchestrator_test.go TestScaleUpMaxCoresLimitHitWithNotAutoscaledGroup:
    # n1 (2 cores, ng1) and n2 (4 cores, in no node group), max 9 cores: two pending 2-core pods
    # get ng1 +1 (2 + 4 + 2 = 8), the node outside the groups counting like any other
    s = scenario(
        "1m",
        [group("ng1", initial=1, cpu="2", memory="1Gi")],
        static_nodes=[
            {"name": "n2", "capacity": {"cpu": "4", "memory": "1Gi"}, "labels": {"pool": "static"}}
        ],
        autoscaler={"cores-total": "0:9"},
        workloads=[
            {
                "name": "p1",
                "requests": {"cpu": "1", "memory": "0"},
                "node_affinity": [{"key": "pool", "operator": "DoesNotExist"}],
            },
            {"name": "p2", "requests": {"cpu": "3", "memory": "0"}, "node_selector": {"pool": "static"}},
            {"name": "new", "replicas": 2, "start": "10s", "requests": {"cpu": "2", "memory": "0"}},
        ],
    )
    r = run(s)
    ups = kinds(r, "scale-up")
    assert [(d.group, d.delta) for d in ups] == [("ng1", 1)] and ups[0].inputs["estimated"] == 2
    assert r.summary["final_nodes"]["ng1"] == 2
    assert not [d for d in r.decisions if d.node == "n2"]  # never a scale-down candidate


def test_scale_down_min_group_size_when_nodes_are_being_deleted():
    # core/scaledown/legacy/legacy_test.go TestScaleDownEmptyMinGroupSizeLimitHitWhenOneNodeIsBeingDeleted:
    # ng1 (min 1) has three empty nodes, two of them already being deleted when CA starts: the
    # third must stay
    s = scenario(
        "15m",
        [group("ng1", initial=3, lo=1)],
        cloud={"deletion_delay": 300, "groups": [group("ng1", initial=3, lo=1)]},
        autoscaler={"scale-down-unneeded-time": "1m", "scale-down-delay-after-add": 0},
        node_events=[{"at": 0, "node": "ng1-0", "delete": True}, {"at": 0, "node": "ng1-1", "delete": True}],
    )
    r = run(s)
    assert not kinds(r, "scale-down")
    assert r.summary["final_nodes"] == {"ng1": 1}
    assert "NodeGroupDeleteNodes" not in r.rpc_counts["autoscaler"]  # the deletions were not CA's
    assert r.rpc_counts["simulator"]["NodeGroupDeleteNodes"] == 2


def test_pdb_can_remove_pods_cases():
    # core/scaledown/pdb/basic_test.go TestBasicCanRemovePods: "Not enough pod disruption budgets"
    # (a covering PDB with 0 disruptions allowed blocks), "Pod disruption budgets is at risk"
    # (2 covered pods, 1 disruption allowed: can disrupt, only not in parallel) and "No pdbs"
    one = PodShape("label-1", "Deployment", "ns", {"cpu": 0, "pods": 1})
    two = PodShape("label-2", "Deployment", "ns", {"cpu": 0, "pods": 1})
    pods = [Pod("a", one, 0), Pod("b", one, 0), Pod("c", two, 0)]
    assert pdb_blocked(pods, {one: 1, two: 0}) == "pod ns/c: NotEnoughPdb"
    assert pdb_blocked(pods, {one: 1, two: 2}) is None
    assert pdb_blocked(pods, {}) is None


def pdb_scenario(pdb):
    return scenario(
        "20m",
        [group("ng1", initial=3, cpu="4", memory="8Gi")],
        autoscaler={"scale-down-unneeded-time": "1m", "scale-down-delay-after-add": 0},
        workloads=[{"name": "web", "replicas": 3, "requests": {"cpu": "1", "memory": "1Gi"}, "pdb": pdb}],
    )


def test_pdb_blocks_drains_through_the_simulation():
    # three nodes each running one web pod (25% cpu: all underutilized, each pod fits elsewhere).
    # minAvailable 3 leaves no disruption, so no node may be drained; maxUnavailable 1 lets the
    # drains through (the evicted pod is recreated and runs again before the next one)
    blocked = run(pdb_scenario({"min_available": 3}))
    assert not kinds(blocked, "scale-down")
    assert blocked.summary["final_nodes"] == {"ng1": 3}
    allowed = run(pdb_scenario({"max_unavailable": 1}))
    assert kinds(allowed, "scale-down")
    assert allowed.summary["final_nodes"]["ng1"] < 3


def test_pod_anti_affinity_and_affinity_in_scheduling_and_scale_up():
    # kubernetes interpodaffinity filtering (which CA runs via its predicate checker): "web"
    # repels itself per host, so 3 replicas need 3 nodes; "sidecar" must share a host with a
    # "web" pod, so its 3 replicas join them and add no node. The estimator counts 3 nodes
    # although 3 web pods' resources would fit one node.
    s = scenario(
        "5m",
        [group("g", cpu="4", memory="8Gi")],
        workloads=[
            {
                "name": "web",
                "replicas": 3,
                "requests": {"cpu": "500m", "memory": "512Mi"},
                "pod_anti_affinity": [
                    {"label_selector": {"app": "web"}, "topology_key": "kubernetes.io/hostname"}
                ],
            },
            {
                "name": "sidecar",
                "replicas": 3,
                "start": "3m",
                "requests": {"cpu": "100m", "memory": "64Mi"},
                "pod_affinity": [
                    {"label_selector": {"app": "web"}, "topology_key": "kubernetes.io/hostname"}
                ],
            },
        ],
    )
    r = run(s)
    assert [(d.group, d.delta) for d in kinds(r, "scale-up")] == [("g", 3)]
    assert r.timeline["pending"][-1] == 0 and r.summary["final_nodes"] == {"g": 3}


def test_host_port_conflict_in_scheduling_and_scale_up():
    # binpacking_estimator_test.go "hostport conflict forces pod-per-node", end to end
    s = scenario(
        "3m",
        [group("g", cpu="4", memory="8Gi")],
        workloads=[
            {
                "name": "agent",
                "replicas": 4,
                "host_ports": [9100],
                "requests": {"cpu": "100m", "memory": "64Mi"},
            }
        ],
    )
    r = run(s)
    assert [(d.group, d.delta) for d in kinds(r, "scale-up")] == [("g", 4)]
    assert r.timeline["pending"][-1] == 0


def test_atomic_resize_filter():
    # processors/nodes/scale_down_set_processor_test.go (AtomicResizeFilteringProcessor): a
    # zero-or-max group's nodes are removed together when all of its target are removable;
    # otherwise each is AtomicScaleDownFailed. Ordinary groups are unaffected.
    def u(node, group):
        return Unneeded(node, group, 0.0, 0.0, "cpu", True)

    unneeded = [u("a-0", "a"), u("a-1", "a"), u("a-2", "a"), u("b-0", "b"), u("b-1", "b"), u("c-0", "c")]
    chosen, skipped = select_removals(
        1000.0, unneeded, lambda g: 600.0, {"a": 3, "b": 3, "c": 2}, {}, 10, 1, atomic={"a", "b"}
    )
    assert sorted(r.node for r in chosen) == ["a-0", "a-1", "a-2", "c-0"]
    assert sorted((s.node, s.reason) for s in skipped) == [
        ("b-0", "AtomicScaleDownFailed"),
        ("b-1", "AtomicScaleDownFailed"),
    ]


def test_zero_or_max_group_scales_to_max_and_back_to_zero_at_once():
    # orchestrator.go ComputeExpansionOption (a zero-or-max group's only valid count is its max
    # size) and the atomic scale-down above, through NodeGroupGetOptions served by the sim cloud:
    # one pending pod grows "slice" 0 -> 4; when the Job ends, all 4 go in one DeleteNodes call
    s = scenario(
        "30m",
        [group("slice", hi=4, cpu="4", memory="8Gi", options={"zero_or_max_node_scaling": True})],
        autoscaler={"scale-down-unneeded-time": "2m", "scale-down-delay-after-add": "1m"},
        workloads=[
            {"name": "train", "kind": "Job", "run_time": "10m", "requests": {"cpu": "1", "memory": "1Gi"}}
        ],
    )
    r = run(s)
    assert [(d.group, d.delta) for d in kinds(r, "scale-up")] == [("slice", 4)]
    downs = kinds(r, "scale-down")
    assert len(downs) == 4 and len({d.t for d in downs}) == 1
    assert r.rpc_counts["autoscaler"]["NodeGroupDeleteNodes"] == 1
    assert r.summary["final_nodes"] == {"slice": 0}


def test_a_node_event_for_no_such_node_is_reported():
    s = scenario(
        "1m", [group("ng1", initial=1)], node_events=[{"at": "10s", "node": "ng1-9", "ready": False}]
    )
    r = run(s)
    assert any("node event for ng1-9 at 00:00:10 never applied: no such node" in line for line in r.log)
