"""Record and replay on a real kube-apiserver: `simulate --record` watches while a Deployment is
scaled, a Job runs and completes, and a bare pod comes and goes; stopped by SIGTERM it closes its
log; the replay's pending-pod timeline then matches what the test did, loop by loop. And a watch
whose resourceVersion has left the apiserver's window (`410 Gone`) lists again and writes exactly
the changes it missed.

The control plane has no controller-manager, scheduler or kubelet: objects are created and scaled
through the API and nothing reconciles them (no pods appear for a Deployment, a Job completes when
the test writes its status, as the Job controller would). The recorder reads controllers, not
their pods, so this is the same input a live cluster gives it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from cloudprovider_grpc.cli import main
from cloudprovider_grpc.simulator.eventlog import SNAPSHOT, Header, Writer, read
from cloudprovider_grpc.simulator.record import Recorder
from cloudprovider_grpc.simulator.record_objects import kind_named
from tests.simulator.recordings import NOWHERE, template, wanted
from tests.support.waits import poll

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _deployment(name: str, ns: str, replicas: int) -> dict[str, Any]:
    tpl = template(name)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": tpl},
    }


def _job(name: str, ns: str, parallelism: int) -> dict[str, Any]:
    tpl = template(name, "1")
    tpl["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"parallelism": parallelism, "completions": parallelism, "template": tpl},
    }


def _pod(name: str, ns: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
        "spec": {
            "nodeSelector": dict(NOWHERE),
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "250m"}}}],
        },
    }


def _complete(plane: Any, ns: str, name: str, pods: int) -> None:
    """What the Job controller writes when the last pod succeeds."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    cond = {"status": "True", "lastProbeTime": now, "lastTransitionTime": now}
    status = {
        "status": {
            "startTime": now,
            "completionTime": now,
            "succeeded": pods,
            "conditions": [{"type": "SuccessCriteriaMet", **cond}, {"type": "Complete", **cond}],
        }
    }
    plane.kubectl(
        "patch", "job", name, "-n", ns, "--subresource=status", "--type=merge", "-p", json.dumps(status)
    )


def _only(src: Path, dst: Path, ns: str) -> Path:
    """The recording restricted to one namespace (the apiserver is shared with other tests)."""
    snap = json.loads((src / SNAPSHOT).read_text())
    snap["items"] = [i for i in snap["items"] if (i.get("metadata") or {}).get("namespace") == ns]
    dst.mkdir(parents=True)
    (dst / SNAPSHOT).write_text(json.dumps(snap))
    log = read(src)
    w = Writer(dst, Header(log.header.started, log.header.kinds))
    for r in log.records:
        if r.get("ns") == ns:
            w.write(r)
    w.close(log.length, log.end_reason or "")
    return dst


def _found(rec: Path, predicate: Any) -> dict[str, Any] | None:
    """The first record of the log so far that `predicate` accepts."""
    if not (rec / "events.jsonl.gz").exists():
        return None
    return next((r for r in read(rec).records if predicate(r)), None)


#: how long each recorded state lasts at least: four of the replay's 0.25 s loops
HOLD = 1.0


