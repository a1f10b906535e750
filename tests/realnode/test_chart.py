"""The chart, installed for real with the project's helm on the one-node cluster: two Ready
replicas, one leader on the Lease whose pod alone carries the leader label, the Service pointing
at the leader only, and calls from outside the cluster through that Service answered. Then what a
cluster does to it: a `helm upgrade` rolled out under load (one hand-over, no failed call), the
leader pod deleted (a new leader within 20 s), the front killed by the node inside the pod (the
pod restarted per its probes, or still Ready), and the PodDisruptionBudget refusing the eviction
that would leave no replica answering.

The steps are one test, in order, on one release: the cluster is the machine's (its bridge and
address), so one test is what makes it one cluster per suite run whatever the xdist workers."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from tests.deploy_support.tools import tool
from tests.realnode import figures, official_chart
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
GROUP = "pool-a"
LEADER_LABEL = "cloudprovider-grpc.io/leader"


@dataclass
class Release:
    node: Cluster
    namespace: str
    pki: Pki
    helm: Path
    values: Path
    install_seconds: float
    name: str = RELEASE
    replicas: int = 2

    @property
    def fullname(self) -> str:
        return f"{self.name}-cloudprovider-grpc"

    def helm_run(self, *args: str) -> str:
        return official_chart.helm(self.node, self.helm, self.namespace, *args)

    def pods(self) -> list[dict[str, Any]]:
        out = self.node.kubectl(
            "get", "pods", "-n", self.namespace, "-l", f"app.kubernetes.io/instance={self.name}", "-o", "json"
        ).stdout
        return [p for p in json.loads(out)["items"] if not p["metadata"].get("deletionTimestamp")]

    def holder(self) -> str:
        out = self.node.kubectl(
            "get", "lease", self.fullname, "-n", self.namespace, "-o", "json", check=False
        )
        return json.loads(out.stdout)["spec"].get("holderIdentity", "") if out.returncode == 0 else ""

    def service_ip(self) -> str:
        out = self.node.kubectl("get", "service", self.fullname, "-n", self.namespace, "-o", "json").stdout
        return str(json.loads(out)["spec"]["clusterIP"])

    def api(self) -> kubernetes.client.ApiClient:
        return kubernetes.config.new_client_from_config(config_file=str(self.node.plane.kubeconfig))

    def ready_endpoints(self) -> list[str]:
        out = self.node.kubectl(
            "get",
            "endpointslices",
            "-n",
            self.namespace,
            "-l",
            f"kubernetes.io/service-name={self.fullname}",
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


def labelled_leader(pod: dict[str, Any]) -> bool:
    return (pod["metadata"].get("labels") or {}).get(LEADER_LABEL) == "true"


def settled(release: Release) -> dict[str, Any] | None:
    """The leader pod once the release's pods (two, or `replicas`) run and are Ready, exactly one is
    labelled the leader, it holds the Lease and the Service points at it alone; else None."""
    pods = release.pods()
    if len(pods) != release.replicas or not all(running(p) and ready(p) for p in pods):
        return None
    leaders = [p for p in pods if labelled_leader(p)]
    if len(leaders) != 1 or release.holder() != leaders[0]["metadata"]["name"]:
        return None
    if release.ready_endpoints() != [leaders[0]["status"]["podIP"]]:
        return None
    return leaders[0]


def rolled_out(release: Release) -> bool:
    """What `kubectl rollout status` waits for, read through the API: the controller saw the new
    template, every replica runs it and is available, no old one is left."""
    with release.api() as client:
        deployment = kubernetes.client.AppsV1Api(client).read_namespaced_deployment(
            release.fullname, release.namespace
        )
    status, want = deployment.status, deployment.spec.replicas
    return bool(
        (status.observed_generation or 0) >= deployment.metadata.generation
        and (status.updated_replicas or 0) == want
        and (status.replicas or 0) == want
        and (status.available_replicas or 0) == want
    )


class HolderWatch:
    """Every holder the Lease had, in order (the empty holder of a released Lease left out), read
    every 0.1 s on a thread."""

    def __init__(self, release: Release) -> None:
        self.holders: list[str] = []
        self._release = release
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> HolderWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        with self._release.api() as client:
            coordination = kubernetes.client.CoordinationV1Api(client)
            while not self._stop.wait(0.1):
                try:
                    lease = coordination.read_namespaced_lease(
                        self._release.fullname, self._release.namespace
                    )
                except kubernetes.client.ApiException:
                    continue
                holder = lease.spec.holder_identity or ""
                if holder and (not self.holders or self.holders[-1] != holder):
                    self.holders.append(holder)


class HandOverLog:
    """The hand-over lines of every server container's log in the release's namespace, read from
    the kubelet's pod log files every 0.2 s on a thread (a replaced pod's files go with it, so
    they are read while they exist): how many calls an old leader forwarded to its successor."""

    PATTERN = re.compile(r"hand-over: (\d+) calls were forwarded|hand-over: calls that reach this replica")

    def __init__(self, release: Release) -> None:
        self._root = release.node.workdir / "pod-logs"
        self._glob = f"{release.namespace}_*/cloudprovider-grpc/*.log"
        self.lines: dict[str, list[str]] = {}  # log file -> its hand-over lines
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> HandOverLog:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self._read()

    def _read(self) -> None:
        for path in self._root.glob(self._glob):
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            found = [line for line in text.splitlines() if self.PATTERN.search(line)]
            if len(found) >= len(self.lines.get(str(path), [])):
                self.lines[str(path)] = found

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self._read()

    def forwarded(self) -> int:
        return sum(
            int(m.group(1))
            for found in self.lines.values()
            for line in found
            if (m := self.PATTERN.search(line)) and m.group(1)
        )

    def forwarding_started(self) -> int:
        return sum(1 for found in self.lines.values() for line in found if "calls that reach" in line)


def install(node: Cluster, helm: Path, pki: Pki, work: Path, name: str, overrides: dict[str, Any]) -> Release:
    """`helm install` of the chart as release `name` in a namespace of its own: mutual TLS from a
    Secret the user provides (tls.mode=secret: no cert-manager), the image the suite built, the
    `overrides`; returned once its pods settled (see `settled`), with the time that took."""
    namespace = node.plane.namespace(name)
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
    chosen: dict[str, Any] = {
        "image": {"repository": images.REPOSITORY, "tag": "realnode", "pullPolicy": "Never"},
        "replicas": 2,
        "tls": {"mode": "secret", "secret": {"name": "cpg-tls"}},
        # the pods' requests fit any build machine
        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        **overrides,
    }
    values = work / f"{name}-values.yaml"
    values.write_text(yaml.safe_dump(chosen))
    installed = Release(node, namespace, pki, helm, values, 0.0, name, chosen["replicas"])
    started = time.monotonic()
    installed.helm_run("install", name, str(CHART), f"--values={values}")
    poll(lambda: settled(installed), 180, f"{name}: its pods to settle:\n{installed.pods()}", interval=0.5)
    installed.install_seconds = time.monotonic() - started
    return installed


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("chart")


@pytest.fixture(scope="module")
def release(node: Cluster, work: Path) -> Release:
    """The chart on the sim cloud, two replicas."""
    pki = write_pki(work / "pki")
    installed = install(node, tool(HELM), pki, work, RELEASE, {"provider": "sim", "nodes": [f"1:5:{GROUP}"]})
    figures.note(f"\nchart installed, leader and standby settled in {installed.install_seconds:.1f} s")
    return installed


def every_rpc(release: Release, rounds: int = 3, group: str = GROUP) -> EveryRpcLoop:
    """Every RPC through the Service from the host, with CA's client certificate."""
    loop = EveryRpcLoop(f"{release.service_ip()}:8086", group, release.pki).start()
    try:
        poll(lambda: loop.calls.get("Refresh", 0) >= rounds, 120, f"{rounds} rounds of every RPC")
    finally:
        loop.stop()
    return loop


