"""What cluster-autoscaler itself said it decided: read from the Events it emitted during a
recording, or from its klog output (`--ca-log`), as one list of `CADecision`s on the recording's
time axis.

CA reports each decision twice, before and after acting; only the first of each pair is read, so
one decision counts once:

- `ScaledUpGroup`, `Scale-up: setting group G size to B instead of A (max: M)` (in the log:
  `Final scale-up plan: [{G A->B (max: M)}]`): a scale-up of G by B-A;
- `ScaleDownEmpty`, `Scale-down: removing empty node "N"`, and `ScaleDown`, `Scale-down: removing
  node N, utilization: {...}, pods to reschedule: ...` (the same text in the log): a scale-down;
- `FailedToScaleUpGroup`, `Scale-up failed for group G: ERR` (in the log: `Failed to scale up:
  ...`, which names no group): a scale-up error (the report's `scale-up-error`);
- `ScaleUpTimedOut`, `Nodes added to group G failed to register within D` (in the log: `Scale-up
  timed out for node group G after D`): a `scale-up-timeout`.

Sources, identical at cluster-autoscaler-1.29.0 and cluster-autoscaler-1.36.1:
core/scaleup/orchestrator/executor.go (ScaledUpGroup, FailedToScaleUpGroup; 1.36.1 lines
166-191), core/scaleup/orchestrator/orchestrator.go (`Final scale-up plan`, line 177, printing
processors/nodegroupset ScaleUpInfo.String: `{G A->B (max: M)}`),
core/scaledown/actuation/actuator.go (ScaleDownEmpty, ScaleDown; lines 176-177, 269-270),
clusterstate/clusterstate.go (ScaleUpTimedOut, lines 358-362), core/static_autoscaler.go
(`Failed to scale up`, line 646; that line names no group). CA emits these Events on its status
ConfigMap (clusterstate/utils/status.go, LogEventRecorder), with source `cluster-autoscaler`.

A removal names a node; its node group comes from the recording's nodes (NodeGroupForNode on
their providerID and labels) and is empty when the recording never saw the node.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

import yaml

#: the kinds of CA decision the agreement compares, as the simulator's report names them
KINDS = ("scale-up", "scale-down", "scale-up-error", "scale-up-timeout")


@dataclass(frozen=True)
class CADecision:
    """One decision of the real cluster-autoscaler, `t` seconds after the recording started."""

    t: float
    kind: str
    group: str = ""
    delta: int = 0
    node: str = ""
    #: CA's own words (the Event's message or the log line)
    text: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_SCALE_UP = re.compile(r"Scale-up: setting group (\S+) size to (\d+) instead of (\d+) \(max: (\d+)\)")
_EMPTY = re.compile(r'Scale-down: removing empty node "?([^"\s]+)"?')
_DRAIN = re.compile(r"Scale-down: removing node (\S+?),? utilization")
_FAILED = re.compile(r"Scale-up failed for group (\S+?): (.*)")
_TIMED_OUT = re.compile(r"Nodes added to group (\S+) failed to register within (\S+)")
_PLAN_ITEM = re.compile(r"\{(\S+) (\d+)->(\d+) \(max: (\d+)\)\}")
_LOG_TIMED_OUT = re.compile(r"Scale-up timed out for node group (\S+) after (\S+)")
#: klog's header: Lmmdd hh:mm:ss.uuuuuu threadid file:line] (k8s.io/klog/v2, klog.go)
_KLOG = re.compile(r"^([IWEF])(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?\s+\d+ [^\]]*\] (.*)$")


def _parse(message: str, t: float, group_of: Callable[[str], str]) -> CADecision | None:
    """The decision one of CA's messages states, or None (every other message)."""
    if m := _SCALE_UP.search(message):
        return CADecision(t, "scale-up", m[1], int(m[2]) - int(m[3]), text=message)
    if (m := _EMPTY.search(message)) or (m := _DRAIN.search(message)):
        return CADecision(t, "scale-down", group_of(m[1]), -1, node=m[1], text=message)
    if m := _FAILED.search(message):
        return CADecision(t, "scale-up-error", m[1], text=message)
    if (m := _TIMED_OUT.search(message)) or (m := _LOG_TIMED_OUT.search(message)):
        return CADecision(t, "scale-up-timeout", m[1], text=message)
    return None


def _seconds(stamp: str, started: datetime) -> float | None:
    """Seconds from `started` to an RFC 3339 time, or to the status ConfigMap's Go-style
    `2006-01-02 15:04:05.999999999 -0700` (fractions cut to microseconds)."""
    text = re.sub(r"(\.\d{6})\d+", r"\1", stamp.strip().replace("Z", "+00:00"))
    text = re.sub(r" ([+-]\d\d)(\d\d)$", r"\1:\2", text)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return round((when - started).total_seconds(), 3)


