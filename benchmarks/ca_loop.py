"""cluster-autoscaler's main loop at cluster scale, replayed by the project's CA-faithful client.

The Go client of tests/conformance (`conformance loop`, generation 1.35+) replays CA's quiet
steady-state loop serially, as CA makes it: per loop one Refresh and one NodeGroups; per group
TargetSize three times, Nodes and TemplateNodeInfo; per node one NodeGroupForNode and four
GetOptions (5,017 calls at 1,000 nodes in 3 groups; CA 1.36.1 was measured at 5,032-5,351 against
a real control plane). Every call has CA's 5 s deadline and waits for the one before it.

Measured for each size, in one run:
- our server behind the compiled front (`serve --front on`: Python and the front both counted);
- our server, Python alone (`--front off`);
- the canned Go server (benchmarks/cannedgrpc answering each call with the bytes our server gave for
  the same group or node): the floor of any gRPC server on this machine.

Printed: loop time p50/p90 (the client's wall clock around each loop) and the server's CPU per loop
(utime + stime of its whole process tree over the measured loops, divided by their count).

    .venv/bin/python benchmarks/ca_loop.py [--nodes 200 1000 5000] [--groups 3] [--loops 10]
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
WARMUP_LOOPS = 2


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
                    # half the groups override an option: the client gets answers and UNIMPLEMENTED alike
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
    calls_per_loop: int

    def row(self, nodes: int) -> str:
        p50 = statistics.median(self.loops)
        p90 = statistics.quantiles(self.loops, n=10)[8] if len(self.loops) > 1 else p50
        return (
            f"| {nodes:,} | {self.label} | {p50:.3f} s | {p90:.3f} s | {self.calls_per_loop:,} "
            f"| {self.cpu_per_loop:.3f} s |"
        )


def replay(client: Path, port: int, pid: int, loops: int, label: str, workdir: Path) -> Result:
    """WARMUP_LOOPS loops, then `loops` measured ones, against 127.0.0.1:`port` (served by `pid`)."""
    cloud_config = workdir / f"cloud-config-{port}.yaml"
    cloud_config.write_text(f'address: "127.0.0.1:{port}"\ngrpc_timeout: 5s\n')

    def run(n: int) -> dict:
        proc = subprocess.run(
            [str(client), "loop", "-cloud-config", str(cloud_config), "-loops", str(n)],
            capture_output=True,
            text=True,
            check=False,
        )
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
    return Result(label, report["seconds"], spent / loops, report["calls_in_loop"])


def record(stub: pb_grpc.CloudProviderStub) -> cannedserver.Table:
    """The canned server's replies: what our server answers now, per group and per node."""
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


def run_size(
    client: Path, nodes: int, groups: int, loops: int, workdir: Path, fronts: list[str]
) -> list[str]:
    config = workdir / "server.yaml"
    config.write_text(yaml.safe_dump(server_config(nodes, groups)))
    rows: list[str] = []
    table = None
    for front in fronts:
        label = "our server, compiled front" if front == "on" else "our server, Python only"
        print(f"[{nodes} nodes] {label}", flush=True)
        with our_server(config, front, workdir) as (port, proc):
            rows.append(replay(client, port, proc.pid, loops, label, workdir).row(nodes))
            if table is None:
                with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                    table = record(pb_grpc.CloudProviderStub(channel))
    print(f"[{nodes} nodes] canned Go server", flush=True)
    canned_port = free_port()
    assert table is not None
    with cannedserver.serve(table, canned_port) as canned:
        rows.append(
            replay(client, canned_port, canned.pid, loops, "canned Go server (floor)", workdir).row(nodes)
        )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[200, 1000, 5000])
    ap.add_argument("--groups", type=int, default=3)
    ap.add_argument("--loops", type=int, default=10, help="loops measured per server")
    ap.add_argument("--front", choices=["both", "on", "off"], default="both")
    args = ap.parse_args()
    fronts = ["on", "off"] if args.front == "both" else [args.front]
    if "on" in fronts:
        from cloudprovider_grpc.front import binary as front_binary

        front_binary.build()
    client = conformance.client()
    rows: list[str] = []
    for nodes in args.nodes:
        with tempfile.TemporaryDirectory(prefix=f"ca-loop-{nodes}-") as tmp:
            rows += run_size(client, nodes, args.groups, args.loops, Path(tmp), fronts)
    print(f"\nCA's main loop replayed (client generation 1.35+), quiet steady state, {args.groups} groups")
    print("| nodes | server | loop p50 | loop p90 | calls per loop | server CPU per loop |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
