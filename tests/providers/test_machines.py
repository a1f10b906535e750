"""The shared machinery under stress: concurrency, lost responses, throttling, restarts.

The cloud is the sim backend's in-memory SimCloud; `FlakyDriver` wraps it the way a real network
fails: a create that reaches the cloud but whose response is lost, and transient refusals before
the cloud sees anything. Everything goes through a real gRPC port.
"""

from __future__ import annotations

import threading
from pathlib import Path

import grpc
import pytest

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.providers.driver import CloudError, Machine, MachineListing
from cloudprovider_grpc.providers.machinery.machines.provider import MachineProvider
from cloudprovider_grpc.providers.sim import SimCloud, SimDriver, SimOptions
from tests.support.machine_worlds import alive as _alive
from tests.support.machine_worlds import serve as _serve
from tests.support.machine_worlds import sim_cloud as _cloud
from tests.support.servers import channel, stub

pytestmark = pytest.mark.integration

RUNNING = pb.InstanceStatus.instanceRunning


class FlakyDriver(SimDriver):
    """SimDriver whose creates fail like a bad network, in a fixed, repeating pattern:
    'lost' = the cloud created the machine but the response never arrived (timeout);
    'refused' = a 503 before the cloud did anything; 'ok' = success."""

    def __init__(self, cloud: SimCloud, pattern: list[str], then: str | None = None) -> None:
        super().__init__(cloud)
        self.pattern = pattern
        self.then = then  # outcome of every call after the pattern, instead of repeating it
        self.calls = 0
        self._lock = threading.Lock()

    def create_machine(self, group: str, token: str) -> Machine:
        with self._lock:
            if self.then is not None and self.calls >= len(self.pattern):
                outcome = self.then
            else:
                outcome = self.pattern[self.calls % len(self.pattern)]
            self.calls += 1
        if outcome == "refused":
            raise CloudError("503 Service Unavailable", transient=True, status=503)
        machine = super().create_machine(group, token)
        if outcome == "lost":
            raise CloudError("read timed out", transient=True)
        return machine


def test_lost_responses_and_throttling_never_double_a_machine() -> None:
    cloud = _cloud()
    driver = FlakyDriver(cloud, ["lost", "refused", "ok", "refused", "lost", "ok", "ok"])
    provider = MachineProvider(driver, concurrency=4, max_backoff=0.05)
    handle = _serve(provider)
    try:
        s = stub(channel(handle))
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="g", delta=10), timeout=5)
        assert provider.wait_idle(30)
        s.Refresh(pb.RefreshRequest())
        assert len(_alive(cloud)) == 10  # exactly what was asked for, despite lost responses
        assert driver.calls > 10  # the failures really happened and were retried
        assert s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="g")).targetSize == 10
        ids = sorted(i.id for i in s.NodeGroupNodes(pb.NodeGroupNodesRequest(id="g")).instances)
        assert ids == _alive(cloud)
    finally:
        handle.stop(1)


def test_ten_concurrent_single_node_deletes() -> None:
    cloud = _cloud(initial=15)
    provider = MachineProvider(SimDriver(cloud), concurrency=10)
    handle = _serve(provider)
    try:
        ch = channel(handle)
        s = stub(ch)
        victims = _alive(cloud)[:10]
        errors: list[Exception] = []

        def delete(pid: str) -> None:
            try:
                s.NodeGroupDeleteNodes(
                    pb.NodeGroupDeleteNodesRequest(
                        id="g", nodes=[pb.ExternalGrpcNode(providerID=pid, name=pid)]
                    ),
                    timeout=5,
                )
            except grpc.RpcError as exc:
                errors.append(exc)

        threads = [threading.Thread(target=delete, args=(pid,)) for pid in victims]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="g")).targetSize == 5
        assert provider.wait_idle(10)
        s.Refresh(pb.RefreshRequest())
        assert _alive(cloud) == sorted(set(_alive(cloud)) - set(victims)) and len(_alive(cloud)) == 5
        assert cloud.calls["delete"] == 10  # one delete per machine, none repeated
    finally:
        handle.stop(1)


def test_concurrent_deletes_respect_min_size() -> None:
    cloud = SimCloud(
        SimOptions.model_validate(
            {"deletion_delay": 0, "groups": [{"id": "g", "min_size": 3, "max_size": 10, "initial_size": 5}]}
        )
    )
    provider = MachineProvider(SimDriver(cloud), concurrency=10)
    handle = _serve(provider)
    try:
        s = stub(channel(handle))
        codes: list[grpc.StatusCode] = []
        lock = threading.Lock()

        def delete(pid: str) -> None:
            try:
                s.NodeGroupDeleteNodes(
                    pb.NodeGroupDeleteNodesRequest(id="g", nodes=[pb.ExternalGrpcNode(providerID=pid)]),
                    timeout=5,
                )
                code = grpc.StatusCode.OK
            except grpc.RpcError as exc:
                code = exc.code()
            with lock:
                codes.append(code)

        threads = [threading.Thread(target=delete, args=(pid,)) for pid in _alive(cloud)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(c.name for c in codes) == ["FAILED_PRECONDITION"] * 3 + ["OK"] * 2
        assert s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="g")).targetSize == 3
    finally:
        handle.stop(1)


