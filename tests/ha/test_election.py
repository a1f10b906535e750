"""`serve --leader-elect` against a real kube-apiserver (and etcd), on emulated clouds: one leader,
standbys that are alive and ready as replicas (/readyz/replica) but not leading (/readyz), each
labelling its own pod leader or standby, ten kills -9 of the leader in a row in the middle of a
20-machine scale-up on each cloud shape, a leader frozen (SIGSTOP) past its lease, and a rolling
upgrade under mutual TLS and a client that calls every RPC in a loop (zero failed calls).

The suite runs short leases (5 s, renew deadline 3 s, retry 0.5 s; the kill rounds 2 s, 1.5 s and
0.25 s, the three clouds at once: the same rules, a fraction of the wait); benchmarks/failover.py
runs the same rounds with cluster-autoscaler's default lease settings and prints the failover
times.
"""

from __future__ import annotations

import json
import signal
import statistics
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from cloudprovider_grpc.emulators import FaultPlan
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from tests.support.backends import backend
from tests.support.certs import write_pki
from tests.support.failover import Kill, big_cloud, kill_chain, rolling_upgrade
from tests.support.probes import ServerProcess
from tests.support.replicas import Lease, is_ready, start_replica, wait_leader
from tests.support.waits import instances, poll, refresh

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROUNDS = 10
SHAPES = ["cherry", "vultr", "exoscale"]


def short_lease(control_plane, name: str = "cloudprovider-grpc") -> Lease:
    return Lease(
        control_plane.kubeconfig,
        control_plane.namespace("le"),
        name,
        duration="5s",
        renew_deadline="3s",
        retry_period="500ms",
    )


def lease_holder(control_plane, lease: Lease) -> str:
    out = control_plane.kubectl("get", "lease", lease.name, "-n", lease.namespace, "-o", "json").stdout
    return json.loads(out)["spec"].get("holderIdentity") or ""


def test_one_leader_answers_and_a_standby_stays_warm_and_refuses_writes(
    control_plane, tmp_path: Path
) -> None:
    cloud = big_cloud("exoscale", tmp_path)
    lease = short_lease(control_plane)
    replicas: list[ServerProcess] = []
    try:
        replicas.append(start_replica(backend("exoscale"), tmp_path, cloud, lease, "replica-a"))
        leader = wait_leader(replicas)
        replicas.append(start_replica(backend("exoscale"), tmp_path, cloud, lease, "replica-b"))
        standby = replicas[1]
        assert lease_holder(control_plane, lease) == "replica-a"
        poll(lambda: "cloudprovider_grpc_leader 0.0" in standby.metrics(), 10, "the standby's leader gauge")
        assert "cloudprovider_grpc_leader 1.0" in leader.metrics()
        assert not is_ready(standby)
        assert is_ready(standby, "/readyz/replica")  # Ready as a pod: a rolling update can go on
        # the standby is alive, answers health NOT_SERVING, and lists the cloud (warm)
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        health = health_pb2_grpc.HealthStub(standby.channel())
        status = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status
        assert status == health_pb2.HealthCheckResponse.NOT_SERVING
        s = standby.stub()
        gid = next(iter(cloud.groups))
        assert s.NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups
        with pytest.raises(grpc.RpcError) as refused:
            s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=gid, delta=1), timeout=5)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "replica-a" in (refused.value.details() or "")
        # the leader acts
        leader.stub().NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=gid, delta=2), timeout=5)
        poll(lambda: len(cloud.machines(gid)) == 2, 30, "two machines")
        logs = leader.output()
        assert "replica-a became the leader (term 0" in logs
    finally:
        for r in replicas:
            r.close()
        cloud.stop()


def test_ten_kills_9_of_the_leader_mid_scale_up_each_end_with_exactly_what_was_asked(
    control_plane, tmp_path: Path
) -> None:
    """Per cloud shape, ten rounds in a row (kill_chain): each kill leaves exactly 20 more
    machines, never more, and nothing is ever deleted. The three shapes run at once, each on its
    own Lease, with a lease of 2 s (renew deadline 1.5 s, retry 0.25 s)."""

    def chain(shape: str) -> list[Kill]:
        lease = Lease(
            control_plane.kubeconfig,
            control_plane.namespace(f"kill-{shape}"),
            duration="2s",
            renew_deadline="1500ms",
            retry_period="250ms",
        )
        return kill_chain(shape, backend(shape), lease, tmp_path / shape, ROUNDS)

    with ThreadPoolExecutor(len(SHAPES)) as pool:
        failovers = dict(zip(SHAPES, pool.map(chain, SHAPES), strict=True))
    for shape, kills in failovers.items():
        assert len(kills) == ROUNDS
        times = [k.failover for k in kills]
        print(
            f"{shape}: {ROUNDS} kills, failover p50 {statistics.median(times):.2f} s, max {max(times):.2f} s"
        )


