"""The shipped SPC seed-log scenario reproduces the fork's logged decision through the SPC backend
(our gRPC server -> SPC client -> the bundled emulator over HTTP)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudprovider_grpc.simulator import load_scenario, run

pytestmark = pytest.mark.integration

SCENARIO = Path(__file__).resolve().parents[3] / "examples" / "scenarios" / "spc-seed-log.yaml"
GROUP = "autoscaling-spc755avwe-pool-1"  # the emulated cluster 1's first pool


def test_the_seed_log_decision_96_cpu_on_2_cpu_nodes_capped_at_max_8() -> None:
    scenario = load_scenario(SCENARIO)
    assert scenario.provider == "spc"
    report = run(scenario, emulate=True)
    first = [line for line in report.log if line.startswith("[00:00:00]")]
    assert any(f"Estimated 48 nodes needed in {GROUP}" in line for line in first), first
    assert any("Capping size to MAX (8)" in line for line in first), first
    (up,) = report.of_kind("scale-up")
    assert (up.t, up.group, up.delta) == (0.0, GROUP, 8)
    assert up.inputs["estimated"] == 48 and up.inputs["max_size"] == 8
    # the 8 nodes came from the emulated SPC API and registered; 96 - 8 x 2 pods stay pending
    assert report.timeline["nodes"][GROUP][-1] == 8 and report.timeline["pending"][-1] == 80
    assert report.rpc_counts["autoscaler"]["NodeGroupIncreaseSize"] == 1
    assert report.rpc_counts["autoscaler"]["NodeGroupTemplateNodeInfo"] >= 1
