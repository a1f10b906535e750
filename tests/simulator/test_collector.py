"""The cyclic collector's pause (collector.py): off inside, its earlier state after, whatever
happens inside; the simulation's run holds it."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from cloudprovider_grpc.simulator import parse_scenario, run
from cloudprovider_grpc.simulator.collector import collector_paused

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _collector_restored() -> Iterator[None]:
    was = gc.isenabled()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


def test_paused_inside_and_enabled_after() -> None:
    gc.enable()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_enabled_again_after_an_exception() -> None:
    gc.enable()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("inside")
    assert gc.isenabled()


def test_a_caller_that_disabled_it_keeps_it_disabled() -> None:
    gc.disable()
    with collector_paused(), collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_a_simulation_runs_with_the_collector_paused_and_restores_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-process run: a loop sees the collector off; it is on again once the report is made."""
    from cloudprovider_grpc.simulator.engine.loop import Simulation

    seen: list[bool] = []
    original = Simulation.run_once

    def spy(self: Simulation, t: float) -> None:
        seen.append(gc.isenabled())
        original(self, t)

    monkeypatch.setattr(Simulation, "run_once", spy)
    gc.enable()
    scenario = parse_scenario(
        {
            "name": "paused",
            "duration": "20s",
            "cloud": {
                "groups": [
                    {"id": "g", "min_size": 0, "max_size": 3, "capacity": {"cpu": "4", "memory": "8Gi"}}
                ]
            },
            "workloads": [{"name": "w", "replicas": 2, "requests": {"cpu": "1", "memory": "1Gi"}}],
        }
    )
    report = run(scenario, transport="in-process")
    assert seen == [False, False, False]
    assert gc.isenabled()
    assert report.summary["loops"] == 3