def test_a_leader_frozen_past_its_lease_writes_nothing_when_it_resumes(control_plane, tmp_path: Path) -> None:
    """SIGSTOP right after a scale-up was accepted with creations still queued (one at a time); the
    standby takes over and finishes it; SIGCONT: the old leader finds its term over, writes
    nothing (cloud and journal), and ends."""
    cloud = big_cloud("cherry", tmp_path)
    lease = short_lease(control_plane)
    journal = tmp_path / "journal.json"
    extra = ["--state-file", str(journal), "--concurrency", "1"]
    replicas: list[ServerProcess] = []
    try:
        replicas.append(start_replica(backend("cherry"), tmp_path, cloud, lease, "old", extra))
        old = wait_leader(replicas)
        replicas.append(start_replica(backend("cherry"), tmp_path, cloud, lease, "new", extra))
        gid = "pool1"
        emulator = cloud.emulator  # type: ignore[attr-defined]
        # The freeze lands while the old leader's one worker waits for the cloud to answer a create
        # (held by a slow POST): a request that already passed the term check before the freeze
        # would go out after SIGCONT whatever the check (no cloud API takes a fencing token), so the
        # freeze is placed where the check, not luck, decides what the resumed process does.
        held = FaultPlan(rate=1.0, kinds=("slow",), slow_seconds=1.0, methods=frozenset({"POST"}))
        emulator.set_faults(held)
        old.stub().NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=gid, delta=10), timeout=5)
        poll(lambda: emulator.in_flight("POST") >= 1, 10, "a create to be waiting for its answer", 0.005)
        old.signal(signal.SIGSTOP)
        emulator.set_faults(FaultPlan.none())
        poll(lambda: emulator.in_flight("POST") == 0, 10, "the held create to be answered")
        sent_before_freeze = len(cloud.machines(gid))
        new = wait_leader(replicas[1:], timeout=30)
        s = new.stub()

        def done() -> bool:
            refresh(s, timeout=5)
            return len(cloud.machines(gid)) == 10 and len(instances(s, gid)) == 10

        poll(done, 60, "the new leader to finish the scale-up", 0.2)
        assert sent_before_freeze < 10, "the freeze came too late to leave work queued"

        def journaled() -> list[object]:
            return json.loads(journal.read_bytes())["groups"].get(gid, {}).get("creations", [])

        poll(lambda: journaled() == [], 10, "the successor's journal to hold no creation")
        mark = emulator.log_mark()
        old.signal(signal.SIGCONT)
        assert old.wait(30) == 1  # it ends, saying why
        writes = [e for e in emulator.request_log(mark) if e.method != "GET"]
        assert writes == [], writes
        # the old leader still holds nine queued creations in memory: a journal it wrote would list
        # them; the successor's (which may still rewrite it as its own work settles) lists none
        assert journaled() == []
        assert len(cloud.machines(gid)) == 10
        assert "lost the leadership (term 0)" in old.output()
        assert "not writing" in old.output() or "Lease was not renewed" in old.output()
    finally:
        for r in replicas:
            r.signal(signal.SIGCONT)
            r.close()
        cloud.stop()


def test_the_charts_role_suffices_and_a_leader_that_cannot_renew_stops(control_plane, tmp_path: Path) -> None:
    """The replicas run as a ServiceAccount granted exactly the Role the chart renders: they elect a
    leader and watch the Lease. Then the RoleBinding goes: the leader cannot renew, turns not ready
    within its renew deadline, writes nothing more, and ends; the standby cannot take over."""
    import yaml

    from tests.deploy_support.layouts import OUR_CHART, OUR_RELEASE
    from tests.deploy_support.tools import helm_template
    from tests.support.rbac import grants, wait_allowed

    namespace = control_plane.namespace("rbac")
    objects = helm_template(
        OUR_CHART,
        release=OUR_RELEASE,
        namespace=namespace,
        set_values=["provider=sim", "kubeStatus.enabled=false"],
    )
    rbac = [o for o in objects if o["kind"] in ("Role", "RoleBinding")]
    assert len(rbac) == 2
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(rbac))
    kubeconfig = control_plane.token_kubeconfig(namespace, OUR_RELEASE)
    # granted before the first replica asks: one refusal is what the test counts, at the end
    wait_allowed(control_plane, kubeconfig, *grants(rbac))
    lease = Lease(
        kubeconfig,
        namespace,
        OUR_RELEASE,
        duration="5s",
        renew_deadline="3s",
        retry_period="500ms",
    )
    cloud = big_cloud("exoscale", tmp_path)
    replicas: list[ServerProcess] = []
    try:
        replicas.append(start_replica(backend("exoscale"), tmp_path, cloud, lease, "first"))
        leader = wait_leader(replicas)
        replicas.append(start_replica(backend("exoscale"), tmp_path, cloud, lease, "second"))
        poll(lambda: "candidate for Lease" in replicas[1].output(), 30, "the standby to take part")
        binding = next(o["metadata"]["name"] for o in rbac if o["kind"] == "RoleBinding")
        control_plane.kubectl("delete", "rolebinding", binding, "-n", namespace)
        poll(lambda: not is_ready(leader), 30, "the leader to turn not ready")
        emulator = cloud.emulator  # type: ignore[attr-defined]
        mark = emulator.log_mark()
        assert leader.wait(30) == 1
        assert "lost the leadership (term 0)" in leader.output()
        assert leader.output().count("HTTP 403") == 1  # one line, not one per retry
        assert not is_ready(replicas[1])  # forbidden to take the Lease: nobody leads
        assert [e for e in emulator.request_log(mark) if e.method != "GET"] == []
        for r in replicas:
            assert "cannot watch" not in r.output()  # the Role allows the watch
            assert "Traceback" not in r.output()
    finally:
        for r in replicas:
            r.close()
        cloud.stop()