def from_events(
    records: Iterable[Mapping[str, Any]], started: datetime, group_of: Callable[[str], str]
) -> list[CADecision]:
    """CA's decisions from the `Event` records of a recording: each Event once when it appears,
    and again each time its count grows (the apiserver folds repeats of a message into one
    Event). Times are the Events' own, else the time the recorder saw them."""
    counts: dict[str, int] = {}
    out: list[CADecision] = []
    for r in records:
        if r.get("kind") != "Event" or r.get("op") not in ("add", "update"):
            continue
        uid, count = str(r.get("uid")), int(r.get("count") or 1)
        seen = counts.get(uid, 0 if r["op"] == "add" else count - 1)
        counts[uid] = max(seen, count)
        if count <= seen:
            continue
        t = _seconds(str(r.get("time") or ""), started)
        decision = _parse(str(r.get("message") or ""), float(r["t"]) if t is None else t, group_of)
        if decision is not None:
            out.append(decision)
    return sorted(out, key=lambda d: d.t)


def from_klog(text: str, started: datetime, group_of: Callable[[str], str]) -> list[CADecision]:
    """CA's decisions from its klog output. klog stamps no year: the recording's is taken (the
    next one for a month before the recording's, a log across New Year)."""
    out: list[CADecision] = []
    for line in text.splitlines():
        m = _KLOG.match(line.strip())
        if not m:
            continue
        month, day, hh, mm, ss = (int(x) for x in m.groups()[1:6])
        micro = int((m[7] or "0").ljust(6, "0"))
        year = started.year + (1 if month < started.month else 0)
        try:
            when = datetime(year, month, day, hh, mm, ss, micro, tzinfo=UTC)
        except ValueError:
            continue
        t = round((when - started).total_seconds(), 3)
        message = m[8]
        if message.startswith("Final scale-up plan:"):
            for g, before, after, _ in _PLAN_ITEM.findall(message):
                out.append(CADecision(t, "scale-up", g, int(after) - int(before), text=message))
            continue
        if message.startswith("Failed to scale up:"):
            out.append(CADecision(t, "scale-up-error", text=message))
            continue
        decision = _parse(message, t, group_of)
        if decision is not None and decision.kind != "scale-up":  # scale-ups: the plan line above
            out.append(decision)
    return sorted(out, key=lambda d: d.t)


def status_targets(records: Iterable[Mapping[str, Any]], started: datetime) -> list[dict[str, Any]]:
    """CA's target size of each node group over time, from its status ConfigMap: YAML
    (`nodeGroups[].health.cloudProviderTarget`, clusterstate/api/types.go at
    cluster-autoscaler-1.36.1) since 1.30, plain text before (`Name: G` then a `Health:` line
    holding `cloudProviderTarget=N`: clusterstate/api/utils.go at cluster-autoscaler-1.29.0 lines
    85-87, clusterstate/clusterstate.go line 808, under `Cluster-autoscaler status at TIME:` from
    clusterstate/utils/status.go line 87). One `{"t", "targets"}` per update; the status's own
    time when it parses."""
    out: list[dict[str, Any]] = []
    for r in records:
        if r.get("kind") != "CAStatus" or "status" not in r:
            continue
        targets, stamp = _targets(str(r["status"]))
        if not targets:
            continue
        t = _seconds(stamp, started) if stamp else None
        out.append({"t": float(r["t"]) if t is None else t, "targets": targets})
    return out


def _targets(status: str) -> tuple[dict[str, int], str]:
    try:
        data = yaml.safe_load(status)
    except yaml.YAMLError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("nodeGroups"), list):
        targets = {}
        for g in data["nodeGroups"]:
            health = (g or {}).get("health") or {}
            if g.get("name") and isinstance(health.get("cloudProviderTarget"), int):
                targets[str(g["name"])] = int(health["cloudProviderTarget"])
        # CA's ConfigMapLastUpdateFormat "2006-01-02 15:04:05.999999999 -0700 MST"
        stamp = " ".join(str(data.get("time") or "").split()[:3])
        return targets, stamp
    targets, name = {}, None
    for line in status.splitlines():
        if m := re.match(r"\s*Name:\s*(\S+)", line):
            name = m[1]
        elif name and (m := re.search(r"cloudProviderTarget=(\d+)", line)):
            targets[name] = int(m[1])
            name = None
    m = re.match(r"Cluster-autoscaler status at (\S+ \S+ \S+)", status)
    return targets, m[1] if m else ""
