"""`simulate --from-snapshotz`: a start from cluster-autoscaler's debugging snapshot, in the JSON
CA serves at /snapshotz (debuggingsnapshot/debugging_snapshot.go at cluster-autoscaler-1.36.1:
`NodeList` of `{Node, Pods}`, `UnscheduledPodsCanBeScheduled`, `TemplateNodes`, Go's JSON of the
API types, without kind or apiVersion), run through the command line on the in-process backend."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from cloudprovider_grpc.cli import main

pytestmark = pytest.mark.integration

CLOUD = {
    "groups": [
        {
            "id": "general",
            "min_size": 1,
            "max_size": 6,
            "initial_size": 1,
            "capacity": {"cpu": "2", "memory": "8Gi"},
        }
    ]
}


def _pod(
    name: str, cpu: str, owner_kind: str, owner: str, labels: dict[str, str], phase: str
) -> dict[str, Any]:
    ref = {
        "apiVersion": "apps/v1",
        "kind": owner_kind,
        "name": owner,
        "uid": f"u-{owner}",
        "controller": True,
    }
    return {
        "metadata": {"name": name, "namespace": "shop", "labels": labels, "ownerReferences": [ref]},
        "spec": {
            "containers": [
                {"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}
            ]
        },
        "status": {"phase": phase},
    }


def _snapshotz() -> dict[str, Any]:
    """One node of `general` running a web pod and a DaemonSet's agent; three more web pods
    (1.5 CPU each: one per 2-CPU node) that CA held unscheduled."""
    node = {
        "metadata": {"name": "general-7f3k", "labels": {"kubernetes.io/hostname": "general-7f3k"}},
        "spec": {"providerID": "sim://general/0"},
        "status": {
            "capacity": {"cpu": "2", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    web = {"app": "web", "pod-template-hash": "5d9f"}
    running = [
        _pod("web-5d9f-a", "1500m", "ReplicaSet", "web-5d9f", web, "Running"),
        _pod("agent-x", "100m", "DaemonSet", "agent", {"app": "agent"}, "Running"),
    ]
    return {
        "NodeList": [{"Node": node, "Pods": running}],
        "UnscheduledPodsCanBeScheduled": [
            _pod(f"web-5d9f-{c}", "1500m", "ReplicaSet", "web-5d9f", web, "Pending") for c in "bcd"
        ],
        "StartTimestamp": "2026-12-01T20:00:00.000000Z",
        "EndTimestamp": "2026-12-01T20:00:00.210000Z",
        "TemplateNodes": {"general": {"Node": node, "Pods": []}, "gpu": {"Node": node, "Pods": []}},
    }


def _run(tmp_path: Path, snapshot: Any, capsys) -> tuple[int, str, str]:
    path = tmp_path / "snapshotz.json"
    path.write_text(json.dumps(snapshot))
    cloud = tmp_path / "cloud.yaml"
    cloud.write_text(yaml.safe_dump(CLOUD))
    args = ["simulate", "--from-snapshotz", str(path), "--provider", "sim", "--cloud", str(cloud)]
    rc = main(
        [
            *args,
            "--duration",
            "5m",
            "--out",
            str(tmp_path / "out"),
            "--write-scenario",
            str(tmp_path / "s.yaml"),
        ]
    )
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_the_snapshots_pending_pods_get_the_scale_up_they_need(tmp_path: Path, capsys) -> None:
    rc, out, err = _run(tmp_path, _snapshotz(), capsys)
    assert rc == 0, err
    assert "Scale-up: setting group general size to 4 instead of 1 (max: 6)" in out
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    ups = [(d["t"], d["group"], d["delta"]) for d in report["decisions"] if d["kind"] == "scale-up"]
    assert ups == [(0.0, "general", 3)]
    scenario = yaml.safe_load((tmp_path / "s.yaml").read_text())
    assert [(w["name"], w["replicas"]) for w in scenario["workloads"]] == [("web", 4)]
    assert [d["name"] for d in scenario["daemonsets"]] == ["agent"]  # rebuilt from its pods
    assert "note: 3 pod(s) CA held unscheduled in the snapshot start pending" in out
    assert "lack: gpu" in out


@pytest.mark.parametrize(
    ("content", "says"),
    [("{", "not JSON"), ("[]", "not cluster-autoscaler's debugging snapshot")],
)
def test_a_file_that_is_no_snapshot_is_one_line(tmp_path: Path, capsys, content: str, says: str) -> None:
    path = tmp_path / "snapshotz.json"
    path.write_text(content)
    assert main(["simulate", "--from-snapshotz", str(path), "--provider", "sim", "--out", str(tmp_path)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert says in line
