"""Latency and throughput of the memory-served RPCs, as CA calls them: one client, serial calls.

Starts `cloudprovider-grpc serve` as a separate process on the sim backend with GROUPS node groups
of NODES_PER_GROUP machines each (default 1,000 x 15 = 15,000 nodes, every group with option
overrides so NodeGroupGetOptions answers with options), then calls each RPC N times
over loopback and prints p50/p99 latency, throughput, the server's CPU per call and its resident memory.

    .venv/bin/python benchmarks/rpc_latency.py [--groups 1000] [--nodes-per-group 15] [--calls 5000]

Targets on a 2-core machine: p99 under 1 ms for these RPCs, server RSS under 200 MB; behind the
compiled front, the RPCs CA calls per node (GetOptions, also its answer without options to CA < 1.29,
ForNode, TargetSize), answered from its cache, at most 1.0x the canned Go server's CPU per call (`xGo`),
and the calls it relays to Python (NodeGroupNodes, NodeGroupTemplateNodeInfo, NodeGroups) at most 1.2x
Python alone's (`xPy`).

CPU per call is the server process's utime + stime (/proc/PID/stat, every thread) over the measured
calls divided by their number: on a node CA shares with us, that is what each RPC adds to CA's loop.
Our server is measured twice: `python` (`serve --front off`, grpcio serving the port) and `front`
(`serve --front on`: the compiled front on the port, Python behind it, CPU of BOTH processes counted).
Each per-node RPC is measured, in the same run, against two floors answering the very bytes (or
status) our server gave for the same request: a do-nothing grpcio server (thread pool, raw bytes, no
metrics, no lock) and `benchmarks/cannedgrpc`, a canned-reply grpc-go server built from source into
the shared Go cache: the floor of any gRPC server on this machine. The client is Python gRPC for all
three; its own cost is not in the CPU column.

`--go` also measures our server with the conformance harness's Go client (tests/conformance,
`conformance bench`: the project's CA-faithful client), which is what cluster-autoscaler
experiences.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cannedserver  # benchmarks/cannedserver.py (this script's directory is on sys.path)
import grpc
import yaml

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc


def rss_mb(pid: int) -> tuple[float, float]:
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
    )
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


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
    """Run the CA-faithful client's `bench` (tests/conformance, built once and cached outside the
    clone by tests/support/conformance.py) against our server."""
    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root))
    from tests.support import conformance, gotools

    if gotools.go_binary() is None:
        print("(Go is not installed: skipping the Go client measurement)")
        return
    binary = conformance.client()
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as cfg:
        cfg.write(f'address: "127.0.0.1:{port}"\ngrpc_timeout: 5s\n')
    try:
        subprocess.run([str(binary), "bench", "-cloud-config", cfg.name, "-calls", str(calls)], check=True)
    finally:
        Path(cfg.name).unlink()


def handler_times(config: dict, calls: int) -> None:
    """The same RPCs handled in-process, straight into the servicer: our own code's cost, without
    gRPC's transport on either side."""
    from cloudprovider_grpc.grpcapi.servicer import CloudProviderServicer
    from cloudprovider_grpc.providers.registry import ProviderContext, build_provider

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


FLOOR_SERVER = """
import json, sys, base64
from concurrent import futures
import grpc

table = json.load(open(sys.argv[2]))
codes = {c.value[0]: c for c in grpc.StatusCode}

def handler(reply):
    body = base64.b64decode(reply["b64"]) if "b64" in reply else None

    def answer(request, context):
        if body is None:
            context.abort(codes[reply["code"]], reply["message"])
        return body

    return grpc.unary_unary_rpc_method_handler(answer)

service, handlers = "", {}
for name, entry in table.items():
    service, method = name.strip("/").split("/")
    handlers[method] = handler(entry["default"])
server = grpc.server(futures.ThreadPoolExecutor(16))
server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
server.add_insecure_port("127.0.0.1:" + sys.argv[1])
server.start()
server.wait_for_termination()
"""


@dataclass
class Row:
    p50: float
    p99: float
    rate: float
    cpu_us: float


def measure_cpu(call: Callable[[], object], calls: int, pids: int | list[int]) -> Row:
    """Latency over `calls` serial calls after a warm-up, and the CPU (utime + stime, every thread)
    the server's processes `pids` spent on them, per call (the compiled front and Python together)."""
    pids = [pids] if isinstance(pids, int) else pids

    def cpu_now() -> float:
        return sum(cannedserver.cpu_seconds(pid) for pid in pids)

    for _ in range(200):
        call()
    samples = []
    cpu0 = cpu_now()
    t0 = time.perf_counter()
    for _ in range(calls):
        s0 = time.perf_counter()
        call()
        samples.append(time.perf_counter() - s0)
    wall = time.perf_counter() - t0
    cpu = cpu_now() - cpu0
    q = statistics.quantiles(samples, n=100)
    return Row(q[49] * 1e3, q[98] * 1e3, calls / wall, cpu / calls * 1e6)


