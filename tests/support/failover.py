"""What the high-availability tests (and benchmarks/failover.py) do to replicas on a Lease
(tests/support/replicas.py), and the callers that measure it.

`kill_chain` kills the leader `rounds` times in a row in the middle of a scale-up and times each
failover as a caller through the readiness proxy sees it (`AnswerClock`); `rolling_upgrade` replaces
two replicas the way a Deployment's RollingUpdate does while `EveryRpcLoop` calls every RPC,
counting each call that did not get its answer (the real-node tier drives it through a real
Service). Both check that nothing is lost or done twice.
"""

from __future__ import annotations

import itertools
import re
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import grpc

from cloudprovider_grpc.core.durations import parse_duration
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc
from tests.support.backends import BackendUnderTest, backend
from tests.support.certs import Pki
from tests.support.clouds import ExternalCloud
from tests.support.probes import ServerProcess
from tests.support.replicas import (
    Lease,
    ReadinessProxy,
    holder,
    is_ready,
    lease_api,
    start_replica,
    wait_leader,
    wait_renewals,
)
from tests.support.waits import poll

#: the machines each scale-up asks for
SCALE = 20


def big_cloud(name: str, tmp: Path, room: int = SCALE) -> ExternalCloud:
    """The backend's emulated cloud with a first group that has room for `room` more machines."""
    from tests.support.clouds import CherryCloud, ExoscaleCloud, VultrCloud

    if name == "cherry":
        cherry = CherryCloud(tmp, groups={"pool1": (0, room + 5), "pool2": (0, 5)})
        cherry.emulator.set_stock({"*": {"*": max(100, room + 10)}})  # 100 servers by default
        return cherry
    if name == "vultr":
        return VultrCloud(tmp, pool1_max=room + 5)
    exoscale = ExoscaleCloud(tmp, pool1_max=room + 5)
    exoscale.emulator.quota_limit = max(exoscale.emulator.quota_limit, room + 10)  # 50 instances by default
    return exoscale


def destructive(cloud: ExternalCloud) -> list[str]:
    """Requests that delete or remove a machine (none may happen in a scale-up)."""
    emulator = cloud.emulator  # type: ignore[attr-defined]
    return [
        f"{e.method} {e.path}" for e in emulator.request_log() if e.method == "DELETE" or "evict" in e.path
    ]


class AnswerClock:
    """Calls NodeGroupTargetSize through `address` every few milliseconds and keeps the time of each
    answer: the failover is the gap around a kill. Reconnects at once (a caller's backoff after a
    refused connection would otherwise add to what is measured)."""

    def __init__(self, address: str, gid: str) -> None:
        self.channel = grpc.insecure_channel(
            address,
            options=[("grpc.initial_reconnect_backoff_ms", 50), ("grpc.max_reconnect_backoff_ms", 100)],
        )
        self.stub = pb_grpc.CloudProviderStub(self.channel)
        self.gid = gid
        self.answers: list[tuple[float, float]] = []  # (call started, answer came)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        request = pb.NodeGroupTargetSizeRequest(id=self.gid)
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.stub.NodeGroupTargetSize(request, timeout=1)
                self.answers.append((started, time.monotonic()))
            except grpc.RpcError:
                pass
            self._stop.wait(0.01)

    def answered_within(self, seconds: float) -> bool:
        return bool(self.answers) and self.answers[-1][1] > time.monotonic() - seconds

    def gap_around(self, dead: float, timeout: float = 120) -> float:
        """Seconds from the last answer before the old leader was `dead` (reaped) to the first
        answer to a call made after that (which only the new leader can have given)."""
        poll(lambda: any(s > dead for s, _ in self.answers), timeout, "an answer after the kill", 0.05)
        before = max(end for _, end in self.answers if end <= dead)
        after = min(end for start, end in self.answers if start > dead)
        return after - before

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.channel.close()


