"""A release of the project's chart on the realnode cluster, and what the chart test reads from it.

`install` runs `helm install` of deploy/helm/cloudprovider-grpc with the project's helm (mutual TLS
from a Secret the test provides, the image the suite built) and returns once its pods settled;
`Release` answers from the cluster what the test asks: the pods, the Lease holder, the Service's
ready endpoints, the Deployment's rollout, and the host's address for its Service (relayed into the
cluster's namespace, `Cluster.forward`). `answering` waits until that Service answers, the one wait
any step that calls it after a change takes first. `HolderWatch` and `HandOverLog` record, on threads, every
holder of the Lease and the hand-over lines of the pods' logs while a step runs; `front_pid` finds
the compiled front inside a pod from the node's side, for the step that kills it.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import kubernetes
import yaml

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from tests.realnode import image as images
from tests.realnode import official_chart
from tests.realnode.cluster import Cluster
from tests.support.certs import Pki
from tests.support.failover import EveryRpcLoop
from tests.support.waits import poll

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

    def service(self, port: int = 8086) -> str:
        """The host's `127.0.0.1:P` for the Service's `port` (its ClusterIP, relayed inside)."""
        return self.node.forward(self.service_ip(), port)

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


def answering(release: Release, what: str, timeout: float = 120) -> list[pb.NodeGroup]:
    """The node groups, once a NodeGroups through the release's Service is answered OK: after an
    install, an upgrade or a change of leader the pods can be Ready and the endpoints right while
    kube-proxy has not yet rewritten the Service's rules (the call is refused, or reaches the pod
    that just left), so a step waits for the answer itself before it calls and counts."""
    probe = EveryRpcLoop(release.service(), GROUP, release.pki)
    last = ["no call yet"]

    def groups() -> list[pb.NodeGroup] | None:
        try:
            return list(probe.stub.NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups) or None
        except grpc.RpcError as exc:
            last[0] = f"{exc.code().name}: {exc.details()}"
            return None

    try:
        return poll(groups, timeout, f"{what}: NodeGroups answered through the Service", interval=0.2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the last call: {last[0]}") from None
    finally:
        probe.channel.close()


def every_rpc(release: Release, rounds: int = 3, group: str = GROUP) -> EveryRpcLoop:
    """Every RPC through the Service from the host, with CA's client certificate, once the
    Service answers (`answering`)."""
    answering(release, "every RPC")
    loop = EveryRpcLoop(release.service(), group, release.pki).start()
    try:
        poll(lambda: loop.calls.get("Refresh", 0) >= rounds, 120, f"{rounds} rounds of every RPC")
    finally:
        loop.stop()
    return loop


def front_pid(node: Cluster, pod_uid: str, *, missing_ok: bool = False) -> int:
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
