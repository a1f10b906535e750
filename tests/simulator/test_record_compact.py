"""What the recorder writes for each watch event, on objects shaped as the API serializes them:
only changes a replay uses, each once (a pod's binding, a status heartbeat, a controller's pods and
a repeated delete write nothing)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from cloudprovider_grpc.simulator.eventlog import Header, Writer, read
from cloudprovider_grpc.simulator.record import Recorder
from cloudprovider_grpc.simulator.record_objects import kind_named
from tests.simulator.recordings import STARTED, template

pytestmark = pytest.mark.unit


def _recorder(tmp_path: Path) -> Recorder:
    ticks = iter(range(100))  # each record one second after the last
    rec = Recorder(None, tmp_path, clock=lambda: float(next(ticks)))
    rec.t0 = 0.0
    rec.writer = Writer(tmp_path, Header(STARTED, ["Pod", "Deployment", "Job"]))
    for k in ("Pod", "Deployment", "Job", "Node"):
        rec.known[k] = {}
    return rec


def _pod(name: str, owner: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "7"}
    if owner:
        meta["ownerReferences"] = [{"kind": "ReplicaSet", "name": owner, "controller": True}]
    meta["labels"] = {"app": name}
    return {**template(name), "metadata": meta, "status": {"phase": "Pending"}}


def _records(rec: Recorder, tmp_path: Path) -> list[dict[str, Any]]:
    rec.stop("duration")
    return [{k: v for k, v in r.items() if k != "template"} for r in read(tmp_path).records]


def test_a_bare_pod_is_written_when_created_and_deleted_only(tmp_path: Path) -> None:
    rec = _recorder(tmp_path)
    pod, kind = _pod("debug"), kind_named("Pod")
    rec.on_event(kind, "ADDED", pod)
    bound = copy.deepcopy(pod)
    bound["spec"]["nodeName"] = "node-1"
    bound["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    rec.on_event(kind, "MODIFIED", bound)  # the scheduler and the kubelet: nothing replayed changes
    rec.on_event(kind, "ADDED", _pod("web-abc-1", owner="web-abc"))  # its Deployment is recorded
    leaving = copy.deepcopy(bound)
    leaving["metadata"]["deletionTimestamp"] = "2026-11-28T03:00:00Z"
    rec.on_event(kind, "MODIFIED", leaving)
    rec.on_event(kind, "DELETED", leaving)
    rec.on_event(kind, "BOOKMARK", {"metadata": {"resourceVersion": "99"}})
    assert rec.versions["Pod"] == "99"
    assert _records(rec, tmp_path) == [
        {"t": 0.0, "op": "add", "kind": "Pod", "ns": "ns", "name": "debug", "uid": "uid-debug", "done": None},
        {"t": 1.0, "op": "delete", "kind": "Pod", "ns": "ns", "name": "debug", "uid": "uid-debug"},
    ]


def test_a_deployment_update_carries_only_what_changed(tmp_path: Path) -> None:
    rec = _recorder(tmp_path)
    kind = kind_named("Deployment")
    dep = {
        "metadata": {"name": "web", "namespace": "ns", "uid": "w"},
        "spec": {"replicas": 2, "template": template("web")},
    }
    rec.on_event(kind, "ADDED", dep)
    status_only = copy.deepcopy(dep)
    status_only["status"] = {"readyReplicas": 2}
    rec.on_event(kind, "MODIFIED", status_only)
    scaled = copy.deepcopy(dep)
    scaled["spec"]["replicas"] = 6
    rec.on_event(kind, "MODIFIED", scaled)
    rolled = copy.deepcopy(scaled)
    rolled["spec"]["template"]["spec"]["containers"][0]["image"] = "y"
    rec.on_event(kind, "MODIFIED", rolled)
    rec.stop("duration")
    records = read(tmp_path).records
    assert [(r["op"], r.get("replicas"), "template" in r) for r in records] == [
        ("add", 2, True),
        ("update", 6, False),
        ("update", None, True),
    ]


def test_a_job_is_done_when_its_condition_says_so(tmp_path: Path) -> None:
    rec = _recorder(tmp_path)
    kind = kind_named("Job")
    job = {
        "metadata": {"name": "b", "namespace": "ns", "uid": "j"},
        "spec": {"parallelism": 3, "template": template("b")},
    }
    rec.on_event(kind, "ADDED", job)
    running = copy.deepcopy(job)
    running["status"] = {"active": 3, "conditions": [{"type": "Complete", "status": "False"}]}
    rec.on_event(kind, "MODIFIED", running)
    done = copy.deepcopy(job)
    done["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    rec.on_event(kind, "MODIFIED", done)
    assert _records(rec, tmp_path) == [
        {"t": 0.0, "op": "add", "kind": "Job", "ns": "ns", "name": "b", "uid": "j",
         "parallelism": 3, "completions": None, "suspend": False, "done": None},
        {"t": 1.0, "op": "update", "kind": "Job", "ns": "ns", "name": "b", "uid": "j", "done": "Complete"},
    ]  # fmt: skip


def test_a_pod_of_a_controller_not_watched_is_recorded_with_its_owner(tmp_path: Path) -> None:
    rec = _recorder(tmp_path)
    pod = _pod("trainer-0")
    pod["metadata"]["ownerReferences"] = [{"kind": "TrainingRun", "name": "run-1", "controller": True}]
    rec.on_event(kind_named("Pod"), "ADDED", pod)
    rec.on_event(kind_named("Pod"), "ADDED", _pod("web-abc-1", owner="web-abc"))
    assert [(r["name"], r.get("owner")) for r in _records(rec, tmp_path)] == [("trainer-0", "TrainingRun")]
