"""Exoscale API calls per quiet cluster-autoscaler loop, and RPC latency while operations hang.

Runs the Exoscale API emulator and our gRPC server (Exoscale backend pointed at it) in this process:
one SKS cluster with POOLS nodepools and NODES running instances spread over them. Then:

1. CA loops (Refresh, then the read RPCs of one CA 1.36 loop, benchmarks/loop_pattern.py). The
   emulator's request log says which API calls each phase caused. Target: one cluster listing plus
   one member listing per pool per Refresh, zero from other read RPCs.
2. The emulator holds every operation pending for ten minutes; IncreaseSize, DeleteNodes and a full
   loop of read RPCs are timed (in-tree blocked up to 10 minutes inside IncreaseSize/DeleteNodes).

    .venv/bin/python benchmarks/exoscale_api_calls.py [--pools 10] [--nodes 200] [--loops 5]
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loop_pattern import one_loop  # noqa: E402

from cloudprovider_grpc.config.settings import Settings  # noqa: E402
from cloudprovider_grpc.emulators.exoscale import ExoscaleEmulator  # noqa: E402
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb  # noqa: E402
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc  # noqa: E402
from cloudprovider_grpc.providers.registry import ProviderContext, build_provider  # noqa: E402
from cloudprovider_grpc.server.assembly import start_server  # noqa: E402

KEY, SECRET, ZONE = "EXObenchkey", "bench-secret", "ch-gva-2"


def calls_since(emu: ExoscaleEmulator, mark: int) -> collections.Counter[str]:
    return collections.Counter(emu.operation_of(e.method, e.path) for e in emu.request_log(since=mark))


def fmt(counter: collections.Counter[str]) -> str:
    return ", ".join(f"{op} x{n}" for op, n in sorted(counter.items())) or "none"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pools", type=int, default=10)
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--loops", type=int, default=5)
    args = ap.parse_args()

    emu = ExoscaleEmulator(zone=ZONE, keys={KEY: SECRET}, quota_limit=-1, boot_seconds=0, destroy_seconds=0)
    cid = emu.add_cluster("bench")
    per_pool = [
        args.nodes // args.pools + (1 if i < args.nodes % args.pools else 0) for i in range(args.pools)
    ]
    for i, size in enumerate(per_pool):
        emu.add_nodepool(cid, f"pool{i}", size=size)
    emu.start()
    env = {
        "EXOSCALE_ZONE": ZONE,
        "EXOSCALE_API_KEY": KEY,
        "EXOSCALE_API_SECRET": SECRET,
        "EXOSCALE_API_ENDPOINT": emu.base_url,
        "EXOSCALE_SKS_CLUSTER": "bench",
    }
    provider = build_provider("exoscale", ProviderContext(env=env, options={"rate-limit": 1000}))
    handle = start_server(Settings(address="127.0.0.1:0", metrics_address=""), provider=provider)
    channel = grpc.insecure_channel(handle.address)
    s = pb_grpc.CloudProviderStub(channel)
    timings: dict[str, list[float]] = collections.defaultdict(list)

    def call(name: str, fn, req) -> object:  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        try:
            return fn(req, timeout=5)
        finally:
            timings[name].append(time.perf_counter() - t0)

    def read_rpcs(groups: list[pb.NodeGroup], nodes: list[pb.ExternalGrpcNode]) -> int:
        """The shared CA loop (benchmarks/loop_pattern.py); SKS runs its control plane outside the
        cluster's nodes, so every node is in a nodepool."""
        return one_loop(s, [g.id for g in groups], nodes, timed=lambda rpc, t: timings[rpc].append(t))

    mark = 0
    call("Refresh", s.Refresh, pb.RefreshRequest())
    startup = calls_since(emu, mark)
    groups = list(s.NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups)
    nodes = [
        pb.ExternalGrpcNode(providerID=i.id, name=i.id.removeprefix("exoscale://"))
        for g in groups
        for i in s.NodeGroupNodes(pb.NodeGroupNodesRequest(id=g.id), timeout=5).instances
    ]
    print(f"exoscale: {len(groups)} nodepools, {len(nodes)} nodes, one SKS cluster")
    print(f"server start + first Refresh (quota and instance types included): {fmt(startup)}")
    for loop in range(args.loops):
        mark = emu.log_mark()
        t0 = time.perf_counter()
        call("Refresh", s.Refresh, pb.RefreshRequest())
        refresh_s = time.perf_counter() - t0
        refresh_calls = calls_since(emu, mark)
        mark = emu.log_mark()
        n = read_rpcs(groups, nodes)
        read_calls = calls_since(emu, mark)
        print(
            f"loop {loop + 1}: Refresh {refresh_s * 1000:.1f} ms -> {sum(refresh_calls.values())} API calls "
            f"({fmt(refresh_calls)}); {n} read RPCs -> {sum(read_calls.values())} API calls"
        )

    # --- operations held pending for ten minutes: nothing may wait on them
    emu.hold_operations = 600.0
    timings.clear()
    target = groups[0]
    call(
        "NodeGroupIncreaseSize",
        s.NodeGroupIncreaseSize,
        pb.NodeGroupIncreaseSizeRequest(id=target.id, delta=3),
    )
    deadline = time.monotonic() + 30
    while (
        emu.nodepool_by_name(target.debug.split()[3])["size"] != per_pool[0] + 3
        and time.monotonic() < deadline
    ):
        time.sleep(0.01)
    victim = next(
        n
        for n in nodes
        if s.NodeGroupForNode(pb.NodeGroupForNodeRequest(node=n), timeout=5).nodeGroup.id == target.id
    )
    call(
        "NodeGroupDeleteNodes",
        s.NodeGroupDeleteNodes,
        pb.NodeGroupDeleteNodesRequest(id=target.id, nodes=[victim]),
    )
    for _ in range(args.loops):
        call("Refresh", s.Refresh, pb.RefreshRequest())
        read_rpcs(groups, nodes)
    pending = sum(1 for op in emu.operations.values() if op["state"] == "pending")
    every = [t for ts in timings.values() for t in ts]
    print(f"with {pending} operation(s) held pending for 10 minutes, {len(every)} RPCs:")
    for name in (
        "NodeGroupIncreaseSize",
        "NodeGroupDeleteNodes",
        "Refresh",
        "NodeGroupForNode",
        "NodeGroupTargetSize",
    ):
        ts = timings[name]
        print(
            f"  {name}: n={len(ts)} median {statistics.median(ts) * 1000:.2f} ms, max {max(ts) * 1000:.2f} ms"
        )
    print(f"  slowest RPC of all: {max(every) * 1000:.2f} ms")
    channel.close()
    handle.stop(grace=1)
    emu.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
