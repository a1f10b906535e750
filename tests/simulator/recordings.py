"""Recordings written by hand in the documented event-log format, for replay tests, and the
pending-pod count a replay must show for them."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
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


CA_CLOUD = {
    "provisioning_delay": 60,
    "groups": [{"id": "general", "min_size": 0, "max_size": 5, "capacity": {"cpu": "2", "memory": "8Gi"}}],
}
#: CA's decisions: (seconds after the start, Event reason, message)
CA_EVENTS = [
    (5.0, "ScaledUpGroup", "Scale-up: setting group general size to 2 instead of 0 (max: 5)"),
    (5.2, "ScaledUpGroup", "Scale-up: group general size set to 2 instead of 0 (max: 5)"),
    (675.0, "ScaleDownEmpty", 'Scale-down: removing empty node "node-a"'),
    (675.0, "ScaleDownEmpty", 'Scale-down: removing empty node "node-b"'),
    (676.0, "ScaleDownEmpty", "Scale-down: empty node node-a removed"),
]
#: the same decisions in CA's klog output (orchestrator.go and actuator.go), among other lines
CA_LOG = """\
I1128 03:00:04.912345       1 static_autoscaler.go:290] Starting main loop
I1128 03:00:05.000000       1 orchestrator.go:177] Final scale-up plan: [{general 0->2 (max: 5)}]
I1128 03:00:05.000100       1 executor.go:166] Scale-up: setting group general size to 2
I1128 03:11:15.000000       1 actuator.go:176] Scale-down: removing empty node "node-a"
I1128 03:11:15.000000       1 actuator.go:176] Scale-down: removing empty node "node-b"
"""


def _pod_template() -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]},
    }


def with_ca_account(directory: Path, with_events: bool = True) -> Path:
    """A recording of `web` on `general` (see test_agreement.py) with CA's Events and status
    ConfigMap in it, or (`with_events` False) one made without them."""
    directory.mkdir(parents=True)
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "uid": "u-web"},
        "spec": {"replicas": 0, "template": _pod_template()},
    }
    (directory / "snapshot.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [dep]}))
    kinds = ["Deployment", "Pod", *(["Event", "CAStatus"] if with_events else [])]
    w = Writer(directory, Header(STARTED, kinds))
    head = {"kind": "Deployment", "ns": "shop", "name": "web", "uid": "u-web"}
    w.write({"t": 1.5, "op": "update", **head, "replicas": 4})
    w.write({"t": 12.5, "op": "update", **head, "replicas": 0})
    for n, (t, reason, message) in enumerate(CA_EVENTS if with_events else []):
        when = (STARTED + timedelta(seconds=t)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        w.write(
            {
                "t": t + 0.05,
                "op": "add",
                "kind": "Event",
                "ns": "kube-system",
                "name": f"cluster-autoscaler-status.{n}",
                "uid": f"e{n}",
                "reason": reason,
                "message": message,
                "type": "Normal",
                "count": 1,
                "time": when,
                "object": "ConfigMap/kube-system/cluster-autoscaler-status",
            }
        )
    if with_events:  # CA's status ConfigMap (YAML, as since 1.30) after its scale-up
        status = "time: 2026-11-28 03:00:05.300000000 +0000 UTC\nautoscalerStatus: Running\nnodeGroups:\n"
        status += "- name: general\n  health:\n    status: Healthy\n    cloudProviderTarget: 2\n"
        w.write(
            {
                "t": 5.4,
                "op": "update",
                "kind": "CAStatus",
                "ns": "kube-system",
                "name": "s",
                "uid": "s",
                "status": status,
            }
        )
    w.close(20.0, "duration")
    return directory
