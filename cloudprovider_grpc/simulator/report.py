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
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n"

    def write(self, out_dir: str | Path, plot: bool = True) -> list[str]:
        """Write report.json (and timeline.png when matplotlib is installed); returns notes."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_text(self.to_json(), encoding="utf-8")
        notes = [f"wrote {out / 'report.json'}"]
        if plot:
            notes.append(write_timeline(self, out / "timeline.png"))
        return notes


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


def write_timeline(report: Report, path: Path) -> str:
    """Nodes per group and pending pods over time; matplotlib is the optional `plot` extra."""
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
    hours = [t / 3600.0 for t in tl.get("t", [])]
    fig, (ax1, ax2) = plt.subplots(2, 1, sharex=True, figsize=(10, 6))
    for group, series in sorted(tl.get("nodes", {}).items()):
        ax1.step(hours, series, where="post", label=group)
    ax1.set_ylabel("ready nodes")
    ax1.legend(loc="upper left", fontsize="small")
    ax1.set_title(f"{report.scenario} (seed {report.seed})")
    ax2.step(hours, tl.get("pending", []), where="post", color="tab:red")
    ax2.set_ylabel("pending pods")
    ax2.set_xlabel("hours since start")
    fig.tight_layout()
    # a fixed creation date keeps the PNG metadata stable across runs
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    return f"wrote {path}"