def test_restart_with_journal_resumes_without_doubling(tmp_path: Path) -> None:
    cloud = _cloud()
    journal = tmp_path / "state.json"
    # first life: two creates reach the cloud but their responses are lost, then the cloud refuses
    # everything (throttling) until the process dies mid-scale-up
    driver = FlakyDriver(cloud, ["lost", "lost"], then="refused")
    first = MachineProvider(driver, concurrency=1, state_file=journal, max_backoff=0.01, max_attempts=10_000)
    handle = _serve(first)
    s = stub(channel(handle))
    s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="g", delta=5), timeout=5)
    for _ in range(1000):
        if driver.calls >= 6:
            break
        threading.Event().wait(0.01)
    handle.stop(0)
    assert len(_alive(cloud)) == 2
    creates_before = cloud.calls["create"]
    # second life, healthy network: the journal's creations resume; tokens found in the cloud count
    second = MachineProvider(SimDriver(cloud), concurrency=2, state_file=journal)
    handle = _serve(second)
    try:
        s = stub(channel(handle))
        assert s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="g")).targetSize == 5
        assert second.wait_idle(10)
        s.Refresh(pb.RefreshRequest())
        assert len(_alive(cloud)) == 5
        assert cloud.calls["create"] - creates_before == 3  # only the three that never reached the cloud
        assert s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="g")).targetSize == 5
    finally:
        handle.stop(1)


def test_restart_without_journal_recovers_membership_from_the_cloud() -> None:
    cloud = _cloud(initial=3)
    handle = _serve(MachineProvider(SimDriver(cloud), inline_workers=True))
    s = stub(channel(handle))
    s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="g", delta=2))
    s.Refresh(pb.RefreshRequest())  # creates run
    handle.stop(0)
    handle = _serve(MachineProvider(SimDriver(cloud), inline_workers=True))
    try:
        s = stub(channel(handle))
        assert s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="g")).targetSize == 5
        assert sorted(i.id for i in s.NodeGroupNodes(pb.NodeGroupNodesRequest(id="g")).instances) == _alive(
            cloud
        )
    finally:
        handle.stop(1)


def test_machines_deleted_behind_our_back_leave_the_target() -> None:
    cloud = _cloud(initial=4)
    handle = _serve(MachineProvider(SimDriver(cloud), inline_workers=True))
    try:
        s = stub(channel(handle))
        assert s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="g")).targetSize == 4
        cloud.delete(_alive(cloud)[0])  # someone deletes a machine in the cloud console
        s.Refresh(pb.RefreshRequest())
        assert s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="g")).targetSize == 3
    finally:
        handle.stop(1)


def test_cloud_outage_on_refresh_is_unavailable_and_keeps_the_cache() -> None:
    class Down(SimDriver):
        down = False

        def list_machines(self) -> list[Machine]:
            if self.down:
                raise CloudError("connection refused", transient=True)
            return super().list_machines()

    driver = Down(_cloud(initial=2))
    handle = _serve(MachineProvider(driver, inline_workers=True))
    try:
        s = stub(channel(handle))
        driver.down = True
        with pytest.raises(grpc.RpcError) as info:
            s.Refresh(pb.RefreshRequest(), timeout=5)
        assert (
            info.value.code() == grpc.StatusCode.UNAVAILABLE and "connection refused" in info.value.details()
        )
        assert s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="g")).targetSize == 2
        assert len(s.NodeGroupNodes(pb.NodeGroupNodesRequest(id="g")).instances) == 2
    finally:
        handle.stop(1)


def test_placeholder_of_a_machine_that_landed_still_resolves() -> None:
    """CA may time out an instance it saw as a placeholder after the machine appeared under its
    real id; deleting the placeholder must delete that machine, not fail or leak it."""
    cloud = _cloud(initial=0, delay=100)
    handle = _serve(MachineProvider(SimDriver(cloud), inline_workers=True))
    try:
        s = stub(channel(handle))
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="g", delta=1))
        (placeholder,) = [i.id for i in s.NodeGroupNodes(pb.NodeGroupNodesRequest(id="g")).instances]
        assert placeholder.startswith("sim://pending-")
        s.Refresh(pb.RefreshRequest())  # the machine is created
        (real,) = _alive(cloud)
        fake = pb.ExternalGrpcNode(providerID=placeholder, name=placeholder)
        assert s.NodeGroupForNode(pb.NodeGroupForNodeRequest(node=fake)).nodeGroup.id == "g"
        s.NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(id="g", nodes=[fake]))
        assert s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="g")).targetSize == 0
        s.Refresh(pb.RefreshRequest())
        assert _alive(cloud) == [] and real not in cloud.machines and cloud.calls["delete"] == 1
    finally:
        handle.stop(1)


