"""What a run produces: the decision log, report.json and timeline.png.

The report holds only virtual time and values derived from the scenario, the seed and the
server's answers, so the same scenario and seed give a byte-identical report.json (wall-clock
figures are kept out on purpose; benchmarks print them instead).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any


@dataclass
class Decision:
    """One thing the autoscaler decided (or decided not to do), with its inputs and reason."""

    t: float  # virtual seconds since the scenario start
    loop: int
    kind: str  # scale-up, scale-up-failed, scale-up-error, no-scale-up, node-unneeded, scale-down, ...
    group: str = ""
    delta: int = 0
    node: str = ""
    reason: str = ""
    inputs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Report:
    """The outcome of one simulation; `to_json()` is report.json."""

    scenario: str
    seed: int
    provider: str
    start_time: datetime
    options: dict[str, Any]
    decisions: list[Decision] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    timeline: dict[str, Any] = field(default_factory=dict)
    rpc_counts: dict[str, dict[str, int]] = field(default_factory=dict)
    cost: dict[str, Any] | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    #: what a scenario built from a cluster could not carry over, and model caveats of this run
    notes: list[str] = field(default_factory=list)
    #: how the decisions agree with the real cluster-autoscaler's over a recording (agreement.py)
    agreement: dict[str, Any] | None = None

    def of_kind(self, kind: str) -> list[Decision]:
        return [d for d in self.decisions if d.kind == kind]

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "seed": self.seed,
            "provider": self.provider,
            "start_time": self.start_time.isoformat(),
            "options": self.options,
            "summary": self.summary,
            "decisions": [asdict(d) for d in self.decisions],
            "timeline": self.timeline,
            "rpc_counts": self.rpc_counts,
            "cost": self.cost,
            "log": self.log,
            **({"notes": self.notes} if self.notes else {}),
            **({"agreement": self.agreement} if self.agreement is not None else {}),
        }

    def to_json(self) -> str:
        return _json(self.to_dict())

    def write(self, out_dir: str | Path, plot: bool = True) -> list[str]:
        """Write report.json, report.html, series.csv (one row per loop) and timeline.png (when
        matplotlib is installed); returns notes."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        data = self.to_dict()  # once for the three files: an hour's decisions take a while
        (out / "report.json").write_text(_json(data), encoding="utf-8")
        notes = [f"wrote {out / 'report.json'}"]
        from cloudprovider_grpc.simulator.html import write_html

        notes.append(write_html(data, out / "report.html"))
        from cloudprovider_grpc.simulator.report_tables import write_series

        notes.append(write_series(data, out / "series.csv"))
        if plot:
            notes.append(write_timeline(self, out / "timeline.png"))
        return notes


def _json(data: dict[str, Any]) -> str:
    """report.json's text: stable key order, so equal runs give equal files."""
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


class Recorder:
    """Collects decisions and CA-style log lines stamped with virtual time."""

    def __init__(self, start: datetime, echo: Callable[[str], None] | None = None) -> None:
        self.start = start
        self.echo = echo
        self.decisions: list[Decision] = []
        self.lines: list[str] = []
        self.loop = 0
        self.t = 0.0

    def stamp(self, t: float) -> str:
        return (self.start + timedelta(seconds=t)).strftime("%H:%M:%S")

    def line(self, text: str) -> None:
        entry = f"[{self.stamp(self.t)}] loop {self.loop}: {text}"
        self.lines.append(entry)
        if self.echo is not None:
            self.echo(entry)

    def decide(self, kind: str, **kw: Any) -> Decision:
        d = Decision(self.t, self.loop, kind, **kw)
        self.decisions.append(d)
        return d


#: decision kinds drawn on a group's panel: kind -> (marker, colour, legend label)
MARKERS = {
    "scale-up": ("^", "tab:green", "scale-up (+nodes)"),
    "scale-down": ("v", "tab:purple", "scale-down (node)"),
    "scale-up-failed": ("X", "tab:red", "failed / timed out / error"),
    "scale-up-timeout": ("X", "tab:red", "failed / timed out / error"),
    "scale-up-error": ("X", "tab:red", "failed / timed out / error"),
    "delete-unregistered": ("v", "tab:brown", "unregistered node deleted"),
    "fix-node-group-size": ("d", "tab:brown", "target size fixed"),
}
MAX_PANELS = 8  # more groups than this share one panel (one line each) instead of a panel each


