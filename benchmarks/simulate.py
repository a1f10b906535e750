"""Wall time of the reference simulator's heavy cases, against the targets printed with them.

1. One scale-up decision for 10,000 pending pods across 50 node groups: the orchestrator alone
   (equivalence groups, 50 binpacking estimates, least-waste), target < 2 s; plus, for context,
   the same decision as the first loop of a full simulation through our gRPC server.
2. A 24-hour simulated day with about 500 nodes at CA's default 10 s scan interval (8,641 loops),
   target < 60 s with CA's real call pattern (`rpc_profile: ca`: NodeGroupForNode for every node
   every loop, ~530 RPCs a loop), and with `lean` for comparison. It uses the in-process
   transport (the server's request path without a socket: same bytes, same handlers): the RPCs over loopback
   gRPC would measure grpcio, not the simulator (see benchmarks/rpc_latency.py for that).
3. A cluster snapshot of 1,000 nodes and 20,000 pods (a `kubectl get -o json` dump file, its nodes
   matched to 10 node groups through NodeGroupForNode): loaded and its first loop decided, target
   < 5 s; a day of it, target < 2 minutes; `--compare` of 4 variants (a burst under four
   scale-down-unneeded-time settings) on 2 worker processes against one after another, target at
   most 0.6x. Wall and CPU seconds are both printed: on a shared machine wall time also counts the
   other processes' turns.

    .venv/bin/python benchmarks/simulate.py [--skip-day] [--profile ca|lean ...]
    .venv/bin/python benchmarks/simulate.py --snapshot-only [--no-snapshot-day] [--no-compare]
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import resource
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cloudprovider_grpc.simulator import parse_scenario, run  # noqa: E402
from cloudprovider_grpc.simulator.engine.scale_up.estimator import PodGroup  # noqa: E402
from cloudprovider_grpc.simulator.engine.scale_up.expanders import Chain, ExpanderContext  # noqa: E402
from cloudprovider_grpc.simulator.engine.scale_up.orchestrator import GroupView, plan_scale_up  # noqa: E402
from cloudprovider_grpc.simulator.model import NodeShape, effective_requests  # noqa: E402
from cloudprovider_grpc.simulator.predicates import StaticFitCache  # noqa: E402
from cloudprovider_grpc.simulator.scenario import AutoscalerOptions  # noqa: E402
from cloudprovider_grpc.simulator.world import workload_shape  # noqa: E402

T = TypeVar("T")
GROUPS = 50
PODS = 10_000
SHAPES = 40  # workloads (equivalence groups) the pods come from


def _cloud_groups() -> list[dict]:
    sizes = [("2", "8Gi"), ("4", "16Gi"), ("8", "32Gi"), ("16", "64Gi"), ("8", "64Gi")]
    return [
        {
            "id": f"pool-{i:02d}",
            "min_size": 0,
            "max_size": 2000,
            "capacity": {"cpu": sizes[i % 5][0], "memory": sizes[i % 5][1]},
            "labels": {"tier": f"t{i % 3}"},
            "price_per_hour": 0.1 * (i % 5 + 1),
        }
        for i in range(GROUPS)
    ]


def _workloads(total: int) -> list[dict]:
    rng = random.Random(1)
    per = total // SHAPES
    out = []
    for i in range(SHAPES):
        w = {
            "name": f"w{i:02d}",
            "replicas": per,
            "requests": {
                "cpu": f"{rng.choice([100, 250, 500, 1000, 1500])}m",
                "memory": f"{rng.choice([1, 2, 3])}Gi",
            },
        }
        if i % 4 == 0:
            w["node_selector"] = {"tier": f"t{i % 3}"}
        out.append(w)
    return out


def bench_decision() -> None:
    scenario = parse_scenario(
        {
            "name": "bench-decision",
            "duration": 0,
            "cloud": {"groups": _cloud_groups()},
            "workloads": _workloads(PODS),
        }
    )
    shapes = [workload_shape(w) for w in scenario.workloads]
    groups = []
    for g in _cloud_groups():
        res = effective_requests([g["capacity"]], [])
        res["pods"] = 110
        tpl = NodeShape(g["id"], dict(res), dict(res), {"tier": g["labels"]["tier"]}, ())
        groups.append(GroupView(g["id"], 0, g["max_size"], 0, tpl, dict(tpl.allocatable)))
    pod_groups = [PodGroup(s, w.replicas) for s, w in zip(shapes, scenario.workloads, strict=True)]
    opts = AutoscalerOptions()
    best = None
    for _ in range(3):
        ctx = ExpanderContext(random.Random(0), datetime(2026, 1, 1, tzinfo=UTC))
        started = time.perf_counter()
        plan = plan_scale_up(pod_groups, groups, opts, Chain("least-waste"), ctx, 0, {}, StaticFitCache())
        elapsed = time.perf_counter() - started
        best = elapsed if best is None else min(best, elapsed)
    print(
        f"scale-up decision, {sum(p.count for p in pod_groups)} pending pods x {GROUPS} node groups: "
        f"{best:.3f} s (best of 3; target < 2 s) -> {plan.increases[0][0]} +{plan.increases[0][1]}, "
        f"{len(plan.options)} options"
    )
    s = parse_scenario(
        {
            "name": "bench-loop",
            "duration": 0,
            "cloud": {"groups": _cloud_groups()},
            "workloads": _workloads(PODS),
        }
    )
    started = time.perf_counter()
    report = run(s)
    elapsed = time.perf_counter() - started
    up = report.of_kind("scale-up")[0]
    print(
        f"  same decision as one full loop through gRPC (server start, scheduler, RPCs): {elapsed:.3f} s "
        f"-> {up.group} +{up.delta}"
    )


def day_scenario() -> dict:
    """~500 nodes through a day: 5 pools x 100 nodes, load swinging 60% -> 100% -> 60%."""
    groups = [
        {
            "id": f"pool-{i}",
            "min_size": 60,
            "max_size": 160,
            "initial_size": 100,
            "capacity": {"cpu": "8", "memory": "32Gi"},
            "labels": {"pool": str(i)},
            "price_per_hour": 0.4,
        }
        for i in range(5)
    ]
    workloads = []
    for i in range(5):
        base = 600  # 600 pods x 1 cpu on 100 nodes of 7.9 usable cpus (DaemonSet 100m)
        workloads.append(
            {
                "name": f"app-{i}",
                "replicas": base,
                "requests": {"cpu": "1", "memory": "2Gi"},
                "node_selector": {"pool": str(i)},
                "schedule": [
                    {"at": "7h", "replicas": 750},
                    {"at": "9h", "replicas": 780},
                    {"at": "13h", "replicas": 720},
                    {"at": "18h", "replicas": 600},
                    {"at": "22h", "replicas": 480},
                ],
            }
        )
    return {
        "name": "bench-day",
        "duration": "24h",
        "cloud": {"provisioning_delay": 90, "deletion_delay": 30, "groups": groups},
        "daemonsets": [{"name": "kube-proxy", "requests": {"cpu": "100m", "memory": "128Mi"}}],
        "workloads": workloads,
    }


def _timed_day(profile: str) -> tuple[float, float, object]:
    d = day_scenario()
    d.update(rpc_profile=profile)
    started, cpu = time.perf_counter(), time.process_time()
    report = run(parse_scenario(d), transport="in-process")
    return time.perf_counter() - started, time.process_time() - cpu, report


def bench_day(profiles: list[str]) -> None:
    """The day in each RPC profile: wall and CPU seconds (CPU time is what the simulator itself
    spent; on a shared machine wall time also counts the other processes' turns), the cluster's
    range and every RPC count by method, so a change can show it made exactly the same calls."""
    for profile in profiles:
        wall, cpu, report = _timed_day(profile)
        nodes = report.timeline["nodes"]  # type: ignore[attr-defined]
        total = [sum(col) for col in zip(*nodes.values(), strict=True)]
        counts = report.rpc_counts["autoscaler"]  # type: ignore[attr-defined]
        summary = report.summary  # type: ignore[attr-defined]
        rpcs = sum(counts.values())
        print(
            f"24 h simulated day, rpc_profile={profile}, {summary['loops']} loops at 10 s, "
            f"{min(total)}..{max(total)} nodes: {wall:.1f} s wall, {cpu:.1f} s CPU (target < 60 s); "
            f"{summary['nodes_added']} nodes added, {summary['nodes_removed']} removed, {rpcs} RPCs "
            f"({rpcs / summary['loops']:.0f} per loop)"
        )
        print("  RPCs by method: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))


@dataclass(frozen=True)
class ClusterSize:
    """A snapshot cluster's size: node groups of 100 nodes (min 50, max 200) and Deployments of
    1,000 pods, so a larger size is the same cluster made wider, with the same per-group and
    per-Deployment shape (and the same decisions per group)."""

    groups: int
    nodes: int
    pods: int
    deployments: int

    @property
    def label(self) -> str:
        return f"{self.nodes:,} nodes / {self.pods:,} pods"


#: --size: 1000 is the size every earlier figure was measured at
SIZES = {
    "1000": ClusterSize(groups=10, nodes=1_000, pods=20_000, deployments=20),
    "5000": ClusterSize(groups=50, nodes=5_000, pods=100_000, deployments=100),
}
DEFAULT_SIZE = SIZES["1000"]


def snapshot_objects(size: ClusterSize = DEFAULT_SIZE) -> tuple[list[dict], dict]:
    """The cluster as `kubectl get -o json` prints it (1,000 nodes and 20,000 pods by default),
    and the sim backend options serving its node groups (whose machines are the cluster's nodes)."""
    from cloudprovider_grpc.simulator.cli import group_source
    from cloudprovider_grpc.simulator.model import node_name_for

    per = size.nodes // size.groups
    options = {
        "groups": [
            {
                "id": f"pool-{i}",
                "min_size": 50,
                "max_size": 200,
                "initial_size": per,
                "capacity": {"cpu": "16", "memory": "64Gi"},
                "price_per_hour": 0.8,
            }
            for i in range(size.groups)
        ]
    }
    nodes: list[dict[str, Any]] = []
    with group_source(None, "sim", False, options) as client:
        client.refresh()
        for g in client.node_groups():
            tpl = client.template(g.id)
            alloc = {k: q.string for k, q in tpl.status.allocatable.items()}
            for inst in client.nodes(g.id):
                name = node_name_for(inst.id)
                nodes.append(
                    {
                        "kind": "Node",
                        "metadata": {"name": name, "labels": dict(tpl.metadata.labels)},
                        "spec": {"providerID": inst.id},
                        "status": {"allocatable": alloc, "conditions": [{"type": "Ready", "status": "True"}]},
                    }
                )
    pods = []
    for i in range(size.pods):
        d = i % size.deployments
        pods.append(
            {
                "kind": "Pod",
                "metadata": {
                    "name": f"app-{d}-abc12-{i}",
                    "namespace": "default",
                    "labels": {"app": f"app-{d}", "pod-template-hash": "abc12"},
                    "ownerReferences": [{"kind": "ReplicaSet", "name": f"app-{d}-abc12", "controller": True}],
                },
                "spec": {
                    "nodeName": nodes[i % len(nodes)]["metadata"]["name"],
                    "containers": [
                        {"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}
                    ],
                },
                "status": {"phase": "Running"},
            }
        )
    ds = {
        "kind": "DaemonSet",
        "metadata": {"name": "kube-proxy", "namespace": "kube-system"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [{"name": "p", "resources": {"requests": {"cpu": "100m"}}}],
                    "tolerations": [{"operator": "Exists"}],
                }
            }
        },
    }
    return [*nodes, *pods, ds], options


def peak_rss_mb() -> float:
    """This process's resident-set high-water mark (Linux reports ru_maxrss in kB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def in_child(fn: Callable[..., T], *args: Any) -> T:
    """fn(*args) in a fresh process, so that its peak memory is its own: not the benchmark's
    synthetic cluster (100,000 pod dicts at 5,000 nodes) nor an earlier case's."""
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        return pool.submit(fn, *args).result()


def write_dump(size: ClusterSize, path: Path) -> dict:
    """The snapshot cluster written as a dump file; returns the sim backend's options."""
    import json

    objects, options = snapshot_objects(size)
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    return options


def first_decision(dump: Path, options: dict, out: Path | None) -> dict[str, Any]:
    """Load the dump (file -> scenario through NodeGroupForNode for every node) and decide its
    first loop: the figures, the scenario (for the day and the variants) and the peak memory."""
    from cloudprovider_grpc.simulator.cli import group_source
    from cloudprovider_grpc.simulator.snapshot import build_scenario, load_dump

    started, cpu = time.perf_counter(), time.process_time()
    with group_source(None, "sim", False, options) as client:
        snap = build_scenario(load_dump(dump), client, provider=None, duration="0s")
    loaded = time.perf_counter() - started
    data = snap.scenario
    started = time.perf_counter()
    report = run(parse_scenario(data), transport="in-process")
    first = time.perf_counter() - started
    cpu = time.process_time() - cpu
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "snapshot-first-loop.json").write_text(report.to_json(), encoding="utf-8")
    return {"loaded": loaded, "first": first, "cpu": cpu, "peak": peak_rss_mb(), "summary": report.summary,
            "scenario": data}  # fmt: skip