@contextmanager
def python_floor(table: cannedserver.Table) -> Iterator[tuple[int, int]]:
    """The do-nothing grpcio server (thread pool, raw bytes, each method's default reply of `table`)."""
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "replies.json"
        table.write(path)
        proc = subprocess.Popen([sys.executable, "-c", FLOOR_SERVER, str(port), str(path)])
        try:
            grpc.channel_ready_future(grpc.insecure_channel(f"127.0.0.1:{port}")).result(timeout=60)
            yield proc.pid, port
        finally:
            proc.terminate()
            proc.wait(20)


@contextmanager
def go_floor(table: cannedserver.Table) -> Iterator[tuple[int, int]]:
    port = free_port()
    with cannedserver.serve(table, port) as proc:
        yield proc.pid, port


#: the RPCs CA calls per node, measured against both floors
PER_NODE = (
    "NodeGroupGetOptions",
    "NodeGroupGetOptions (CA < 1.29)",
    "NodeGroupForNode",
    "NodeGroupTargetSize",
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--nodes-per-group", type=int, default=15)
    ap.add_argument("--calls", type=int, default=5000, help="calls per RPC")
    ap.add_argument("--go", action="store_true", help="also measure with the CA-faithful Go client")
    ap.add_argument("--no-floors", action="store_true", help="skip the grpcio and Go floor servers")
    ap.add_argument("--no-front", action="store_true", help="skip our server behind the compiled front")
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
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(config, f)

    def start(front: str) -> tuple[subprocess.Popen, int]:
        port = free_port()
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
                "--front",
                front,
            ],
        )
        return proc, port

    # our server twice: Python serving the port alone, and behind the compiled front
    proc, port = start("off")
    fronted = None
    if not args.no_front:
        from cloudprovider_grpc.front import binary as front_binary

        front_binary.build()
        fronted = start("on")
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(channel).result(timeout=60)
        stub = pb_grpc.CloudProviderStub(channel)
        stub.Refresh(pb.RefreshRequest(), timeout=30)
        front_stub, front_pids = None, []
        if fronted is not None:
            front_channel = grpc.insecure_channel(f"127.0.0.1:{fronted[1]}")
            grpc.channel_ready_future(front_channel).result(timeout=60)
            front_stub = pb_grpc.CloudProviderStub(front_channel)
            front_stub.Refresh(pb.RefreshRequest(), timeout=30)
            front_pids = cannedserver.process_tree(fronted[0].pid)
        groups = [g.id for g in stub.NodeGroups(pb.NodeGroupsRequest(), timeout=30).nodeGroups]
        nodes = [
            (g, i.id)
            for g in random.Random(1).sample(groups, 50)
            for i in stub.NodeGroupNodes(pb.NodeGroupNodesRequest(id=g)).instances
        ]
        total_nodes = args.groups * args.nodes_per_group
        defaults = pb.NodeGroupAutoscalingOptions(scaleDownUtilizationThreshold=0.5)
        defaults.scaleDownUnneededDuration.seconds = 600
        defaults.MaxNodeProvisionDuration.seconds = 900
        # what CA 1.25-1.28 send: the legacy durations without MaxNodeProvisionTime (answered without options)
        legacy = pb.NodeGroupAutoscalingOptions(scaleDownUtilizationThreshold=0.5)
        legacy.scaleDownUnneededTime.duration = 600 * 10**9

        def options(gid: str) -> pb.NodeGroupAutoscalingOptionsRequest:
            return pb.NodeGroupAutoscalingOptionsRequest(id=gid, defaults=defaults)

        def legacy_options(gid: str) -> pb.NodeGroupAutoscalingOptionsRequest:
            return pb.NodeGroupAutoscalingOptionsRequest(id=gid, defaults=legacy)

        def for_node(provider_id: str) -> pb.NodeGroupForNodeRequest:
            return pb.NodeGroupForNodeRequest(node=pb.ExternalGrpcNode(providerID=provider_id))

        # every case: (method, request builder, the keys it is called with, key path for cannedgrpc)
        cases: dict[str, tuple[str, Callable[[str], Any], list[str], tuple[int, ...]]] = {
            "NodeGroupGetOptions": ("NodeGroupGetOptions", options, groups, (1,)),
            "NodeGroupGetOptions (CA < 1.29)": ("NodeGroupGetOptions", legacy_options, groups, (1,)),
            "NodeGroupForNode": ("NodeGroupForNode", for_node, [n for _, n in nodes], (1, 1)),
            "NodeGroupTargetSize": (
                "NodeGroupTargetSize",
                lambda gid: pb.NodeGroupTargetSizeRequest(id=gid),
                groups,
                (1,),
            ),
            "NodeGroupNodes": ("NodeGroupNodes", lambda gid: pb.NodeGroupNodesRequest(id=gid), groups, (1,)),
            "NodeGroupTemplateNodeInfo": (
                "NodeGroupTemplateNodeInfo",
                lambda gid: pb.NodeGroupTemplateNodeInfoRequest(id=gid),
                groups,
                (1,),
            ),
            "NodeGroups": ("NodeGroups", lambda _: pb.NodeGroupsRequest(), [""], ()),
        }

        def caller(target: pb_grpc.CloudProviderStub, case: str) -> Callable[[], object]:
            method, build, keys, _ = cases[case]
            rpc = getattr(target, method)
            rng = random.Random(7)

            def call() -> object:
                try:
                    return rpc(build(rng.choice(keys)), timeout=5)
                except grpc.RpcError as err:
                    if err.code() != grpc.StatusCode.UNIMPLEMENTED:
                        raise
                    return err

            return call

        print(
            f"sim backend: {args.groups} node groups, {total_nodes} nodes; {args.calls} serial calls per RPC "
            "(Python client); CPU = server process utime+stime per call (/proc)"
        )
        header = f"{'RPC':<38}{'server':<10}{'p50 ms':>8}{'p99 ms':>8}{'calls/s':>9}{'CPU us':>8}"
        header += f"{'xGo':>6}{'xPy':>6}"
        print(header)
        for case, (method, build, keys, key_path) in cases.items():
            rows: dict[str, Row] = {"python": measure_cpu(caller(stub, case), args.calls, proc.pid)}
            if front_stub is not None:
                # steady state, as in CA's loops between state changes: every distinct request has
                # been answered once (the first answer of each is Python's, through the front)
                rpc = getattr(front_stub, method)
                for key in keys:
                    with contextlib.suppress(grpc.RpcError):
                        rpc(build(key), timeout=5)
                rows["front"] = measure_cpu(caller(front_stub, case), args.calls, front_pids)
            if not args.no_floors and case in PER_NODE:
                # both floors answer with the bytes (or the status) our server gave for the same request
                table = cannedserver.Table()
                table.method(method, key_path)
                table.record(method, getattr(stub, method), build(keys[0]))
                for key in keys:
                    table.record(method, getattr(stub, method), build(key), key)
                for name, floor in (("grpcio", python_floor), ("Go", go_floor)):
                    with floor(table) as (pid, floor_port):
                        floor_stub = pb_grpc.CloudProviderStub(
                            grpc.insecure_channel(f"127.0.0.1:{floor_port}")
                        )
                        rows[name] = measure_cpu(caller(floor_stub, case), args.calls, pid)
            go, alone = rows.get("Go"), rows["python"]
            for name, row in rows.items():
                ratio = f"{row.cpu_us / go.cpu_us:>6.2f}" if go else f"{'':>6}"
                print(
                    f"{case if name == 'python' else '':<38}{name:<10}{row.p50:>8.3f}{row.p99:>8.3f}"
                    f"{row.rate:>9.0f}{row.cpu_us:>8.0f}{ratio}{row.cpu_us / alone.cpu_us:>6.2f}"
                )
        if args.go:
            go_client(port, args.calls)
        handler_times(config, args.calls)
        t0 = time.perf_counter()
        stub.Refresh(pb.RefreshRequest(), timeout=30)
        print(
            f"Refresh (sim cloud, {total_nodes} machines listed): {(time.perf_counter() - t0) * 1e3:.1f} ms"
        )
        rss, peak = rss_mb(proc.pid)
        print(f"server RSS (Python only): {rss:.0f} MB (peak {peak:.0f} MB)")
        if front_pids:
            sizes = [rss_mb(pid) for pid in front_pids]
            print(
                "server RSS (behind the front): "
                + " + ".join(f"{r:.0f} MB (peak {p:.0f})" for r, p in sizes)
                + " (Python + front)"
            )
    finally:
        for server in (proc, fronted[0] if fronted else None):
            if server is not None:
                server.terminate()
                server.wait(20)
        Path(f.name).unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
