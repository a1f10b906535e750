"""Cherry Servers API calls per simulated cluster-autoscaler loop (10 pools, 200 nodes by default).

Runs the Cherry API emulator and our gRPC server (Cherry backend pointed at the emulator) in this
process, seeds POOLS x NODES/POOLS deployed servers, then drives the RPCs one CA loop makes
(CA's `core/static_autoscaler.go` RunOnce and its callers: Refresh, NodeGroups, NodeGroupForNode per node,
~3 TargetSize per group, ~2 GetOptions per node, NodeGroupNodes for ~G/12 groups, TemplateNodeInfo
per group without a real-node template, GPULabel/GetAvailableGPUTypes, and on a scale-up loop
IncreaseSize plus pricing calls). The emulator's request log tells how many API calls each phase
caused. Target: one list call per Refresh per project, none from any other read RPC.

    .venv/bin/python benchmarks/cherry_api_calls.py [--pools 10] [--nodes 200] [--loops 5]
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import time
from pathlib import Path

import grpc
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loop_pattern import one_loop  # noqa: E402

from cloudprovider_grpc.config.settings import Settings  # noqa: E402
from cloudprovider_grpc.emulators.cherry import CherryEmulator  # noqa: E402
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb  # noqa: E402
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc  # noqa: E402
from cloudprovider_grpc.providers.registry import NodesSpec, ProviderContext, build_provider  # noqa: E402
from cloudprovider_grpc.server.assembly import start_server  # noqa: E402

TOKEN = "bench-token"
PROJECT = 4242
_ID_RE = re.compile(r"/\d+")


def endpoint(method: str, path: str) -> str:
    return f"{method} {_ID_RE.sub('/{id}', path)}"


def calls_since(emu: CherryEmulator, mark: int) -> collections.Counter[str]:
    return collections.Counter(endpoint(e.method, e.path) for e in emu.request_log(since=mark))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pools", type=int, default=10)
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--loops", type=int, default=5)
    args = ap.parse_args()

    emu = CherryEmulator(
        tokens={TOKEN: 1}, projects={PROJECT: 1}, deploy_seconds=0, stock={"*": {"*": 10_000}}
    )
    emu.start()
    pools = [f"pool{i}" for i in range(args.pools)]
    hdr = {"Authorization": f"Bearer {TOKEN}"}
    servers: list[tuple[str, str, str]] = []  # (pool, providerID, hostname)
    for n in range(args.nodes):
        pool = pools[n % len(pools)]
        body = {
            "plan": "e3_1240v3",
            "region": "eu_nord_1",
            "image": "ubuntu_22_04",
            "hostname": f"{pool}-{n}",
            "tags": {"k8s-cluster": "bench", "k8s-nodepool": pool},
        }
        s = requests.post(
            f"{emu.base_url}projects/{PROJECT}/servers", json=body, headers=hdr, timeout=5
        ).json()
        servers.append((pool, f"cherryservers://{s['id']}", s["hostname"]))
    emu.clear_log()

    ctx = ProviderContext(
        nodes=tuple(NodesSpec(0, args.nodes, p) for p in pools),
        cluster_name="bench",
        env={"CHERRY_AUTH_TOKEN": TOKEN},
        options={
            "api-url": emu.base_url,
            "global": {
                "project-id": PROJECT,
                "plan": "e3_1240v3",
                "region": "eu_nord_1",
                "os": "ubuntu_22_04",
            },
        },
    )
    handle = start_server(
        Settings(address="127.0.0.1:0", metrics_address=""), provider=build_provider("cherry", ctx)
    )
    startup = calls_since(emu, 0)
    channel = grpc.insecure_channel(handle.address)
    s = pb_grpc.CloudProviderStub(channel)
    nodes = [pb.ExternalGrpcNode(providerID=pid, name=host) for _, pid, host in servers]
    control_planes = [
        pb.ExternalGrpcNode(providerID=f"cherryservers://9{i}", name=f"cp-{i}",
                            labels={"node-role.kubernetes.io/control-plane": ""})
        for i in range(3)
    ]  # fmt: skip

    def read_rpcs(scale_up: bool) -> int:
        return one_loop(s, pools, nodes, foreign=control_planes, scale_up=scale_up)

    print(f"Cherry API calls per CA loop: {args.pools} pools, {args.nodes} nodes, 1 project")
    print(f"startup (initial Refresh incl. plan catalogue): {dict(startup)}")
    rows = []
    for loop in range(args.loops):
        scale_up = loop == args.loops - 1
        mark = emu.log_mark()
        t0 = time.perf_counter()
        s.Refresh(pb.RefreshRequest(), timeout=30)
        refresh_s = time.perf_counter() - t0
        after_refresh = emu.log_mark()
        t1 = time.perf_counter()
        rpcs = read_rpcs(scale_up)
        reads_s = time.perf_counter() - t1
        read_calls = calls_since(emu, after_refresh)
        write_calls: collections.Counter[str] = collections.Counter()
        if scale_up:
            wmark = emu.log_mark()
            s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=pools[0], delta=2), timeout=5)
            handle.provider.wait_idle(30)  # type: ignore[attr-defined]
            write_calls = calls_since(emu, wmark)
        refresh_calls = collections.Counter(
            endpoint(e.method, e.path) for e in emu.request_log(since=mark)[: after_refresh - mark]
        )
        kind = "scale-up" if scale_up else "quiet"
        rows.append((loop + 1, kind, refresh_calls, rpcs, read_calls, write_calls, refresh_s, reads_s))

    print(f"{'loop':>4} {'kind':8} {'Refresh API calls':34} {'read RPCs':>9} {'API calls from reads':>20} "
          f"{'Refresh ms':>10} {'reads ms':>8}  write-path API calls")  # fmt: skip
    for loop, kind, rc, rpcs, reads, writes, rs, ws in rows:
        print(f"{loop:>4} {kind:8} {dict(rc)!s:34} {rpcs:>9} {sum(reads.values()):>20} "
              f"{rs * 1000:>10.1f} {ws * 1000:>8.1f}  {dict(writes) or '-'}")  # fmt: skip
    list_per_refresh = [r[2]["GET /v1/projects/{id}/servers"] for r in rows]
    reads_total = sum(sum(r[4].values()) for r in rows)
    ok = all(n == 1 for n in list_per_refresh) and reads_total == 0
    print(f"list calls per Refresh: {list_per_refresh}; API calls from read RPCs: {reads_total} -> "
          f"{'target met' if ok else 'TARGET MISSED'}")  # fmt: skip
    channel.close()
    handle.stop(grace=1)
    emu.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