def hmm(seconds: float, with_seconds: bool = False) -> str:
    """Virtual time as h:mm (h:mm:ss when asked, or when not on a whole minute)."""
    s = round(seconds)
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}:{m:02d}" if sec == 0 and not with_seconds else f"{h}:{m:02d}:{sec:02d}"


def tick_step(duration: float) -> float:
    """A readable tick spacing (seconds) giving at most about 12 ticks over the run."""
    for step in (10, 15, 30, 60, 120, 300, 600, 900, 1200, 1800, 3600, 7200, 10800, 14400, 21600, 43200):
        if duration / step <= 12:
            return float(step)
    return 86400.0


def marker_events(decisions: list[Decision], window: float = 0.0) -> dict[str, list[tuple[float, str, str]]]:
    """Per group: (time, kind, label) with decisions of one kind at one time merged, so ten empty
    nodes removed together give one marker reading "-10: general-0, general-1, general-2 +7 more".
    With a `window`, decisions of one kind up to that many seconds after the first of a run of
    them merge into it too (one label for removals a few loops apart)."""
    merged: dict[tuple[str, float, str], list[Decision]] = {}
    first: dict[tuple[str, str], float] = {}
    for d in sorted(decisions, key=lambda d: d.t):
        if d.kind in MARKERS and d.group:
            start = first.get((d.group, d.kind))
            if start is None or d.t - start > window:
                start = first[(d.group, d.kind)] = d.t
            merged.setdefault((d.group, start, d.kind), []).append(d)
    out: dict[str, list[tuple[float, str, str]]] = {}
    for (group, t, kind), ds in sorted(merged.items()):
        if kind == "scale-up":
            label = f"+{sum(d.delta for d in ds)}"
        elif kind in ("scale-down", "delete-unregistered"):
            # names listed, never "a … b": node names are not ordered, so that reads as a range
            names = [_short(d.node) for d in ds if d.node]
            label = f"-{len(ds)}"
            if names:
                label += ": " + ", ".join(names[:3]) + (f" +{len(names) - 3} more" if len(names) > 3 else "")
        elif kind == "fix-node-group-size":
            label = f"{sum(d.delta for d in ds)} (size fixed)"
        elif kind == "scale-up-failed":
            label = f"{sum(d.delta for d in ds)} failed ({ds[0].reason})"
        else:
            label = kind.removeprefix("scale-up-")
        out.setdefault(group, []).append((t, kind, label))
    return out


def backoff_spans(decisions: list[Decision]) -> dict[str, list[tuple[float, float]]]:
    """Per group: (from, until) of every back-off a failed, timed-out or refused scale-up started."""
    out: dict[str, list[tuple[float, float]]] = {}
    for d in decisions:
        until = d.inputs.get("backoff_until")
        if d.kind.startswith("scale-up-") and d.group and isinstance(until, int | float):
            out.setdefault(d.group, []).append((d.t, float(until)))
    return out


def workload_marks(workloads: list[dict[str, Any]], end: float) -> list[tuple[float, str]]:
    """(time, "web starts"/"web ends") inside the run; a start at 0 is the run's own start. A Job
    without a set end ends when its last pod completed (`finished`)."""
    marks = []
    for w in workloads:
        ends = w.get("end") if w.get("end") is not None else w.get("finished")
        for t, what in ((w.get("start"), "starts"), (ends, "ends")):
            if t is not None and 0 < t <= end:
                marks.append((float(t), f"{w['name']} {what}"))
    return sorted(marks)


def _short(name: str, limit: int = 22) -> str:
    """A node name short enough for a marker label (clouds' instance ids can be long)."""
    return name if len(name) <= limit else f"{name[: limit // 2 - 1]}…{name[-(limit // 2 - 1) :]}"