class LateDriver(SimDriver):
    """The first create times out and the cloud carries it out only after our retry has looked
    the token up (nothing found) and created again: one token, two machines."""

    def __init__(self, cloud: SimCloud) -> None:
        super().__init__(cloud)
        self.late: list[tuple[str, str]] = []

    def create_machine(self, group: str, token: str) -> Machine:
        if not self.late and self.cloud.calls["create"] == 0 and not getattr(self, "_done", False):
            self._done = True
            self.late.append((group, token))
            raise CloudError("read timed out", transient=True)
        machine = super().create_machine(group, token)
        while self.late:  # the delayed execution of the first request lands now
            super().create_machine(*self.late.pop())
        return machine


def test_a_late_executed_create_is_deduplicated() -> None:
    cloud = _cloud()
    provider = MachineProvider(LateDriver(cloud), inline_workers=True, max_backoff=0.0)
    handle = _serve(provider)
    try:
        s = stub(channel(handle))
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="g", delta=1))
        # attempt 1 times out; attempt 2 finds nothing and creates; the first request lands late;
        # this Refresh's listing then shows one token on two machines and schedules the younger's deletion
        s.Refresh(pb.RefreshRequest())
        assert cloud.calls["create"] == 2  # two machines really existed for one requested
        assert s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="g")).targetSize == 1
        s.Refresh(pb.RefreshRequest())
        assert provider.wait_idle(5)
        s.Refresh(pb.RefreshRequest())
        assert len(_alive(cloud)) == 1 and cloud.calls["delete"] == 1
        (kept,) = _alive(cloud)
        assert [i.id for i in s.NodeGroupNodes(pb.NodeGroupNodesRequest(id="g")).instances] == [kept]
    finally:
        handle.stop(1)


class HalfBrokenDriver(SimDriver):
    """Two groups; listing one of them fails (a project answering 403) while `broken` is set."""

    def __init__(self, cloud: SimCloud) -> None:
        super().__init__(cloud)
        self.broken = True

    def list_machines(self) -> MachineListing:
        machines = self.cloud.list_machines()
        if not self.broken:
            return MachineListing(machines)
        denied = CloudError("403 Forbidden: Access denied: project belongs to another team", status=403)
        return MachineListing([m for m in machines if m.group != "bad"], {"bad": denied})

    def create_machine(self, group: str, token: str) -> Machine:
        if group == "bad" and self.broken:
            raise CloudError("403 Forbidden: Access denied: project belongs to another team", status=403)
        return super().create_machine(group, token)


def test_one_broken_group_never_takes_the_others_down() -> None:
    cloud = SimCloud(
        SimOptions.model_validate(
            {
                "provisioning_delay": 0,
                "deletion_delay": 0,
                "groups": [
                    {"id": "good", "min_size": 0, "max_size": 10, "initial_size": 2},
                    {"id": "bad", "min_size": 0, "max_size": 10, "initial_size": 1},
                ],
            }
        )
    )
    driver = HalfBrokenDriver(cloud)
    driver.broken = False
    provider = MachineProvider(driver, inline_workers=True)
    handle = _serve(provider)
    try:
        s = stub(channel(handle))
        s.Refresh(pb.RefreshRequest())
        bad_machine = next(m.id for m in cloud.machines.values() if m.group == "bad")
        driver.broken = True
        s.Refresh(pb.RefreshRequest())  # no error: the healthy group was listed
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="good", delta=3))
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="bad", delta=1))
        s.Refresh(pb.RefreshRequest())
        s.Refresh(pb.RefreshRequest())
        good = s.NodeGroupNodes(pb.NodeGroupNodesRequest(id="good")).instances
        assert len(good) == 5 and all(i.status.instanceState == RUNNING for i in good)
        bad = s.NodeGroupNodes(pb.NodeGroupNodesRequest(id="bad")).instances
        assert bad_machine in {i.id for i in bad}  # what was known is kept
        failed = [i for i in bad if i.id.startswith("sim://pending-")]
        assert len(failed) == 1 and "403" in failed[0].status.errorInfo.errorMessage
        victim = next(i.id for i in good)
        s.NodeGroupDeleteNodes(
            pb.NodeGroupDeleteNodesRequest(id="good", nodes=[pb.ExternalGrpcNode(providerID=victim)])
        )
        s.Refresh(pb.RefreshRequest())
        s.Refresh(pb.RefreshRequest())
        assert s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="good")).targetSize == 4
        assert victim not in _alive(cloud)
    finally:
        handle.stop(1)
