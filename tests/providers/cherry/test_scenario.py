"""The shipped Cherry scenario (examples/scenarios/cherry.yaml) runs as the README prints it: the
simulator against our server on the Cherry backend, talking HTTP to the bundled emulator."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudprovider_grpc.simulator import load_scenario, run

pytestmark = pytest.mark.integration

SCENARIO = Path(__file__).resolve().parents[3] / "examples" / "scenarios" / "cherry.yaml"


def test_cherry_burst_fills_vps_then_metal_and_scales_back_down() -> None:
    report = run(load_scenario(SCENARIO), emulate=True)
    ups = [(d.group, d.delta) for d in report.of_kind("scale-up")]
    assert ups == [("vps", 2), ("metal", 1)]  # vps is capped at its max of 2; the rest goes to metal
    downs = report.of_kind("scale-down")
    assert len(downs) == 2  # every added server but the one vps keeps for its min size
    assert report.timeline["nodes"]["vps"][-1] == 1 and report.timeline["nodes"]["metal"][-1] == 0
    assert report.timeline["pending"][-1] == 0