def test_chart_on_a_real_node(release: Release, built: images.Built, work: Path) -> None:
    """Install, then upgrade, delete, kill and evict, in order; then a second release on an emulated
    cloud, and the official cluster-autoscaler chart with our sidecar values. Each step's assertions
    say which."""
    step_leader_and_standby_behind_the_service(release)
    step_upgrade_under_load(release)
    step_deleted_leader_replaced_within_20_seconds(release)
    step_killed_front_restarted(release)
    step_disruption_budget_refuses_the_last_replica(release)
    step_second_release_on_an_emulated_cloud(release, work)
    step_official_chart_with_the_sidecar(release, built, work)


def step_leader_and_standby_behind_the_service(release: Release) -> None:
    leader = settled(release)
    assert leader is not None, f"install: no settled leader and standby:\n{release.pods()}"
    standby = next(p for p in release.pods() if p["metadata"]["name"] != leader["metadata"]["name"])
    assert ready(standby) and not labelled_leader(standby), f"install: the standby {standby['metadata']}"
    spec = leader["spec"]["containers"][0]["securityContext"]
    assert spec["readOnlyRootFilesystem"] is True and spec.get("runAsNonRoot", True), f"install: {spec}"
    loop = every_rpc(release)
    assert loop.failures() == 0, f"install: calls through the Service failed: {loop.failed}"
    assert loop.answered.get("NodeGroups", 0) >= 3, f"install: NodeGroups answered {loop.answered}"


