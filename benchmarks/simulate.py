"""Wall time of the reference simulator's two heavy cases, against the targets printed with them.

1. One scale-up decision for 10,000 pending pods across 50 node groups: the orchestrator alone
   (equivalence groups, 50 binpacking estimates, least-waste), target < 2 s; plus, for context,
   the same decision as the first loop of a full simulation through our gRPC server.
2. A 24-hour simulated day with about 500 nodes at CA's default 10 s scan interval (8,641 loops),
   target < 60 s with CA's real call pattern (`rpc_profile: ca`: NodeGroupForNode for every node
   every loop, ~530 RPCs a loop), and with `lean` for comparison. It uses the in-process
   transport (the servicer called directly, same messages, no socket): the RPCs over loopback
   gRPC would measure grpcio, not the simulator (see benchmarks/rpc_latency.py for that).

    .venv/bin/python benchmarks/simulate.py [--skip-day] [--profile ca|lean ...]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cloudprovider_grpc.simulator import parse_scenario, run  # noqa: E402
from cloudprovider_grpc.simulator.estimator import PodGroup  # noqa: E402
from cloudprovider_grpc.simulator.expanders import Chain, ExpanderContext  # noqa: E402
from cloudprovider_grpc.simulator.fit import StaticFitCache  # noqa: E402
from cloudprovider_grpc.simulator.model import NodeShape, effective_requests  # noqa: E402
from cloudprovider_grpc.simulator.scaleup import GroupView, plan_scale_up  # noqa: E402
from cloudprovider_grpc.simulator.scenario import AutoscalerOptions  # noqa: E402
from cloudprovider_grpc.simulator.world import workload_shape  # noqa: E402

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-day", action="store_true", help="only the scale-up decision")
    parser.add_argument(
        "--profile",
        action="append",
        choices=["ca", "lean"],
        help="RPC profile(s) of the day (default: ca, then lean)",
    )
    args = parser.parse_args()
    bench_decision()
    if not args.skip_day:
        bench_day(args.profile or ["ca", "lean"])


if __name__ == "__main__":
    main()