@dataclass(frozen=True)
class Kill:
    """One kill: `failover`, the seconds from the last answer of the old leader to the first of
    the new one through the proxy; `lease_left`, the seconds the Lease still had to run at the
    kill (its duration after the killed leader's last renewal), which no successor may shorten.
    The difference is what the takeover itself costs."""

    failover: float
    lease_left: float

    @property
    def takeover(self) -> float:
        return self.failover - self.lease_left


def scale_up(s: pb_grpc.CloudProviderStub, gid: str) -> bool:
    """IncreaseSize(SCALE) through the proxy: True once accepted; False when refused with nothing
    recorded (a leader whose term ran out a moment before: a short lease on a loaded machine), or
    never sent (no connection could be made through the proxy while no replica was ready), to be
    asked again, as cluster-autoscaler asks again in its next loop."""
    try:
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=gid, delta=SCALE), timeout=5)
    except grpc.RpcError as exc:
        details = exc.details() or ""
        unsent = "nothing was recorded" in details or details.startswith("failed to connect to all addresses")
        if exc.code() == grpc.StatusCode.UNAVAILABLE and unsent:
            return False
        raise
    return True


def kill_chain(
    shape: str,
    backend: BackendUnderTest,
    lease: Lease,
    work: Path,
    rounds: int,
    phase: Callable[[], float] = lambda: 0.0,
) -> list[Kill]:
    """`rounds` kills in a row on one cloud, one Lease and one shared --state-file. Each round: two
    live replicas (the leader, and a standby that has seen it renew), IncreaseSize(SCALE) through
    the proxy to the leader, kill -9 of the leader at once, `phase()` seconds after a renewal (a
    crash falls anywhere between two renewals); a fresh replica joins as the next standby while the
    old standby takes over and finishes the scale-up; the next round kills that new leader.
    Checked every round: the cloud ends with exactly SCALE more machines, never more; nothing is
    deleted, ever. Returns each round's failover as a caller through the proxy saw it, and how much
    of the lease was left at the kill (see Kill)."""
    from tests.support.waits import instances, refresh

    cloud = big_cloud(shape, work, room=SCALE * rounds)
    extra = ["--state-file", str(work / "journal.json")]
    names = (f"r{i}" for i in itertools.count())
    replicas: list[ServerProcess] = []
    gone: list[ServerProcess] = []
    proxy = ReadinessProxy(replicas).start()
    clock: AnswerClock | None = None
    failovers: list[Kill] = []
    try:
        replicas.append(start_replica(backend, work, cloud, lease, next(names), extra))
        poll(proxy.ready, 60, "a first leader")
        gid = next(iter(cloud.groups))
        clock = AnswerClock(proxy.address, gid)
        s = pb_grpc.CloudProviderStub(clock.channel)
        api = lease_api(lease)

        def stand_in(live: int) -> None:
            """A replica that lost its term (an API server too slow for a short lease on a loaded
            machine) has ended: fresh ones stand in until `live` run."""
            gone.extend(r for r in replicas if r.proc.poll() is not None)
            replicas[:] = [r for r in replicas if r.proc.poll() is None]
            while len(replicas) < live:
                replicas.append(start_replica(backend, work, cloud, lease, next(names), extra))

        for _ in range(rounds):
            stand_in(2)
            # the standby in its steady state: it has seen the leader renew (a candidate's expiry
            # counts from the last renewal it saw, as in client-go)
            wait_renewals(lease, since=datetime.now(UTC), count=2)
            time.sleep(phase())
            want = len(cloud.machines(gid)) + SCALE
            poll(lambda: scale_up(s, gid), 30, f"a leader to accept {SCALE} machines")
            # the failover is measured from the leader's last answer: one that came just now
            poll(lambda: clock.answered_within(0.5), 10, "an answer through the proxy")
            # the one that accepted it: the holder (a term that ran out would have refused it)
            leader = next(r for r in replicas if r.out_path.stem == holder(lease, api))
            leader.signal(signal.SIGKILL)
            killed_at = datetime.now(UTC)
            leader.wait(10)
            dead = time.monotonic()
            replicas.remove(leader)
            gone.append(leader)
            replicas.append(start_replica(backend, work, cloud, lease, next(names), extra))
            # the killed leader's last renewal (its clock is this machine's): the Lease runs out
            # `duration` after it, whatever the standby does
            renewed = api.read_namespaced_lease(lease.name, lease.namespace).spec.renew_time
            left = (renewed - killed_at).total_seconds() + parse_duration(lease.duration)
            failovers.append(Kill(clock.gap_around(dead), left))

            def exact(want: int = want) -> bool:
                stand_in(1)
                held = len(cloud.machines(gid))
                assert held <= want, f"{held} machines, {want} asked for"
                if not refresh(s, timeout=5):
                    return False
                return held == want and len(instances(s, gid)) == want

            poll(exact, 120, f"exactly {want} machines after the takeover", 0.1)
            assert destructive(cloud) == [], destructive(cloud)
        for r in [*gone, *replicas]:
            out = r.output()
            assert "Traceback" not in out, out[max(0, out.find("Traceback") - 1500) :][:5000]
        return failovers
    finally:
        if clock is not None:
            clock.close()
        proxy.close()
        for r in replicas:
            r.close()
        cloud.stop()


