"""The chart, installed for real with the project's helm on the one-node cluster: two replicas,
one leader on the Lease, the standby not ready, the Service pointing at the leader only, and calls
from outside the cluster through that Service answered. Then the failures a cluster brings: the
leader pod deleted (a new leader within 20 s), the front killed by the node inside the pod (the
pod restarted per its probes, or still Ready), and the PodDisruptionBudget refusing the eviction
that would leave no replica answering."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from tests.deploy_support.tools import tool
from tests.realnode import image as images
from tests.realnode.cluster import Cluster
from tests.support.certs import Pki, write_pki
from tests.support.gotools import HELM
from tests.support.ha import EveryRpcLoop
from tests.support.waits import poll

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(3600)]

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "cloudprovider-grpc"
RELEASE = "cpg"
FULLNAME = f"{RELEASE}-cloudprovider-grpc"
GROUP = "pool-a"


@dataclass
class Release:
    node: Cluster
    namespace: str
    pki: Pki
    helm: Path
    values: Path
    install_seconds: float

    def helm_run(self, *args: str) -> str:
        import subprocess

        proc = subprocess.run(
            [
                str(self.helm),
                f"--kubeconfig={self.node.plane.kubeconfig}",
                f"--namespace={self.namespace}",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr + proc.stdout
        return proc.stdout

    def pods(self) -> list[dict[str, Any]]:
        out = self.node.kubectl(
            "get", "pods", "-n", self.namespace, "-l", f"app.kubernetes.io/instance={RELEASE}", "-o", "json"
        ).stdout
        return [p for p in json.loads(out)["items"] if not p["metadata"].get("deletionTimestamp")]

    def holder(self) -> str:
        out = self.node.kubectl("get", "lease", FULLNAME, "-n", self.namespace, "-o", "json", check=False)
        return json.loads(out.stdout)["spec"].get("holderIdentity", "") if out.returncode == 0 else ""

    def service_ip(self) -> str:
        out = self.node.kubectl("get", "service", FULLNAME, "-n", self.namespace, "-o", "json").stdout
        return str(json.loads(out)["spec"]["clusterIP"])

    def ready_endpoints(self) -> list[str]:
        out = self.node.kubectl(
            "get",
            "endpointslices",
            "-n",
            self.namespace,
            "-l",
            f"kubernetes.io/service-name={FULLNAME}",
            "-o",
            "json",
        ).stdout
        return sorted(
            address
            for item in json.loads(out)["items"]
            for endpoint in item.get("endpoints") or []
            if endpoint.get("conditions", {}).get("ready")
            for address in endpoint["addresses"]
        )


def ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def running(pod: dict[str, Any]) -> bool:
    return bool(pod.get("status", {}).get("phase") == "Running" and pod["status"].get("podIP"))


def settled(release: Release) -> dict[str, Any] | None:
    """The leader pod once two pods run, exactly one is Ready, it holds the Lease and the Service
    points at it alone; else None."""
    pods = release.pods()
    if len(pods) != 2 or not all(running(p) for p in pods):
        return None
    leaders = [p for p in pods if ready(p)]
    if len(leaders) != 1 or release.holder() != leaders[0]["metadata"]["name"]:
        return None
    if release.ready_endpoints() != [leaders[0]["status"]["podIP"]]:
        return None
    return leaders[0]


@pytest.fixture(scope="module")
def release(node: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    """`helm install` of the chart: the sim cloud, two replicas, mutual TLS from a Secret the user
    provides (tls.mode=secret: no cert-manager), the image the suite built."""
    helm = tool(HELM)
    work = tmp_path_factory.mktemp("chart")
    pki = write_pki(work / "pki")
    namespace = node.plane.namespace("chart")
    files = {"tls.crt": pki.server_cert, "tls.key": pki.server_key, "ca.crt": pki.ca}
    node.kubectl(
        "create",
        "secret",
        "generic",
        "cpg-tls",
        "-n",
        namespace,
        *(f"--from-file={k}={v}" for k, v in files.items()),
    )
    values = work / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "image": {"repository": images.REPOSITORY, "tag": "realnode", "pullPolicy": "Never"},
                "provider": "sim",
                "nodes": [f"1:5:{GROUP}"],
                "replicas": 2,
                "tls": {"mode": "secret", "secret": {"name": "cpg-tls"}},
                # the pods' requests fit any build machine
                "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
            }
        )
    )
    installed = Release(node, namespace, pki, helm, values, 0.0)
    started = time.monotonic()
    installed.helm_run("install", RELEASE, str(CHART), f"--values={values}")
    poll(lambda: settled(installed), 180, f"a leader and a standby:\n{installed.pods()}", interval=0.5)
    installed.install_seconds = time.monotonic() - started
    print(f"\nchart installed, leader and standby settled in {installed.install_seconds:.1f} s")
    yield installed


def every_rpc(release: Release, rounds: int = 3) -> EveryRpcLoop:
    """Every RPC through the Service from the host, with CA's client certificate."""
    loop = EveryRpcLoop(f"{release.service_ip()}:8086", GROUP, release.pki).start()
    try:
        poll(lambda: loop.calls.get("Refresh", 0) >= rounds, 120, f"{rounds} rounds of every RPC")
    finally:
        loop.stop()
    return loop


