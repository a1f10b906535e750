"""The report's tables: every decision (report.html), and the per-loop series (series.csv).

The decision table is static HTML, so it prints, reads with a keyboard or a screen reader and
works on touch screens; a few lines of script in the page filter its rows without a server. Each
row: the simulated time, the node group by the name people know it by, the action, CA's reason in
its own words, and for a scale-up every group CA considered with what became of it (chosen,
dropped by an expander and why, or skipped before the expanders and why) - the expander's inputs.

The series are one row per loop: pending pods, then nodes, unready nodes and CA's target size per
group, and the cost so far, for analysis elsewhere.
"""

from __future__ import annotations

import csv
import html
import io
import re
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any


def group_names(data: Mapping[str, Any]) -> dict[str, str]:
    """Group id -> the name shown for it (the cloud's name where it has one, else the id)."""
    groups = data.get("timeline", {}).get("groups", {}) or {}
    names = {gid: str(b.get("name") or gid) for gid, b in groups.items()}
    for gid in data.get("timeline", {}).get("nodes", {}) or {}:
        names.setdefault(gid, gid)
    return names


def named(text: str, names: Mapping[str, str]) -> str:
    """`text` with every group id that has a different name replaced by that name."""
    ids = sorted((g for g, n in names.items() if n != g), key=len, reverse=True)
    if not ids or not text:
        return text
    pattern = re.compile("|".join(re.escape(g) for g in ids))
    return pattern.sub(lambda m: names[m.group(0)], text)


