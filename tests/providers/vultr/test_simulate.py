"""The simulator on `provider: vultr` (emulated): the shipped scenario examples/scenarios/vultr-burst.yaml
through our real gRPC server, the pool machinery, the Vultr client and the emulator."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudprovider_grpc.simulator import load_scenario, run

pytestmark = [pytest.mark.integration, pytest.mark.slow]


SCENARIO = Path(__file__).resolve().parents[3] / "examples" / "scenarios" / "vultr-burst.yaml"


def test_vultr_burst_scales_general_up_once_and_back_down() -> None:
    """Numbers worked out in the scenario's comments."""
    report = run(load_scenario(SCENARIO), seed=0, emulate=True)
    assert report.provider == "vultr"
    summary, timeline = report.summary, report.timeline["nodes"]
    [general] = [gid for gid, sizes in timeline.items() if max(sizes) == 6]
    [highmem] = [gid for gid in timeline if gid != general]
    assert max(timeline[highmem]) == 1
    assert summary["decisions"] == {"scale-up": 1, "node-unneeded": 6, "scale-down": 5}
    assert (summary["nodes_added"], summary["nodes_removed"], summary["max_pending_pods"]) == (5, 5, 14)
    assert summary["final_nodes"] == {general: 1, highmem: 1}
    log = "\n".join(report.log)
    assert f"Scale-up: setting group {general} size to 6 instead of 1 (max: 8)" in log
    assert "Skipping" in log and "the node group min size reached" in log
