"""The state version (contract.state_version / watch_state) of the shared machinery: targeted cases.

A front may serve NodeGroupTargetSize, NodeGroupForNode and NodeGroupGetOptions (and NodeGroups)
from a cache valid for one version (the model check in test_state_version_property.py proves the
version moves whenever one of those answers could change). Here:

1. Steady state: Refreshes with nothing changed leave the version alone, in every backend.
2. Every driver declares what its node fallbacks read; a journal restored at start moves the version.
3. Real worker threads: a background step that changes an answer reports a newer version from the
   worker thread.
4. Two Refresh callers: a listing older than the last one applied changes nothing, and an accepted
   IncreaseSize is never read back lower.
"""

from __future__ import annotations

import contextlib
import importlib
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from cloudprovider_grpc.emulators import FaultPlan
from cloudprovider_grpc.emulators.cherry import CherryEmulator
from cloudprovider_grpc.emulators.vultr import VultrEmulator
from cloudprovider_grpc.providers.contract import NodeRef
from cloudprovider_grpc.providers.driver import DriverBase
from cloudprovider_grpc.providers.machinery.base import GroupProvider
from cloudprovider_grpc.providers.machinery.machines.provider import MachineProvider
from cloudprovider_grpc.providers.registry import BACKENDS, ProviderContext, build_provider
from cloudprovider_grpc.providers.sim import SimDriver
from tests.support import refresh_race
from tests.support.state_version import HeldRefresh, Probes, World, _groups, observe
from tests.support.state_version_worlds import WORLDS, cherry_world, sim_world, vultr_world, world

pytestmark = pytest.mark.integration


def _settle(w: World) -> None:
    """Let every boot, deletion, failure hold and tombstone run its course (a deleted machine's
    tombstone outlives it by an hour, and the placeholder of the creation it came from one Refresh
    more)."""
    for _ in range(5):
        w.clock.advance(4000.0)
        w.provider.refresh()


@pytest.mark.parametrize("name", sorted(WORLDS))
def test_refreshes_with_nothing_changed_keep_the_version(name: str) -> None:
    with world(name, 7) as w:
        p = w.provider
        reported: list[int] = []
        p.watch_state(reported.append)
        p.start()
        gid = _groups(p)[0]
        p.increase_size(gid, 2)  # some history first: a creation that lands, then a deletion
        _settle(w)
        victim = next(i for i in p.nodes(gid))
        p.delete_nodes(gid, [NodeRef(victim.id)])
        _settle(w)
        version, calls = p.state_version(), len(reported)
        probes = Probes()
        probes.gather(w)
        answers = observe(w, probes)
        for _ in range(20):
            w.clock.advance(15.0)
            p.refresh()
        assert p.state_version() == version
        assert reported[calls:] == []
        assert observe(w, probes) == answers
        # and the version is not merely stuck: a change in the cloud moves it on the next Refresh
        w.cloud_actions["vanish"](random.Random(0))
        p.refresh()
        assert p.state_version() > version and reported[-1] == p.state_version()


@pytest.mark.parametrize("name", ["alicloud", "exoscale"])
def test_the_other_clouds_keep_the_version_across_refreshes_with_their_bundled_emulator(name: str) -> None:
    """The backends outside the model check, as `serve --provider NAME --emulate` runs them."""
    # the client rate limit (10/s by default) is not under test here
    provider = build_provider(name, ProviderContext(emulate=True, options={"rate-limit": 1000}))
    assert isinstance(provider, GroupProvider)
    reported: list[int] = []
    provider.watch_state(reported.append)
    try:
        provider.start()
        version, calls = provider.state_version(), len(reported)
        for _ in range(5):
            provider.refresh()
        assert provider.state_version() == version and reported[calls:] == []
        gid = next(g.id for g in provider.node_groups() if provider.target_size(g.id) < g.max_size)
        provider.increase_size(gid, 1)
        assert provider.state_version() == version + 1 and reported[calls:] == [version + 1]
    finally:
        provider.stop(1.0)


def test_every_driver_says_what_its_node_fallbacks_read() -> None:
    """A driver that overrides is_control_plane, group_of or machine_of without fallback_version
    is taken to change at every comparison: correct, but nothing it answers could be cached."""
    for module in BACKENDS.values():
        importlib.import_module(module)
    classes, todo = [], [DriverBase]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls.__module__.startswith("cloudprovider_grpc."):
            classes.append(cls)
    overriding = [
        c
        for c in classes
        if any(
            getattr(c, n) is not getattr(DriverBase, n)
            for n in ("is_control_plane", "group_of", "machine_of")
        )
    ]
    assert {c.__name__ for c in overriding} >= {"CherryDriver", "VultrDriver", "SpcDriver", "AliCloudDriver"}
    undeclared = [c.__name__ for c in overriding if c.fallback_version is DriverBase.fallback_version]
    assert undeclared == []


def test_a_journal_restored_at_start_moves_the_version(tmp_path: Path) -> None:
    journal = tmp_path / "state.json"
    first = sim_world("machines", 5).provider
    cloud = first.driver.cloud  # type: ignore[attr-defined]
    first = MachineProvider(SimDriver(cloud), clock=first.core.clock, inline_workers=True, state_file=journal)
    first.start()
    first.increase_size("b", 2)  # accepted, never sent (inline workers run at the next Refresh)
    first.stop(1.0)
    second = MachineProvider(
        SimDriver(cloud), clock=first.core.clock, inline_workers=True, state_file=journal
    )
    reported: list[int] = []
    second.watch_state(reported.append)
    version = second.state_version()
    assert second.target_size("b") == 0
    second.start()
    assert second.target_size("b") == 2
    assert second.state_version() > version and reported[-1] == second.state_version()
    second.stop(1.0)


