"""How far the simulation is from what the user's own cluster-autoscaler did, decision by decision.

Every decision CA recorded (`ca_account.py`) is paired with at most one of the simulation's:

- `matched`: the same kind in the same node group (for a scale-up, the same size change) within
  one scan interval of CA's time;
- `early` / `late`: that same decision, but further away (`offset` says by how much: the
  simulation's time minus CA's);
- `different size`: a scale-up of the same group within the interval, by a different number;
- `different group`: the same kind within the interval, in another group;
- `missed`: nothing of the kind;

and the simulation's decisions of these kinds that no CA decision took are `extra`. Exact matches
are paired first, over the whole run, so that a near miss never takes the decision that matches a
later one exactly; then the rest, each CA decision in time order with the nearest one left. A
removal whose node the recording never saw (no node group known) pairs with a removal in any
group.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cloudprovider_grpc.simulator.ca_account import KINDS, CADecision

OUTCOMES = ("matched", "early", "late", "different size", "different group", "missed", "extra")


@dataclass
class Agreement:
    """The pairing, per CA decision (and the extra ones), and its counts."""

    window: float
    source: str
    rows: list[dict[str, Any]] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(OUTCOMES, 0)
        for r in self.rows:
            out[r["outcome"]] += 1
        return out

    def line(self) -> str:
        """The one line the command prints."""
        c = self.counts()
        total = len(self.rows) - c["extra"]
        rest = ", ".join(f"{c[k]} {k}" for k in OUTCOMES[1:])
        return (
            f"agreement with cluster-autoscaler: {c['matched']} of {total} decisions matched "
            f"within {self.window:g}s ({rest})"
        )

    def to_dict(self) -> dict[str, Any]:
        c = self.counts()
        return {
            "source": self.source,
            "window": self.window,
            "ca_decisions": len(self.rows) - c["extra"],
            "counts": c,
            "line": self.line(),
            "rows": self.rows,
        }


def _sim(d: Any) -> dict[str, Any]:
    return {"t": d.t, "kind": d.kind, "group": d.group, "delta": d.delta, "node": d.node}


def agree(ca: Iterable[CADecision], simulated: Iterable[Any], window: float, source: str) -> Agreement:
    """Pair CA's decisions with the simulation's (report `Decision`s); `window`: the scan interval."""
    mine = sorted(ca, key=lambda d: d.t)
    sims = [d for d in simulated if d.kind in KINDS]
    taken: set[int] = set()
    pairs: dict[int, tuple[str, int | None]] = {}

    def nearest(c: CADecision, ok: Callable[[Any], bool], within: float | None) -> int | None:
        best: int | None = None
        for i, s in enumerate(sims):
            if i in taken or not ok(s) or (within is not None and abs(s.t - c.t) > within):
                continue
            if best is None or abs(s.t - c.t) < abs(sims[best].t - c.t):
                best = i
        return best

    def same_kind(c: CADecision) -> Callable[[Any], bool]:
        return lambda s: bool(s.kind == c.kind)

    def same_group(c: CADecision) -> Callable[[Any], bool]:
        return lambda s: s.kind == c.kind and (not c.group or s.group == c.group)

    def same(c: CADecision) -> Callable[[Any], bool]:
        return lambda s: same_group(c)(s) and (c.kind != "scale-up" or s.delta == c.delta)

    for n, c in enumerate(mine):
        i = nearest(c, same(c), window)
        if i is not None:
            taken.add(i)
            pairs[n] = ("matched", i)
    for n, c in enumerate(mine):
        if n in pairs:
            continue
        i = nearest(c, same(c), None)
        if i is not None:
            outcome = "early" if sims[i].t < c.t else "late"
        elif (i := nearest(c, same_group(c), window)) is not None:
            outcome = "different size"
        elif (i := nearest(c, same_kind(c), window)) is not None:
            outcome = "different group"
        else:
            outcome = "missed"
        if i is not None:
            taken.add(i)
        pairs[n] = (outcome, i)
    out = Agreement(window, source)
    for n, c in enumerate(mine):
        outcome, i = pairs[n]
        row: dict[str, Any] = {"outcome": outcome, "ca": c.to_dict(), "simulated": None, "offset": None}
        if i is not None:
            row["simulated"] = _sim(sims[i])
            row["offset"] = round(sims[i].t - c.t, 3)
        out.rows.append(row)
    for i, s in enumerate(sims):
        if i not in taken:
            out.rows.append({"outcome": "extra", "ca": None, "simulated": _sim(s), "offset": None})
    return out


@dataclass
class CAAccount:
    """What the real cluster-autoscaler decided during a recording, and where that was read."""

    decisions: list[CADecision]
    source: str
    #: CA's target size per group over time, from its status ConfigMap (`status_targets`)
    targets: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, recording: Any, groups: dict[str, str | None], ca_log: Path | None) -> CAAccount | None:
        from cloudprovider_grpc.simulator.scenario import ScenarioError

        targets = recording.ca_targets()
        if ca_log is not None:
            try:
                text = ca_log.read_text(encoding="utf-8", errors="replace")
            except OSError as exc:
                raise ScenarioError(f"--ca-log {ca_log}: cannot read: {exc.strerror}") from None
            source = f"cluster-autoscaler's log {ca_log.name}"
            return cls(recording.ca_decisions(groups, text), source, targets)
        if not recording.has_ca_account():
            return None
        return cls(recording.ca_decisions(groups), "cluster-autoscaler's Events in the recording", targets)

    def against(self, report: Any, window: float) -> dict[str, Any]:
        """The agreement of a run's decisions with CA's, as report.json holds it."""
        out = agree(self.decisions, report.decisions, window, self.source).to_dict()
        if self.targets:
            out["ca_targets"] = self.targets
        return out
