"""Reading cluster-autoscaler's own account: its Events as the recorder writes them (a repeat
folded into one Event by its count counts again), its status ConfigMap in both of CA's formats,
and its klog lines, in the formats of CA 1.29 and 1.36 (sources in ca_account.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cloudprovider_grpc.simulator.ca_account import from_events, from_klog, status_targets
from cloudprovider_grpc.simulator.record_objects import compact

pytestmark = pytest.mark.unit

STARTED = datetime(2026, 12, 31, 23, 50, tzinfo=UTC)
GROUPS = {"pool-a-1": "pool-a"}


def _group(node: str) -> str:
    return GROUPS.get(node, "")


def test_an_event_is_compacted_with_its_newest_time_and_count() -> None:
    event = {
        "metadata": {"name": "cluster-autoscaler-status.1", "namespace": "kube-system", "uid": "e1"},
        "involvedObject": {
            "kind": "ConfigMap",
            "namespace": "kube-system",
            "name": "cluster-autoscaler-status",
        },
        "reason": "ScaleDownEmpty",
        "message": 'Scale-down: removing empty node "pool-a-1"',
        "type": "Normal",
        "count": 2,
        "firstTimestamp": "2026-12-31T23:51:00Z",
        "lastTimestamp": "2026-12-31T23:52:00Z",
        "source": {"component": "cluster-autoscaler"},
    }
    assert compact("Event", event) == {
        "reason": "ScaleDownEmpty",
        "message": 'Scale-down: removing empty node "pool-a-1"',
        "type": "Normal",
        "count": 2,
        "time": "2026-12-31T23:52:00Z",
        "object": "ConfigMap/kube-system/cluster-autoscaler-status",
    }
    node = {"metadata": {"name": "n", "labels": {"pool": "a"}}, "spec": {"providerID": "vultr://x"}}
    assert compact("Node", node) == {"providerID": "vultr://x", "labels": {"pool": "a"}}


def _event(t: float, op: str, uid: str, message: str, count: int, time: str) -> dict[str, object]:
    return {"t": t, "op": op, "kind": "Event", "uid": uid, "message": message, "count": count, "time": time}


def test_events_give_one_decision_each_and_one_per_repeat() -> None:
    up = "Scale-up: setting group pool-a size to 3 instead of 1 (max: 10)"
    records = [
        _event(60.2, "add", "e1", up, 1, "2026-12-31T23:51:00Z"),
        _event(61.0, "add", "e2", "Scale-up: group pool-a size set to 3 instead of 1 (max: 10)", 1, ""),
        _event(600.5, "add", "e3", 'Scale-down: removing empty node "pool-a-1"', 1, "2027-01-01T00:00:00Z"),
        # a node CA drained: 1.29's and 1.36's message, utilization as Go prints its struct
        _event(
            700.0,
            "add",
            "e4",
            "Scale-down: removing node pool-b-2, utilization: {0.1 0.2 0 cpu 0.2}, "
            "pods to reschedule: shop/web-1",
            1,
            "",
        ),
        _event(800.0, "update", "e5", "Scale-up failed for group pool-c: quota exceeded", 3, ""),
        _event(900.0, "update", "e5", "Scale-up failed for group pool-c: quota exceeded", 3, ""),
        _event(1000.0, "add", "e6", "Nodes added to group pool-d failed to register within 15m0.2s", 1, ""),
    ]
    got = [(d.t, d.kind, d.group, d.delta, d.node) for d in from_events(records, STARTED, _group)]
    assert got == [
        (60.0, "scale-up", "pool-a", 2, ""),
        (600.0, "scale-down", "pool-a", -1, "pool-a-1"),
        (700.0, "scale-down", "", -1, "pool-b-2"),
        (800.0, "scale-up-error", "pool-c", 0, ""),
        (1000.0, "scale-up-timeout", "pool-d", 0, ""),
    ]


def test_the_status_configmap_in_yaml_and_in_text() -> None:
    yaml_status = (
        "time: 2026-12-31 23:55:00.123456789 +0000 UTC\nautoscalerStatus: Running\nnodeGroups:\n"
        "- name: pool-a\n  health:\n    status: Healthy\n    cloudProviderTarget: 3\n    minSize: 1\n"
    )
    text_status = (
        "Cluster-autoscaler status at 2026-12-31 23:58:00.5 +0000 UTC:\nCluster-wide:\n  Health: Healthy\n"
        "NodeGroups:\n  Name:        pool-a\n  Health:      Healthy (ready=2 unready=0 (resourceUnready=0) "
        "notStarted=0 longNotStarted=0 registered=2 longUnregistered=0 cloudProviderTarget=2 "
        "(minSize=1, maxSize=10))\n"
    )
    records = [
        {"t": 301.0, "op": "update", "kind": "CAStatus", "status": yaml_status},
        {"t": 481.0, "op": "update", "kind": "CAStatus", "status": text_status},
        {"t": 500.0, "op": "update", "kind": "CAStatus", "status": "autoscalerStatus: Initializing\n"},
    ]
    assert status_targets(records, STARTED) == [
        {"t": 300.123, "targets": {"pool-a": 3}},
        {"t": 480.5, "targets": {"pool-a": 2}},
    ]


def test_klog_lines_across_new_year() -> None:
    log = "\n".join(
        [
            "I1231 23:51:00.000000 1 orchestrator.go:177] Final scale-up plan: [{pool-a 1->3 (max: 10)}]",
            "I1231 23:51:00.000100       1 executor.go:166] Scale-up: setting group pool-a size to 3",
            'I0101 00:00:00.500000       1 actuator.go:176] Scale-down: removing empty node "pool-a-1"',
            "W0101 00:05:00.000000       1 clusterstate.go:358] Scale-up timed out for node group pool-d "
            "after 15m0.2s",
            "E0101 00:06:00.000000       1 static_autoscaler.go:646] Failed to scale up: quota exceeded",
            "not a klog line",
        ]
    )
    got = [(d.t, d.kind, d.group, d.delta) for d in from_klog(log, STARTED, _group)]
    assert got == [
        (60.0, "scale-up", "pool-a", 2),
        (600.5, "scale-down", "pool-a", -1),
        (900.0, "scale-up-timeout", "pool-d", 0),
        (960.0, "scale-up-error", "", 0),
    ]
