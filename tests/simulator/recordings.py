"""Recordings written by hand in the documented event-log format, for replay tests, and the
pending-pod count a replay must show for them."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cloudprovider_grpc.simulator.eventlog import Header, Writer

STARTED = datetime(2026, 11, 28, 3, 0, tzinfo=UTC)
#: a node selector no node group offers: every replayed pod stays pending, so the pending count
#: is exactly the pods the recorded workloads want
NOWHERE = {"pool": "nowhere"}


def template(app: str, cpu: str = "500m") -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": app}},
        "spec": {
            "nodeSelector": dict(NOWHERE),
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}],
        },
    }


def deployment(name: str, ns: str, replicas: int, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "uid": uid},
        "spec": {"replicas": replicas, "template": template(name)},
    }


def write(
    directory: Path,
    objects: Iterable[Mapping[str, Any]],
    records: Iterable[Mapping[str, Any]],
    length: float | None,
    reason: str = "duration",
) -> Path:
    """A recording directory; `length` None leaves the log without its end line (cut short)."""
    directory.mkdir(parents=True, exist_ok=True)
    snapshot = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
    (directory / "snapshot.json").write_text(json.dumps(snapshot), encoding="utf-8")
    w = Writer(directory, Header(STARTED, ["Deployment", "Job", "Pod"]))
    for r in records:
        w.write(dict(r))
    if length is None:
        w.flush()
    else:
        w.close(length, reason)
    return directory


def wanted(changes: Iterable[tuple[float, str, int]], t: float, start: Mapping[str, int]) -> int:
    """Pods wanted at `t`: each workload's count from `start`, replaced by its changes
    (time, workload, pods) up to `t`."""
    now = dict(start)
    for at, name, pods in sorted(changes):
        if at <= t:
            now[name] = pods
    return sum(now.values())