def bench_snapshot(
    compare: bool, day: bool = True, size: ClusterSize = DEFAULT_SIZE, out: Path | None = None
) -> None:
    """Load the snapshot (dump file -> scenario through NodeGroupForNode for every node) and decide
    its first loop; a day of it; 4 --compare variants on 2 workers against one after another."""
    import tempfile

    from cloudprovider_grpc.simulator.compare import Job, run_jobs

    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "cluster.json"
        options = in_child(write_dump, size, dump)
        mb = dump.stat().st_size / 1e6
        f = in_child(first_decision, dump, options, out)
    data, s = f["scenario"], f["summary"]
    target = 5 if size == DEFAULT_SIZE else 2
    print(
        f"snapshot of {size.label} ({mb:.0f} MB dump): loaded in {f['loaded']:.2f} s, first loop decided "
        f"in {f['first']:.2f} s; together {f['loaded'] + f['first']:.2f} s wall, {f['cpu']:.2f} s CPU "
        f"(target < {target} s), peak RSS {f['peak']:.0f} MB; "
        f"{s['decisions'] or 'no decisions'}, {s['max_pending_pods']} pending"
    )
    if day:
        started, cpu = time.perf_counter(), time.process_time()
        report = run(parse_scenario(dict(data, duration="24h", rpc_profile="lean")), transport="in-process")
        wall = time.perf_counter() - started
        print(
            f"  a day of it (rpc_profile lean, {report.summary['loops']} loops): {wall:.1f} s wall, "
            f"{time.process_time() - cpu:.1f} s CPU (target < 120 s)"
        )
    if not compare:
        return
    # a what-if per variant: a burst of 1,500 four-CPU pods for the first 30 minutes (about 170
    # more nodes), then CA's scale-down under four scale-down-unneeded-time settings
    burst = {"name": "burst", "replicas": 1500, "end": "30m", "requests": {"cpu": "4", "memory": "4Gi"}}
    jobs = [
        Job(
            f"unneeded-{m}m",
            dict(
                data,
                duration="1h",
                rpc_profile="lean",
                autoscaler={"scale-down-unneeded-time": f"{m}m"},
                workloads=[*data["workloads"], burst],
            ),
        )
        for m in (2, 5, 10, 20)
    ]
    started = time.perf_counter()
    one_by_one = run_jobs(jobs, "local:1")
    seq = time.perf_counter() - started
    started = time.perf_counter()
    parallel = run_jobs(jobs, "local:2")
    par = time.perf_counter() - started
    same = [a.to_json() == b.to_json() for a, b in zip(one_by_one, parallel, strict=True)]
    summary = ", ".join(
        f"{j.name}: +{r.summary['nodes_added']}/-{r.summary['nodes_removed']} nodes, "
        f"{r.summary['node_hours']:.0f} node-hours"
        for j, r in zip(jobs, parallel, strict=True)
    )
    print(
        f"  --compare of {len(jobs)} variants (1 h each; {summary}): one after another {seq:.1f} s, "
        f"on 2 worker processes {par:.1f} s = {par / seq:.2f}x (target <= 0.6x); "
        f"reports identical: {all(same)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-day", action="store_true", help="only the scale-up decision")
    parser.add_argument("--snapshot-only", action="store_true", help="only the cluster snapshot figures")
    parser.add_argument("--no-compare", action="store_true", help="skip the --compare timing")
    parser.add_argument("--no-snapshot-day", action="store_true", help="skip the snapshot's day")
    parser.add_argument(
        "--profile",
        action="append",
        choices=["ca", "lean"],
        help="RPC profile(s) of the day (default: ca, then lean)",
    )
    parser.add_argument(
        "--size", choices=sorted(SIZES), default="1000", help="the snapshot's nodes (default 1000)"
    )
    parser.add_argument(
        "--out", type=Path, help="write the snapshot's first-loop report.json here (to cmp runs)"
    )
    args = parser.parse_args()
    size = SIZES[args.size]
    if args.snapshot_only:
        bench_snapshot(not args.no_compare, not args.no_snapshot_day, size, args.out)
        return
    bench_decision()
    if not args.skip_day:
        bench_day(args.profile or ["ca", "lean"])
    bench_snapshot(not args.no_compare, not args.no_snapshot_day, size, args.out)


if __name__ == "__main__":
    main()