#: answers that mean the call did not get its answer (any other status is the server answering)
FAILED = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.INTERNAL,
}


class EveryRpcLoop:
    """Calls each of the 15 RPCs in turn through one channel, as fast as answers come, counting
    calls and failed calls (FAILED) per method."""

    def __init__(self, address: str, gid: str, pki: Pki | None = None) -> None:
        # a caller that reconnects at once after its connection closed (its server's GOAWAY)
        options = [("grpc.initial_reconnect_backoff_ms", 50), ("grpc.max_reconnect_backoff_ms", 200)]
        if pki is None:
            self.channel = grpc.insecure_channel(address, options=options)
        else:  # as cluster-autoscaler dials: its client certificate, the server's name
            credentials = grpc.ssl_channel_credentials(
                pki.read("ca"), pki.read("client_key"), pki.read("client_cert")
            )
            options.append(("grpc.ssl_target_name_override", "localhost"))
            self.channel = grpc.secure_channel(address, credentials, options=options)
        self.stub = pb_grpc.CloudProviderStub(self.channel)
        self.gid = gid
        self.calls: dict[str, int] = {}
        self.failed: dict[str, list[str]] = {}
        self.answered: dict[str, int] = {}  # calls answered OK
        self.other: dict[str, set[str]] = {}  # the other statuses seen (the server answering)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> EveryRpcLoop:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(30)
        self.channel.close()

    def _requests(self) -> list[tuple[str, object]]:
        gid = self.gid
        node = pb.ExternalGrpcNode(providerID="exoscale://unknown", name="unknown")
        return [
            ("NodeGroups", pb.NodeGroupsRequest()),
            ("NodeGroupForNode", pb.NodeGroupForNodeRequest(node=node)),
            ("PricingNodePrice", pb.PricingNodePriceRequest(node=node)),
            ("PricingPodPrice", pb.PricingPodPriceRequest()),
            ("GPULabel", pb.GPULabelRequest()),
            ("GetAvailableGPUTypes", pb.GetAvailableGPUTypesRequest()),
            ("Refresh", pb.RefreshRequest()),
            ("NodeGroupTargetSize", pb.NodeGroupTargetSizeRequest(id=gid)),
            ("NodeGroupIncreaseSize", pb.NodeGroupIncreaseSizeRequest(id=gid, delta=1)),
            ("NodeGroupDecreaseTargetSize", pb.NodeGroupDecreaseTargetSizeRequest(id=gid, delta=-1)),
            ("NodeGroupDeleteNodes", pb.NodeGroupDeleteNodesRequest(id=gid, nodes=[node])),
            ("NodeGroupNodes", pb.NodeGroupNodesRequest(id=gid)),
            ("NodeGroupTemplateNodeInfo", pb.NodeGroupTemplateNodeInfoRequest(id=gid)),
            ("NodeGroupGetOptions", pb.NodeGroupAutoscalingOptionsRequest(id=gid)),
            ("Cleanup", pb.CleanupRequest()),
        ]

    def _run(self) -> None:
        while not self._stop.is_set():
            for method, request in self._requests():
                if method == "Cleanup":
                    continue  # CA calls it once, at its own exit
                self.calls[method] = self.calls.get(method, 0) + 1
                try:
                    getattr(self.stub, method)(request, timeout=5)
                    self.answered[method] = self.answered.get(method, 0) + 1
                except grpc.RpcError as exc:
                    if exc.code() in FAILED:
                        self.failed.setdefault(method, []).append(f"{exc.code().name}: {exc.details()}")
                    else:
                        self.other.setdefault(method, set()).add(exc.code().name)

    def failures(self) -> int:
        return sum(len(v) for v in self.failed.values())


