"""Latency and throughput of the memory-served RPCs, as CA calls them: one client, serial calls.

Starts `cloudprovider-grpc serve` as a separate process on the sim backend with GROUPS node groups
of NODES_PER_GROUP machines each (default 1,000 x 15 = 15,000 nodes, every group with option
overrides so NodeGroupGetOptions answers instead of UNIMPLEMENTED), then calls each RPC N times
over loopback and prints p50/p99 latency, throughput and the server's resident memory.

    .venv/bin/python benchmarks/rpc_latency.py [--groups 1000] [--nodes-per-group 15] [--calls 3000]

Targets on a 2-core machine: p99 under 1 ms for these RPCs, server RSS under 200 MB.

For scale it also measures the transport floor: a do-nothing grpcio server (a constant answer to
NodeGroupTargetSize, no metrics, no lock) called the same way. The difference between a row and the
floor is what our code costs; the floor itself is Python gRPC on both ends of a loopback socket
(CA's Go client is cheaper than this Python client, so CA sees lower figures).

When Go is installed it then measures the same server with the conformance harness's Go client
(tests/conformance, `conformance bench`: CA master's own externalgrpc client code and generated
stub), which is what cluster-autoscaler experiences. `--no-go` skips that.
"""

from __future__ import annotations

import argparse
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import yaml

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc


def rss_mb(pid: int) -> tuple[float, float]:
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
    )
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


