"""cluster-autoscaler's own account, recorded from a real kube-apiserver and replayed beside the
simulation: the test plays CA's part, writing the Events CA emits on its status ConfigMap (and
the ConfigMap's YAML status) in CA's formats while `simulate --record` watches; the replay then
pairs the simulation's decisions with CA's. And a recorder whose kubeconfig turns TLS
verification off says so once, instead of once per request.

The cluster (no controller-manager, scheduler or kubelet: see test_record_cluster.py): Deployment
`web` (one CPU a pod) goes from 0 to 4 replicas, then back to 0 once the replay's loop has seen
its pods pending. CA's part follows CA's rules on the replay's node group (2-CPU nodes, 60 s to
boot): a 0->2 scale-up a few seconds after the pods appear, and both nodes, empty since they
registered, removed together after the default 10 minutes unneeded."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from cloudprovider_grpc.cli import main
from cloudprovider_grpc.simulator.eventlog import SNAPSHOT, Header, Writer, read
from tests.support.waits import poll

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CLOUD = {
    "provisioning_delay": 60,
    "groups": [{"id": "general", "min_size": 0, "max_size": 5, "capacity": {"cpu": "2", "memory": "8Gi"}}],
}
STATUS = "cluster-autoscaler-status"


def _deployment(ns: str) -> dict[str, Any]:
    tpl = {
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}}, "template": tpl},
    }


def _stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _status(ns: str, when: datetime, target: int) -> dict[str, Any]:
    """CA's status ConfigMap as CA >= 1.30 writes it (YAML, clusterstate/api/types.go)."""
    status = {
        "time": when.strftime("%Y-%m-%d %H:%M:%S.%f +0000 UTC"),
        "autoscalerStatus": "Running",
        "nodeGroups": [
            {
                "name": "general",
                "health": {"status": "Healthy", "cloudProviderTarget": target, "minSize": 0, "maxSize": 5},
                "scaleUp": {"status": "InProgress" if target else "NoActivity"},
            }
        ],
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": STATUS, "namespace": ns},
        "data": {"status": yaml.safe_dump(status)},
    }