def test_a_recording_replays_to_the_pending_pods_of_what_happened(control_plane, tmp_path: Path) -> None:
    plane = control_plane
    ns = plane.namespace("rec")
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(_deployment("web", ns, 2)))
    rec = tmp_path / "rec"
    cmd = [sys.executable, "-m", "cloudprovider_grpc", "simulate", "--record", str(rec), "--from-cluster"]
    proc = subprocess.Popen(
        [*cmd, "--kubeconfig", str(plane.kubeconfig)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    changes: list[tuple[float, str, int]] = []  # (recorded time, workload, pods it wants)
    windows: list[tuple[float, float]] = []
    try:
        poll(lambda: (rec / "events.jsonl.gz").exists() or None, 60, "the recording to start")
        started = read(rec).header.started.timestamp()

        def act(what: Any, name: str, pods: int, *kubectl: str, done: Any = None, **kw: Any) -> None:
            before = time.time() - started
            if done is not None:
                done()
            else:
                plane.kubectl(*kubectl, **kw)
            after = time.time() - started
            seen = poll(
                lambda: _found(rec, lambda r: r.get("ns") == ns and r.get("name") == name and what(r)),
                30,
                f"the recorder to write {name}'s change",
            )
            # seen as it happened (a watch delivers within moments of the write)
            assert before - 0.01 <= seen["t"] <= after + 5, (before, seen, after)
            changes.append((seen["t"], name, pods))
            windows.append((before, max(after, seen["t"])))
            # the workload stays in this state for HOLD seconds before the next change, so the
            # replay has loops inside it whatever the pace of the machine: part of the scenario
            # (what the cluster does), not a wait for anything
            time.sleep(max(0.0, windows[-1][1] + HOLD - (time.time() - started)))

        act(
            lambda r: r.get("replicas") == 5, "web", 5, "scale", "deployment", "web", "-n", ns, "--replicas=5"
        )
        act(
            lambda r: r.get("op") == "add",
            "batch",
            3,
            "apply",
            "-f",
            "-",
            input=yaml.safe_dump(_job("batch", ns, 3)),
        )
        act(
            lambda r: r.get("op") == "add",
            "debug",
            1,
            "apply",
            "-f",
            "-",
            input=yaml.safe_dump(_pod("debug", ns)),
        )
        act(lambda r: r.get("done") == "Complete", "batch", 0, done=lambda: _complete(plane, ns, "batch", 3))
        act(lambda r: r.get("op") == "delete", "debug", 0, "delete", "pod", "debug", "-n", ns, "--wait=false")
        act(
            lambda r: r.get("replicas") == 1, "web", 1, "scale", "deployment", "web", "-n", ns, "--replicas=1"
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "recorded" in out and "(interrupted" in out, out
    log = read(rec)
    assert log.end_reason == "signal"
    mine = [r for r in log.records if r.get("ns") == ns]
    assert [(r["kind"], r["op"]) for r in mine] == [
        ("Deployment", "update"),
        ("Job", "add"),
        ("Pod", "add"),
        ("Job", "update"),
        ("Pod", "delete"),
        ("Deployment", "update"),
    ]

    out_dir = tmp_path / "out"
    replay = _only(rec, tmp_path / "mine", ns)
    args = ["simulate", "--replay", str(replay), "--provider", "sim", "--quiet", "--out", str(out_dir)]
    assert main([*args, "--set", "autoscaler.scan-interval=0.25s"]) == 0
    tl = json.loads((out_dir / "report.json").read_text())["timeline"]
    # a loop between the kubectl call and the recorder seeing its change may show either count:
    # every other loop must show exactly the pods the test's actions want
    checked = [
        (t, p, wanted(changes, t, {"web": 2}))
        for t, p in zip(tl["t"], tl["pending"], strict=True)
        if not any(lo - 0.05 <= t <= hi + 0.05 for lo, hi in windows)
    ]
    assert len(checked) >= len(tl["t"]) // 2, (len(checked), windows)
    assert [p for _, p, _ in checked] == [w for _, _, w in checked], checked
    assert {w for _, _, w in checked} >= {2, 5, 8, 9, 6, 1}


def _gone(api: Any, ns: str, version: str) -> bool:
    """Whether the apiserver answers a watch from `version` with 410 Gone."""
    from kubernetes import client, watch
    from kubernetes.client.exceptions import ApiException

    try:
        for _ in watch.Watch().stream(
            client.AppsV1Api(api).list_namespaced_deployment, ns, resource_version=version, timeout_seconds=1
        ):
            pass
    except ApiException as exc:
        return exc.status == 410
    return False


def test_a_watch_too_old_for_the_apiserver_lists_again_and_writes_what_it_missed(
    control_plane, tmp_path: Path
) -> None:
    """A watch from a version etcd has compacted away gets 410 Gone (Deployments skip the test
    apiserver's watch cache, `controlplane.WATCH_CACHE_SIZES`, so etcd answers the watch itself).
    The test compacts etcd past the listed version, as the apiserver's periodic compaction does,
    and waits on the apiserver's own answer, not on a clock."""
    from kubernetes import config

    plane = control_plane
    ns = plane.namespace("gone")
    docs = [_deployment(n, ns, 1) for n in ("kept", "scaled", "removed")]
    plane.kubectl("apply", "-f", "-", input="\n---\n".join(yaml.safe_dump(d) for d in docs))
    api = config.new_client_from_config(config_file=str(plane.kubeconfig))
    rec = Recorder(api, tmp_path / "rec", watch_seconds=1)
    try:
        rec.start(threads=False)
        listed = rec.versions["Deployment"]
        assert listed
        # changes while the recorder is not watching, as during a long disconnection
        plane.kubectl("scale", "deployment", "scaled", "-n", ns, "--replicas=4")
        plane.kubectl("delete", "deployment", "removed", "-n", ns)
        plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(_deployment("added", ns, 2)))
        assert plane.compact() > int(listed)
        poll(
            lambda: _gone(api, ns, listed) or None,
            60,
            "the apiserver to answer 410 Gone for the listed version",
        )
        kind = kind_named("Deployment")
        rec.watch_once(kind)  # answered 410 Gone
        assert rec.versions["Deployment"] is None
        rec.watch_once(kind)  # lists again, then watches from the list's version
        rec.watch_once(kind)  # nothing new: nothing written twice
    finally:
        rec.stop("duration")
        api.close()
    records = read(tmp_path / "rec").records
    relists = [r for r in records if r["op"] == "relist"]
    assert [(r["kind"], r["reason"]) for r in relists] == [("Deployment", "410 Gone")]
    mine = sorted((r["op"], r["name"], r.get("replicas")) for r in records if r.get("ns") == ns)
    assert mine == [("add", "added", 2), ("delete", "removed", None), ("update", "scaled", 4)]
    assert rec.relists == {"Deployment": 1}


def test_record_for_a_duration_ends_its_log_on_time(control_plane, tmp_path: Path, capsys) -> None:
    rec = tmp_path / "rec"
    args = ["simulate", "--record", str(rec), "--from-cluster", "--kubeconfig", str(control_plane.kubeconfig)]
    assert main([*args, "--for", "1s"]) == 0
    log = read(rec)
    assert log.end_reason == "duration" and 1.0 <= log.length < 30
    assert json.loads((rec / SNAPSHOT).read_text())["kind"] == "List"
    out = capsys.readouterr().out
    assert out.startswith(f"recording into {rec} for 1s\n") and "(done): " in out