def write_timeline(report: Report, path: Path) -> str:
    """The run as an operator reads it: one panel per node group (target size vs ready nodes, max
    size, a marker at every scale decision) over a pending-pods panel, time as h:mm, the legend
    above the data. matplotlib is the optional `plot` extra."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return (
            "timeline.png not written: matplotlib is not installed "
            "(pip install 'cloudprovider-grpc[plot]' to get it)"
        )
    tl = report.timeline
    ts = list(tl.get("t", []))
    nodes: dict[str, list[int]] = tl.get("nodes", {})
    bounds: dict[str, dict[str, int]] = tl.get("groups", {})
    groups = sorted(set(nodes) | set(bounds))
    shared = len(groups) > MAX_PANELS
    rows = (1 if shared else max(1, len(groups))) + 1
    heights = [2.0] * (rows - 1) + [1.4]
    height = 1.3 + sum(heights)
    fig, axes = plt.subplots(
        rows, 1, sharex=True, figsize=(12, height), gridspec_kw={"height_ratios": heights}
    )
    end = ts[-1] if ts else 0.0
    seen_kinds: dict[str, tuple[str, str]] = {}
    if shared:
        _shared_panel(axes[0], groups, ts, nodes)
    else:
        panel = _Panels(
            ts,
            end,
            tl.get("target", {}),
            bounds,
            marker_events(report.decisions),
            marker_events(report.decisions, window=0.03 * (ts[-1] if ts else 0.0)),
            backoff_spans(report.decisions),
            seen_kinds,
        )
        for i, group in enumerate(groups):
            panel.draw(axes[i], group, nodes.get(group, [0] * len(ts)))
    _pending_panel(axes[-1], ts, tl, end)
    _title_and_legend(fig, report, shared, seen_kinds, height)
    fig.tight_layout(rect=(0.0, 0.0, 1.0, 1.0 - 0.5 / height))
    # no Software entry keeps the PNG bytes independent of the matplotlib version
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    return f"wrote {path}"


def _shared_panel(ax: Any, groups: list[str], ts: list[float], nodes: dict[str, list[int]]) -> None:
    """More groups than MAX_PANELS: one line each in a single panel, named in its legend."""
    for group in groups:
        ax.step(ts, nodes.get(group, [0] * len(ts)), where="post", label=group)
    ax.set_ylabel("ready nodes")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", title="group")
    ax.text(
        0.01,
        0.95,
        f"{len(groups)} groups: one line each (more than {MAX_PANELS}: no panel per group)",
        transform=ax.transAxes,
        fontsize=8,
        va="top",
    )


@dataclass
class _Panels:
    """What every group panel draws from: the timeline's columns, the decisions' markers, labels
    and back-off spans; `seen_kinds` collects the legend's marker kinds."""

    ts: list[float]
    end: float
    targets: dict[str, list[int | None]]
    bounds: dict[str, dict[str, int]]
    events: dict[str, list[tuple[float, str, str]]]
    labels: dict[str, list[tuple[float, str, str]]]
    backoffs: dict[str, list[tuple[float, float]]]
    seen_kinds: dict[str, tuple[str, str]]

    def draw(self, ax: Any, group: str, ready: list[int]) -> None:
        """One group's panel: target size (dashed) over ready nodes, max size, back-offs,
        decisions with their labels, the group's name and bounds above it."""
        from matplotlib.ticker import MultipleLocator

        ts = self.ts
        target = [float("nan") if v is None else v for v in self.targets.get(group, [None] * len(ts))]
        ax.step(ts, target, where="post", color="tab:blue", linestyle="--", linewidth=1.4)
        ax.step(ts, ready, where="post", color="tab:blue", linewidth=2.2, alpha=0.55)
        top = max([*ready, *(v for v in target if v == v), 1])
        b = self.bounds.get(group)
        off_scale = ""
        if b is not None:
            if b["max_size"] <= 2 * top + 2:  # a far-away max would flatten the lines
                ax.axhline(b["max_size"], color="0.55", linestyle=":", linewidth=1)
                top = max(top, b["max_size"])
            else:
                off_scale = " above the scale"

        def level_at(t: float) -> float:
            k = min(range(len(ts)), key=lambda j: abs(ts[j] - t)) if ts else 0
            return target[k] if ts and target[k] == target[k] else (ready[k] if ts else 0)

        self._markers(ax, group, level_at)
        self._labels(ax, group, level_at)
        ax.set_ylim(-0.3, top * 1.25 + 0.5)
        ax.yaxis.set_major_locator(MultipleLocator(max(1, round(top / 4))))
        size = f"  (min {b['min_size']}, max {b['max_size']}{off_scale})" if b is not None else ""
        # the group's name above its panel: long ids (UUIDs, ASG ids) would squeeze a side label
        name = b.get("name") if b is not None else None
        ax.set_title(f"{name} ({group}){size}" if name else f"{group}{size}", loc="left", fontsize=9, pad=3)
        ax.set_ylabel("nodes", fontsize=8)
        ax.grid(axis="x", color="0.9")

    def _markers(self, ax: Any, group: str, level_at: Callable[[float], float]) -> None:
        for t0, until in self.backoffs.get(group, []):
            ax.axvspan(t0, min(until, self.end), color="tab:red", alpha=0.1, linewidth=0)
            self.seen_kinds.setdefault("back-off", ("s", "#f4c7c7"))
        for t, kind, _ in self.events.get(group, []):
            marker, colour, legend = MARKERS[kind]
            self.seen_kinds[legend] = (marker, colour)
            ax.plot([t], [level_at(t)], marker=marker, color=colour, markersize=9, linestyle="none", zorder=5)

    def _labels(self, ax: Any, group: str, level_at: Callable[[float], float]) -> None:
        """One label per run of decisions (within 3% of the run's length); each takes the lowest
        level where it overlaps no label already placed, a label spanning about 6 px per
        character of the panel's ~1000 px, converted to time."""
        end = self.end
        per_char = max(end, 1.0) * 6.0 / 1000.0
        placed: list[tuple[float, float, int]] = []
        for t, kind, label in self.labels.get(group, []):
            marker, colour, _ = MARKERS[kind]
            right_half = t > 0.55 * max(end, 1.0)  # labels there grow leftwards, inside the panel
            width = per_char * (len(label) + 2)
            lo, hi = (t - width, t) if right_half else (t, t + width)
            stack = 0
            while any(a < hi and lo < b and lvl == stack for a, b, lvl in placed):
                stack += 1
            placed.append((lo, hi, stack))
            ax.annotate(
                label,
                (t, level_at(t)),
                ha="right" if right_half else "left",
                # failures below their marker, everything else above; close ones stacked
                xytext=((-5 if right_half else 5), (-14 - 11 * stack) if marker == "X" else (5 + 11 * stack)),
                textcoords="offset points",
                fontsize=8,
                color=colour,
            )


