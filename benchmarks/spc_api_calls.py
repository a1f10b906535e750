"""StackPointCloud API calls per simulated cluster-autoscaler loop, and how long CA waits on us.

Runs the SPC API emulator and our gRPC server (SPC backend pointed at it) in this process, seeds
POOLS autoscaled pools holding NODES running nodes, then drives the RPCs one CA loop makes
(CA's `core/static_autoscaler.go` RunOnce and its callers: Refresh, NodeGroups, NodeGroupForNode per node,
~3 TargetSize per group, ~2 GetOptions per node, NodeGroupNodes for ~G/12 groups, TemplateNodeInfo
per group, GPULabel/GetAvailableGPUTypes) and counts the API calls each phase caused in the
emulator's request log. Target: one pool listing and one node listing per Refresh,
none from any other read RPC. It also prints what the fork made CA wait: IncreaseSize and
DeleteNodes RPC times while every add is answered after --add-delay seconds (the fork blocked up to
20 minutes in IncreaseSize and 60 s in DeleteNodes), and the API calls of a scale-up by 3.

    .venv/bin/python benchmarks/spc_api_calls.py [--pools 10] [--nodes 200] [--loops 5] [--add-delay 2]
"""

from __future__ import annotations

import argparse
import collections
import re
import statistics
import sys
import time
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loop_pattern import one_loop  # noqa: E402

from cloudprovider_grpc.config.settings import Settings  # noqa: E402
from cloudprovider_grpc.emulators import FaultPlan  # noqa: E402
from cloudprovider_grpc.emulators.spc import SpcEmulator  # noqa: E402
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb  # noqa: E402
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc  # noqa: E402
from cloudprovider_grpc.providers.registry import ProviderContext, build_provider  # noqa: E402
from cloudprovider_grpc.server.assembly import start_server  # noqa: E402

TOKEN = "bench-token"
ORG, CLUSTER = 4, 12
_ID_RE = re.compile(r"/\d+")


def endpoint(method: str, path: str) -> str:
    return f"{method} {_ID_RE.sub('/{id}', path)}"


