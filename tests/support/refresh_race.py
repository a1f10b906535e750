"""Two concurrent Refresh callers against a write caller: the target CA reads right after an
accepted IncreaseSize must include the increase, however the two listings interleave.

Used by tests/providers/test_state_version_cases.py (a few hundred tries per shape) and
benchmarks/concurrent_refresh.py (10,000). The sim cloud in-process with real worker threads; each
listing takes a random 0-2 ms, standing in for a cloud's latency, so listings overlap with each other
and with the workers' creations."""

from __future__ import annotations

import contextlib
import random
import threading
import time
from dataclasses import dataclass
from typing import Any

from cloudprovider_grpc.core.errors import ProviderError
from cloudprovider_grpc.providers.contract import NodeRef
from cloudprovider_grpc.providers.machinery.base import GroupProvider
from cloudprovider_grpc.providers.machinery.machines.provider import MachineProvider
from cloudprovider_grpc.providers.machinery.pools.provider import PoolProvider
from cloudprovider_grpc.providers.sim import SimCloud, SimDriver, SimOptions, SimPoolDriver

GROUP = "race"
STEP = 3


@dataclass
class RaceResult:
    tries: int
    low: int
    refreshes: int


def _provider(shape: str, seed: int) -> GroupProvider[Any]:
    options = SimOptions.model_validate(
        {
            "shape": shape,
            "provisioning_delay": 0,
            "deletion_delay": 0,
            "seed": seed,
            "groups": [{"id": GROUP, "min_size": 0, "max_size": 1000, "initial_size": 1}],
        }
    )
    cloud = SimCloud(options)
    driver = SimDriver(cloud) if shape == "machines" else SimPoolDriver(cloud)
    method = "list_machines" if shape == "machines" else "list_pools"
    original = getattr(driver, method)
    rng = random.Random(seed)

    def slow_listing() -> Any:
        listing = original()
        time.sleep(rng.random() * 0.002)  # the listing travels back from the cloud
        return listing

    setattr(driver, method, slow_listing)
    kw: dict[str, Any] = {"concurrency": 4, "seed": seed}
    return MachineProvider(driver, **kw) if shape == "machines" else PoolProvider(driver, **kw)


def run(shape: str, tries: int, seed: int = 22) -> RaceResult:
    """`tries` rounds of: read the target, IncreaseSize(3), read it again (low if it did not grow by
    3), then delete three instances so the group stays small; two threads call Refresh throughout."""
    provider = _provider(shape, seed)
    provider.start()
    stop = threading.Event()
    refreshes = [0, 0]

    def refresher(i: int) -> None:
        while not stop.is_set():
            with contextlib.suppress(ProviderError):
                provider.refresh()
            refreshes[i] += 1

    threads = [threading.Thread(target=refresher, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    low = 0
    try:
        for _ in range(tries):
            before = provider.target_size(GROUP)
            provider.increase_size(GROUP, STEP)
            if provider.target_size(GROUP) < before + STEP:
                low += 1
            ids = [i.id for i in provider.nodes(GROUP)][-STEP:]
            # an instance the cloud dropped meanwhile is refused: the next rounds delete the rest
            with contextlib.suppress(ProviderError):
                provider.delete_nodes(GROUP, [NodeRef(i) for i in ids])
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        provider.stop(2.0)
    return RaceResult(tries, low, sum(refreshes))
