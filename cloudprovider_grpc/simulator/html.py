"""report.html: the run in a browser, as one self-contained file (no network when viewed).

The page carries the report's timeline and decisions as JSON and draws them with a small script
of its own into SVG: one panel per node group (ready and unready nodes, CA's target size, min and
max size, each decision as a marker whose tooltip gives CA's reason, back-offs as shaded spans),
a pending-pods panel with each workload's start and end, and a summary with the cost in its unit.
Hovering a panel shows the values at that moment. A replay with the real cluster-autoscaler's
own account also shows CA's decisions on the panels (hollow markers along the top) and the
agreement table (agreement.py). Below the panels, the same facts without a
pointer: a table of every decision (filterable in the page) and the values at every change
(report_tables.py).
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from cloudprovider_grpc.simulator.report_tables import agreement_table, changes_table, decision_table

#: decision kinds drawn as markers: kind -> (shape, colour)
MARKS = {
    "scale-up": ("up", "#2a9d3a"),
    "scale-down": ("down", "#7b3fb0"),
    "scale-up-failed": ("x", "#d62728"),
    "scale-up-timeout": ("x", "#d62728"),
    "scale-up-error": ("x", "#d62728"),
    "delete-unregistered": ("down", "#8c564b"),
    "fix-node-group-size": ("diamond", "#8c564b"),
    "scale-down-failed": ("x", "#d62728"),
    "startup-time-zero": ("diamond", "#e69500"),
}
BACKOFF_KINDS = ("scale-up-failed", "scale-up-timeout", "scale-up-error")

_HERE = Path(__file__).parent


_LEGEND = (
    '<div class="legend"><span><i style="background:#1f77b4;opacity:.45"></i>ready nodes</span>'
    '<span><i style="background:#ff9f1c;opacity:.7"></i>unready / booting nodes</span>'
    '<span><i style="border-top:2px dashed #1f4e8c;height:0"></i>target size (CA)</span>'
    '<span><i style="border-top:2px dotted #555;height:0"></i>min / max size</span>'
    '<span><i style="background:#d62728;opacity:.2"></i>back-off</span>'
    '<span style="color:#2a9d3a">&#9650; scale-up</span><span style="color:#7b3fb0">&#9660; scale-down</span>'
    '<span style="color:#d62728">&#10006; failed</span>'
    "<span>hover a marker for CA's reason; every decision is in the table below</span></div>"
)


def _asset(name: str) -> str:
    """The page's own script and styles, shipped beside this module and inlined into every page."""
    return (_HERE / name).read_text(encoding="utf-8")


def _json_script(ident: str, value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":")).replace("</", "<\\/")
    return f'<script type="application/json" id="{ident}">{text}</script>'


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.1f} min"


def render(data: dict[str, Any]) -> str:
    """The page for a report's `to_dict()`."""
    s = data.get("summary", {})
    cost = data.get("cost")
    rows = [
        ("simulated", f"{s.get('simulated_seconds', 0) / 3600:.2f} h in {s.get('loops', 0)} loops"),
        ("nodes added / removed", f"{s.get('nodes_added', 0)} / {s.get('nodes_removed', 0)}"),
        ("node-hours", f"{s.get('node_hours', 0):.2f}"),
        (
            "estimated cost",
            f"{cost['total']:.2f} {cost.get('unit', '')} ({cost.get('basis', '')})"
            if cost
            else "unavailable (the server answers no PricingNodePrice)",
        ),
        ("max pending pods", str(s.get("max_pending_pods", 0))),
    ]
    wait = s.get("pod_pending_seconds")
    if wait and wait.get("pods"):
        rows.append(
            (
                "pod pending time",
                f"p50 {_minutes(wait['p50'])}, p99 {_minutes(wait['p99'])}, max {_minutes(wait['max'])} "
                f"over {wait['pods']} pods",
            )
        )
    table = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in data.get("notes", []))
    title = html.escape(f"{data.get('scenario', '')}: simulated cluster-autoscaler decisions")
    sub = html.escape(
        f"seed {data.get('seed')}, {data.get('provider')}, from {data.get('start_time', '')}, "
        f"expander {data.get('options', {}).get('expander', '')}"
    )
    view = {k: data.get(k) for k in ("timeline", "decisions", "start_time")}
    # the real cluster-autoscaler's decisions, drawn on the same panels (a replay with its account)
    agreement = data.get("agreement") or {}
    view["ca_decisions"] = [r["ca"] for r in agreement.get("rows", []) if r.get("ca")]
    view["ca_targets"] = agreement.get("ca_targets", [])
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title><style>{_asset('report_page.css')}</style></head><body>"
        f'<h1>{title}</h1><div class="sub">{sub}</div><table>{table}</table>'
        + (f'<h2>notes</h2><ul class="notes">{notes}</ul>' if notes else "")
        + f'{_LEGEND}<div id="panels"></div><div class="tip" id="tip"></div>'
        + agreement_table(data)
        + decision_table(data)
        + changes_table(data)
        + _json_script("report-data", view)
        + _json_script("marks", MARKS)
        + _json_script("backoff-kinds", list(BACKOFF_KINDS))
        + f"<script>{_asset('report_page.js')}</script></body></html>\n"
    )


def write_html(data: dict[str, Any], path: Path) -> str:
    path.write_text(render(data), encoding="utf-8")
    return f"wrote {path}"