def _pending_panel(pend: Any, ts: list[float], tl: dict[str, Any], end: float) -> None:
    """Pending pods over time, the workloads' starts and ends dashed, and the shared time axis."""
    from matplotlib.ticker import FuncFormatter, MultipleLocator

    pend.step(ts, tl.get("pending", []), where="post", color="tab:red")
    pend.fill_between(ts, tl.get("pending", []), step="post", color="tab:red", alpha=0.15)
    for k, (t, label) in enumerate(workload_marks(tl.get("workloads", []), end)):
        pend.axvline(t, color="0.3", linestyle="--", linewidth=0.8)
        pend.annotate(
            label,
            (t, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(3, -10 - 9 * (k % 3)),
            textcoords="offset points",
            fontsize=7,
            color="0.3",
        )
    pend.set_title("pending pods (dashed: workloads start and end)", loc="left", fontsize=9, pad=3)
    pend.set_ylabel("pods", fontsize=8)
    pend.grid(axis="x", color="0.9")
    step = tick_step(end)
    fine = step < 60  # runs of a few minutes get ticks every 10-30 s, all as h:mm:ss
    pend.set_xlabel("time since start (h:mm:ss)" if fine else "time since start (h:mm)")
    pend.xaxis.set_major_locator(MultipleLocator(step))
    pend.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: hmm(x, fine) if x >= 0 else ""))
    pend.set_xlim(0, max(end, 1.0))


def _title_and_legend(
    fig: Any, report: Report, shared: bool, seen_kinds: dict[str, tuple[str, str]], height: float
) -> None:
    """The run's name, seed, backend, start and cost, and the legend, in a fixed band of 0.5 in at
    the top, above every panel."""
    from matplotlib.lines import Line2D

    handles = []
    if not shared:
        handles = [
            Line2D([], [], color="tab:blue", linestyle="--", label="target size (CA)"),
            Line2D([], [], color="tab:blue", linewidth=2.2, alpha=0.55, label="ready nodes"),
            Line2D([], [], color="0.55", linestyle=":", label="max size"),
        ]
    handles += [
        Line2D([], [], marker=m, color=c, linestyle="none", markersize=8, label=label)
        for label, (m, c) in seen_kinds.items()
    ]
    start = report.start_time.strftime("%Y-%m-%d %H:%M UTC")
    cost = report.cost
    priced = f", estimated cost {cost['total']:.2f} {cost.get('unit', '')}".rstrip() if cost else ""
    fig.suptitle(
        f"{report.scenario} (seed {report.seed}, {report.provider}), from {start}{priced}",
        fontsize=11,
        y=0.995,
    )
    if handles:
        fig.legend(
            handles=handles,
            loc="upper center",
            ncol=len(handles),
            fontsize=8,
            bbox_to_anchor=(0.5, 1.0 - 0.3 / height),
        )
