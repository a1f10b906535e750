"""The simulator on the sim cloud's pool mode (the shape of VKE, Exoscale and ESS): CA decides the
same things whichever shape serves the groups, since the shapes differ only in who owns the size.
CA reads a group only through its target size and instances (`clusterstate/clusterstate.go`), so its
decisions cannot depend on the shape."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudprovider_grpc.simulator import load_scenario, run

pytestmark = pytest.mark.integration

SCENARIOS = Path(__file__).resolve().parents[2] / "examples" / "scenarios"


def _decisions(name: str) -> list[tuple[str, str, int, str]]:
    report = run(load_scenario(SCENARIOS / name), seed=0)
    return [
        (d.kind, d.group, d.delta, d.node) for d in report.decisions if d.kind in ("scale-up", "scale-down")
    ]


def test_burst_on_pool_mode_makes_the_same_decisions_as_on_machine_mode() -> None:
    pools = _decisions("burst-pools.yaml")
    assert pools == _decisions("burst.yaml")
    ups = [(g, n) for kind, g, n, _ in pools if kind == "scale-up"]
    assert ups == [("general", 7), ("highmem", 3)]
    assert sum(1 for kind, *_ in pools if kind == "scale-down") == 10
