"""What the state version costs: the comparison at the end of every Refresh, for a large cluster.

    .venv/bin/python benchmarks/state_version_cost.py [--groups 1000] [--nodes-per-group 15] [--rounds 30]

The sim cloud in-process (as benchmarks/rpc_latency.py sizes it: 1,000 groups of 15 nodes, each
group with an option override), in both shapes. For each, the median over `rounds` of: a whole
steady-state Refresh; the full publish alone (what Refresh adds: comparing targets, options, the
node index and the group set with what was last published, plus the comparison of the rebuilt
node index with the previous one); the one-group publish a write RPC or
a background step pays. Prints figures; asserts nothing (performance is not tested).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from cloudprovider_grpc.providers.machinery.base import GroupProvider
from cloudprovider_grpc.providers.machinery.machines.provider import MachineProvider
from cloudprovider_grpc.providers.machinery.pools.provider import PoolProvider
from cloudprovider_grpc.providers.sim import SimCloud, SimDriver, SimOptions, SimPoolDriver


def median_ms(call: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000.0


def build(shape: str, groups: int, per_group: int) -> GroupProvider[Any]:
    options = SimOptions.model_validate(
        {
            "shape": shape,
            "provisioning_delay": 0,
            "groups": [
                {
                    "id": f"pool-{i:04d}",
                    "max_size": per_group * 2,
                    "initial_size": per_group,
                    "options": {"scale_down_unneeded_time": 300.0},
                }
                for i in range(groups)
            ],
        }
    )
    cloud = SimCloud(options)
    if shape == "machines":
        return MachineProvider(SimDriver(cloud), inline_workers=True)
    return PoolProvider(SimPoolDriver(cloud), inline_workers=True)


def measure(shape: str, groups: int, per_group: int, rounds: int) -> tuple[float, float, float]:
    """(Refresh ms, what the version adds to it in ms, one-group publish in microseconds)."""
    provider = build(shape, groups, per_group)
    provider.start()
    provider.refresh()
    version = provider.state_version()
    refresh = median_ms(provider.refresh, rounds)
    assert provider.state_version() == version, "a steady-state Refresh moved the version"

    def full() -> None:
        with provider.core.lock:
            provider.core.version.publish()

    def one() -> None:
        with provider.core.lock:
            provider.core.version.publish(["pool-0500"])

    # Refresh's reindex also compares the rebuilt node index with the previous one
    by_id, by_name = dict(provider.core.index.by_id), dict(provider.core.index.by_name)

    def index_compare() -> bool:
        return by_id != provider.core.index.by_id or by_name != provider.core.index.by_name

    added = median_ms(full, rounds) + median_ms(index_compare, rounds)
    scoped = median_ms(one, rounds * 10) * 1000.0
    provider.stop(1.0)
    return refresh, added, scoped


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--nodes-per-group", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    print(f"{args.groups} groups x {args.nodes_per_group} nodes, median of {args.rounds} rounds")
    print(
        f"{'shape':<10} {'Refresh ms':>11} {'version adds ms':>16} {'share':>7} {'one-group publish us':>21}"
    )
    for shape in ("machines", "pools"):
        refresh, added, scoped = measure(shape, args.groups, args.nodes_per_group, args.rounds)
        print(f"{shape:<10} {refresh:>11.1f} {added:>16.2f} {added / refresh:>7.1%} {scoped:>21.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