def calls(emu: SpcEmulator, start: int, end: int | None = None) -> collections.Counter[str]:
    entries = emu.request_log(since=start)
    if end is not None:
        entries = entries[: end - start]
    return collections.Counter(endpoint(e.method, e.path) for e in entries)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pools", type=int, default=10)
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--loops", type=int, default=5)
    ap.add_argument(
        "--add-delay", type=float, default=2.0, help="seconds the emulator takes to answer an add"
    )
    args = ap.parse_args()

    emu = SpcEmulator(tokens={TOKEN: {ORG}}, draft_seconds=0, building_seconds=0, provisioned_seconds=0)
    emu.add_cluster(ORG, CLUSTER)
    per_pool = args.nodes // args.pools
    for i in range(args.pools):
        emu.add_pool(
            CLUSTER, name=f"pool {i}", size="m4.large", min_count=0, max_count=args.nodes, running=per_pool
        )
    emu.start()
    env = {
        "CLUSTER_API_TOKEN": TOKEN,
        "SPC_API_BASE_URL": emu.base_url,
        "ORGANIZATION_ID": str(ORG),
        "CLUSTER_ID": str(CLUSTER),
    }
    provider = build_provider("spc", ProviderContext(env=env, options={"rate-limit": 1000}))
    handle = start_server(Settings(address="127.0.0.1:0", metrics_address=""), provider=provider)
    startup = calls(emu, 0)
    channel = grpc.insecure_channel(handle.address)
    s = pb_grpc.CloudProviderStub(channel)
    groups = [g.id for g in s.NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups]
    workers = [n for n in emu.node_records(CLUSTER) if n["role"] == "worker"]
    nodes = [
        pb.ExternalGrpcNode(
            providerID=f"aws:///{n['zone']}/{n['provider_node_id']}",
            name=n["instance_id"],
            labels={
                "stackpoint.io/node_group": n["group_name"],
                "stackpoint.io/instance_id": n["instance_id"],
            },
        )
        for n in workers
    ]
    masters = [
        pb.ExternalGrpcNode(
            providerID=f"aws:///us-west-2a/i-master{i}",
            name=f"m-{i}",
            labels={"stackpoint.io/role": "master"},
        )
        for i in range(3)
    ]

    def read_rpcs() -> int:
        return one_loop(s, groups, nodes, foreign=masters)

    print(f"SPC API calls per CA loop: {args.pools} autoscaled pools, {len(workers)} nodes")
    print(f"startup (initial Refresh): {dict(startup)}")
    rows = []
    for loop in range(args.loops):
        mark = emu.log_mark()
        t0 = time.perf_counter()
        s.Refresh(pb.RefreshRequest(), timeout=30)
        refresh_ms = (time.perf_counter() - t0) * 1000
        after = emu.log_mark()
        rpcs = read_rpcs()
        rows.append((loop + 1, calls(emu, mark, after), rpcs, sum(calls(emu, after).values()), refresh_ms))
    head = f"{'loop':>4} {'Refresh API calls':66} {'read RPCs':>9} {'API calls from reads':>20}"
    print(f"{head} {'Refresh ms':>10}")
    for loop, rc, rpcs, reads, ms in rows:
        print(f"{loop:>4} {dict(rc)!s:66} {rpcs:>9} {reads:>20} {ms:>10.1f}")
    pool_lists = [r[1]["GET /orgs/{id}/clusters/{id}/nodepools"] for r in rows]
    node_lists = [r[1]["GET /orgs/{id}/clusters/{id}/nodes"] for r in rows]
    reads_total = sum(r[3] for r in rows)
    ok = (
        all(n == 1 for n in pool_lists + node_lists)
        and all(sum(r[1].values()) == 2 for r in rows)
        and reads_total == 0
    )

    # what CA waits for: IncreaseSize / DeleteNodes while each add takes --add-delay seconds
    emu.set_faults(
        FaultPlan(rate=1.0, kinds=("slow",), slow_seconds=args.add_delay, methods=frozenset({"POST"}))
    )
    gid = groups[0]
    mark = emu.log_mark()
    inc_ms = []
    for _ in range(5):
        t0 = time.perf_counter()
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=gid, delta=3), timeout=5)
        inc_ms.append((time.perf_counter() - t0) * 1000)
        s.NodeGroupDecreaseTargetSize(pb.NodeGroupDecreaseTargetSizeRequest(id=gid, delta=-3), timeout=5)
    provider.wait_idle(60)  # type: ignore[attr-defined]
    emu.set_faults(None)
    s.Refresh(pb.RefreshRequest(), timeout=30)
    mark = emu.log_mark()
    s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=groups[1], delta=3), timeout=5)
    provider.wait_idle(60)  # type: ignore[attr-defined]
    scale_up_calls = calls(emu, mark)
    del_ms = []
    mark = emu.log_mark()
    for node in nodes[len(nodes) - 5 :]:
        t0 = time.perf_counter()
        s.NodeGroupDeleteNodes(
            pb.NodeGroupDeleteNodesRequest(id=node.labels["stackpoint.io/node_group"], nodes=[node]),
            timeout=5,
        )
        del_ms.append((time.perf_counter() - t0) * 1000)
    provider.wait_idle(60)  # type: ignore[attr-defined]
    delete_calls = calls(emu, mark)
    print(
        f"IncreaseSize RPC with adds answered after {args.add_delay:g}s: "
        f"median {statistics.median(inc_ms):.2f} ms, max {max(inc_ms):.2f} ms (the fork: up to 20 min)"
    )
    print(
        f"DeleteNodes RPC: median {statistics.median(del_ms):.2f} ms, "
        f"max {max(del_ms):.2f} ms (the fork: >= 60 s)"
    )
    print(f"API calls of a scale-up by 3 (background): {dict(scale_up_calls)}")
    print(f"API calls of 5 single-node deletes (background): {dict(delete_calls)}")
    print(
        f"pool listings per Refresh: {pool_lists}; node listings per Refresh: {node_lists}; "
        f"API calls from read RPCs: {reads_total} -> {'target met' if ok else 'TARGET MISSED'}"
    )
    channel.close()
    handle.stop(grace=1)
    emu.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