def step_upgrade_under_load(release: Release) -> None:
    """`helm upgrade` to a new image tag while every RPC goes through the Service: the rollout
    completes (the standby replaced first, the leader last), the leadership moves once, no call
    fails."""
    before = settled(release)
    assert before is not None, f"upgrade: not settled before:\n{release.pods()}"
    old_pods = {p["metadata"]["name"] for p in release.pods()}
    loop = EveryRpcLoop(f"{release.service_ip()}:8086", GROUP, release.pki).start()
    try:
        poll(lambda: loop.calls.get("Refresh", 0) >= 3, 120, "upgrade: the loop to run")
        with HolderWatch(release) as watch, HandOverLog(release) as handover:
            started = time.monotonic()
            release.helm_run(
                "upgrade", RELEASE, str(CHART), f"--values={release.values}", "--set=image.tag=realnode-2"
            )
            poll(lambda: rolled_out(release), 300, f"upgrade: the rollout to complete:\n{release.pods()}")
            took = time.monotonic() - started
            poll(lambda: settled(release), 60, f"upgrade: a leader and a standby again:\n{release.pods()}")
            after = loop.calls.get("Refresh", 0)
            poll(lambda: loop.calls.get("Refresh", 0) >= after + 3, 120, "upgrade: calls after the rollout")
    finally:
        loop.stop()
    calls, answered = sum(loop.calls.values()), sum(loop.answered.values())
    figures.note(
        f"\nupgrade rolled out in {took:.1f} s; {calls} calls, {answered} answered OK,"
        f" {loop.failures()} failed, other statuses {loop.other}; holders {watch.holders}"
        f"\nupgrade counts: calls {calls}, failed {loop.failures()}, forwarded by the old leader"
        f" {handover.forwarded()} (forwarding began {handover.forwarding_started()} time(s)),"
        f" hand-overs {len(watch.holders) - 1}"
    )
    assert loop.failures() == 0, f"upgrade: calls failed: {loop.failed}"
    assert len(watch.holders) == 2 and watch.holders[0] == before["metadata"]["name"], (
        f"upgrade: the Lease should change holder exactly once, from the old leader: {watch.holders}"
    )
    pods = release.pods()
    assert not old_pods & {p["metadata"]["name"] for p in pods}, f"upgrade: old pods left: {pods}"
    assert all(p["spec"]["containers"][0]["image"].endswith(":realnode-2") for p in pods), pods
    leader = settled(release)
    assert leader is not None and leader["metadata"]["name"] == watch.holders[-1], (
        f"upgrade: the last holder {watch.holders[-1]} is not the one leader-labelled ready endpoint"
    )


def step_deleted_leader_replaced_within_20_seconds(release: Release) -> None:
    leader = settled(release)
    assert leader is not None, f"delete: not settled before:\n{release.pods()}"
    name = leader["metadata"]["name"]
    deleted = time.monotonic()
    release.node.kubectl("delete", "pod", name, "-n", release.namespace, "--wait=false")
    poll(
        lambda: release.holder() not in ("", name),
        20,
        f"delete: a new holder of the Lease than {name} within 20 s",
        interval=0.2,
    )
    took = time.monotonic() - deleted
    figures.note(f"\nleader {name} deleted: new leader {release.holder()} after {took:.1f} s")
    poll(lambda: settled(release), 120, "delete: a leader and a standby again", interval=0.5)
    loop = every_rpc(release)
    assert loop.failures() == 0, f"delete: calls through the Service failed after: {loop.failed}"


def step_killed_front_restarted(release: Release) -> None:
    leader = settled(release)
    assert leader is not None, f"kill: not settled before:\n{release.pods()}"
    uid = leader["metadata"]["uid"]
    killed = _front_pid(release.node, uid)
    os.kill(killed, signal.SIGKILL)  # as the node's OOM killer would
    # Restarted by the server in the same container, or the container restarted by its probes.
    poll(
        lambda: _front_pid(release.node, uid, missing_ok=True) not in (0, killed),
        60,
        "kill: the front to run again",
    )
    poll(lambda: settled(release), 120, "kill: a leader and a standby again", interval=0.5)
    loop = every_rpc(release)
    assert loop.failures() == 0, f"kill: calls through the Service failed after: {loop.failed}"


