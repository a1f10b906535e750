"""Every example scenario end to end, through our real gRPC server on a loopback port (sim backend).

Expected numbers are worked out by hand in the comments from the scenario files. Each reproduces CA's
main loop (`core/static_autoscaler.go` RunOnce: refresh, cluster state, scale-up of pending pods,
scale-down of unneeded nodes after `--scale-down-unneeded-time`, the delays after add and delete)
on the workload its scenario file describes.
"""

from pathlib import Path

import pytest

from cloudprovider_grpc.simulator import load_scenario, parse_scenario, run

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "scenarios"
TESTED = {"burst", "diurnal", "gpu-pool", "priority", "scale-to-zero"}
#: scenarios on another provider, run against its emulator by that backend's own tests
ELSEWHERE = {
    "burst-pools": "tests/simulator/test_pool_mode.py",
    "vultr-burst": "tests/providers/vultr/test_simulate.py",
    "exoscale-sks": "tests/providers/exoscale/test_simulate.py",
    "alicloud-gpu": "tests/providers/alicloud/test_scenario.py",
    "spc-seed-log": "tests/providers/spc/test_scenario.py",
    "cherry": "tests/providers/cherry/test_scenario.py",
}


@pytest.fixture(scope="module")
def reports():
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = run(load_scenario(EXAMPLES / f"{name}.yaml"), seed=0)
        return cache[name]

    return get


def kinds(report, kind):
    return [d for d in report.decisions if d.kind == kind]


def at(t):
    """A log prefix for virtual time t (seconds)."""
    return f"[{int(t // 3600):02d}:{int(t % 3600 // 60):02d}:{int(t % 60):02d}]"


def test_every_example_is_exercised():
    assert {p.stem for p in EXAMPLES.glob("*.yaml")} == TESTED | set(ELSEWHERE)


def test_burst(reports):
    r = reports("burst")
    ups = kinds(r, "scale-up")
    # 4-cpu node minus kube-proxy (100m) = 3.9 cpu -> 3 pods of 1 cpu; 40 pods, 3 fit the existing
    # node -> 37 pending -> ceil(37/3) = 13 nodes; general may grow 1 -> 8: capped to +7
    assert (ups[0].t, ups[0].group, ups[0].delta) == (60.0, "general", 7)
    assert ups[0].inputs["estimated"] == 13 and ups[0].inputs["max_size"] == 8
    first_loop = [line for line in r.log if line.startswith(at(60))]
    assert any("Estimated 13 nodes needed in general" in line for line in first_loop)
    assert any("Capping size to MAX (8)" in line for line in first_loop)
    # next loop: 7 upcoming nodes x 3 = 21 pods absorbed, 16 left; general is at max, so highmem
    # (8 cpu - 100m = 7.9 -> 7 pods per node): ceil(16/7) = 3
    assert (ups[1].t, ups[1].group, ups[1].delta) == (70.0, "highmem", 3)
    assert ups[1].inputs["skipped_groups"]["general"] == "max limit reached"
    assert len(ups) == 2
    # pods leave at 15m; every added node is empty from then on and goes after 10m unneeded
    downs = kinds(r, "scale-down")
    assert sorted(d.node for d in downs) == [f"general-{i}" for i in range(7)] + [
        f"highmem-{i}" for i in range(3)
    ]
    assert {(d.t, d.reason, d.inputs["unneeded_for"]) for d in downs} == {(1500.0, "empty", 600.0)}
    assert r.rpc_counts["autoscaler"]["NodeGroupDeleteNodes"] == 10  # one node per call, like CA
    nodes = r.timeline["nodes"]
    assert min(nodes["general"]) == 1 and max(nodes["general"]) == 8 and nodes["general"][-1] == 1
    assert max(nodes["highmem"]) == 3 and nodes["highmem"][-1] == 0
    # 1 node x 40m + 7 x (63s..25m) + 3 x (~2m..25m), at 0.20/h and 0.50/h: priced via the RPC
    assert r.cost is not None and set(r.cost["per_group"]) == {"general", "highmem"}


def test_gpu_pods_grow_only_the_gpu_pool(reports):
    r = reports("gpu-pool")
    ups = kinds(r, "scale-up")
    # 2 pods x 1 GPU, 1 GPU per node -> 2 gpu nodes; the 6 web pods (3 cpu) fit the general node
    assert [(d.group, d.delta) for d in ups] == [("gpu", 2)]
    downs = kinds(r, "scale-down")
    assert sorted(d.node for d in downs) == ["gpu-0", "gpu-1"]
    # per-group unneeded time from NodeGroupGetOptions: 5m instead of CA's 10m
    assert {d.inputs["unneeded_time"] for d in downs} == {300.0}
    assert {d.inputs["unneeded_for"] for d in downs} == {300.0}
    assert r.rpc_counts["autoscaler"]["NodeGroupGetOptions"] > 0
    assert r.timeline["nodes"]["general"] == [1] * len(r.timeline["t"])
    assert r.summary["jobs_completed"] == 2


GPU_CLOUD = {
    "provisioning_delay": 60,
    "groups": [
        {"id": "general", "min_size": 0, "max_size": 5, "capacity": {"cpu": "4", "memory": "16Gi"}},
        {
            "id": "gpu",
            "min_size": 0,
            "max_size": 3,
            "capacity": {"cpu": "8", "memory": "32Gi"},
            "gpu": {"count": 1},
            "taints": [{"key": "nvidia.com/gpu", "value": "present"}],
        },
    ],
}


def test_tainted_pool_is_used_only_by_tolerating_pods():
    s = parse_scenario(
        {
            "name": "taints",
            "duration": "3m",
            "cloud": GPU_CLOUD,
            "workloads": [
                # wants a GPU but does not tolerate the taint: no group can help
                {"name": "careless", "replicas": 1, "requests": {"cpu": "1", "nvidia.com/gpu": "1"}},
                # plain pods: only general (the gpu pool's taint repels them)
                {"name": "plain", "replicas": 3, "requests": {"cpu": "1", "memory": "1Gi"}},
            ],
        }
    )
    r = run(s)
    assert [(d.group, d.delta) for d in kinds(r, "scale-up")] == [("general", 1)]
    assert r.timeline["nodes"]["gpu"][-1] == 0
    assert r.timeline["pending"][-1] == 1  # the careless pod stays pending
    reasons = [d.inputs["skipped_groups"] for d in kinds(r, "no-scale-up")]
    assert any("untolerated taint {nvidia.com/gpu=present:NoSchedule}" in g.get("gpu", "") for g in reasons)


def test_stockout_backs_off_and_the_expander_picks_another_group(reports):
    r = reports("priority")
    ups = kinds(r, "scale-up")
    # 14 pods x 1.5 cpu / 3Gi; spot-c8 (8 cpu / 16Gi) holds 5 -> ceil(14/5) = 3 nodes, waste
    # 3/24 + 6/48 = 0.25; spot-c4 holds 2 -> 7 nodes, waste 7/28 + 70/112 = 0.875; both spot pools
    # have priority 50, on-demand 10 -> spot-c8
    assert (ups[0].group, ups[0].delta, ups[0].t) == ("spot-c8", 3, 120.0)
    failed = kinds(r, "scale-up-failed")
    # spot-c8 stocks out after 2 machines: the third fails with class 1 (OutOfResource)
    assert [(d.group, d.reason, d.delta) for d in failed] == [("spot-c8", "OutOfResource.STOCKOUT", -1)]
    assert failed[0].inputs["backoff_until"] == failed[0].t + 300  # initial backoff 5m
    # the same loop, spot-c8 is skipped as backed off and spot-c4 takes the 4 pods left (2 per node)
    assert (ups[1].group, ups[1].delta, ups[1].t) == ("spot-c4", 2, failed[0].t)
    assert ups[1].inputs["skipped_groups"]["spot-c8"].startswith("backed off (OutOfResource.STOCKOUT")
    assert all(d.group != "on-demand" for d in ups)
    assert r.timeline["nodes"]["spot-c8"][-1] == 2 and r.timeline["nodes"]["spot-c4"][-1] == 2
    assert r.timeline["pending"][-1] == 0


