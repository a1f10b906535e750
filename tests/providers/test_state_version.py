"""The state version (contract.state_version / watch_state) of the shared machinery.

A front may serve NodeGroupTargetSize, NodeGroupForNode and NodeGroupGetOptions (and NodeGroups)
from a cache valid for one version, so the version must move whenever one of those answers could
change, and should stay put otherwise (above all across steady-state Refreshes).

1. A model check: random sequences of RPCs, Refreshes, background job runs, time passing, changes
   made in the cloud behind our back and injected failures, against the sim cloud in both shapes and
   against Cherry Servers and Vultr VKE through their HTTP emulators on loopback. After every step:
   if the version did not move, every answer is what it was before the step; every move was reported
   to the watcher, once per version, in order. A failure names the seed and the steps that led to it.
2. Steady state: Refreshes with nothing changed leave the version alone.
3. Real worker threads: a background step that changes an answer reports a newer version from the
   worker thread.

The answers are read from the provider itself (what the service encodes and a front would cache);
the clouds answer over real HTTP.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import random
import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from cloudprovider_grpc.core.clouderrors import CloudError
from cloudprovider_grpc.core.errors import ProviderError
from cloudprovider_grpc.emulators import EmulatorServer, FaultPlan
from cloudprovider_grpc.emulators.cherry import CherryEmulator
from cloudprovider_grpc.emulators.spc import SpcEmulator
from cloudprovider_grpc.emulators.vultr import VultrEmulator
from cloudprovider_grpc.emulators.vultr.seed import EmulatorPool
from cloudprovider_grpc.providers.cherry import make_client
from cloudprovider_grpc.providers.cherry.config import load_config as load_cherry
from cloudprovider_grpc.providers.cherry.driver import CherryDriver
from cloudprovider_grpc.providers.contract import AutoscalingOptions, NodeRef
from cloudprovider_grpc.providers.driver import CONTROL_PLANE_LABELS, DriverBase
from cloudprovider_grpc.providers.machinery.base import GroupProvider
from cloudprovider_grpc.providers.machinery.machines.provider import MachineProvider
from cloudprovider_grpc.providers.machinery.pools.provider import PoolProvider
from cloudprovider_grpc.providers.registry import BACKENDS, NodesSpec, ProviderContext, build_provider
from cloudprovider_grpc.providers.sim import SimCloud, SimDriver, SimOptions, SimPoolDriver
from cloudprovider_grpc.providers.sim.cloud import FailSpec, SimGroupSpec
from cloudprovider_grpc.providers.spc import make_client as make_spc_client
from cloudprovider_grpc.providers.spc.config import load_config as load_spc
from cloudprovider_grpc.providers.spc.driver import INSTANCE_ID_LABEL, NODE_GROUP_LABEL, ROLE_LABEL, SpcDriver
from cloudprovider_grpc.providers.vultr import make_client as make_vultr_client
from cloudprovider_grpc.providers.vultr.config import load_config as load_vultr
from cloudprovider_grpc.providers.vultr.driver import LABEL_NODE_ID, LABEL_POOL, VultrDriver
from tests.support import refresh_race
from tests.support.servers import ManualClock

pytestmark = pytest.mark.integration

#: seeds of the model check; STATE_VERSION_SEEDS="1,2,3" explores more
SEEDS = [int(s) for s in os.environ.get("STATE_VERSION_SEEDS", "1").split(",")]
STEPS = 300
NO_GROUP = "no-such-group"
NEVER = "never-seen"  # the probe value standing for every value not seen yet (see observe)
DEFAULTS = (
    AutoscalingOptions(),
    AutoscalingOptions(scale_down_unneeded_time=42.0, max_node_provision_time=7.0),
)
CONTROL_PLANE = {CONTROL_PLANE_LABELS[1]: ""}

Key = tuple[str, str]


@dataclass
class World:
    """One backend under test: its provider on a manual clock (workers inline), the cloud-side
    actions the model check may take, and how to build the label-only nodes it probes."""

    name: str
    provider: GroupProvider[Any]
    clock: ManualClock
    cloud_actions: dict[str, Callable[[random.Random], None]] = field(default_factory=dict)
    #: extra probe kinds: kind -> (values seen so far, how a node of that kind is built)
    label_probes: dict[str, tuple[Callable[[], set[str]], Callable[[str], NodeRef]]] = field(
        default_factory=dict
    )
    emulator: EmulatorServer | None = None
    #: a Refresh of a second caller, listed but not applied yet (see HeldRefresh)
    held: list[HeldRefresh] = field(default_factory=list)
    #: where that Refresh pauses: after its listing, or before it where the driver's listing itself
    #: replaces what the label fallbacks read (the version moves when the listing is applied, a few
    #: lines later; a pause in between would show answers changed under an unchanged version)
    hold_after_listing: bool = True

    def stop(self) -> None:
        while self.held:
            self.held.pop().release()
        self.provider.stop(1.0)
        if self.emulator is not None:
            self.emulator.stop()


# ---------------------------------------------------------------------------------- observing


def _answer(fn: Callable[[], object]) -> object:
    try:
        return ("ok", fn())
    except ProviderError as exc:  # the kind only: messages name the id asked about
        return ("error", type(exc).__name__)


def _node(kind: str, value: str) -> NodeRef:
    if kind == "id":
        return NodeRef(value)
    if kind == "name":
        return NodeRef("", value)
    if kind == "control-plane":
        return NodeRef(value, value, labels=CONTROL_PLANE)
    raise AssertionError(kind)


@dataclass
class Probes:
    """Everything asked after each step; sets only grow, so a value once seen is asked forever."""

    values: dict[str, set[str]] = field(default_factory=dict)

    def gather(self, world: World) -> None:
        p = world.provider
        with p._lock:
            ids = set(p._by_id)
            names = set(p._by_name)
            for gid in list(p._groups):
                ids.update(i.id for i in p.nodes(gid))
            groups = {g.id for g in p.node_groups()}
        for kind, new in (("id", ids), ("name", names), ("control-plane", ids), ("group", groups)):
            self.values.setdefault(kind, set()).update(new)
        for kind, (seen, _) in world.label_probes.items():
            self.values.setdefault(kind, set()).update(seen())


def observe(world: World, probes: Probes) -> dict[Key, object]:
    """Every versioned answer for every probe, plus one probe per kind for a value never seen
    (NEVER): a value first seen after a step answered before it exactly as NEVER did."""
    p = world.provider
    out: dict[Key, object] = {("node-groups", ""): tuple(p.node_groups())}
    for gid in [*probes.values.get("group", ()), NO_GROUP, NEVER]:
        out[("target", gid)] = _answer(partial(p.target_size, gid))
        for i, defaults in enumerate(DEFAULTS):
            out[(f"options{i}", gid)] = _answer(partial(p.options, gid, defaults))
    for kind in ("id", "name", "control-plane"):
        for value in [*probes.values.get(kind, ()), NEVER]:
            out[(kind, value)] = p.node_group_for_node(_node(kind, value))
    for kind, (_, make) in world.label_probes.items():
        for value in [*probes.values.get(kind, ()), NEVER]:
            out[(kind, value)] = p.node_group_for_node(make(value))
    return out


def _before(before: dict[Key, object], key: Key) -> object:
    if key in before:
        return before[key]
    kind = key[0]
    return before[(kind, NEVER)]


class HeldRefresh:
    """A Refresh by a second caller, on its own thread, paused between its listing and applying it:
    what two concurrent Refresh callers do when the older listing comes back last. `release()`
    lets it apply and waits for it."""

    def __init__(self, provider: GroupProvider[Any], *, after_listing: bool = True) -> None:
        self.listed = threading.Event()
        self._go = threading.Event()
        self.error: BaseException | None = None
        method = "list_machines" if isinstance(provider, MachineProvider) else "list_pools"
        driver = provider.driver
        original = getattr(driver, method)

        def held() -> Any:
            setattr(driver, method, original)  # only this caller's listing is held
            if not after_listing:  # numbered (as started) now, listed at release: newer data, older number
                self.listed.set()
                self._go.wait(30)
                return original()
            try:
                return original()
            finally:
                self.listed.set()
                self._go.wait(30)

        setattr(driver, method, held)
        self._thread = threading.Thread(target=self._run, args=(provider,), daemon=True)
        self._thread.start()
        if not self.listed.wait(30):
            raise AssertionError("the held Refresh never listed")

    def _run(self, provider: GroupProvider[Any]) -> None:
        try:
            provider.refresh()
        except ProviderError as exc:
            self.error = exc
        finally:
            self.listed.set()  # a Refresh that failed before listing

    def release(self) -> None:
        self._go.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "the held Refresh did not finish"


# ---------------------------------------------------------------------------------- the model check


def _groups(p: GroupProvider[Any]) -> list[str]:
    return [g.id for g in p.node_groups()]


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
        p._jobs.run_due()  # background steps without a Refresh

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


def sim_world(shape: str, seed: int) -> World:
    clock = ManualClock()
    options = SimOptions.model_validate(
        {
            "shape": shape,
            "provisioning_delay": 30,
            "deletion_delay": 5,
            "seed": seed,
            "groups": [
                {"id": "a", "min_size": 1, "max_size": 6, "initial_size": 2},
                {"id": "b", "min_size": 0, "max_size": 4, "options": {"scale_down_unneeded_time": 60.0}},
            ],
        }
    )
    cloud = SimCloud(options, clock=clock)
    kw: dict[str, Any] = {"clock": clock, "inline_workers": True, "seed": seed, "failed_ttl": 300.0}
    provider: GroupProvider[Any] = (
        MachineProvider(SimDriver(cloud), max_attempts=3, **kw)
        if shape == "machines"
        else PoolProvider(SimPoolDriver(cloud), max_attempts=3, **kw)
    )

    def alive(rng: random.Random) -> list[str]:
        with cloud._lock:
            return sorted(m.id for m in cloud.machines.values() if m.deleted_at is None)

    def vanish(rng: random.Random) -> None:
        ids = alive(rng)
        if ids:
            mid = rng.choice(ids)
            with cloud._lock:
                if rng.random() < 0.5:
                    cloud.machines[mid].deleted_at = clock()  # terminating, then gone
                else:
                    del cloud.machines[mid]  # gone at once

    def elsewhere(rng: random.Random) -> None:
        gid = rng.choice(["a", "b"])
        with cloud._lock:
            if shape == "machines":
                cloud._add(gid, "", clock())  # created with the group's tags by someone else
            else:
                cloud.desired[gid] = rng.randint(0, cloud.groups[gid].max_size)  # resized in the console

    def failures(rng: random.Random) -> None:
        gid = rng.choice(sorted(cloud.groups))
        fail = rng.choice([FailSpec(), FailSpec(stockout_after=rng.randint(0, 3)), FailSpec(error_rate=0.5)])
        with cloud._lock:
            cloud.groups[gid] = cloud.groups[gid].model_copy(update={"fail": fail})
        _sync_options(cloud)

    def reconfigure(rng: random.Random) -> None:
        """The group set and the groups' bounds and options change (the next listing sees it)."""
        gid = rng.choice(["a", "b", "c"])
        with cloud._lock:
            if gid == "c":  # a group that comes and goes
                if "c" in cloud.groups:
                    del cloud.groups["c"]
                else:
                    cloud.groups["c"] = SimGroupSpec(id="c", max_size=3)
                    cloud._counters.setdefault("c", 0)
                    cloud.desired.setdefault("c", 0)
                    cloud.failures.setdefault("c", None)
            elif gid in cloud.groups:
                change: dict[str, Any] = rng.choice(
                    [
                        {"options": {}},
                        {"options": {"scale_down_unneeded_time": rng.choice([60.0, 90.0])}},
                        {"max_size": rng.choice([5, 6, 7])},
                    ]
                )
                cloud.groups[gid] = cloud.groups[gid].model_copy(update=change)
        _sync_options(cloud)

    return World(
        f"sim-{shape}",
        provider,
        clock,
        {"vanish": vanish, "elsewhere": elsewhere, "failures": failures, "reconfigure": reconfigure},
    )


