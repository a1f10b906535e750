"""The chart, installed for real with the project's helm on the one-node cluster: two Ready
replicas, one leader on the Lease whose pod alone carries the leader label, the Service pointing
at the leader only, and calls from outside the cluster through that Service answered. Then what a
cluster does to it: a `helm upgrade` rolled out under load (one hand-over, no failed call), the
leader pod deleted (a new leader within 20 s), the front killed by the node inside the pod (the
pod restarted per its probes, or still Ready), and the PodDisruptionBudget refusing the eviction
that would leave no replica answering.

The steps are one test, in order, on one release: one test is what makes it one cluster per suite
run whatever the xdist workers. The first step checks the cluster's isolation: its network lives
in a namespace of its own with no way off the machine, the host's routes and iptables untouched;
and once the cluster has stopped, its namespace is gone (`host_untouched`). The release and what
the steps read from the cluster are in tests/realnode/releases.py."""

from __future__ import annotations

import ipaddress
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from tests.deploy_support.tools import tool
from tests.realnode import figures, netns, official_chart
from tests.realnode import image as images
from tests.realnode.cluster import BRIDGE, POD_SUBNET, Cluster
from tests.realnode.releases import (
    CHART,
    GROUP,
    RELEASE,
    HandOverLog,
    HolderWatch,
    Release,
    answering,
    every_rpc,
    front_pid,
    install,
    labelled_leader,
    ready,
    rolled_out,
    settled,
)
from tests.support.certs import write_pki
from tests.support.controlplane import SERVICE_RANGE
from tests.support.failover import EveryRpcLoop
from tests.support.kubebuilds import HELM
from tests.support.waits import poll

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(3600)]


@pytest.fixture(scope="module", autouse=True)
def host_untouched() -> Iterator[dict[str, Any]]:
    """The host's KUBE-* iptables chains from before the cluster started (autouse: set up before
    `node`, and so torn down after it); on the way out, the namespace the cluster ran in (recorded
    by the isolation step) is gone and no process is left in it."""
    seen: dict[str, Any] = {"chains": netns.kube_chains()}
    yield seen
    if "ns" in seen:
        path, inode = seen["ns"]
        assert not path.exists(), f"stopped: the cluster's namespace {path} is still there"
        assert not netns.members(inode), (
            f"stopped: processes left in the cluster's namespace: {netns.members(inode)}"
        )


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


def test_chart_on_a_real_node(
    release: Release, built: images.Built, work: Path, host_untouched: dict[str, Any]
) -> None:
    """The cluster's isolation; install, then upgrade, delete, kill and evict, in order; then a
    second release on an emulated cloud, and the official cluster-autoscaler chart with our sidecar
    values. Each step's assertions say which."""
    step_the_cluster_has_a_network_of_its_own(release.node, host_untouched)
    step_leader_and_standby_behind_the_service(release)
    step_upgrade_under_load(release)
    step_deleted_leader_replaced_within_20_seconds(release)
    step_killed_front_restarted(release)
    step_disruption_budget_refuses_the_last_replica(release)
    step_second_release_on_an_emulated_cloud(release, work)
    step_official_chart_with_the_sidecar(release, built, work)


def _within(route: dict[str, Any], ranges: tuple[str, ...]) -> bool:
    dst = route.get("dst", "")
    if dst in ("", "default") or ":" in dst:
        return False
    network = ipaddress.ip_network(dst, strict=False)
    return any(network.overlaps(ipaddress.ip_network(r)) for r in ranges)