def step_disruption_budget_refuses_the_last_replica(release: Release) -> None:
    """Both replicas are Ready, so one may be evicted (a node drain moves it); the other, then,
    may not: the budget keeps a replica that can answer."""
    leader = settled(release)
    assert leader is not None, f"evict: not settled before:\n{release.pods()}"
    standby = next(p for p in release.pods() if p["metadata"]["name"] != leader["metadata"]["name"])
    with release.api() as client:
        core = kubernetes.client.CoreV1Api(client)

        def evict(pod: dict[str, Any]) -> None:
            name = pod["metadata"]["name"]
            body = kubernetes.client.V1Eviction(
                metadata=kubernetes.client.V1ObjectMeta(name=name, namespace=release.namespace)
            )
            core.create_namespaced_pod_eviction(name, release.namespace, body)

        evict(standby)
        with pytest.raises(kubernetes.client.ApiException) as refused:
            evict(leader)
    assert refused.value.status == 429, f"evict: {refused.value.body}"
    assert "disruption budget" in str(refused.value.body), f"evict: {refused.value.body}"
    after = poll(lambda: settled(release), 120, "evict: a leader and a standby again", interval=0.5)
    assert after["metadata"]["name"] == leader["metadata"]["name"], "evict: the leader moved"


def step_second_release_on_an_emulated_cloud(first: Release, work: Path) -> None:
    """A second release beside the first, on the Exoscale backend's bundled emulator (`--emulate`:
    no account, no credentials Secret, the emulator's demo groups): its pod settles and every RPC
    is answered through its own Service."""
    emulated = install(
        first.node,
        first.helm,
        first.pki,
        work,
        "emulated",
        {
            "provider": "exoscale",
            "extraArgs": ["--emulate"],
            "backends": {"exoscale": {"env": [], "files": []}},
            "replicas": 1,
        },
    )
    probe = EveryRpcLoop(f"{emulated.service_ip()}:8086", GROUP, emulated.pki)
    try:
        groups = probe.stub.NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups
    finally:
        probe.channel.close()
    assert groups, "emulated: the emulator's demo groups were not listed"
    loop = every_rpc(emulated, group=groups[0].id)
    figures.note(
        f"\nsecond release (exoscale, emulated) settled in {emulated.install_seconds:.1f} s;"
        f" groups {[g.id for g in groups]}; {sum(loop.answered.values())} calls answered"
    )
    assert loop.failures() == 0, f"emulated: calls through the Service failed: {loop.failed}"
    for method in ("NodeGroups", "NodeGroupTargetSize", "NodeGroupNodes", "NodeGroupTemplateNodeInfo"):
        assert loop.answered.get(method, 0) >= 3, f"emulated: {method} answered {loop.answered}"


def step_official_chart_with_the_sidecar(first: Release, built: images.Built, work: Path) -> None:
    """The official cluster-autoscaler chart with deploy/helm/cluster-autoscaler/sim.yaml: the pod
    Ready with both containers (our server as a native sidecar, restartPolicy Always, and the CA
    stand-in), the stand-in's loops answered (its own count and health check) and our server's
    metrics counting the calls it served."""
    node = first.node
    started = time.monotonic()
    standin = official_chart.standin_image(built.podman)
    node.load_image(built.podman, standin)
    prepared = time.monotonic() - started
    ca = official_chart.install_official_chart(
        node, first.helm, work, f"{images.REPOSITORY}:realnode", standin
    )
    sidecar = next(c for c in ca.pod["spec"]["initContainers"] if c["name"] == "cloudprovider-grpc")
    assert sidecar.get("restartPolicy") == "Always", f"ca chart: not a native sidecar: {sidecar}"
    poll(lambda: (ca.calls() or {}).get("loops", 0) >= 3, 60, "ca chart: three loops of the stand-in")
    calls = ca.calls() or {}
    health = ca.get(8085, "/health-check")
    metrics = ca.get(8087, "/metrics")[1]
    served = {m: official_chart.served(metrics, m) for m in ("NodeGroups", "NodeGroupTargetSize", "Refresh")}
    figures.note(
        f"\nofficial chart: stand-in image ({images.size_and_layers(built.podman, standin)[0] / 1e6:.1f} MB)"
        f" built (or found cached) and loaded in {prepared:.1f} s; installed, pod Ready"
        f" with its sidecar in {ca.install_seconds:.1f} s; stand-in {calls}; server served {served}"
    )
    assert health[0] == 200, f"ca chart: the stand-in's health check: {health}"
    assert calls["last_ok"] and not calls["failed"], f"ca chart: the stand-in's calls failed: {calls}"
    for method in ("NodeGroups", "NodeGroupTargetSize", "Refresh"):
        assert calls["calls"].get(method, 0) >= 3, f"ca chart: the stand-in made no {method}: {calls}"
        assert served[method] >= calls["calls"][method], f"ca chart: {method} served {served}, {calls}"
    pod = official_chart.ca_pods(node, ca.pod["metadata"]["namespace"])[0]
    statuses = pod["status"]["initContainerStatuses"] + pod["status"]["containerStatuses"]
    assert [s.get("restartCount", 0) for s in statuses] == [0, 0], f"ca chart: restarts: {pod['status']}"


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