def _sync_options(cloud: SimCloud) -> None:
    """The sim drivers read the group set from `cloud.options`: keep it in line with `cloud.groups`."""
    with cloud._lock:
        cloud.options = cloud.options.model_copy(update={"groups": list(cloud.groups.values())})


CHERRY_TOKEN = "state-version-cherry-token"
CHERRY_PROJECTS = {"pool1": 11, "pool2": 22}


def cherry_world(seed: int, *, threaded: bool = False) -> World:
    clock = ManualClock(start=1_760_000_000.0)
    emu = CherryEmulator(
        tokens={CHERRY_TOKEN: 100},
        projects={pid: 100 for pid in CHERRY_PROJECTS.values()},
        deploy_seconds=30,
        terminate_seconds=5,
        clock=clock,
    ).start()
    ctx = ProviderContext(
        nodes=(NodesSpec(1, 6, "pool1"), NodesSpec(0, 4, "pool2")),
        cluster_name="version",
        env={"CHERRY_AUTH_TOKEN": CHERRY_TOKEN},
        options={
            "api-url": emu.base_url,
            "rate-limit": 1000,
            "retries": 0,  # a fault is one failed call: the machinery's own retries are under test
            "read-timeout": 2.0,
            "global": {
                "project-id": CHERRY_PROJECTS["pool1"],
                "plan": "cloud_vps_4",
                "region": "eu_nord_1",
                "os": "ubuntu_24_04",
            },
            "pools": {"pool2": {"project-id": CHERRY_PROJECTS["pool2"]}},
        },
    )
    config = load_cherry(ctx)
    driver = CherryDriver(config, make_client(config))
    provider = MachineProvider(
        driver,
        clock=clock,
        inline_workers=not threaded,  # threaded: real worker threads, one attempt per operation
        concurrency=2,
        seed=seed,
        failed_ttl=300.0,
        max_attempts=1 if threaded else 3,
    )

    def vanish(rng: random.Random) -> None:
        with emu.lock:
            if emu.servers:
                del emu.servers[rng.choice(sorted(emu.servers))]

    def elsewhere(rng: random.Random) -> None:
        # a server with the pool's tags that we did not ask for (another tool, a human); faults or
        # a stock-out may refuse it, and the model goes on
        with contextlib.suppress(CloudError):
            driver.create_machine(rng.choice(sorted(CHERRY_PROJECTS)), secrets.token_hex(8))

    def break_project(rng: random.Random) -> None:
        with emu.lock:  # pool2's project answers 403 (its listing fails alone), or works again
            emu.projects[CHERRY_PROJECTS["pool2"]] = rng.choice([100, 999])

    def stock(rng: random.Random) -> None:
        emu.set_stock({"*": {"*": rng.choice([0, 1, 100])}})

    def faults(rng: random.Random) -> None:
        plan = FaultPlan(rate=0.3, kinds=("error", "error_after"), seed=rng.randrange(1000))
        emu.set_faults(rng.choice([None, plan]))

    def failed_deploy(rng: random.Random) -> None:
        with emu.lock:
            emu.fail_next_deployments += 1

    return World(
        "cherry",
        provider,
        clock,
        {
            "vanish": vanish,
            "elsewhere": elsewhere,
            "break": break_project,
            "stock": stock,
            "faults": faults,
            "failed-deploy": failed_deploy,
        },
        emulator=emu,
    )


