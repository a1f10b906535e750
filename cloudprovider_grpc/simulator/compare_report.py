"""compare.html and compare.csv: the variants of `simulate --compare` side by side.

The first variant is always `baseline`, the input with no variant applied, so every other one reads
as a change from it. Per variant: nodes at the end and at the peak, node-hours, cost, pod pending
time percentiles and CA's decisions by kind; a chart of the cluster's nodes over time, one line per
variant; and the decisions that differ from the baseline's (same time, group, action and node),
since two settings usually agree on most decisions and the few that differ are the answer.
The page is static (inline SVG, no script), so it needs no server and nothing can fail to load.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cloudprovider_grpc.simulator.report import Report
from cloudprovider_grpc.simulator.report_tables import csv_text, group_names, named, stamp

BASELINE = "baseline"
#: decisions listed per variant in "decisions that differ" (the count is always given)
MAX_DIFF_ROWS = 200
_COLOURS = ["#333333", "#1f77b4", "#d62728", "#2a9d3a", "#7b3fb0", "#e69500", "#17becf", "#8c564b"]
_FAILED = ("scale-up-failed", "scale-up-timeout", "scale-up-error")


def total_nodes(r: Report) -> list[int]:
    nodes = r.timeline.get("nodes", {})
    return [sum(s[i] for s in nodes.values()) for i in range(len(r.timeline.get("t", [])))]


def figures(r: Report) -> dict[str, Any]:
    """One variant's row, as numbers."""
    wait = r.summary.get("pod_pending_seconds", {})
    totals = total_nodes(r)
    kinds = Counter(d.kind for d in r.decisions)
    return {
        "final_nodes": totals[-1] if totals else 0,
        "peak_nodes": max(totals, default=0),
        "node_hours": r.summary.get("node_hours", 0.0),
        "cost": r.cost["total"] if r.cost else None,
        "cost_unit": r.cost.get("unit", "") if r.cost else "",
        "pending_p50_s": wait.get("p50", 0.0),
        "pending_p99_s": wait.get("p99", 0.0),
        "pending_max_s": wait.get("max", 0.0),
        "max_pending_pods": r.summary.get("max_pending_pods", 0),
        "scale_ups": kinds.get("scale-up", 0),
        "nodes_added": r.summary.get("nodes_added", 0),
        "scale_downs": kinds.get("scale-down", 0),
        "failed_scale_ups": sum(kinds.get(k, 0) for k in _FAILED),
    }


def _key(d: Any) -> tuple[float, str, str, int, str]:
    return (d.t, d.kind, d.group, d.delta, d.node)


def differing(base: Report, other: Report) -> tuple[list[Any], list[Any]]:
    """Decisions only the baseline made, and only `other` made (as multisets, in time order)."""
    a, b = Counter(_key(d) for d in base.decisions), Counter(_key(d) for d in other.decisions)
    only_a, only_b = a - b, b - a
    return _pick(base.decisions, only_a), _pick(other.decisions, only_b)


def _pick(decisions: Sequence[Any], wanted: Counter[tuple[float, str, str, int, str]]) -> list[Any]:
    left = Counter(wanted)
    out = []
    for d in decisions:
        k = _key(d)
        if left[k] > 0:
            left[k] -= 1
            out.append(d)
    return out


def write_csv(names: Sequence[str], reports: Sequence[Report], path: Path) -> str:
    rows = [figures(r) for r in reports]
    header = ["variant", *rows[0]] if rows else ["variant"]
    body = [[n, *("" if v is None else v for v in row.values())] for n, row in zip(names, rows, strict=True)]
    path.write_text(csv_text(header, body), encoding="utf-8")
    return f"wrote {path}"


def _fmt_s(seconds: float) -> str:
    return f"{seconds:.0f}s" if seconds < 600 else f"{seconds / 60:.1f} min"


