"""The report of one run: its summary figures, the workloads' spans, its notes and RPC counts.

Built once, after the last loop, from the run context, the timeline and the node costs; the
figures are ones a pod or node really had (nearest-rank percentiles, no interpolation).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from cloudprovider_grpc.simulator.engine.context import RunContext
from cloudprovider_grpc.simulator.engine.costs import NodeCosts
from cloudprovider_grpc.simulator.engine.timeline import Timeline
from cloudprovider_grpc.simulator.report import Decision, Report

#: what a backend's PricingNodePrice is in, when its cloud's price list says (Vultr: USD per plan)
KNOWN_UNITS = {"vultr": "USD"}


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (no interpolation: every figure is one a pod really had)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def pending_stats(waits: list[float]) -> dict[str, float | int]:
    """How long pods waited between creation and binding; pods still pending at the end count
    with their wait so far."""
    if not waits:
        return {"pods": 0, "p50": 0.0, "p99": 0.0, "max": 0.0}
    return {
        "pods": len(waits),
        "p50": round(percentile(waits, 50), 3),
        "p99": round(percentile(waits, 99), 3),
        "max": round(max(waits), 3),
    }


def build_report(ctx: RunContext, timeline: Timeline, costs: NodeCosts) -> Report:
    """The run's Report; the costs of the nodes still registered are priced up to the last loop."""
    tl = timeline.data
    end = tl["t"][-1] if tl["t"] else 0.0
    cost = costs.summary(end, ctx.scenario.cost_unit or KNOWN_UNITS.get(ctx.provider, "price units"))
    summary = _summary(ctx, timeline, end)
    tl["workloads"] = _workload_spans(ctx)
    return Report(
        notes=_notes(ctx, ctx.rec.decisions),
        scenario=ctx.scenario.name,
        seed=ctx.seed,
        provider=ctx.provider,
        start_time=ctx.scenario.start_time,
        options=ctx.options.model_dump(by_alias=True),
        decisions=ctx.rec.decisions,
        log=ctx.rec.lines,
        timeline=tl,
        rpc_counts={
            "autoscaler": dict(sorted(ctx.client.counts.items())),
            "simulator": dict(sorted(ctx.world_client.counts.items())),
        },
        cost=cost,
        summary=summary,
    )


def _summary(ctx: RunContext, timeline: Timeline, end: float) -> dict[str, Any]:
    tl, world, decisions = timeline.data, ctx.world, ctx.rec.decisions
    kinds = Counter(d.kind for d in decisions)
    return {
        "loops": len(tl["t"]),
        "simulated_seconds": end,
        "decisions": dict(sorted(kinds.items())),
        "nodes_added": sum(d.delta for d in decisions if d.kind == "scale-up"),
        "nodes_removed": kinds.get("scale-down", 0),
        "max_pending_pods": max(tl["pending"], default=0),
        "final_nodes": {g: s[-1] for g, s in sorted(tl["nodes"].items()) if s},
        "jobs_completed": world.completed,
        "pod_pending_seconds": pending_stats(
            [*world.waits, *(end - p.created for p in world.pending.values())]
        ),
        "node_hours": timeline.node_hours(),
    }


def _workload_spans(ctx: RunContext) -> list[dict[str, Any]]:
    """Each workload's start and end, and when its Job finished."""
    finished = ctx.world.job_finish_times()
    return [
        {
            "name": w.name,
            "start": w.start,
            "end": w.end,
            "kind": w.kind,
            **({"finished": finished[w.name]} if w.name in finished else {}),
        }
        for w in ctx.scenario.workloads
    ]


def _notes(ctx: RunContext, decisions: list[Decision]) -> list[str]:
    """What a reader must know to trust the figures: CA 1.35-1.36 with groups that answer
    GetOptions take MaxNodeStartupTime 0, so booting nodes count as unready."""
    o = ctx.options
    notes = []
    zero = sorted(d.group for d in decisions if d.kind == "startup-time-zero")
    if zero:
        notes.append(
            f"CA {o.version} with node groups that answer GetOptions ({', '.join(zero)}): "
            "MaxNodeStartupTime is 0 for them, so a booting node counts as unready at once and "
            "enough of them stop autoscaling (max-total-unready-percentage "
            f"{o.max_total_unready_percentage:g}%, ok-total-unready-count "
            f"{o.ok_total_unready_count})"
        )
    return notes
