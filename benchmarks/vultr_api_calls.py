"""Vultr API calls per simulated cluster-autoscaler loop, and size pushes per IncreaseSize burst.

Runs the Vultr API emulator and our gRPC server (Vultr backend pointed at it) in this process, seeds
one VKE cluster with POOLS autoscaled pools holding NODES nodes in all, then
1. drives the RPCs one CA loop makes (benchmarks/loop_pattern.py, shared by every API-calls
   benchmark) and counts the API calls each phase caused at the emulator. Target: one node-pool list
   per Refresh, none from any other read RPC;
2. fires BURST concurrent NodeGroupIncreaseSize(1) at a pool holding 2 nodes with max 20, ROUNDS
   times, and counts the PATCHes each burst caused. Target: at most 3 per burst, never above max.

    .venv/bin/python benchmarks/vultr_api_calls.py [--pools 10] [--nodes 200] [--loops 5]
        [--burst 50] [--rounds 5]
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import threading
import time
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loop_pattern import one_loop  # noqa: E402

from cloudprovider_grpc.config.settings import Settings  # noqa: E402
from cloudprovider_grpc.emulators.vultr import VultrEmulator  # noqa: E402
from cloudprovider_grpc.emulators.vultr.seed import EmulatorPool  # noqa: E402
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb  # noqa: E402
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc  # noqa: E402
from cloudprovider_grpc.providers.registry import ProviderContext, build_provider  # noqa: E402
from cloudprovider_grpc.server.assembly import start_server  # noqa: E402

TOKEN = "bench-token"
CLUSTER = "00000000-0000-4000-8000-00000000beef"
_ID_RE = re.compile(r"/[0-9a-f]{8}-[0-9a-f-]{27}")


def endpoint(method: str, path: str) -> str:
    return f"{method} {_ID_RE.sub('/{id}', path)}"


def calls_between(emu: VultrEmulator, start: int, end: int | None = None) -> collections.Counter[str]:
    entries = emu.request_log(since=start)
    if end is not None:
        entries = entries[: end - start]
    return collections.Counter(endpoint(e.method, e.path) for e in entries)


def serve(emu: VultrEmulator) -> tuple[object, pb_grpc.CloudProviderStub, grpc.Channel]:
    ctx = ProviderContext(
        env={"VULTR_API_KEY": TOKEN},
        options={"cluster_id": CLUSTER, "api_url": f"http://{emu.address}/", "rate_limit": 1000},
    )
    handle = start_server(
        Settings(address="127.0.0.1:0", metrics_address=""), provider=build_provider("vultr", ctx)
    )
    channel = grpc.insecure_channel(handle.address)
    return handle, pb_grpc.CloudProviderStub(channel), channel


def ca_loops(args: argparse.Namespace) -> bool:
    per_pool = max(1, args.nodes // args.pools)
    specs = [
        EmulatorPool(
            label=f"pool{i}", plan="vc2-4c-8gb", node_quantity=per_pool, min_nodes=1, max_nodes=per_pool + 20
        )
        for i in range(args.pools)
    ]
    emu = VultrEmulator(tokens=[TOKEN], provision_seconds=0, rate_limit_per_s=None).start()
    emu.add_cluster(CLUSTER, specs)
    handle, s, channel = serve(emu)
    s.Refresh(pb.RefreshRequest(), timeout=30)
    startup = calls_between(emu, 0)
    pools = [g.id for g in s.NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups]
    nodes = [
        pb.ExternalGrpcNode(providerID=f"vultr://{n['id']}", name=n["label"],
                            labels={"vke.vultr.com/node-id": n["id"]})
        for pid in pools for n in emu.pool_record(pid)["nodes"]
    ]  # fmt: skip
    # VKE runs the control plane outside the cluster's nodes; a few foreign nodes (not in any pool)
    # stand for nodes CA asks about at several call sites without a cached answer
    foreign = [pb.ExternalGrpcNode(providerID=f"vultr://foreign-{i}", name=f"foreign-{i}") for i in range(3)]

    def read_rpcs(scale_up: bool) -> int:
        return one_loop(s, pools, nodes, foreign=foreign, scale_up=scale_up)

    print(f"Vultr API calls per CA loop: {len(pools)} pools, {len(nodes)} nodes, 1 cluster")
    print(f"startup (the server's first Refresh + one more, catalogue loaded once): {dict(startup)}")
    print(f"{'loop':>4} {'kind':8} {'Refresh API calls':44} {'read RPCs':>9} {'API calls from reads':>20} "
          f"{'Refresh ms':>10}  write-path API calls")  # fmt: skip
    per_refresh, from_reads = [], 0
    for loop in range(args.loops):
        scale_up = loop == args.loops - 1
        mark = emu.log_mark()
        t0 = time.perf_counter()
        s.Refresh(pb.RefreshRequest(), timeout=30)
        refresh_ms = (time.perf_counter() - t0) * 1000
        after = emu.log_mark()
        rpcs = read_rpcs(scale_up)
        reads = calls_between(emu, after)
        writes: collections.Counter[str] = collections.Counter()
        if scale_up:
            wmark = emu.log_mark()
            s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=pools[0], delta=2), timeout=5)
            handle.provider.wait_idle(30)  # type: ignore[attr-defined]
            writes = calls_between(emu, wmark)
        refresh_calls = calls_between(emu, mark, after)
        per_refresh.append(refresh_calls["GET /v2/kubernetes/clusters/{id}/node-pools"])
        from_reads += sum(reads.values())
        kind = "scale-up" if scale_up else "quiet"
        print(f"{loop + 1:>4} {kind:8} {dict(refresh_calls)!s:44} {rpcs:>9} {sum(reads.values()):>20} "
              f"{refresh_ms:>10.1f}  {dict(writes) or '-'}")  # fmt: skip
    ok = all(n == 1 for n in per_refresh) and from_reads == 0
    print(f"node-pool lists per Refresh: {per_refresh}; API calls from read RPCs: {from_reads} -> "
          f"{'target met' if ok else 'TARGET MISSED'}")  # fmt: skip
    channel.close()
    handle.stop(grace=1)  # type: ignore[attr-defined]
    emu.stop()
    return ok


def bursts(args: argparse.Namespace) -> bool:
    emu = VultrEmulator(tokens=[TOKEN], provision_seconds=0, rate_limit_per_s=None).start()
    emu.add_cluster(CLUSTER, [])
    handle, s, channel = serve(emu)
    results = []
    for _ in range(args.rounds):
        [pid] = emu.add_cluster(
            CLUSTER,
            [EmulatorPool(label="burst", plan="vc2-1c-2gb", node_quantity=2, min_nodes=1, max_nodes=20)],
        )
        s.Refresh(pb.RefreshRequest(), timeout=30)
        before = len(emu.patches)
        barrier = threading.Barrier(args.burst)

        def one(pid: str = pid, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            try:
                s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=pid, delta=1), timeout=10)
            except grpc.RpcError as err:
                assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, err

        threads = [threading.Thread(target=one) for _ in range(args.burst)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        handle.provider.wait_idle(30)  # type: ignore[attr-defined]
        sizes = [q for p, q in emu.patches[before:] if p == pid]
        final = emu.pool_record(pid)["node_quantity"]
        results.append((len(sizes), sizes, final))
    print(f"\n{args.burst} concurrent IncreaseSize(1) on a pool of 2 nodes, max 20 ({args.rounds} rounds):")
    for n, sizes, final in results:
        print(f"  PATCHes: {n} {sizes} -> node_quantity {final}")
    ok = all(n <= 3 and final == 20 and max(sizes) <= 20 for n, sizes, final in results)
    most = max(r[0] for r in results)
    print(f"most PATCHes in one burst: {most} -> {'target met' if ok else 'TARGET MISSED'}")
    channel.close()
    handle.stop(grace=1)  # type: ignore[attr-defined]
    emu.stop()
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pools", type=int, default=10)
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--loops", type=int, default=5)
    ap.add_argument("--burst", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    ok = ca_loops(args)
    ok = bursts(args) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