def test_each_replica_labels_its_own_pod_leader_or_standby_before_it_is_ready(
    control_plane, tmp_path: Path
) -> None:
    """In pods (Pod objects on the real API server, as a Deployment's): the standby writes its
    pod's leader label "false" before /readyz/replica answers, even on a pod still labelled
    "true" (a container restarted in a former leader's pod); the leader labels its pod "true"
    with the higher pod-deletion-cost; after a hand-over the labels follow the Lease."""
    cloud = big_cloud("exoscale", tmp_path)
    lease = short_lease(control_plane)
    for name, was_leader in (("pod-a", "false"), ("pod-b", "true")):
        control_plane.kubectl(
            "run",
            name,
            "-n",
            lease.namespace,
            "--image=pause",
            "--restart=Never",
            f"--labels={LABEL}={was_leader}",
        )
    replicas: list[ServerProcess] = []
    try:
        replicas.append(
            start_replica(backend("exoscale"), tmp_path, cloud, lease, "pod-a", pod_namespace=lease.namespace)
        )
        wait_leader(replicas)
        assert pod_role(control_plane, lease, "pod-a") == ("true", "1000")
        replicas.append(
            start_replica(backend("exoscale"), tmp_path, cloud, lease, "pod-b", pod_namespace=lease.namespace)
        )
        poll(lambda: is_ready(replicas[1], "/readyz/replica"), 30, "pod-b ready as a replica")
        assert pod_role(control_plane, lease, "pod-b") == ("false", "0")
        assert not is_ready(replicas[1])  # /readyz: the leader only
        replicas[0].signal(signal.SIGTERM)
        assert replicas[0].wait(40) == 0, replicas[0].output()[-2000:]
        wait_leader(replicas[1:])
        assert pod_role(control_plane, lease, "pod-b") == ("true", "1000")
        assert "Traceback" not in replicas[1].output()
    finally:
        for r in replicas:
            r.close()
        cloud.stop()


LABEL = "cloudprovider-grpc.io/leader"


def pod_role(control_plane, lease: Lease, pod: str) -> tuple[str, str]:
    """The pod's leader label and pod-deletion-cost annotation."""
    meta = json.loads(control_plane.kubectl("get", "pod", pod, "-n", lease.namespace, "-o", "json").stdout)[
        "metadata"
    ]
    cost = (meta.get("annotations") or {}).get("controller.kubernetes.io/pod-deletion-cost", "")
    return (meta.get("labels") or {}).get(LABEL, ""), cost


def test_rolling_upgrade_under_mtls_and_a_client_calling_every_rpc_fails_no_call(
    control_plane, tmp_path: Path
) -> None:
    """The old leader holds the calls that still reach it after it released the Lease and forwards
    them, over mutual TLS with its own certificate, to the successor once that one answers; no call
    fails, and each write answered OK was executed exactly once (rolling_upgrade counts them in the
    replicas' logs)."""
    lease = Lease(control_plane.kubeconfig, control_plane.namespace("roll"))  # CA's default settings
    upgrade = rolling_upgrade(tmp_path, lease, write_pki(tmp_path / "pki"))
    loop = upgrade.loop
    total = sum(loop.calls.values())
    print(f"rolling upgrade: {loop.failures()} failed of {total} calls: {loop.failed}")
    assert loop.failed == {}
    assert loop.answered.get("NodeGroupIncreaseSize", 0) > 0
    # the standby went first and stopped without a hand-over; the leader went last, handed over
    # and forwarded to its successor: one hand-over for the whole upgrade
    assert "released the Lease" not in upgrade.logs[0], upgrade.logs[0][-3000:]
    assert "forwarded to the next leader at 127.0.0.1:" in upgrade.logs[1], upgrade.logs[1][-3000:]
    for log in upgrade.logs:
        assert "cannot reach the next leader" not in log and "Traceback" not in log, log[-3000:]
