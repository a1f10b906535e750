"""The shipped AliCloud scenario, simulated through our server, the AliCloud client and the emulator."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudprovider_grpc.simulator import load_scenario, run

pytestmark = pytest.mark.integration

SCENARIO = Path(__file__).resolve().parents[3] / "examples" / "scenarios" / "alicloud-gpu.yaml"
GENERAL, GPU = "asg-bp1demogeneral000001", "asg-bp1demogpu00000000001"


def test_alicloud_gpu_scenario() -> None:
    r = run(load_scenario(SCENARIO), emulate=True)
    ups = [(d.t, d.group, d.delta) for d in r.decisions if d.kind == "scale-up"]
    # 8 web pods of 1 vCPU: 4 fit the demo general instance (4 vCPU, no daemonsets), 4 more need one
    # more; the 2 GPU pods only fit the tainted GPU group (one T4 each): +2
    assert ups == [(60.0, GENERAL, 1), (120.0, GPU, 2)]
    assert max(r.timeline["nodes"][GPU]) == 2 and max(r.timeline["nodes"][GENERAL]) == 2
    # web ends at 15m, the Job at 17m: everything is empty and goes after 10 minutes unneeded
    downs = [d for d in r.decisions if d.kind == "scale-down"]
    assert sorted(d.group for d in downs) == [GENERAL, GENERAL, GPU, GPU]
    assert r.timeline["nodes"][GENERAL][-1] == 0 and r.timeline["nodes"][GPU][-1] == 0
    assert r.timeline["pending"][-1] == 0
    assert r.rpc_counts["autoscaler"]["NodeGroupIncreaseSize"] == 2
    assert not [d for d in r.decisions if d.kind == "scale-up-error"]
