"""The state version (contract.state_version / watch_state) of the shared machinery: the model check.

A front may serve NodeGroupTargetSize, NodeGroupForNode and NodeGroupGetOptions (and NodeGroups)
from a cache valid for one version, so the version must move whenever one of those answers could
change, and should stay put otherwise. Random sequences of RPCs, Refreshes, background job runs,
time passing, changes made in the cloud behind our back and injected failures, against the sim cloud
in both shapes and against Cherry Servers, Vultr VKE and SPC through their HTTP emulators on
loopback. After every step: if the version did not move, every answer is what it was before the
step; every move was reported to the watcher, once per version, in order. A failure names the seed
and the steps that led to it.

The answers are read from the provider itself (what the service encodes and a front would cache);
the clouds answer over real HTTP. The targeted cases are in test_state_version_cases.py.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable

import pytest

from cloudprovider_grpc.core.errors import ProviderError
from cloudprovider_grpc.providers.contract import NodeRef
from tests.support.state_version import NEVER, NO_GROUP, HeldRefresh, Key, Probes, World, _groups, observe
from tests.support.state_version_worlds import WORLDS, world

pytestmark = pytest.mark.integration

#: seeds of the model check; STATE_VERSION_SEEDS="1,2,3" explores more
SEEDS = [int(s) for s in os.environ.get("STATE_VERSION_SEEDS", "1").split(",")]
STEPS = 300


def _before(before: dict[Key, object], key: Key) -> object:
    if key in before:
        return before[key]
    kind = key[0]
    return before[(kind, NEVER)]


def _rpc_actions(world: World) -> dict[str, Callable[[random.Random], None]]:
    p = world.provider

    def pick_group(rng: random.Random) -> str:
        ids = _groups(p)
        return rng.choice(ids) if ids and rng.random() < 0.95 else NO_GROUP

    def increase(rng: random.Random) -> None:
        p.increase_size(pick_group(rng), rng.choice([1, 1, 2, 3, 0]))

    def decrease(rng: random.Random) -> None:
        p.decrease_target_size(pick_group(rng), -rng.choice([1, 1, 2]))

    def delete(rng: random.Random) -> None:
        gid = pick_group(rng)
        ids = _groups(p)
        pool = [i.id for i in p.nodes(gid)] if gid in ids else []
        if ids and rng.random() < 0.1:  # sometimes a node of another group: nothing is deleted
            other = rng.choice(ids)
            pool += [i.id for i in p.nodes(other)][:1]
        chosen = rng.sample(pool, min(len(pool), rng.choice([1, 1, 2]))) if pool else [NEVER]
        p.delete_nodes(gid, [NodeRef(i) for i in chosen])

    def refresh(rng: random.Random) -> None:
        p.refresh()

    held: list[HeldRefresh] = world.held

    def concurrent_refresh(rng: random.Random) -> None:
        """A second Refresh caller: its listing is taken now and applied at a later step, after
        whatever ran meanwhile (other Refreshes included)."""
        if held:
            held.pop().release()
        else:
            held.append(HeldRefresh(p, after_listing=world.hold_after_listing))

    def jobs(rng: random.Random) -> None:
        p.core.jobs.run_due()  # background steps without a Refresh

    def time_passes(rng: random.Random) -> None:
        world.clock.advance(rng.choice([0.5, 2.0, 10.0, 40.0, 400.0, 700.0]))

    return {
        "increase": increase,
        "decrease": decrease,
        "delete": delete,
        "refresh": refresh,
        "refresh2": refresh,
        "concurrent-refresh": concurrent_refresh,
        "jobs": jobs,
        "time": time_passes,
        "time2": time_passes,
    }


def run_model(world: World, seed: int, steps: int = STEPS) -> None:
    rng = random.Random(seed)
    p = world.provider
    reported: list[int] = []
    p.watch_state(reported.append)
    p.start()
    actions = {**_rpc_actions(world), **world.cloud_actions}
    names = sorted(actions)
    probes = Probes()
    probes.gather(world)
    before = observe(world, probes)
    trail: list[str] = []
    for step in range(steps):
        name = rng.choice(names)
        version, calls = p.state_version(), len(reported)
        try:
            actions[name](rng)
            outcome = "ok"
        except ProviderError as exc:  # refusals and an unreachable cloud are part of the model
            outcome = type(exc).__name__
        after_version = p.state_version()
        trail.append(f"{step}: {name} -> {outcome}, version {version} -> {after_version}")
        where = f"{world.name}, seed {seed}; last steps:\n  " + "\n  ".join(trail[-12:])
        probes.gather(world)
        after = observe(world, probes)
        assert after_version >= version, where
        assert reported[calls:] == list(range(version + 1, after_version + 1)), (
            f"watcher saw {reported[calls:]} for a move {version} -> {after_version}; {where}"
        )
        if after_version == version:
            changed = {k: (_before(before, k), v) for k, v in after.items() if _before(before, k) != v}
            assert not changed, f"answers changed under version {version}: {changed}; {where}"
        before = after
    assert p.state_version() > 1, f"{world.name}: the run never changed anything"


# ---------------------------------------------------------------------------------- worlds


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", sorted(WORLDS))
def test_an_unchanged_version_means_unchanged_answers(name: str, seed: int) -> None:
    with world(name, seed) as w:
        run_model(w, seed)
