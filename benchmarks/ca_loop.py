"""cluster-autoscaler's main loop at cluster scale, replayed by the project's CA-faithful client.

The Go client of tests/conformance (`conformance loop`, generation 1.35-1.36) replays CA 1.36.1's quiet
steady-state loop serially, as CA makes it, each call under CA's 5 s deadline: per loop one Refresh
and one NodeGroups; per group three TargetSize; per node in a group one NodeGroupForNode and four
GetOptions; per node in no group six NodeGroupForNode (CA does not cache an empty answer; 1.35 asks
five, 1.34 four: `conformance loop -ca`); no TemplateNodeInfo (every group has a usable node); GPULabel
once and GetAvailableGPUTypes never (CA asks it only on scale-ups and deletions); NodeGroupNodes only
from CA's instance cache: every
group in the first loop, then every 2 minutes in the background (one cycle = 12 loops at a 10 s scan
interval, the default --loops). See tests/conformance/loop.go for the model and its sources.

Measured in one run, for each cluster size and share of nodes in no group (non-autoscaled):
- our server behind the compiled front (`serve --front on`: Python and the front both counted);
- our server, Python alone (`--front off`);
- the canned Go server (benchmarks/cannedgrpc answering each call with the bytes our server gave for
  the same group or node, the empty answer for a node in no group): the floor of any gRPC server on
  this machine.

Printed: calls per RPC per loop (averaged over the measured loops: one 2-minute cycle), loop time
p50/p90 (the client's wall clock around each loop) and the server's CPU per loop (utime + stime of its
whole process tree over the measured loops, divided by their count).

    .venv/bin/python benchmarks/ca_loop.py [--nodes 1000 5000] [--shares 0 0.1] [--groups 3] [--loops 12]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import cannedserver  # noqa: E402  benchmarks/cannedserver.py, beside this script

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb  # noqa: E402
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc  # noqa: E402
from tests.support import conformance  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

NODE_CPU, NODE_MEMORY_GI = 8, 32
WARMUP_LOOPS = 1
#: the RPCs in the order the tables print them
RPCS = (
    "Refresh",
    "NodeGroups",
    "NodeGroupNodes",
    "NodeGroupForNode",
    "NodeGroupTargetSize",
    "NodeGroupGetOptions",
    "NodeGroupTemplateNodeInfo",
    "GPULabel",
    "GetAvailableGPUTypes",
)


def server_config(nodes: int, groups: int) -> dict:
    """`nodes` instances in `groups` sim groups, half of which override an option (so GetOptions
    answers both with options and without)."""
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
                    **({"options": {"scale_down_unneeded_time": 600.0}} if i % 2 else {}),
                }
                for i in range(groups)
            ],
        },
    }


@dataclass
class Result:
    label: str
    loops: list[float]
    cpu_per_loop: float
    calls: dict[str, float]  # per RPC, per loop (mean over the measured loops)

    def row(self, nodes: int, share: float) -> str:
        p50 = statistics.median(self.loops)
        p90 = statistics.quantiles(self.loops, n=10, method="inclusive")[8] if len(self.loops) > 1 else p50
        return (
            f"| {nodes:,} | {share:.0%} | {self.label} | {p50:.3f} s | {p90:.3f} s "
            f"| {sum(self.calls.values()):,.0f} | {self.cpu_per_loop:.3f} s |"
        )


def replay(client: Path, port: int, pid: int, loops: int, share: float, label: str, workdir: Path) -> Result:
    """WARMUP_LOOPS loops (a client of their own), then `loops` measured ones with a fresh client (as
    a CA that just started), against 127.0.0.1:`port` (served by `pid`)."""
    cloud_config = workdir / f"cloud-config-{port}.yaml"
    cloud_config.write_text(f'address: "127.0.0.1:{port}"\ngrpc_timeout: 5s\n')

    def run(n: int) -> dict:
        command = [str(client), "loop", "-cloud-config", str(cloud_config), "-loops", str(n)]
        command += ["-non-autoscaled-share", str(share)]
        proc = subprocess.run(command, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"loop replay against {label} failed:\n{proc.stderr[-3000:]}")
        return json.loads(proc.stdout)

    run(WARMUP_LOOPS)
    pids = cannedserver.process_tree(pid)

    def cpu() -> float:
        return sum(cannedserver.cpu_seconds(p) for p in pids)

    before = cpu()
    report = run(loops)
    spent = cpu() - before
    calls = {rpc: sum(loop.get(rpc, 0) for loop in report["calls"]) / loops for rpc in RPCS}
    other = {rpc for loop in report["calls"] for rpc in loop} - set(RPCS)
    if other:
        raise RuntimeError(f"the replay made calls this table does not show: {sorted(other)}")
    return Result(label, report["seconds"], spent / loops, calls)


def record(stub: pb_grpc.CloudProviderStub) -> cannedserver.Table:
    """The canned server's replies: what our server answers now, per group and per node, and for a
    node in no group."""
    groups = [g.id for g in stub.NodeGroups(pb.NodeGroupsRequest(), timeout=30).nodeGroups]
    table = cannedserver.Table()
    for name in ("Refresh", "NodeGroups", "GPULabel", "GetAvailableGPUTypes", "Cleanup"):
        table.method(name)
        table.record(name, getattr(stub, name), getattr(pb, name + "Request")())
    defaults = pb.NodeGroupAutoscalingOptions(
        scaleDownUtilizationThreshold=0.5, scaleDownGpuUtilizationThreshold=0.5
    )
    defaults.scaleDownUnneededDuration.seconds = 600
    defaults.scaleDownUnreadyDuration.seconds = 1200
    defaults.MaxNodeProvisionDuration.seconds = 900
    per_group: dict[str, Callable[[str], object]] = {
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
    # the default reply: a node in no group (the loop's are named static://static-N)
    foreign = pb.NodeGroupForNodeRequest(node=pb.ExternalGrpcNode(providerID="static://static-0"))
    table.record("NodeGroupForNode", stub.NodeGroupForNode, foreign)
    for gid in groups:
        for inst in stub.NodeGroupNodes(pb.NodeGroupNodesRequest(id=gid), timeout=30).instances:
            request = pb.NodeGroupForNodeRequest(node=pb.ExternalGrpcNode(providerID=inst.id))
            table.record("NodeGroupForNode", stub.NodeGroupForNode, request, inst.id)
    return table


@contextmanager
def our_server(config: Path, front: str, workdir: Path):
    port, metrics_port = free_port(), free_port()
    log = (workdir / f"server-{front}.log").open("w")
    command = [sys.executable, "-m", "cloudprovider_grpc", "serve", "--config", str(config), "--front", front]
    command += ["--address", f"127.0.0.1:{port}", "--metrics-address", f"127.0.0.1:{metrics_port}"]
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=120)
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/healthz", timeout=30) as resp:
            assert resp.status == 200
        yield port, proc
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def run_case(
    client: Path, nodes: int, share: float, groups: int, loops: int, workdir: Path, fronts: list[str]
) -> list[Result]:
    """One cluster: `nodes` in all, `share` of them in no group (the server lists the rest)."""
    config = workdir / "server.yaml"
    config.write_text(yaml.safe_dump(server_config(round(nodes * (1 - share)), groups)))
    results: list[Result] = []
    table = None
    for front in fronts:
        label = "our server, compiled front" if front == "on" else "our server, Python only"
        print(f"[{nodes} nodes, {share:.0%} in no group] {label}", flush=True)
        with our_server(config, front, workdir) as (port, proc):
            results.append(replay(client, port, proc.pid, loops, share, label, workdir))
            if table is None:
                with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                    table = record(pb_grpc.CloudProviderStub(channel))
    print(f"[{nodes} nodes, {share:.0%} in no group] canned Go server", flush=True)
    canned_port = free_port()
    assert table is not None
    with cannedserver.serve(table, canned_port) as canned:
        label = "canned Go server (floor)"
        results.append(replay(client, canned_port, canned.pid, loops, share, label, workdir))
    return results


def calls_row(nodes: int, share: float, result: Result) -> str:
    cells = " | ".join(f"{result.calls[rpc]:,.2f}".rstrip("0").rstrip(".") for rpc in RPCS)
    return f"| {nodes:,} | {share:.0%} | {cells} | {sum(result.calls.values()):,.0f} |"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000])
    ap.add_argument("--shares", type=float, nargs="+", default=[0.0, 0.1], help="shares of nodes in no group")
    ap.add_argument("--groups", type=int, default=3)
    ap.add_argument("--loops", type=int, default=12, help="loops measured per server (12: a 2-minute cycle)")
    ap.add_argument("--front", choices=["both", "on", "off"], default="both")
    args = ap.parse_args()
    fronts = ["on", "off"] if args.front == "both" else [args.front]
    if "on" in fronts:
        from cloudprovider_grpc.front import binary as front_binary

        front_binary.build()
    client = conformance.client()
    cases: list[tuple[int, float, list[Result]]] = []
    for nodes in args.nodes:
        for share in args.shares:
            with tempfile.TemporaryDirectory(prefix=f"ca-loop-{nodes}-") as tmp:
                results = run_case(client, nodes, share, args.groups, args.loops, Path(tmp), fronts)
            cases.append((nodes, share, results))
    print(
        f"\nCA 1.36.1's main loop replayed (client generation 1.35-1.36), steady state, {args.groups} groups"
    )
    print(f"\nCalls per RPC per loop (mean of {args.loops} loops, the same against every server):")
    print("| nodes | in no group | " + " | ".join(RPCS) + " | all |")
    print("|---|---|" + "---|" * (len(RPCS) + 1))
    for nodes, share, results in cases:
        if any(r.calls != results[0].calls for r in results):
            raise RuntimeError(f"the servers were asked different calls at {nodes} nodes, {share:.0%}")
        print(calls_row(nodes, share, results[0]))
    print("\n| nodes | in no group | server | loop p50 | loop p90 | calls per loop | server CPU per loop |")
    print("|---|---|---|---|---|---|---|")
    for nodes, share, results in cases:
        for result in results:
            print(result.row(nodes, share))
    return 0


if __name__ == "__main__":
    sys.exit(main())
