"""AliCloud API calls per simulated cluster-autoscaler loop (10 scaling groups, 200 nodes by default).

Runs the AliCloud emulator and our gRPC server (AliCloud backend, AK/SK, V3 signatures, pointed at the
emulator) in this process, seeds GROUPS x NODES/GROUPS InService instances, then drives the RPCs one
CA loop makes (CA's `core/static_autoscaler.go` RunOnce and its callers: Refresh, NodeGroups, NodeGroupForNode
per node, ~3 TargetSize per group, ~2 GetOptions per node, NodeGroupNodes for ~G/12 groups,
TemplateNodeInfo per group, GPULabel/GetAvailableGPUTypes; on the last loop an IncreaseSize). The
emulator's action log tells how many API calls each phase caused. Target: at most one
group listing and one instance listing per group per Refresh, none from any other read RPC.

    .venv/bin/python benchmarks/alicloud_api_calls.py [--groups 10] [--nodes 200] [--loops 5] [--big 1000]
"""

from __future__ import annotations

import argparse
import collections
import math
import sys
import time
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loop_pattern import one_loop  # noqa: E402

from cloudprovider_grpc.config.settings import Settings  # noqa: E402
from cloudprovider_grpc.emulators.alicloud import AliCloudEmulator  # noqa: E402
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb  # noqa: E402
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc  # noqa: E402
from cloudprovider_grpc.providers.registry import NodesSpec, ProviderContext, build_provider  # noqa: E402
from cloudprovider_grpc.server.assembly import start_server  # noqa: E402

AK, SK, REGION = "LTAI5tBenchAccessKey0001", "bench-secret", "cn-hangzhou"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=10)
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--loops", type=int, default=5)
    ap.add_argument("--big", type=int, default=1000, help="instances of one group for the paging figure")
    args = ap.parse_args()

    emu = AliCloudEmulator(region=REGION, access_keys={AK: SK}, pending_seconds=0, activity_seconds=0)
    emu.start()
    groups = [f"asg-bp1bench{i:012d}" for i in range(args.groups)]
    per_group = [
        args.nodes // args.groups + (1 if i < args.nodes % args.groups else 0) for i in range(args.groups)
    ]
    for gid, count in zip(groups, per_group, strict=True):
        cid = "asc-" + gid.removeprefix("asg-")
        emu.add_group({"ScalingGroupId": gid, "MaxSize": 2000, "DesiredCapacity": count,
                       "ActiveScalingConfigurationId": cid})  # fmt: skip
        emu.add_configuration(
            {"ScalingConfigurationId": cid, "ScalingGroupId": gid, "InstanceType": "ecs.g7.xlarge"}
        )
    emu.clear_log()
    env = {"ACCESS_KEY_ID": AK, "ACCESS_KEY_SECRET": SK, "REGION_ID": REGION}
    env.update({f"ALICLOUD_{p}_ENDPOINT": emu.base_url for p in ("ESS", "ECS", "VPC", "STS")})
    ctx = ProviderContext(nodes=tuple(NodesSpec(0, 2000, g) for g in groups), env=env)
    handle = start_server(
        Settings(address="127.0.0.1:0", metrics_address=""), provider=build_provider("alicloud", ctx)
    )
    channel = grpc.insecure_channel(handle.address)
    s = pb_grpc.CloudProviderStub(channel)
    t0 = time.perf_counter()
    s.Refresh(pb.RefreshRequest(), timeout=30)
    startup_ms = (time.perf_counter() - t0) * 1000
    startup = collections.Counter(emu.actions())
    members = [(g, f"{REGION}.{i['InstanceId']}") for g in groups for i in emu.group_instances(g)]
    nodes = [pb.ExternalGrpcNode(providerID=pid, name=pid) for _, pid in members]
    others = [
        pb.ExternalGrpcNode(providerID=f"{REGION}.i-bp1unmanaged{n:08d}", name=f"other-{n}")
        for n in range(20)
    ]

    def read_rpcs() -> int:
        # nodes outside any group never trigger a rebuild (in-tree #6748)
        return one_loop(s, groups, nodes, foreign=others)

    print(f"AliCloud API calls per CA loop: {args.groups} scaling groups, {args.nodes} instances")
    print(f"startup (server start + first Refresh, with the catalogue, {startup_ms:.0f} ms): {dict(startup)}")
    head = f"{'loop':>4} {'kind':8} {'Refresh API calls':70} {'read RPCs':>9} {'API calls from reads':>20}"
    print(f"{head} {'Refresh ms':>10}")
    ok = True
    for loop in range(args.loops):
        scale_up = loop == args.loops - 1
        emu.clear_log()
        t0 = time.perf_counter()
        s.Refresh(pb.RefreshRequest(), timeout=30)
        refresh_ms = (time.perf_counter() - t0) * 1000
        refresh_calls = collections.Counter(emu.actions())
        emu.clear_log()
        rpcs = read_rpcs()
        reads = len(emu.actions())
        kind = "scale-up" if scale_up else "quiet"
        print(f"{loop + 1:>4} {kind:8} {dict(refresh_calls)!s:70} {rpcs:>9} {reads:>20} {refresh_ms:>10.1f}")
        ok &= refresh_calls["DescribeScalingGroups"] <= math.ceil(args.groups / 20)
        ok &= refresh_calls["DescribeScalingInstances"] == args.groups and reads == 0
        if scale_up:
            emu.clear_log()
            s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=groups[0], delta=3), timeout=5)
            handle.provider.wait_idle(30)  # type: ignore[attr-defined]
            print(f"     IncreaseSize(3) in the background: {dict(collections.Counter(emu.actions()))}")
    verdict = "met" if ok else "MISSED"
    print(f"quiet-loop target (<= 1 group listing per 20 groups, 1 instance listing per group): {verdict}")

    big = "asg-bp1benchbig000000001"
    emu.add_group({"ScalingGroupId": big, "MaxSize": 5000, "DesiredCapacity": args.big})
    from cloudprovider_grpc.providers.alicloud.client import AliClient
    from cloudprovider_grpc.providers.alicloud.credentials import StaticCredentials

    client = AliClient(StaticCredentials(AK, SK), region=REGION, ess_url=emu.base_url)
    emu.clear_log()
    t0 = time.perf_counter()
    listed = client.describe_scaling_instances(big)
    ms = (time.perf_counter() - t0) * 1000
    pages_in_tree = math.ceil(args.big / 10)
    calls = len(emu.actions())
    print(f"one group of {len(listed)} instances: {calls} DescribeScalingInstances calls in {ms:.0f} ms")
    print(f"  (in-tree: {pages_in_tree} calls of 10 with 200 ms sleeps, >= {pages_in_tree * 0.2:.0f} s)")
    channel.close()
    handle.stop(grace=1)
    emu.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