# ---------------------------------------------------------------------------------- threaded workers


class _Watcher:
    """Records (version, thread name) of every callback; wait() until one matches."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, str]] = []
        self._cond = threading.Condition()

    def __call__(self, version: int) -> None:
        with self._cond:
            self.seen.append((version, threading.current_thread().name))
            self._cond.notify_all()

    def wait_for(self, cond: Callable[[int, str], bool], timeout: float = 10.0) -> tuple[int, str]:
        with self._cond:
            found: list[tuple[int, str]] = []

            def hit() -> bool:
                found[:] = [(v, t) for v, t in self.seen if cond(v, t)]
                return bool(found)

            assert self._cond.wait_for(hit, timeout), f"no such callback; saw {self.seen}"
            return found[0]


REFUSE_DELETES = FaultPlan(rate=1.0, kinds=("error",), error_statuses=(500,), methods=frozenset({"DELETE"}))


def test_a_background_creation_and_a_refused_deletion_report_newer_versions_from_a_worker() -> None:
    with contextlib.closing(_Closing(cherry_world(3, threaded=True))) as closing:
        w, workers = closing.world, "cherry-"  # JobRunner names its threads <backend>-<n>
        p, emu = w.provider, w.emulator
        assert isinstance(emu, CherryEmulator)
        watcher = _Watcher()
        p.watch_state(watcher)
        p.start()
        before = p.state_version()
        p.increase_size("pool1", 2)
        accepted = p.state_version()
        assert accepted > before  # the RPC's own change, reported from the RPC's thread
        assert watcher.seen[-1] == (accepted, threading.current_thread().name)
        # the creations land in workers: the machines become NodeGroupForNode answers
        watcher.wait_for(lambda v, t: v > accepted and t.startswith(workers))
        assert p.wait_idle(10.0)
        machines = [i.id for i in p.nodes("pool1") if "pending" not in i.id]
        assert len(machines) == 2
        assert all(p.node_group_for_node(NodeRef(m)) is not None for m in machines)

        # a deletion the cloud refuses: the worker gives the machine back to the target
        emu.set_faults(REFUSE_DELETES)
        p.delete_nodes("pool1", [NodeRef(machines[0])])
        lowered = p.state_version()
        assert p.target_size("pool1") == 1
        version, _ = watcher.wait_for(lambda v, t: v > lowered and t.startswith(workers))
        assert p.wait_idle(10.0)
        assert p.target_size("pool1") == 2 and p.state_version() >= version


def test_a_removal_the_cloud_refuses_reports_a_newer_version_from_a_worker() -> None:
    with contextlib.closing(_Closing(vultr_world(3, threaded=True))) as closing:
        w, workers = closing.world, "vultr-"
        p, emu = w.provider, w.emulator
        assert isinstance(emu, VultrEmulator)
        watcher = _Watcher()
        p.watch_state(watcher)
        p.start()
        general = emu.pool_id("general")
        emu.set_faults(REFUSE_DELETES)
        victim = f"vultr://{emu.node_ids(general)[0]}"
        p.delete_nodes(general, [NodeRef(victim)])
        lowered = p.state_version()
        assert p.target_size(general) == 1
        w.clock.advance(1.0)  # past the coalescing window: the group's sync job is due
        version, _ = watcher.wait_for(lambda v, t: v > lowered and t.startswith(workers))
        assert p.wait_idle(10.0)
        assert p.target_size(general) == 2 and p.state_version() >= version


@dataclass
class _Closing:
    world: World

    def close(self) -> None:
        self.world.stop()


@pytest.mark.parametrize("shape", ["machines", "pools"])
def test_a_listing_older_than_the_last_one_applied_changes_nothing(shape: str) -> None:
    """Two Refresh callers: the one that listed first comes back last. Applied, its listing (taken
    before an accepted IncreaseSize whose machines the newer listing shows) would drop them, and the
    target CA reads would fall back below what it was just told."""
    with world(f"sim-{shape}", 3) as w:
        p = w.provider
        p.start()
        target = p.target_size("a")
        older = HeldRefresh(p)
        p.increase_size("a", 3)
        p.core.jobs.run_due()  # the creations (or the resize) reach the cloud
        p.refresh()  # the newer listing shows them
        assert p.target_size("a") == target + 3
        version = p.state_version()
        older.release()
        assert older.error is None
        assert p.target_size("a") == target + 3
        assert p.state_version() == version  # nothing was applied
        p.refresh()  # a listing started after the last applied one is applied again
        assert p.target_size("a") == target + 3


@pytest.mark.parametrize("shape", ["machines", "pools"])
def test_two_concurrent_refresh_callers_never_lower_an_accepted_increase(shape: str) -> None:
    """Real threads: two Refresh callers throughout, and the target read right after every accepted
    IncreaseSize(3) includes it. benchmarks/concurrent_refresh.py runs 10,000 tries per shape."""
    result = refresh_race.run(shape, tries=500)
    assert result.refreshes > 2  # the two callers really ran meanwhile
    assert result.low == 0, f"{result.low} of {result.tries} targets read low"