def stamp(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _action(d: Mapping[str, Any]) -> str:
    delta = d.get("delta") or 0
    what = str(d.get("kind", ""))
    if delta:
        what += f" {delta:+d}"
    if d.get("node"):
        what += f" {d['node']}"
    return what


def _considered(d: Mapping[str, Any], names: Mapping[str, str]) -> str:
    """The groups a scale-up (or a refused one) looked at, as a list."""
    inputs = d.get("inputs") or {}
    items: list[str] = []
    for o in inputs.get("considered") or []:
        g = names.get(o.get("group", ""), o.get("group", ""))
        verdict = named(str(o.get("verdict", "")), names)
        items.append(
            f"<li><b>{html.escape(g)}</b>: {html.escape(verdict)} "
            f"({o.get('node_count', 0)} node(s) for {o.get('pods', 0)} pod(s))</li>"
        )
    for gid, why in sorted((inputs.get("skipped_groups") or {}).items()):
        g = names.get(gid, gid)
        items.append(f"<li><b>{html.escape(g)}</b>: skipped, {html.escape(named(str(why), names))}</li>")
    return f'<ul class="considered">{"".join(items)}</ul>' if items else ""


def _reason(d: Mapping[str, Any], names: Mapping[str, str]) -> str:
    text = named(str(d.get("reason", "")), names)
    until = (d.get("inputs") or {}).get("backoff_until")
    if isinstance(until, int | float):
        text += f" (group backed off until {stamp(float(until))})"
    return text


def decision_table(data: Mapping[str, Any]) -> str:
    """Every decision of the report as one table row, with a filter box and an action filter."""
    names = group_names(data)
    decisions = data.get("decisions") or []
    kinds = sorted({str(d.get("kind", "")) for d in decisions})
    options = "".join(f'<option value="{html.escape(k)}">{html.escape(k)}</option>' for k in kinds)
    rows = []
    for d in decisions:
        gid = str(d.get("group", ""))
        g = names.get(gid, gid)
        title = f' title="{html.escape(gid)}"' if g != gid else ""
        rows.append(
            f'<tr data-kind="{html.escape(str(d.get("kind", "")))}">'
            f"<td>{stamp(float(d.get('t', 0)))}</td><td>{d.get('loop', 0)}</td>"
            f"<td{title}>{html.escape(g)}</td><td>{html.escape(_action(d))}</td>"
            f"<td>{html.escape(_reason(d, names))}</td>"
            f"<td>{_considered(d, names)}</td></tr>"
        )
    return (
        '<h2 id="decisions-heading">decisions</h2>'
        '<div class="filters"><label>filter <input id="decision-filter" type="search" '
        'placeholder="group, action or reason"></label> '
        f'<label>action <select id="decision-kind"><option value="">all</option>{options}</select></label> '
        f'<span id="decision-count">{len(decisions)} of {len(decisions)}</span></div>'
        '<table id="decisions" class="decisions"><thead><tr><th>time</th><th>loop</th><th>group</th>'
        "<th>action</th><th>CA's reason</th><th>groups considered</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def series(data: Mapping[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """The per-loop series: header and rows (see the module docstring).

    The cost so far prices each group's node-seconds at the group's average over the run (its cost
    from PricingNodePrice over its node-hours), so the last row matches the report's total."""
    tl = data.get("timeline", {}) or {}
    ts = tl.get("t", []) or []
    names = group_names(data)
    gids = sorted(tl.get("nodes", {}) or {})
    start = data.get("start_time")
    t0 = datetime.fromisoformat(start) if isinstance(start, str) else None
    cost = data.get("cost")
    rate: dict[str, float] = {}
    if cost:
        for gid in gids:
            node_s = sum(
                n * (ts[i + 1] - ts[i]) for i, n in enumerate(tl["nodes"][gid][:-1]) if i + 1 < len(ts)
            )
            spent = float((cost.get("per_group") or {}).get(gid, 0.0))
            rate[gid] = spent / node_s if node_s else 0.0
    header = ["t_seconds", "time", "pending_pods"]
    for gid in gids:
        n = names.get(gid, gid)
        header += [f"nodes[{n}]", f"unready[{n}]", f"target[{n}]"]
    header.append("cost_so_far")  # empty without pricing
    rows: list[list[Any]] = []
    so_far = 0.0
    for i, t in enumerate(ts):
        if i and cost:
            so_far += sum(rate[g] * tl["nodes"][g][i - 1] * (t - ts[i - 1]) for g in gids)
        when = (t0 + timedelta(seconds=t)).strftime("%Y-%m-%dT%H:%M:%SZ") if t0 else ""
        row: list[Any] = [_num(t), when, tl.get("pending", [0] * len(ts))[i]]
        for gid in gids:
            target = (tl.get("target", {}).get(gid) or [None] * len(ts))[i]
            unready = (tl.get("unready", {}).get(gid) or [0] * len(ts))[i]
            row += [tl["nodes"][gid][i], unready, "" if target is None else target]
        row.append(f"{so_far:.6f}" if cost else "")
        rows.append(row)
    return header, rows


def _num(x: float) -> str:
    return f"{x:g}" if x == int(x) else f"{x:.3f}"


def csv_text(header: list[str], rows: Iterable[list[Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


def write_series(data: Mapping[str, Any], path: Path) -> str:
    header, rows = series(data)
    path.write_text(csv_text(header, rows), encoding="utf-8")
    return f"wrote {path}"


def changes_table(data: Mapping[str, Any]) -> str:
    """The values the panels' hover shows, as a table of the loops where one of them changed."""
    header, rows = series(data)
    keep = header[:-1]  # the cost so far grows every loop with nodes: it is in series.csv
    out = []
    prev: list[Any] | None = None
    for row in rows:
        key = row[2 : len(keep)]
        if prev is None or key != prev:
            cells = "".join(f"<td>{html.escape(str(c))}</td>" for c in [stamp(float(row[0])), *key])
            out.append(f"<tr>{cells}</tr>")
        prev = key
    head = "".join(f"<th>{html.escape(h)}</th>" for h in ["time", *keep[2:]])
    return (
        '<details id="values"><summary>values at every change (what the panels show on hover; '
        "every loop is in series.csv)</summary>"
        f'<table class="values"><thead><tr>{head}</tr></thead><tbody>{"".join(out)}</tbody></table>'
        "</details>"
    )


def _one(d: Mapping[str, Any] | None, names: Mapping[str, str]) -> tuple[str, str]:
    """A decision of either side as (time, what) cells."""
    if not d:
        return "", ""
    gid = str(d.get("group") or "")
    what = _action(d) + (f" in {names.get(gid, gid)}" if gid else "")
    return stamp(float(d.get("t", 0))), what


def agreement_table(data: Mapping[str, Any]) -> str:
    """The agreement with the real cluster-autoscaler (agreement.py): its line, then one row per
    CA decision with the simulation's counterpart, and the simulation's extra decisions."""
    a = data.get("agreement")
    if not a:
        return ""
    names = group_names(data)
    rows = []
    for r in a.get("rows") or []:
        ca_t, ca_what = _one(r.get("ca"), names)
        sim_t, sim_what = _one(r.get("simulated"), names)
        offset = r.get("offset")
        by = "" if offset is None else f"{offset:+g}s"
        cells = [r["outcome"], ca_t, ca_what, sim_t, sim_what, by]
        rows.append(
            f'<tr data-outcome="{html.escape(r["outcome"])}">'
            + "".join(f"<td>{html.escape(c)}</td>" for c in cells)
            + "</tr>"
        )
    head = ["outcome", "CA's time", "CA decided", "simulated time", "the simulation decided", "offset"]
    return (
        '<h2 id="agreement-heading">agreement with cluster-autoscaler</h2>'
        f'<p class="agreement">{html.escape(str(a.get("line", "")))}; CA\'s decisions read from '
        f"{html.escape(str(a.get('source', '')))}, drawn as hollow markers on the panels above"
        + (", with CA's target size from its status ConfigMap as a solid line" if a.get("ca_targets") else "")
        + "</p>"
        '<table id="agreement" class="decisions"><thead><tr>'
        + "".join(f"<th>{html.escape(h)}</th>" for h in head)
        + f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )
