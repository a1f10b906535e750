"""The shipped Exoscale scenario through the simulator: CA's decisions over our real gRPC server,
the Exoscale backend and its API emulator (examples/scenarios/exoscale-sks.yaml, numbers worked out
in its comments)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudprovider_grpc.simulator import load_scenario, run

pytestmark = pytest.mark.integration

SCENARIO = Path(__file__).resolve().parents[3] / "examples" / "scenarios" / "exoscale-sks.yaml"


def test_sks_nodepool_scales_up_and_back_down_through_the_emulator() -> None:
    r = run(load_scenario(SCENARIO), seed=0, emulate=True)
    ups = r.of_kind("scale-up")
    assert len(ups) == 1 and (ups[0].t, ups[0].delta) == (60.0, 1)
    workers = ups[0].group
    downs = r.of_kind("scale-down")
    assert {d.group for d in downs} == {workers} and {d.t for d in downs} == {1800.0} and len(downs) == 2
    nodes = r.timeline["nodes"]
    assert len(nodes) == 3  # workers, gpu (empty, still a group) and the standalone batch pool
    assert (nodes[workers][0], max(nodes[workers]), nodes[workers][-1]) == (2, 3, 1)
    assert r.timeline["pending"][-1] == 0
    assert r.rpc_counts["autoscaler"]["NodeGroupIncreaseSize"] == 1
    assert r.rpc_counts["autoscaler"]["NodeGroupDeleteNodes"] == 2