VULTR_TOKEN = "VULTRSTATEVERSIONKEY0123456789ABCDEFG"
VULTR_CLUSTER = "0d5ad1f4-6a7e-4a4e-9a56-3c2b1d0e9f8a"


def vultr_world(seed: int, *, threaded: bool = False) -> World:
    clock = ManualClock(start=1_760_000_000.0)
    emu = VultrEmulator(
        tokens=[VULTR_TOKEN],
        provision_seconds=30,
        page_size=100,
        rate_limit_per_s=None,
        seed=seed,
        clock=clock,
    ).start()
    emu.add_cluster(
        VULTR_CLUSTER,
        (
            EmulatorPool(label="general", plan="vc2-4c-8gb", node_quantity=2, min_nodes=1, max_nodes=6),
            EmulatorPool(label="batch", plan="vc2-2c-4gb", node_quantity=1, min_nodes=1, max_nodes=4),
            EmulatorPool(
                label="system",
                plan="vc2-2c-4gb",
                node_quantity=1,
                min_nodes=1,
                max_nodes=1,
                auto_scaler=False,
            ),
        ),
    )
    ctx = ProviderContext(
        env={"VULTR_API_KEY": VULTR_TOKEN},
        options={
            "api_url": f"http://{emu.address}/",
            "cluster_id": VULTR_CLUSTER,
            "rate_limit": 1000,
            "retries": 0,
            "read_timeout": 2.0,
        },
    )
    config = load_vultr(ctx)
    driver = VultrDriver(config, make_vultr_client(config))
    provider = PoolProvider(
        driver,
        clock=clock,
        inline_workers=not threaded,  # threaded: real worker threads, one attempt per operation
        concurrency=2,
        seed=seed,
        failed_ttl=300.0,
        max_attempts=1 if threaded else 3,
    )

    def pools(autoscaled_only: bool = True) -> list[dict[str, Any]]:
        """The emulator's pools (those with the autoscaler on, if there are any)."""
        every = list(emu.pools.values())
        return [p for p in every if p["auto_scaler"] or not autoscaled_only] or every

    def resize(rng: random.Random) -> None:
        with emu.lock:  # someone changes node_quantity in the console: nodes come or go at random
            pool = rng.choice(pools())
            if rng.random() < 0.5 or len(pool["nodes"]) <= 1:
                emu._grow(pool, 1)
            else:
                pool["nodes"].remove(rng.choice(pool["nodes"]))
                pool["node_quantity"] -= 1

    def vanish(rng: random.Random) -> None:
        with emu.lock:  # a node fails and VKE replaces it: a new id, booting
            pool = rng.choice(pools())
            if pool["nodes"]:
                rng.choice(pool["nodes"]).update(id=emu._uuid(), created=clock())

    def relabel(rng: random.Random) -> None:
        with emu.lock:  # the pool label is what the node-pool label fallback matches
            rng.choice(pools(False))["label"] = rng.choice(["general", "batch", "system", "renamed"])

    def autoscaler(rng: random.Random) -> None:
        with emu.lock:  # turning the autoscaler on or off makes a group appear or disappear
            pool = rng.choice(pools(False))
            pool["auto_scaler"] = rng.random() < 0.6

    def faults(rng: random.Random) -> None:
        plan = FaultPlan(rate=0.3, kinds=("error", "error_after"), seed=rng.randrange(1000))
        emu.set_faults(rng.choice([None, plan]))

    def node_ids() -> set[str]:
        with emu.lock:
            return {n["id"] for p in emu.pools.values() for n in p["nodes"]}

    def labels() -> set[str]:
        with emu.lock:
            return {p["label"] for p in emu.pools.values()}

    return World(
        "vultr",
        provider,
        clock,
        {"resize": resize, "vanish": vanish, "relabel": relabel, "autoscaler": autoscaler, "faults": faults},
        hold_after_listing=False,
        label_probes={
            # nodes CA sends without a providerID: matched by the VKE node-id label, then the pool label
            "vultr-node-id": (node_ids, lambda v: NodeRef("", f"n-{v}", labels={LABEL_NODE_ID: v})),
            "vultr-pool": (labels, lambda v: NodeRef("", f"p-{v}", labels={LABEL_POOL: v})),
        },
        emulator=emu,
    )


