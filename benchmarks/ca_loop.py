"""cluster-autoscaler's main loop at cluster scale: CA against our server versus CA against the floor.

Runs the real cluster-autoscaler (built from ../shared/upstream with `-tags externalgrpc`, cached by
tests/realca/builds.py) on the real-CA harness's control plane (etcd, kube-apiserver, kube-scheduler,
kube-controller-manager on loopback; the registrar stands in for the kubelets) in a quiet steady
state: NODES nodes in GROUPS sim node groups (half of them with option overrides, so CA gets both
NodeGroupGetOptions answers), one pod per node requesting 60% of its CPU and memory, nothing to
scale. Then, for each provider in turn, CA runs LOOPS main loops after a warm-up and the script reads:

- CA's own `cluster_autoscaler_function_duration_seconds{function="main"}`, loop by loop (the metric
  is polled and each loop's duration is the growth of the histogram's sum when its count grows by
  one, so p50/p90 are exact, not bucket estimates);
- RPCs per loop by method (our server's request counter);
- the provider process's CPU per loop (utime + stime from /proc).

Providers measured:
- `ours`: `cloudprovider-grpc serve` (sim cloud), plaintext on loopback as a sidecar runs it, behind
  the compiled front (`--front on`, the default here; its CPU and Python's are both counted) or
  Python only (`--front off`);
- `canned Go`: benchmarks/cannedgrpc answering every call with the bytes our server gave for the same
  group or node (recorded once the cluster is steady): the floor of any externalgrpc server.

The issue asks for a third column, CA's in-process `kwok` provider built into the same binary
(`-tags kwok,externalgrpc`). It cannot be measured here: the CA snapshots in ../shared/upstream are
trimmed to the externalgrpc provider (no cloudprovider/kwok), and the Go module proxy refuses CA's own
module, so the only way to build it would be from fetched source, which the project never builds.

    .venv/bin/python benchmarks/ca_loop.py [--nodes 200 1000] [--groups 10] [--loops 12]

Slow on 2 cores (a control plane, 1,000 Nodes and pods, two CA runs per size): a script, not a test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import cannedserver  # noqa: E402  benchmarks/cannedserver.py, beside this script

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb  # noqa: E402
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc  # noqa: E402
from tests.realca import workloads  # noqa: E402
from tests.realca.autoscaler import Autoscaler  # noqa: E402
from tests.realca.cluster import (  # noqa: E402
    GrpcEndpoint,
    Process,
    Registrar,
    env_without_proxies,
    start_control_plane,
    wait_for,
)
from tests.support.servers import free_port  # noqa: E402

MAIN = 'cluster_autoscaler_function_duration_seconds_{}{{function="main"}}'
NODE_CPU, NODE_MEMORY_GI = 8, 32


class PlainEndpoint(GrpcEndpoint):
    """A provider on plaintext loopback, as a sidecar is reached (the harness's default is mTLS)."""

    def channel(self) -> grpc.Channel:
        return grpc.insecure_channel(self.address)

    def cloud_config(self, path: Path) -> Path:
        path.write_text(f'address: "{self.address}"\ngrpc_timeout: 5s\n')
        return path


def server_config(nodes: int, groups: int) -> dict:
    per_group, extra = divmod(nodes, groups)
    return {
        "provider": "sim",
        "log_level": "warning",
        "sim": {
            "provisioning_delay": 0,
            "groups": [
                {
                    "id": f"pool-{i:02d}",
                    "min_size": 0,
                    "max_size": 2 * (per_group + 1),
                    "initial_size": per_group + (1 if i < extra else 0),
                    "instance_type": f"type-{i}",
                    "capacity": {"cpu": str(NODE_CPU), "memory": f"{NODE_MEMORY_GI}Gi"},
                    "price_per_hour": 0.3,
                    # half the groups override an option: CA gets answers and UNIMPLEMENTED alike
                    **({"options": {"scale_down_unneeded_time": 600.0}} if i % 2 else {}),
                }
                for i in range(groups)
            ],
        },
    }


@dataclass
class Result:
    loops: list[float]
    cpu_per_loop: float
    rpcs_per_loop: dict[str, float]

    def row(self, label: str, nodes: int) -> str:
        p50 = statistics.median(self.loops)
        p90 = statistics.quantiles(self.loops, n=10)[8]
        total = sum(self.rpcs_per_loop.values())
        top = ", ".join(
            f"{m.removeprefix('NodeGroup')} {n:.0f}"
            for m, n in sorted(self.rpcs_per_loop.items(), key=lambda kv: -kv[1])[:3]
        )
        rpcs = f"{total:.0f} ({top})" if total else "(same calls)"
        return f"| {nodes:,} | {label} | {p50:.3f} s | {p90:.3f} s | {rpcs} | {self.cpu_per_loop:.3f} s |"


def rpc_counts(metrics_port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("cloudprovider_grpc_rpc_requests_total{"):
            method = line.split('method="', 1)[1].split('"', 1)[0]
            counts[method] = counts.get(method, 0) + float(line.rsplit(" ", 1)[1])
    return counts


def process_tree(pid: int) -> list[int]:
    """`pid` and its children: our server behind the compiled front is two processes."""
    found = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(p) for p in (task / "children").read_text().split()]
    return found


def measure(ca: Autoscaler, pid: int, loops: int, counts: Callable[[], dict[str, float]] | None) -> Result:
    """`loops` main loops of CA after 3 warm-up loops: each loop's duration, the provider's CPU (its
    whole process tree: Python and the compiled front) and RPCs per loop."""
    ca.wait_running(timeout=600)
    ca.settle(3, timeout=900)
    seen = ca.metrics()
    count, total = seen.get(MAIN.format("count"), 0), seen.get(MAIN.format("sum"), 0)
    pids = process_tree(pid)

    def cpu_now() -> float:
        return sum(cannedserver.cpu_seconds(p) for p in pids)

    cpu0, rpcs0 = cpu_now(), counts() if counts else {}
    durations: list[float] = []
    deadline = time.monotonic() + 60 * loops
    while len(durations) < loops:
        if time.monotonic() > deadline or not ca.process.alive():
            raise RuntimeError(f"CA ran {len(durations)} of {loops} loops in time:\n{ca.log()[-3000:]}")
        time.sleep(0.1)
        now = ca.metrics()
        new_count, new_total = now.get(MAIN.format("count"), 0), now.get(MAIN.format("sum"), 0)
        if new_count == count + 1:
            durations.append(new_total - total)
        elif new_count > count + 1:  # two loops between polls: their mean for both
            durations += [(new_total - total) / (new_count - count)] * int(new_count - count)
        count, total = new_count, new_total
    cpu = cpu_now() - cpu0
    rpcs = counts() if counts else {}
    return Result(
        durations,
        cpu / len(durations),
        {m: (n - rpcs0.get(m, 0)) / len(durations) for m, n in rpcs.items() if n > rpcs0.get(m, 0)},
    )


def record(stub: pb_grpc.CloudProviderStub, nodes: list[tuple[str, str]]) -> cannedserver.Table:
    """The canned server's replies: what our server answers now, per group and per node."""
    groups = [g.id for g in stub.NodeGroups(pb.NodeGroupsRequest(), timeout=30).nodeGroups]
    table = cannedserver.Table()
    for name in ("Refresh", "NodeGroups", "GPULabel", "GetAvailableGPUTypes", "Cleanup"):
        table.method(name)
        request = getattr(pb, name + "Request")()
        table.record(name, getattr(stub, name), request)
    # CA's defaults as its flags in the harness set them (tests/realca/autoscaler.FAST_FLAGS)
    defaults = pb.NodeGroupAutoscalingOptions(
        scaleDownUtilizationThreshold=0.5, scaleDownGpuUtilizationThreshold=0.5
    )
    defaults.scaleDownUnneededDuration.seconds = 6
    defaults.scaleDownUnreadyDuration.seconds = 1200
    defaults.MaxNodeProvisionDuration.seconds = 60
    per_group = {
        "NodeGroupTargetSize": lambda g: pb.NodeGroupTargetSizeRequest(id=g),
        "NodeGroupNodes": lambda g: pb.NodeGroupNodesRequest(id=g),
        "NodeGroupTemplateNodeInfo": lambda g: pb.NodeGroupTemplateNodeInfoRequest(id=g),
        "NodeGroupGetOptions": lambda g: pb.NodeGroupAutoscalingOptionsRequest(id=g, defaults=defaults),
    }
    for name, build in per_group.items():
        table.method(name, (1,))
        for gid in groups:
            table.record(name, getattr(stub, name), build(gid), gid)
    table.method("NodeGroupForNode", (1, 1))
    for provider_id, _ in nodes:
        request = pb.NodeGroupForNodeRequest(node=pb.ExternalGrpcNode(providerID=provider_id))
        table.record("NodeGroupForNode", stub.NodeGroupForNode, request, provider_id)
    return table


def run_size(nodes: int, groups: int, loops: int, version: str, workdir: Path, front: str) -> list[str]:
    plane = start_control_plane(workdir / "plane")
    procs: list[Process] = []
    try:
        port, metrics_port = free_port(), free_port()
        config = workdir / "server.yaml"
        config.write_text(yaml.safe_dump(server_config(nodes, groups)))
        ours = Process(
            "cloudprovider-grpc",
            [
                sys.executable,
                "-m",
                "cloudprovider_grpc",
                "serve",
                "--config",
                str(config),
                "--address",
                f"127.0.0.1:{port}",
                "--metrics-address",
                f"127.0.0.1:{metrics_port}",
                "--front",
                front,
            ],
            workdir / "server.log",
            env_without_proxies(),
        )
        procs.append(ours)
        endpoint = PlainEndpoint(f"127.0.0.1:{port}", plane.pki)
        grpc.channel_ready_future(endpoint.channel()).result(timeout=60)
        kube = plane.kube
        print(f"[{nodes} nodes] registering nodes and scheduling one 60% pod per node", flush=True)
        # heartbeats are not renewed: CA reads the Ready condition, not its age, and 1,000 status
        # patches every 10 s would load the API server CA reads from
        registrar = Registrar(kube, endpoint, interval=1.0, heartbeat=24 * 3600).start()
        try:
            wait_for(f"{nodes} nodes", lambda: len(workloads.nodes(kube)) == nodes, 1800)
            workloads.apply(
                kube,
                workloads.Workload(
                    "steady", nodes, f"{NODE_CPU * 600}m", f"{int(NODE_MEMORY_GI * 1024 * 0.6)}Mi"
                ),
            )
            workloads.wait_running(kube, "steady", nodes, 1800)
        finally:
            registrar.stop()  # its own RPCs must not count in the loops measured
        instances = [(iid, group) for iid, group in registrar.created.values()]
        with endpoint.channel() as channel:
            table = record(pb_grpc.CloudProviderStub(channel), instances)

        rows = []
        print(f"[{nodes} nodes] CA {version} against our server", flush=True)
        ca = Autoscaler(version, plane, endpoint, workdir / "ca-ours")
        try:
            ours_result = measure(ca, ours.proc.pid, loops, lambda: rpc_counts(metrics_port))
        finally:
            ca.stop()
        label = "our server, compiled front" if front == "on" else "our server, Python only"
        rows.append(ours_result.row(f"externalgrpc, {label}", nodes))

        print(f"[{nodes} nodes] CA {version} against the canned Go server", flush=True)
        canned_port = free_port()
        with cannedserver.serve(table, canned_port) as canned:
            ca = Autoscaler(
                version, plane, PlainEndpoint(f"127.0.0.1:{canned_port}", plane.pki), workdir / "ca-go"
            )
            try:
                go_result = measure(ca, canned.pid, loops, None)
            finally:
                ca.stop()
        rows.append(go_result.row("externalgrpc, canned Go server (floor)", nodes))
        rows.append(f"| {nodes:,} | in-process kwok | not measured (see above) | | | |")
        ratio = statistics.median(ours_result.loops) / statistics.median(go_result.loops)
        print(f"[{nodes} nodes] loop p50 ours / canned Go: {ratio:.2f}x", flush=True)
        return rows
    finally:
        for proc in procs:
            proc.stop()
        plane.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[200, 1000])
    ap.add_argument("--groups", type=int, default=10)
    ap.add_argument("--loops", type=int, default=12, help="steady loops measured per provider (>= 10)")
    ap.add_argument("--ca-version", default="1.36.1")
    ap.add_argument(
        "--front",
        choices=["on", "off"],
        default="on",
        help="our server behind the compiled front (default; built first) or Python only",
    )
    args = ap.parse_args()
    if args.front == "on":
        from cloudprovider_grpc.front import binary as front_binary

        front_binary.build()
    rows = []
    for nodes in args.nodes:
        with tempfile.TemporaryDirectory(prefix=f"ca-loop-{nodes}-") as tmp:
            rows += run_size(nodes, args.groups, args.loops, args.ca_version, Path(tmp), args.front)
    print(f"\nCA {args.ca_version} main loop, quiet steady state, {args.groups} groups, 60%-full nodes")
    print("| nodes | provider | loop p50 | loop p90 | RPCs per loop (top 3) | provider CPU per loop |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