def test_scale_to_zero_and_back(reports):
    r = reports("scale-to-zero")
    ups = kinds(r, "scale-up")
    # 6 pods x 2 cpu, 2 per 4-cpu node -> 3 nodes, twice (at 5m and at 1h)
    assert [(d.t, d.group, d.delta, d.inputs["target_before"]) for d in ups] == [
        (300.0, "batch", 3, 0),
        (3600.0, "batch", 3, 0),
    ]
    downs = kinds(r, "scale-down")
    assert len(downs) == 6 and {d.group for d in downs} == {"batch"}
    batch = r.timeline["nodes"]["batch"]
    t = r.timeline["t"]
    assert batch[t.index(3000.0)] == 0 and max(batch) == 3 and batch[-1] == 0
    # with no real node the template came from the server
    assert r.rpc_counts["autoscaler"]["NodeGroupTemplateNodeInfo"] > 0
    assert r.summary["jobs_completed"] == 12


@pytest.mark.slow
def test_diurnal_day(reports):
    r = reports("diurnal")
    ups = kinds(r, "scale-up")
    downs = kinds(r, "scale-down")
    # all growth happens on the morning ramp, all shrinking from the afternoon on
    assert ups and all(6 * 3600 <= d.t <= 11 * 3600 for d in ups)
    assert downs and all(d.t >= 14 * 3600 for d in downs)
    assert sum(d.delta for d in ups) == len(downs)  # back to where it started
    nodes = r.timeline["nodes"]["general"]
    assert min(nodes) == 2 and nodes[-1] == 2  # never below min_size 2
    # drained nodes' pods are rescheduled without triggering a new scale-up afterwards
    assert all(d.t < downs[0].t for d in ups)
    assert r.rpc_counts["autoscaler"]["NodeGroupDeleteNodes"] == len(downs)


def test_same_seed_same_report_and_seed_drives_random():
    s = load_scenario(EXAMPLES / "burst.yaml")
    assert run(s, seed=5).to_json() == run(s, seed=5).to_json()
    twins = parse_scenario(
        {
            "name": "twins",
            "duration": "20s",
            "autoscaler": {"expander": "random"},
            "cloud": {
                "groups": [
                    {
                        "id": f"pool-{c}",
                        "min_size": 0,
                        "max_size": 5,
                        "capacity": {"cpu": "4", "memory": "16Gi"},
                    }
                    for c in "abcd"
                ]
            },
            "workloads": [{"name": "w", "replicas": 2, "requests": {"cpu": "1"}}],
        }
    )
    chosen = {run(twins, seed=seed).of_kind("scale-up")[0].group for seed in range(8)}
    assert len(chosen) > 1