def step_the_cluster_has_a_network_of_its_own(node: Cluster, seen: dict[str, Any]) -> None:
    """The bridge, the Service route and kube-proxy's rules are the cluster namespace's alone, the
    namespace has no default route and no device but loopback, the bridge and the pods' veths (no
    way off the machine), and the host has none of them: a 10.x packet cannot leave."""
    ns = node.network.ns
    seen["ns"] = (ns.path, netns.inode(ns.path))
    ranges = (SERVICE_RANGE, POD_SUBNET)
    inside = netns.routes(ns)
    assert any(_within(r, (SERVICE_RANGE,)) and r.get("dev") == BRIDGE for r in inside), (
        f"isolation: {inside}"
    )
    assert not [r for r in inside if r.get("dst") == "default"], (
        f"isolation: a default route inside: {inside}"
    )
    devices = netns.links(ns)
    others = {n: kind for n, kind in devices.items() if n != "lo" and kind not in ("bridge", "veth")}
    assert devices.get(BRIDGE) == "bridge" and not others, f"isolation: devices inside {devices}"
    host = netns.links()
    assert BRIDGE not in host, f"isolation: {BRIDGE} in the host's namespace: {host}"
    routed = [r for r in netns.routes() if _within(r, ranges)]
    assert not routed, f"isolation: the host routes the cluster's ranges: {routed}"
    made = netns.kube_chains() - seen["chains"]
    assert not made, f"isolation: the cluster made iptables chains on the host: {sorted(made)}"
    assert any("KUBE-SERVICES" in c for c in _chains_in(node)), "isolation: kube-proxy's rules not inside"


def _chains_in(node: Cluster) -> set[str]:
    """The KUBE-* chains inside the cluster's namespace (iptables run there)."""
    found = set()
    for table in ("filter", "nat"):
        cmd = node.network.command(["iptables", "-t", table, "-S"])
        rules = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False).stdout
        found |= {f"{table} {line.split()[1]}" for line in rules.splitlines() if line.startswith("-N KUBE-")}
    return found


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
    answering(release, "upgrade: before")
    loop = EveryRpcLoop(release.service(), GROUP, release.pki).start()
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
    killed = front_pid(release.node, uid)
    os.kill(killed, signal.SIGKILL)  # as the node's OOM killer would
    # Restarted by the server in the same container, or the container restarted by its probes.
    poll(
        lambda: front_pid(release.node, uid, missing_ok=True) not in (0, killed),
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
    groups = answering(emulated, "emulated: the emulator's demo groups")
    loop = every_rpc(emulated, group=groups[0].id)
    figures.note(
        f"\nsecond release (exoscale, emulated) settled in {emulated.install_seconds:.1f} s;"
        f" groups {[g.id for g in groups]}; {sum(loop.answered.values())} calls answered"
    )
    assert loop.failures() == 0, f"emulated: calls through the Service failed: {loop.failed}"
    for method in ("NodeGroups", "NodeGroupTargetSize", "NodeGroupNodes", "NodeGroupTemplateNodeInfo"):
        assert loop.answered.get(method, 0) >= 3, f"emulated: {method} answered {loop.answered}"


def _ok(answer: tuple[int, str]) -> str | None:
    """The body of a 200 answer, else None (for a poll)."""
    return answer[1] if answer[0] == 200 else None


def step_official_chart_with_the_sidecar(first: Release, built: images.Built, work: Path) -> None:
    """The official cluster-autoscaler chart with deploy/helm/cluster-autoscaler/sim.yaml: the pod
    Ready with both containers (our server as a native sidecar, restartPolicy Always, and the CA
    stand-in), the stand-in's loops answered over the unix socket both mount (its own count and
    health check) and our server's metrics counting the calls it served."""
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
    # our server listens on a unix socket only (no gRPC port), in the emptyDir CA's container and
    # ours alone mount: the stand-in's calls counted below went through it
    address = sidecar["args"][sidecar["args"].index("--address") + 1]
    assert address.startswith("unix:///"), f"ca chart: the sidecar listens on {address}"
    socket_dir = address.removeprefix("unix://").rpartition("/")[0]
    spec = ca.pod["spec"]
    mounting = {
        c["name"]
        for c in [*spec["initContainers"], *spec["containers"]]
        for m in c.get("volumeMounts") or []
        if m["mountPath"] == socket_dir
    }
    assert mounting == {"cloudprovider-grpc", "cluster-autoscaler"}, f"ca chart: {socket_dir} in {mounting}"
    poll(lambda: (ca.calls() or {}).get("loops", 0) >= 3, 60, "ca chart: three loops of the stand-in")
    calls = ca.calls() or {}
    health = ca.get(8085, "/health-check")
    metrics = poll(lambda: _ok(ca.get(8087, "/metrics")), 60, "ca chart: the sidecar's /metrics")
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