SPC_TOKEN = "5f0c3b1e9d2a4c6b8e7f0a1b2c3d4e5f60718293"
SPC_ORG, SPC_CLUSTER = 4, 12


def spc_world(seed: int) -> World:
    """SPC: discovered groups, creations that carry no token (adopted from listings), and the
    instance-id / node-group label fallbacks, whose inputs the driver replaces on every listing."""
    clock = ManualClock(start=1_760_000_000.0)
    emu = SpcEmulator(
        tokens={SPC_TOKEN: {SPC_ORG}},
        draft_seconds=20,
        building_seconds=20,
        provisioned_seconds=10,
        deleting_seconds=10,
        clock=clock,
    ).start()
    emu.seed_demo(SPC_ORG, SPC_CLUSTER)
    ctx = ProviderContext(
        env={
            "CLUSTER_API_TOKEN": SPC_TOKEN,
            "SPC_API_BASE_URL": emu.base_url,
            "ORGANIZATION_ID": str(SPC_ORG),
            "CLUSTER_ID": str(SPC_CLUSTER),
        },
        options={"rate-limit": 1000, "retries": 0, "read-timeout": 2.0},
    )
    config = load_spc(ctx)
    driver = SpcDriver(config, make_spc_client(config), clock=clock)
    provider = MachineProvider(
        driver, clock=clock, inline_workers=True, seed=seed, failed_ttl=300.0, max_attempts=3
    )

    def workers() -> list[dict[str, Any]]:
        return [n for n in emu.nodes.values() if n["role"] == "worker"]

    def vanish(rng: random.Random) -> None:
        with emu.lock:
            if workers():
                del emu.nodes[rng.choice(workers())["pk"]]

    def elsewhere(rng: random.Random) -> None:
        with emu.lock:  # a node added to a pool from SPC's dashboard
            pool = rng.choice(sorted(emu.pools.values(), key=lambda p: p["pk"]))
            emu._new_node(emu.clusters[SPC_CLUSTER], pool, pool["instance_size"])

    def rename(rng: random.Random) -> None:
        with emu.lock:  # what the instance-id label fallback matches changes, the node does not
            if workers():
                node = rng.choice(workers())
                node["instance_id"] = f"{node['instance_id'].split('~')[0]}~{rng.randrange(3)}"

    def pools(rng: random.Random) -> None:
        with emu.lock:  # autoscaling switched on or off, bounds edited: groups come, go, change
            pool = rng.choice(sorted(emu.pools.values(), key=lambda p: p["pk"]))
            pool["autoscaled"] = rng.random() < 0.7
            pool["min_count"], pool["max_count"] = rng.choice([(0, 4), (1, 8), (0, 2)])

    def faults(rng: random.Random) -> None:
        plan = FaultPlan(rate=0.3, kinds=("error", "error_after"), seed=rng.randrange(1000))
        emu.set_faults(rng.choice([None, plan]))

    def failed_build(rng: random.Random) -> None:
        with emu.lock:
            emu.fail_next += 1

    def instance_ids() -> set[str]:
        with emu.lock:
            return {str(n["instance_id"]) for n in emu.nodes.values()}

    def group_ids() -> set[str]:
        with emu.lock:
            return {f"autoscaling-{p['instance_id']}" for p in emu.pools.values()}

    return World(
        "spc",
        provider,
        clock,
        {
            "vanish": vanish,
            "elsewhere": elsewhere,
            "rename": rename,
            "pools": pools,
            "faults": faults,
            "failed-build": failed_build,
        },
        hold_after_listing=False,
        label_probes={
            "spc-instance-id": (instance_ids, lambda v: NodeRef("", "", labels={INSTANCE_ID_LABEL: v})),
            "spc-node-group": (group_ids, lambda v: NodeRef("", "", labels={NODE_GROUP_LABEL: v})),
            "spc-master": (
                instance_ids,
                lambda v: NodeRef("", "", labels={INSTANCE_ID_LABEL: v, ROLE_LABEL: "master"}),
            ),
        },
        emulator=emu,
    )


WORLDS: dict[str, Callable[[int], World]] = {
    "sim-machines": lambda seed: sim_world("machines", seed),
    "sim-pools": lambda seed: sim_world("pools", seed),
    "cherry": cherry_world,
    "vultr": vultr_world,
    "spc": spc_world,
}


@contextmanager
def world(name: str, seed: int) -> Iterator[World]:
    w = WORLDS[name](seed)
    try:
        yield w
    finally:
        w.stop()


# ---------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", sorted(WORLDS))
def test_an_unchanged_version_means_unchanged_answers(name: str, seed: int) -> None:
    with world(name, seed) as w:
        run_model(w, seed)


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
    first = MachineProvider(SimDriver(cloud), clock=first._clock, inline_workers=True, state_file=journal)
    first.start()
    first.increase_size("b", 2)  # accepted, never sent (inline workers run at the next Refresh)
    first.stop(1.0)
    second = MachineProvider(SimDriver(cloud), clock=first._clock, inline_workers=True, state_file=journal)
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
        p._jobs.run_due()  # the creations (or the resize) reach the cloud
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