def test_write_report_files(reports, tmp_path):
    r = reports("gpu-pool")
    notes = r.write(tmp_path)
    assert (tmp_path / "report.json").read_text() == r.to_json()
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "matplotlib is not installed" in notes[-1]
    else:
        assert (tmp_path / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def three_nodes(min_size):
    return {
        "groups": [
            {
                "id": "g",
                "min_size": min_size,
                "max_size": 5,
                "initial_size": 3,
                "capacity": {"cpu": "4", "memory": "16Gi"},
            },
        ]
    }


PACKED = [
    {"name": "big", "replicas": 2, "requests": {"cpu": "3", "memory": "1Gi"}},
    {"name": "small", "replicas": 1, "requests": {"cpu": "1", "memory": "1Gi"}},
]


def test_scale_down_removes_exactly_the_underutilized_node_after_the_unneeded_time():
    # the scheduler spreads (LeastAllocated): big-0 -> g-0, big-1 -> g-1, small-0 -> g-2.
    # g-0 and g-1: 3/4 = 0.75 > 0.5 (needed); g-2: 1/4 = 0.25 and its 1-cpu pod fits the 1 cpu
    # left on g-0 -> unneeded from t=0, removed at t=600 (scale-down-unneeded-time 10m)
    r = run(parse_scenario({"name": "pack", "duration": "15m", "cloud": three_nodes(1), "workloads": PACKED}))
    downs = kinds(r, "scale-down")
    assert [(d.t, d.node, d.reason, d.inputs["pods_rescheduled"]) for d in downs] == [
        (600.0, "g-2", "underutilized", ["small-0"])
    ]
    assert downs[0].inputs["utilization"] == 0.25
    assert [d.node for d in kinds(r, "node-unneeded")] == ["g-2"]
    assert r.timeline["nodes"]["g"][-1] == 2
    assert r.timeline["pending"][-1] == 0  # small-0 was rescheduled (onto g-0's or g-1's last cpu)
    assert not kinds(r, "scale-up")


def test_scale_down_never_goes_below_min_size():
    r = run(parse_scenario({"name": "pack", "duration": "15m", "cloud": three_nodes(3), "workloads": PACKED}))
    assert not kinds(r, "scale-down") and not kinds(r, "node-unneeded")
    assert r.timeline["nodes"]["g"] == [3] * len(r.timeline["t"])


def test_unregistered_node_is_deleted_and_the_group_backed_off():
    s = parse_scenario(
        {
            "name": "slow",
            "duration": "16m",
            "cloud": {
                "provisioning_delay": 1500,
                "groups": [
                    {"id": "slow", "min_size": 0, "max_size": 5, "capacity": {"cpu": "4", "memory": "16Gi"}},
                    {"id": "backup", "min_size": 0, "max_size": 5, "capacity": {"cpu": "4", "memory": "8Gi"}},
                ],
            },
            "autoscaler": {"expander": "priority"},
            "priorities": {20: ["slow"], 10: ["backup"]},
            "workloads": [{"name": "w", "replicas": 3, "requests": {"cpu": "1"}}],
        }
    )
    r = run(s)
    # the machine never boots within max-node-provision-time (15m): the scale-up request times out
    # at 900 s (backoff), the instance (first listed at 10 s) is deleted as unregistered at 910 s,
    # and the same loop scales the lower-priority group instead
    assert [(d.t, d.group) for d in kinds(r, "scale-up-timeout")] == [(900.0, "slow")]
    assert [(d.t, d.group) for d in kinds(r, "delete-unregistered")] == [(910.0, "slow")]
    ups = kinds(r, "scale-up")
    assert [(d.t, d.group, d.delta) for d in ups] == [(0.0, "slow", 1), (910.0, "backup", 1)]
    assert ups[1].inputs["skipped_groups"]["slow"].startswith("backed off (timeout")


def test_price_expander_through_the_pricing_rpcs():
    s = parse_scenario(
        {
            "name": "price",
            "duration": "20s",
            "cloud": {
                "groups": [
                    {
                        "id": "system",
                        "min_size": 1,
                        "max_size": 1,
                        "initial_size": 1,
                        "capacity": {"cpu": "2", "memory": "8Gi"},
                        "price_per_hour": 0.10,
                    },
                    {
                        "id": "small",
                        "min_size": 0,
                        "max_size": 5,
                        "capacity": {"cpu": "2", "memory": "8Gi"},
                        "labels": {"pool": "work"},
                        "price_per_hour": 0.10,
                    },
                    {
                        "id": "large",
                        "min_size": 0,
                        "max_size": 5,
                        "capacity": {"cpu": "8", "memory": "32Gi"},
                        "labels": {"pool": "work"},
                        "price_per_hour": 0.50,
                    },
                ]
            },
            "autoscaler": {"expander": "price"},
            "workloads": [
                {
                    "name": "w",
                    "replicas": 4,
                    "requests": {"cpu": "1", "memory": "1Gi"},
                    "node_selector": {"pool": "work"},
                }
            ],
        }
    )
    r = run(s)
    # 1 node in the cluster -> preferred node 1 cpu. Server prices (cheapest dominant share):
    # stabilization pod 500m/500Mi = 0.25 of a 2-cpu $0.10 node = 0.025; each 1-cpu pod 0.05.
    # small: 2 nodes x 0.10, unfitness max(1/2, 2/1) = 2, suppressed (2-1)(1-tanh(1/15))+1 = 1.9334,
    #        score 1.9334 x (0.2 + 0.025) / (0.2 + 0.025) = 1.93
    # large: 1 node x 0.50, unfitness 8, suppressed 8, score 8 x 0.525 / 0.225 = 18.67 -> small
    assert [(d.group, d.delta) for d in kinds(r, "scale-up")] == [("small", 2)]
    assert any(
        "price: small node price 0.1000x2, pods 0.2000, unfitness 2.000, score 1.933" in line
        for line in r.log
    )
    rpcs = r.rpc_counts["autoscaler"]
    assert rpcs["PricingNodePrice"] == 2  # one per option
    assert rpcs["PricingPodPrice"] == 3  # stabilization pod + one per option's equivalence group


def burst_with(node_groups, expander="least-waste"):
    data = load_scenario(EXAMPLES / "burst.yaml").model_dump(by_alias=True)
    data.update(node_groups=node_groups, duration="2m")
    data["autoscaler"]["expander"] = expander
    return parse_scenario(data)


def test_node_group_bounds_overridden_on_the_autoscaler_side():
    r = run(burst_with({"general": {"max_size": 4}, "ghost": {"max_size": 1}}))
    ups = kinds(r, "scale-up")
    # general may now grow 1 -> 4: +3 (needs 13). Next loop: 3 upcoming x 3 = 9 of the 37 pods are
    # covered, 28 left for highmem at 7 per node -> 4 nodes (its max is 5)
    assert [(d.t, d.group, d.delta) for d in ups] == [(60.0, "general", 3), (70.0, "highmem", 4)]
    assert any("Capping size to MAX (4)" in line for line in r.log)
    assert any("node_groups override for 'ghost' ignored" in line for line in r.log)


def test_override_above_the_server_max_fails_increase_size():
    r = run(burst_with({"general": {"max_size": 20}}, expander="most-pods"))
    # CA now thinks general may reach 20: most-pods prefers general (13 nodes for all 37 pods) over
    # highmem (5 nodes, capped at its max, for 35) and asks for +13; the server's max is 8, so
    # IncreaseSize fails and general is backed off; next loop highmem takes 5 nodes
    errors = kinds(r, "scale-up-error")
    assert [(d.t, d.group, d.delta) for d in errors] == [(60.0, "general", 13)]
    assert "above its max size 8" in errors[0].reason
    assert [(d.t, d.group, d.delta) for d in kinds(r, "scale-up")] == [(70.0, "highmem", 5)]


@pytest.mark.parametrize(
    # the diurnal example simulates a whole day: over ten seconds, so in the slow tier
    "name",
    [pytest.param(n, marks=[pytest.mark.slow]) if n == "diurnal" else n for n in sorted(TESTED)],
)
def test_every_example_timeline_has_all_groups_targets_and_markers(reports, name, tmp_path):
    from cloudprovider_grpc.simulator.report import hmm, marker_events, write_timeline

    r = reports(name)
    tl = r.timeline
    groups = set(tl["groups"])
    # every group the server reports is in the timeline, with a target series as long as time
    assert groups == set(tl["nodes"]) == set(tl["target"]) and groups
    assert all(len(series) == len(tl["t"]) for series in tl["target"].values())
    # every scale-up and scale-down is a marker on its group's panel
    events = marker_events(r.decisions)
    marked = {(g, t, k) for g, evs in events.items() for t, k, _ in evs}
    for d in r.decisions:
        if d.kind in ("scale-up", "scale-down"):
            assert (d.group, d.t, d.kind) in marked
    assert hmm(3600 + 5 * 60) == "1:05" and hmm(70) == "0:01:10"
    pytest.importorskip("matplotlib")
    note = write_timeline(r, tmp_path / "timeline.png")
    assert note.startswith("wrote") and (tmp_path / "timeline.png").read_bytes()[:4] == b"\x89PNG"


def test_marker_labels_merge_nodes_removed_together(reports):
    from cloudprovider_grpc.simulator.report import marker_events

    events = marker_events(reports("burst").decisions)
    assert (60.0, "scale-up", "+7") in events["general"]
    assert (1500.0, "scale-down", "-7: general-0, general-1, general-2 +4 more") in events["general"]
