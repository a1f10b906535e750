"""The real cluster-autoscaler binary driving our server end to end (issue 13).

Layout (what runs where, to stay in CI's budget):
- every backend of `tests/support/backends.py` with an `e2e_config`, CA 1.36.1: scale-up, named-node
  scale-down, the cloud's failure path (`scenarios.generic`);
- the sim cloud with CA 1.36.1 and master: the full set (`test_sim_full`);
- the sim cloud with CA 1.34.1 (legacy wire fields): scale-up, scale-down, per-group options.
Each test is one CA run through several phases; CA's decisions are read from its own log.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.realca import compare
from tests.realca import scenarios as sc
from tests.realca import workloads as wl
from tests.realca.autoscaler import FAST_FLAGS
from tests.realca.cluster import ControlPlane
from tests.support.backends import BACKENDS, BackendUnderTest, backend

pytestmark = [pytest.mark.realca, pytest.mark.timeout(1800)]

E2E_BACKENDS = [b for b in BACKENDS if b.e2e_config]


@pytest.mark.parametrize("be", E2E_BACKENDS, ids=lambda b: b.name)
def test_backend_end_to_end(control_plane: ControlPlane, be: BackendUnderTest, tmp_path: Path) -> None:
    with sc.run(control_plane, be, "1.36.1", tmp_path) as r:
        try:
            changes = sc.generic(r, be)
        except BaseException:
            print(r.diagnostics())
            raise
        seen = compare.from_ca(r.ca.decisions(), sc.node_groups(r))
    assert seen == [
        ("up", be.e2e_group, 1),
        ("down", {be.e2e_group: 1}),
        ("up", be.stockout_group, 1),
        ("failed", be.stockout_group),
    ], seen
    if be.name == "sim":
        predicted = compare.from_simulator(compare.scenario(be.name, be.e2e_config, FAST_FLAGS, changes))
        assert predicted == seen, f"the simulator predicted {predicted}; CA decided {seen}"


@pytest.mark.parametrize("version", ["1.36.1", "master"])
def test_sim_full(control_plane: ControlPlane, version: str, tmp_path: Path) -> None:
    sim = backend("sim")
    flags = {**FAST_FLAGS, "expander": "price"}
    with sc.run(control_plane, sim, version, tmp_path, config=sc.SIM_FULL_CONFIG, flags=flags) as r:
        try:
            sc.sim_full(r)
        except BaseException:
            print(r.diagnostics())
            raise
        seen = compare.from_ca(r.ca.decisions(), sc.node_groups(r))
    predicted = compare.from_simulator(
        compare.scenario("sim-full", sc.SIM_FULL_CONFIG, flags, sc.SIM_FULL_CHANGES)
    )
    assert predicted == seen, f"the simulator predicted {predicted}; CA {version} decided {seen}"


def test_sim_legacy_134(control_plane: ControlPlane, tmp_path: Path) -> None:
    sim = backend("sim")
    flags = {**FAST_FLAGS, "expander": "price"}
    with sc.run(control_plane, sim, "1.34.1", tmp_path, config=sc.SIM_FULL_CONFIG, flags=flags) as r:
        try:
            sc.sim_legacy(r)
        except BaseException:
            print(r.diagnostics())
            raise
        seen = compare.from_ca(r.ca.decisions(), sc.node_groups(r))
    predicted = compare.from_simulator(
        compare.scenario("sim-legacy", sc.SIM_FULL_CONFIG, flags, sc.SIM_LEGACY_CHANGES)
    )
    assert predicted == seen, f"the simulator predicted {predicted}; CA 1.34.1 decided {seen}"


def test_restart_mid_scale_up(control_plane: ControlPlane, tmp_path: Path) -> None:
    from cloudprovider_grpc.providers.cherry import CherryEmulator

    emulator = CherryEmulator(
        tokens={sc.RESTART_TOKEN: 100},
        projects={sc.RESTART_PROJECT: 100},
        deploy_seconds=2,
        terminate_seconds=1,
    )
    cherry = BackendUnderTest(
        "cherry-restart", ("--provider", "cherry"), extra_env={"CHERRY_AUTH_TOKEN": sc.RESTART_TOKEN}
    )

    def in_cloud() -> int:
        return sum(
            1
            for rec in emulator.server_records(sc.RESTART_PROJECT)
            if rec["tags"].get("k8s-nodepool") == "workers" and rec.get("state") != "terminated"
        )

    with emulator:
        config = sc.restart_config(emulator.base_url)
        with sc.run(
            control_plane, cherry, "1.36.1", tmp_path, config=config, state_file=tmp_path / "journal"
        ) as r:
            try:
                sc.phase_restart_mid_scale_up(r, in_cloud)
            except BaseException:
                print(r.diagnostics())
                raise
            seen = compare.from_ca(r.ca.decisions(), sc.node_groups(r))
    # The simulator has no model of our server restarting (it is our server's resilience, not a CA
    # decision), so it is held to the decision itself: one scale-up of workers by 3.
    predicted = compare.from_simulator(
        compare.scenario(
            "restart",
            "sim: {groups: [{id: workers, max_size: 6, capacity: {cpu: '4', memory: 8Gi}}]}",
            FAST_FLAGS,
            [compare.Change(0, wl.Workload("restart", 3, cpu="2400m", memory="256Mi"), 3)],
        )
    )
    assert predicted == seen == [("up", "workers", 3)], (predicted, seen)