def _chart(names: Sequence[str], reports: Sequence[Report]) -> str:
    """Total nodes over time, one polyline per variant, as inline SVG."""
    w, h, left, bottom = 1000, 220, 44, 22
    end = max((r.timeline.get("t", [0])[-1] for r in reports if r.timeline.get("t")), default=1.0) or 1.0
    top = max((max(total_nodes(r), default=0) for r in reports), default=1) or 1
    top = int(top * 1.15) + 1

    def x(t: float) -> float:
        return left + (w - left - 10) * t / end

    def y(v: float) -> float:
        return h - bottom - (h - bottom - 8) * v / top

    parts = [f'<svg width="{w}" height="{h}" role="img" aria-label="nodes over time per variant">']
    for v in range(0, top + 1, max(1, top // 4)):
        parts.append(f'<line x1="{left}" x2="{w - 10}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#eee"/>')
        parts.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" font-size="11" text-anchor="end">{v}</text>')
    for k in range(0, 7):
        t = end * k / 6
        parts.append(
            f'<text x="{x(t):.1f}" y="{h - 5}" font-size="11" text-anchor="middle">{stamp(t)}</text>'
        )
    for i, (name, r) in enumerate(zip(names, reports, strict=True)):
        ts, totals = r.timeline.get("t", []), total_nodes(r)
        pts = []
        for j, t in enumerate(ts):
            nxt = ts[j + 1] if j + 1 < len(ts) else t
            pts.append(f"{x(t):.1f},{y(totals[j]):.1f} {x(nxt):.1f},{y(totals[j]):.1f}")
        colour = _COLOURS[i % len(_COLOURS)]
        dash = ' stroke-dasharray="6,3"' if name == BASELINE else ""
        parts.append(
            f'<polyline class="variant-line" fill="none" stroke="{colour}" stroke-width="1.8"{dash} '
            f'points="{" ".join(pts)}"><title>{html.escape(name)}</title></polyline>'
        )
    parts.append("</svg>")
    legend = "".join(
        f'<span><i style="background:{_COLOURS[i % len(_COLOURS)]}"></i>{html.escape(n)}</span>'
        for i, n in enumerate(names)
    )
    return f'<div class="legend">{legend}</div>{"".join(parts)}'


def _diff_section(names: Sequence[str], reports: Sequence[Report]) -> str:
    base = reports[0]
    out = ["<h2>decisions that differ from the baseline</h2>"]
    for name, r in zip(names[1:], reports[1:], strict=True):
        only_base, only_here = differing(base, r)
        gnames = group_names(r.to_dict()) | group_names(base.to_dict())
        rows = []
        for who, ds in ((BASELINE, only_base), (name, only_here)):
            for d in ds[:MAX_DIFF_ROWS]:
                action = d.kind + (f" {d.delta:+d}" if d.delta else "") + (f" {d.node}" if d.node else "")
                rows.append(
                    f"<tr><td>{html.escape(who)}</td><td>{stamp(d.t)}</td>"
                    f"<td>{html.escape(gnames.get(d.group, d.group))}</td><td>{html.escape(action)}</td>"
                    f"<td>{html.escape(named(d.reason, gnames))}</td></tr>"
                )
        shown = min(len(only_base), MAX_DIFF_ROWS) + min(len(only_here), MAX_DIFF_ROWS)
        more = len(only_base) + len(only_here) - shown
        head = (
            f"<h3>{html.escape(name)}: {len(only_here)} decision(s) the baseline did not make, "
            f"{len(only_base)} it made that {html.escape(name)} did not</h3>"
        )
        if not rows:
            out.append(head + "<p>the same decisions as the baseline</p>")
            continue
        out.append(
            head + '<table class="diff"><thead><tr><th>only in</th><th>time</th><th>group</th>'
            f"<th>action</th><th>CA's reason</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
            + (f"<p>{more} more not listed (each variant's report.json has them all)</p>" if more else "")
        )
    return "".join(out)


_CSS = (
    "body{font:14px/1.4 system-ui,sans-serif;margin:16px 24px;color:#222;max-width:1200px}"
    "h1{font-size:20px}h2{font-size:16px;margin-top:22px}h3{font-size:14px}"
    "table{border-collapse:collapse;font-size:13px}td,th{padding:3px 10px;border-top:1px solid #eee;"
    "text-align:right;vertical-align:top}td:first-child,th:first-child{text-align:left}"
    "table.diff td,table.diff th{text-align:left}.legend span{margin-right:14px;font-size:12px}"
    ".legend i{display:inline-block;width:18px;height:3px;margin-right:4px;vertical-align:middle}"
    "tr.baseline td{font-weight:600}"
)


def render(names: Sequence[str], reports: Sequence[Report]) -> str:
    rows = [figures(r) for r in reports]
    units = sorted({str(f["cost_unit"]) for f in rows if f["cost_unit"]})
    cost_head = f"cost ({', '.join(units)})" if units else "cost"
    head = [
        "variant", "nodes at end", "peak nodes", "node-hours", cost_head, "pending p50", "p99",
        "max", "max pending pods", "scale-ups (+nodes)", "scale-downs", "failed scale-ups",
    ]  # fmt: skip
    body = []
    # over a recording with CA's own account: how each variant agrees with what CA really did
    agreed = any(r.agreement for r in reports)
    if agreed:
        head.append("matched CA's decisions")
    for name, f, r in zip(names, rows, reports, strict=True):
        cells = [
            name, f["final_nodes"], f["peak_nodes"], f"{f['node_hours']:.2f}",
            "n/a" if f["cost"] is None else f"{f['cost']:.2f}", _fmt_s(f["pending_p50_s"]),
            _fmt_s(f["pending_p99_s"]), _fmt_s(f["pending_max_s"]), f["max_pending_pods"],
            f"{f['scale_ups']} (+{f['nodes_added']})", f["scale_downs"], f["failed_scale_ups"],
        ]  # fmt: skip
        if agreed:
            cells.append(_matched(r.agreement))
        cls = ' class="baseline"' if name == BASELINE else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    first = reports[0]
    title = html.escape(f"{first.scenario}: {len(names)} variants compared")
    sub = html.escape(
        f"seed {first.seed}, {first.provider}, from {first.start_time.isoformat()}; "
        "each variant's own report is in its directory"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title><style>{_CSS}</style></head><body><h1>{title}</h1>"
        f'<div class="sub">{sub}</div><table id="variants"><thead><tr>'
        + "".join(f"<th>{html.escape(h)}</th>" for h in head)
        + f"</tr></thead><tbody>{''.join(body)}</tbody></table>"
        + (
            f'<p class="agreement">{html.escape(BASELINE)}: {html.escape(first.agreement["line"])}</p>'
            if first.agreement
            else ""
        )
        + "<h2>nodes in the cluster over time</h2>"
        + _chart(names, reports)
        + _diff_section(names, reports)
        + "</body></html>\n"
    )


def _matched(agreement: dict[str, Any] | None) -> str:
    if not agreement:
        return "n/a"
    return f"{agreement['counts']['matched']} of {agreement['ca_decisions']}"


def write(out: Path, names: Sequence[str], reports: Sequence[Report]) -> list[str]:
    """compare.html and compare.csv in `out`; returns the lines to print."""
    (out / "compare.html").write_text(render(names, reports), encoding="utf-8")
    return [f"wrote {out / 'compare.html'}", write_csv(names, reports, out / "compare.csv")]