def test_chart_runs_one_leader_and_a_standby_behind_the_service(release: Release) -> None:
    leader = settled(release)
    assert leader is not None
    standby = next(p for p in release.pods() if p["metadata"]["name"] != leader["metadata"]["name"])
    assert not ready(standby)
    spec = leader["spec"]["containers"][0]["securityContext"]
    assert spec["readOnlyRootFilesystem"] is True and spec.get("runAsNonRoot", True)
    loop = every_rpc(release)
    assert loop.failures() == 0, loop.failed
    assert loop.answered.get("NodeGroups", 0) >= 3


def test_deleted_leader_is_replaced_within_20_seconds(release: Release) -> None:
    leader = settled(release)
    assert leader is not None
    name = leader["metadata"]["name"]
    deleted = time.monotonic()
    release.node.kubectl("delete", "pod", name, "-n", release.namespace, "--wait=false")
    poll(
        lambda: release.holder() not in ("", name), 20, f"a new holder of the Lease than {name}", interval=0.2
    )
    took = time.monotonic() - deleted
    print(f"\nleader {name} deleted: new leader {release.holder()} after {took:.1f} s")
    poll(lambda: settled(release), 120, "a leader and a standby again", interval=0.5)
    assert every_rpc(release).failures() == 0


def test_killed_front_is_restarted_and_the_pod_recovers(release: Release) -> None:
    leader = settled(release)
    assert leader is not None
    uid = leader["metadata"]["uid"]
    killed = _front_pid(release.node, uid)
    os.kill(killed, signal.SIGKILL)  # as the node's OOM killer would
    # Restarted by the server in the same container, or the container restarted by its probes.
    poll(
        lambda: _front_pid(release.node, uid, missing_ok=True) not in (0, killed),
        60,
        "the front to run again",
    )
    poll(lambda: settled(release), 120, "a leader and a standby again", interval=0.5)
    assert every_rpc(release).failures() == 0


def test_pod_disruption_budget_refuses_evicting_the_leader(release: Release) -> None:
    leader = settled(release)
    assert leader is not None
    with kubernetes.config.new_client_from_config(config_file=str(release.node.plane.kubeconfig)) as api:
        core = kubernetes.client.CoreV1Api(api)
        body = kubernetes.client.V1Eviction(
            metadata=kubernetes.client.V1ObjectMeta(
                name=leader["metadata"]["name"], namespace=release.namespace
            )
        )
        with pytest.raises(kubernetes.client.ApiException) as refused:
            core.create_namespaced_pod_eviction(leader["metadata"]["name"], release.namespace, body)
    assert refused.value.status == 429, refused.value.body
    assert "disruption budget" in str(refused.value.body)
    assert settled(release) is not None


def _front_pid(node: Cluster, pod_uid: str, *, missing_ok: bool = False) -> int:
    """The host pid of the compiled front in the server container of pod `pod_uid`: the container's
    task from containerd (labelled with its pod), then the front among that task's children."""
    tasks = node.ctr("tasks", "ls").stdout.splitlines()[1:]
    for line in tasks:
        task, pid = line.split()[:2]
        info = json.loads(node.ctr("containers", "info", task).stdout)
        labels = info.get("Labels") or {}
        if (
            labels.get("io.kubernetes.pod.uid") == pod_uid
            and labels.get("io.kubernetes.container.name") == "cloudprovider-grpc"
        ):
            for child in _children(int(pid)):
                if Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")[0].endswith(b"/cpg-front"):
                    return child
    assert missing_ok, f"no front in pod {pod_uid}"
    return 0


def _children(pid: int) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(proc.name))
            except (OSError, IndexError, ValueError):
                continue
    return found
