"""The backends the state-version tests run against, each as a World (tests/support/state_version.py):
the sim cloud in both shapes, and Cherry Servers, Vultr VKE and SPC through their HTTP emulators on
loopback, each on a manual clock with the cloud-side changes the model check may make behind the
provider's back (machines vanishing or appearing, pools resized or relabelled, faults, stock-outs).
"""

from __future__ import annotations

import contextlib
import random
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from cloudprovider_grpc.core.clouderrors import CloudError
from cloudprovider_grpc.emulators import FaultPlan
from cloudprovider_grpc.emulators.cherry import CherryEmulator
from cloudprovider_grpc.emulators.spc import SpcEmulator
from cloudprovider_grpc.emulators.vultr import VultrEmulator
from cloudprovider_grpc.emulators.vultr.seed import EmulatorPool
from cloudprovider_grpc.providers.cherry import make_client
from cloudprovider_grpc.providers.cherry.config import load_config as load_cherry
from cloudprovider_grpc.providers.cherry.driver import CherryDriver
from cloudprovider_grpc.providers.contract import NodeRef
from cloudprovider_grpc.providers.machinery.base import GroupProvider
from cloudprovider_grpc.providers.machinery.machines.provider import MachineProvider
from cloudprovider_grpc.providers.machinery.pools.provider import PoolProvider
from cloudprovider_grpc.providers.registry import NodesSpec, ProviderContext
from cloudprovider_grpc.providers.sim import SimCloud, SimDriver, SimOptions, SimPoolDriver
from cloudprovider_grpc.providers.sim.cloud import FailSpec, SimGroupSpec
from cloudprovider_grpc.providers.spc import make_client as make_spc_client
from cloudprovider_grpc.providers.spc.config import load_config as load_spc
from cloudprovider_grpc.providers.spc.driver import INSTANCE_ID_LABEL, NODE_GROUP_LABEL, ROLE_LABEL, SpcDriver
from cloudprovider_grpc.providers.vultr import make_client as make_vultr_client
from cloudprovider_grpc.providers.vultr.config import load_config as load_vultr
from cloudprovider_grpc.providers.vultr.driver import LABEL_NODE_ID, LABEL_POOL, VultrDriver
from tests.support.servers import ManualClock
from tests.support.state_version import World


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