@dataclass
class Upgrade:
    """What a rolling upgrade left: the loop's counts, and each replaced replica's log."""

    loop: EveryRpcLoop
    logs: list[str]


def rolling_upgrade(work: Path, lease: Lease, pki: Pki | None = None) -> Upgrade:
    """Two replicas; then, twice, a new replica starts and, once it is ready as a replica, an old one
    gets SIGTERM: the old standby first, the old leader last (a Deployment's RollingUpdate with
    maxSurge 1, maxUnavailable 0 deletes the old pod with the lowest pod-deletion-cost first, and
    the leader's pod has the higher one), so the leadership is handed over once; under the RPC
    loop (with mutual TLS when `pki` is given). Checked at the end: every write answered OK was
    executed exactly once, by one replica, whether it reached the leader or was forwarded by one
    handing over: the replicas' logs hold exactly one `target a -> b` line per IncreaseSize
    answered OK and one `(decrease)` line per DecreaseTargetSize answered OK. (The pool's final
    size is no measure: a DecreaseTargetSize answered before the listing shows the machine it
    would have dropped is kept, by design, so the pool may end above the sum of the answers.)"""
    cloud = big_cloud("exoscale", work)
    tls = [] if pki is None else ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)]
    tls += [] if pki is None else ["--tls-ca", str(pki.ca)]
    replicas: list[ServerProcess] = []
    logs: list[str] = []
    proxy = ReadinessProxy(replicas).start()
    loop: EveryRpcLoop | None = None
    try:
        for name in ("v1-a", "v1-b"):
            replicas.append(start_replica(backend("exoscale"), work, cloud, lease, name, tls))
            wait_leader(replicas)
        poll(lambda: proxy.ready() is not None, 10, "the proxy to see the leader")
        gid = next(iter(cloud.groups))
        loop = EveryRpcLoop(proxy.address, gid, pki).start()
        poll(lambda: loop.calls.get("Refresh", 0) >= 20, 30, "the loop to run")
        old = list(replicas)
        for name in ("v2-a", "v2-b"):
            new = start_replica(backend("exoscale"), work, cloud, lease, name, tls)
            replicas.append(new)
            poll(lambda new=new: is_ready(new, "/readyz/replica"), 30, f"{name} to be ready as a replica")
            # the standby first: its pod's deletion cost is the lower
            going = next((r for r in old if not is_ready(r)), old[0])
            old.remove(going)
            going.signal(signal.SIGTERM)
            assert going.wait(40) == 0, going.output()[-2000:]
            logs.append(going.output())
            replicas.remove(going)
            wait_leader(replicas, timeout=30)
        poll(lambda: loop.calls.get("Refresh", 0) >= 40, 30, "the loop to go on")
        loop.stop()
        every_log = "".join([*logs, *(r.output() for r in replicas)])
        executed = {
            "NodeGroupIncreaseSize": len(re.findall(r"\): target \d+ -> \d+\"", every_log)),
            "NodeGroupDecreaseTargetSize": len(re.findall(r"\): target \d+ -> \d+ \(decrease\)", every_log)),
        }
        answered = {method: loop.answered.get(method, 0) for method in executed}
        assert executed == answered, f"writes executed {executed}, answered OK {answered}"
        return Upgrade(loop, logs)
    finally:
        if loop is not None:
            loop.stop()
        proxy.close()
        for r in replicas:
            r.close()
        cloud.stop()