def _event(ns: str, n: int, when: datetime, reason: str, message: str) -> dict[str, Any]:
    """One Event as CA's LogEventRecorder emits it: on its status ConfigMap, source
    cluster-autoscaler (clusterstate/utils/status.go at cluster-autoscaler-1.36.1)."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{STATUS}.{n}", "namespace": ns},
        "involvedObject": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": ns, "name": STATUS},
        "reason": reason,
        "message": message,
        "type": "Normal",
        "source": {"component": "cluster-autoscaler"},
        "firstTimestamp": _stamp(when),
        "lastTimestamp": _stamp(when),
        "count": 1,
    }


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


def _seen(rec: Path, ns: str, predicate: Any, what: str) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        return next((r for r in read(rec).records if r.get("ns") == ns and predicate(r)), None)

    return poll(found, 30, f"the recorder to write {what}")


def _replay(tmp_path: Path, rec: Path, name: str, *extra: str) -> list[tuple[str, float | None]]:
    cloud = tmp_path / "cloud.yaml"
    cloud.write_text(yaml.safe_dump(CLOUD))
    out = tmp_path / name
    args = ["simulate", "--replay", str(rec), "--provider", "sim", "--cloud", str(cloud), "--duration", "40m"]
    assert main([*args, "--quiet", "--out", str(out), *extra]) == 0
    rows = json.loads((out / "report.json").read_text())["agreement"]["rows"]
    return [(r["outcome"], r["ca"]["kind"] if r["ca"] else r["simulated"]["kind"]) for r in rows]


def test_cas_events_recorded_on_a_real_apiserver_replay_with_the_agreement_table(
    control_plane, tmp_path: Path, capsys
) -> None:
    plane = control_plane
    ns = plane.namespace("ca")
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(_deployment(ns)))
    rec = tmp_path / "rec"
    cmd = [sys.executable, "-m", "cloudprovider_grpc", "simulate", "--record", str(rec), "--from-cluster"]
    proc = subprocess.Popen(
        [*cmd, "--kubeconfig", str(plane.kubeconfig)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        poll(lambda: (rec / "events.jsonl.gz").exists() or None, 60, "the recording to start")
        started = read(rec).header.started
        plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(_status(ns, started, 0)))
        plane.kubectl("scale", "deployment", "web", "-n", ns, "--replicas=4")
        up = _seen(rec, ns, lambda r: r.get("replicas") == 4, "the scale to 4")["t"]
        # the replay's loops run every 10 s from 0: the first after the pods appear decides
        loop = math.ceil(up / 10) * 10
        at = started + timedelta(seconds=up + 3)  # CA's own first loop after the pods appear
        for n, (reason, message) in enumerate(
            [
                ("ScaledUpGroup", "Scale-up: setting group general size to 2 instead of 0 (max: 5)"),
                ("ScaledUpGroup", "Scale-up: group general size set to 2 instead of 0 (max: 5)"),
            ]
        ):
            plane.kubectl("create", "-f", "-", input=yaml.safe_dump(_event(ns, n, at, reason, message)))
        plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(_status(ns, at, 2)))
        # the pods stay pending until past that loop before they go: part of the scenario (what
        # the cluster does), not a wait for anything
        time.sleep(max(0.0, loop + 1.0 - (datetime.now(started.tzinfo) - started).total_seconds()))
        plane.kubectl("scale", "deployment", "web", "-n", ns, "--replicas=0")
        _seen(rec, ns, lambda r: r.get("replicas") == 0, "the scale to 0")
        # nodes registered 60 s after the scale-up, empty, unneeded 10 minutes later
        gone = started + timedelta(seconds=loop + 60 + 600 + 7)
        for n, node in enumerate(["node-a", "node-b"], start=2):
            message = f'Scale-down: removing empty node "{node}"'
            plane.kubectl(
                "create", "-f", "-", input=yaml.safe_dump(_event(ns, n, gone, "ScaleDownEmpty", message))
            )
        _seen(rec, ns, lambda r: r.get("kind") == "Event" and "node-b" in r.get("message", ""), "CA's events")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    log = read(rec)
    assert {"Event", "CAStatus"} <= set(log.header.kinds)
    mine = [r for r in log.records if r.get("ns") == ns and r["kind"] in ("Event", "CAStatus")]
    assert [r["kind"] for r in mine].count("Event") == 4
    assert any(r["kind"] == "CAStatus" and "cloudProviderTarget: 2" in r.get("status", "") for r in mine)

    replay = _only(rec, tmp_path / "mine", ns)
    assert _replay(tmp_path, replay, "baseline") == [
        ("matched", "scale-up"),
        ("matched", "scale-down"),
        ("matched", "scale-down"),
    ]
    assert "agreement with cluster-autoscaler: 3 of 3 decisions matched within 10s" in capsys.readouterr().out
    slow = _replay(tmp_path, replay, "slow", "--set", "autoscaler.scale-down-unneeded-time=20m")
    assert slow == [("matched", "scale-up"), ("late", "scale-down"), ("late", "scale-down")]
    short = _replay(tmp_path, replay, "short", "--set", "autoscaler.scale-down-unneeded-time=40m")
    assert short == [("matched", "scale-up"), ("missed", "scale-down"), ("missed", "scale-down")]

    # the same decisions in CA's log give the same table
    klog = "".join(
        f"{w:I%m%d %H:%M:%S.%f}       1 {where}] {text}\n"
        for w, where, text in [
            (at, "orchestrator.go:177", "Final scale-up plan: [{general 0->2 (max: 5)}]"),
            (gone, "actuator.go:176", 'Scale-down: removing empty node "node-a"'),
            (gone, "actuator.go:176", 'Scale-down: removing empty node "node-b"'),
        ]
    )
    (tmp_path / "ca.log").write_text(klog)
    assert _replay(tmp_path, replay, "log", "--ca-log", str(tmp_path / "ca.log")) == [
        ("matched", "scale-up"),
        ("matched", "scale-down"),
        ("matched", "scale-down"),
    ]


def test_an_unverified_tls_connection_is_said_once(control_plane, tmp_path: Path) -> None:
    config = yaml.safe_load(control_plane.kubeconfig.read_text())
    for c in config["clusters"]:
        c["cluster"].pop("certificate-authority-data", None)
        c["cluster"]["insecure-skip-tls-verify"] = True
    insecure = tmp_path / "insecure.kubeconfig"
    insecure.write_text(yaml.safe_dump(config))
    cmd = [sys.executable, "-m", "cloudprovider_grpc", "simulate", "--record", str(tmp_path / "rec")]
    done = subprocess.run(
        [*cmd, "--from-cluster", "--kubeconfig", str(insecure), "--for", "2s"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "InsecureRequestWarning" not in done.stderr
    said = [line for line in done.stderr.splitlines() if "TLS verification" in line]
    assert len(said) == 1 and control_plane.url in said[0], done.stderr


def test_without_rbac_for_events_the_recording_is_made_without_cas_account(
    control_plane, tmp_path: Path
) -> None:
    """An identity that may read the cluster but not its Events: one warning, and a recording whose
    header says CA's account is not in it (its replay shows no agreement)."""
    plane = control_plane
    ns = plane.namespace("norbac")
    kubeconfig = plane.token_kubeconfig(ns, "recorder")
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": f"{ns}-reader"},
        "rules": [
            {"apiGroups": [""], "resources": ["nodes", "pods", "configmaps"], "verbs": ["list", "watch"]},
            {
                "apiGroups": ["apps"],
                "resources": ["deployments", "replicasets", "statefulsets", "daemonsets"],
                "verbs": ["list", "watch"],
            },
            {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list", "watch"]},
            {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["list", "watch"]},
            {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": ["list"]},
        ],
    }
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(role))
    plane.kubectl(
        "create",
        "clusterrolebinding",
        f"{ns}-reader",
        f"--clusterrole={ns}-reader",
        f"--serviceaccount={ns}:recorder",
    )
    rec = tmp_path / "rec"
    cmd = [sys.executable, "-m", "cloudprovider_grpc", "simulate", "--record", str(rec), "--from-cluster"]
    done = subprocess.run(
        [*cmd, "--kubeconfig", str(kubeconfig), "--for", "1s"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if "cannot list Event" in line]
    assert len(warned) == 1 and "403" in warned[0] and "cluster-autoscaler's Events" in warned[0], done.stderr
    kinds = read(rec).header.kinds
    assert "Event" not in kinds and "CAStatus" in kinds and "Deployment" in kinds