FLOOR_SERVER = """
import sys
from concurrent import futures
import grpc
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb, externalgrpc_pb2_grpc as pb_grpc

class Floor(pb_grpc.CloudProviderServicer):
    def NodeGroupTargetSize(self, request, context):
        return pb.NodeGroupTargetSizeResponse(targetSize=1)

server = grpc.server(futures.ThreadPoolExecutor(16))
pb_grpc.add_CloudProviderServicer_to_server(Floor(), server)
server.add_insecure_port("127.0.0.1:" + sys.argv[1])
server.start()
server.wait_for_termination()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(call: Callable[[], object], calls: int) -> tuple[float, float, float, float]:
    """(p50 ms, p99 ms, max ms, calls/s) over `calls` serial calls after a warm-up."""
    for _ in range(200):
        call()
    samples = []
    t0 = time.perf_counter()
    for _ in range(calls):
        s0 = time.perf_counter()
        call()
        samples.append(time.perf_counter() - s0)
    wall = time.perf_counter() - t0
    q = statistics.quantiles(samples, n=100)
    return q[49] * 1e3, q[98] * 1e3, max(samples) * 1e3, calls / wall


def go_client(port: int, calls: int) -> None:
    """Run the conformance harness's `bench` (linked against CA master's own externalgrpc client,
    built once and cached outside the clone by tests/realca/builds.py) against our server."""
    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root))
    from tests.realca import builds
    from tests.support import gotools

    if gotools.go_binary() is None:
        print("(Go is not installed: skipping the Go client measurement)")
        return
    binary = builds.conformance_harness("master")
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as cfg:
        cfg.write(f'address: "127.0.0.1:{port}"\ngrpc_timeout: 5s\n')
    try:
        subprocess.run([str(binary), "bench", "-cloud-config", cfg.name, "-calls", str(calls)], check=True)
    finally:
        Path(cfg.name).unlink()


def handler_times(config: dict, calls: int) -> None:
    """The same RPCs handled in-process, straight into the servicer: our own code's cost, without
    gRPC's transport on either side."""
    from cloudprovider_grpc.providers.registry import ProviderContext, build_provider
    from cloudprovider_grpc.service import CloudProviderServicer

    provider = build_provider("sim", ProviderContext(options=config["sim"]))
    provider.start()
    servicer = CloudProviderServicer(provider)
    context = None  # handlers touch the context only to abort, and these calls all succeed
    gid = config["sim"]["groups"][len(config["sim"]["groups"]) // 2]["id"]
    member = provider.nodes(gid)[0].id
    defaults = pb.NodeGroupAutoscalingOptions(scaleDownUtilizationThreshold=0.5)
    defaults.scaleDownUnneededDuration.seconds = 600
    defaults.MaxNodeProvisionDuration.seconds = 900
    cases = {
        "NodeGroups": lambda: servicer.NodeGroups(pb.NodeGroupsRequest(), context).SerializeToString(),
        "NodeGroupForNode": lambda: servicer.NodeGroupForNode(
            pb.NodeGroupForNodeRequest(node=pb.ExternalGrpcNode(providerID=member)), context
        ).SerializeToString(),
        "NodeGroupTargetSize": lambda: servicer.NodeGroupTargetSize(
            pb.NodeGroupTargetSizeRequest(id=gid), context
        ).SerializeToString(),
        "NodeGroupGetOptions": lambda: servicer.NodeGroupGetOptions(
            pb.NodeGroupAutoscalingOptionsRequest(id=gid, defaults=defaults), context
        ).SerializeToString(),
        "NodeGroupNodes": lambda: servicer.NodeGroupNodes(
            pb.NodeGroupNodesRequest(id=gid), context
        ).SerializeToString(),
        "NodeGroupTemplateNodeInfo": lambda: servicer.NodeGroupTemplateNodeInfo(
            pb.NodeGroupTemplateNodeInfoRequest(id=gid), context
        ).SerializeToString(),
    }
    print("handler time in-process (our code + response serialization, no transport)")
    print(f"{'RPC':<28}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'calls/s':>10}")
    for name, call in cases.items():
        p50, p99, worst, rate = measure(call, calls)
        print(f"{name:<28}{p50:>9.3f}{p99:>9.3f}{worst:>9.3f}{rate:>10.0f}")
    provider.stop(timeout=1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--nodes-per-group", type=int, default=15)
    ap.add_argument("--calls", type=int, default=3000, help="calls per RPC")
    ap.add_argument("--no-go", action="store_true", help="skip the Go client measurement")
    args = ap.parse_args()

    config = {
        "provider": "sim",
        "log_level": "warning",
        "sim": {
            "provisioning_delay": 0,
            "groups": [
                {
                    "id": f"pool-{i:04d}",
                    "min_size": 0,
                    "max_size": args.nodes_per_group * 2,
                    "initial_size": args.nodes_per_group,
                    "instance_type": f"type-{i % 7}",
                    "capacity": {"cpu": "8", "memory": "32Gi"},
                    "price_per_hour": 0.3,
                    "options": {"scale_down_unneeded_time": 300.0},
                }
                for i in range(args.groups)
            ],
        },
    }
    port = free_port()
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(config, f)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cloudprovider_grpc",
            "serve",
            "--config",
            f.name,
            "--address",
            f"127.0.0.1:{port}",
            "--metrics-address",
            "",
        ],
    )
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(channel).result(timeout=60)
        stub = pb_grpc.CloudProviderStub(channel)
        stub.Refresh(pb.RefreshRequest(), timeout=30)
        groups = [g.id for g in stub.NodeGroups(pb.NodeGroupsRequest(), timeout=30).nodeGroups]
        nodes = [
            (g, i.id)
            for g in random.Random(1).sample(groups, 50)
            for i in stub.NodeGroupNodes(pb.NodeGroupNodesRequest(id=g)).instances
        ]
        total_nodes = args.groups * args.nodes_per_group
        rng = random.Random(7)
        defaults = pb.NodeGroupAutoscalingOptions(scaleDownUtilizationThreshold=0.5)
        defaults.scaleDownUnneededDuration.seconds = 600
        defaults.MaxNodeProvisionDuration.seconds = 900

        cases: dict[str, Callable[[], object]] = {
            "NodeGroups": lambda: stub.NodeGroups(pb.NodeGroupsRequest(), timeout=5),
            "NodeGroupForNode": lambda: stub.NodeGroupForNode(
                pb.NodeGroupForNodeRequest(node=pb.ExternalGrpcNode(providerID=rng.choice(nodes)[1])),
                timeout=5,
            ),
            "NodeGroupTargetSize": lambda: stub.NodeGroupTargetSize(
                pb.NodeGroupTargetSizeRequest(id=rng.choice(groups)), timeout=5
            ),
            "NodeGroupGetOptions": lambda: stub.NodeGroupGetOptions(
                pb.NodeGroupAutoscalingOptionsRequest(id=rng.choice(groups), defaults=defaults), timeout=5
            ),
            "NodeGroupNodes": lambda: stub.NodeGroupNodes(
                pb.NodeGroupNodesRequest(id=rng.choice(groups)), timeout=5
            ),
            "NodeGroupTemplateNodeInfo": lambda: stub.NodeGroupTemplateNodeInfo(
                pb.NodeGroupTemplateNodeInfoRequest(id=rng.choice(groups)), timeout=5
            ),
        }
        print(
            f"sim backend: {args.groups} node groups, {total_nodes} nodes; {args.calls} serial calls per RPC"
        )
        print(f"{'RPC':<28}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'calls/s':>10}")
        for name, call in cases.items():
            p50, p99, worst, rate = measure(call, args.calls)
            print(f"{name:<28}{p50:>9.3f}{p99:>9.3f}{worst:>9.3f}{rate:>10.0f}")
        floor_port = free_port()
        floor = subprocess.Popen([sys.executable, "-c", FLOOR_SERVER, str(floor_port)])
        try:
            floor_channel = grpc.insecure_channel(f"127.0.0.1:{floor_port}")
            grpc.channel_ready_future(floor_channel).result(timeout=60)
            floor_stub = pb_grpc.CloudProviderStub(floor_channel)
            p50, p99, worst, rate = measure(
                lambda: floor_stub.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="x"), timeout=5),
                args.calls,
            )
            print(f"{'(floor: do-nothing server)':<28}{p50:>9.3f}{p99:>9.3f}{worst:>9.3f}{rate:>10.0f}")
        finally:
            floor.terminate()
            floor.wait(20)
        if not args.no_go:
            go_client(port, args.calls)
        handler_times(config, args.calls)
        t0 = time.perf_counter()
        stub.Refresh(pb.RefreshRequest(), timeout=30)
        print(
            f"Refresh (sim cloud, {total_nodes} machines listed): {(time.perf_counter() - t0) * 1e3:.1f} ms"
        )
        rss, peak = rss_mb(proc.pid)
        print(f"server RSS: {rss:.0f} MB (peak {peak:.0f} MB)")
    finally:
        proc.terminate()
        proc.wait(20)
        Path(f.name).unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
