"""The pool shape of the shared machinery (providers/machinery/pools/provider.py) over a real gRPC port.

The cloud is the sim backend in pool mode: it owns each group's desired size, converges on it by
itself, deletes *random* instances when the size drops below the count (as VKE does), and removes
named instances while lowering the size. `CountingDriver` records every call that changes the cloud
and can fail them like a bad network.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from cloudprovider_grpc.config.settings import Settings
from cloudprovider_grpc.core.clouderrors import CloudError
from cloudprovider_grpc.core.errors import ConfigError
from cloudprovider_grpc.grpcapi.server import ServerHandle, start_server
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.providers.driver import (
    Machine,
    Operation,
    OperationState,
    OperationStatus,
    RemoveOutcome,
)
from cloudprovider_grpc.providers.machinery.pools.provider import PoolProvider
from cloudprovider_grpc.providers.registry import ProviderContext, build_provider
from cloudprovider_grpc.providers.sim import SimCloud, SimOptions, SimPoolDriver
from tests.support.servers import channel, stub

pytestmark = pytest.mark.integration

CREATING = pb.InstanceStatus.instanceCreating
RUNNING = pb.InstanceStatus.instanceRunning


class CountingDriver(SimPoolDriver):
    """SimPoolDriver that records set_size/remove calls and can fail a fraction of them: 'lost'
    (the cloud applied it, the answer never came) or 'refused' (a 503 before anything happened)."""

    def __init__(self, cloud: SimCloud, fault_rate: float = 0.0, seed: int = 1) -> None:
        super().__init__(cloud)
        self.pushes: list[int] = []
        self.removals: list[list[str]] = []
        self.fault_rate = fault_rate
        self.faults = 0
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def _fault(self) -> str | None:
        with self._lock:
            if self._rng.random() >= self.fault_rate:
                return None
            self.faults += 1
            return self._rng.choice(["lost", "refused"])

    def set_size(self, group: str, size: int) -> None:
        fault = self._fault()
        if fault == "refused":
            raise CloudError("503 Service Unavailable", transient=True, status=503)
        with self._lock:
            self.pushes.append(size)
        super().set_size(group, size)
        if fault == "lost":
            raise CloudError("read timed out", transient=True)

    def remove_machines(self, group: str, machines: Sequence[Machine]) -> RemoveOutcome:
        fault = self._fault()
        if fault == "refused":
            raise CloudError("429 Too Many Requests", transient=True, status=429)
        with self._lock:
            self.removals.append([m.id for m in machines])
        outcome = super().remove_machines(group, machines)
        if fault == "lost":
            raise CloudError("read timed out", transient=True)
        return outcome


def _cloud(
    max_size: int = 20, initial: int = 0, delay: float = 0.0, min_size: int = 0, **fail: object
) -> SimCloud:
    group: dict[str, object] = {
        "id": "g",
        "min_size": min_size,
        "max_size": max_size,
        "initial_size": initial,
    }
    if fail:
        group["fail"] = fail
    return SimCloud(
        SimOptions.model_validate(
            {"shape": "pools", "provisioning_delay": delay, "deletion_delay": 0, "groups": [group]}
        )
    )


def _serve(provider: PoolProvider) -> ServerHandle:
    return start_server(Settings(address="127.0.0.1:0", metrics_address=""), provider=provider)


def _alive(cloud: SimCloud) -> list[str]:
    return sorted(m.id for m in cloud.machines.values() if m.deleted_at is None)


def _instances(s, gid: str = "g") -> list[pb.Instance]:
    return list(s.NodeGroupNodes(pb.NodeGroupNodesRequest(id=gid)).instances)


def _target(s, gid: str = "g") -> int:
    return s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id=gid)).targetSize


def _eventually(s, check: Callable[[], bool], rounds: int = 200) -> None:
    """Refresh until `check` holds: each Refresh is one CA loop; background work runs between them."""
    for _ in range(rounds):
        s.Refresh(pb.RefreshRequest())
        if check():
            return
        threading.Event().wait(0.02)
    raise AssertionError("condition not reached")


def _delete(s, *ids: str, gid: str = "g") -> None:
    s.NodeGroupDeleteNodes(
        pb.NodeGroupDeleteNodesRequest(id=gid, nodes=[pb.ExternalGrpcNode(providerID=i) for i in ids])
    )


def test_scale_up_by_three_is_one_push_and_instances_go_creating_then_running() -> None:
    cloud = _cloud(delay=30.0)
    clock = [1000.0]
    cloud.clock = lambda: clock[0]
    driver = CountingDriver(cloud)
    provider = PoolProvider(driver, inline_workers=True, clock=lambda: clock[0])
    handle = _serve(provider)
    try:
        s = stub(channel(handle))
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="g", delta=3))
        assert _target(s) == 3  # at once, before the cloud heard anything
        placeholders = _instances(s)
        assert [i.status.instanceState for i in placeholders] == [CREATING] * 3
        assert all(i.id.startswith("sim://pending-g-") for i in placeholders)
        s.Refresh(pb.RefreshRequest())  # the push runs, then the listing sees the cloud's instances
        assert driver.pushes == [3]
        instances = _instances(s)
        assert sorted(i.id for i in instances) == _alive(cloud)
        assert [i.status.instanceState for i in instances] == [CREATING] * 3
        clock[0] += 31
        s.Refresh(pb.RefreshRequest())
        assert {i.status.instanceState for i in _instances(s)} == {RUNNING}
        assert _target(s) == 3 and driver.pushes == [3]
    finally:
        handle.stop(1)


def test_delete_named_node_removes_exactly_it_and_lowers_the_size() -> None:
    cloud = _cloud(initial=5)
    driver = CountingDriver(cloud)
    provider = PoolProvider(driver, inline_workers=True)
    handle = _serve(provider)
    try:
        s = stub(channel(handle))
        s.Refresh(pb.RefreshRequest())
        before = _alive(cloud)
        victim = before[2]
        _delete(s, victim)
        assert _target(s) == 4
        states = {i.id: i.status.instanceState for i in _instances(s)}
        assert states[victim] == pb.InstanceStatus.instanceDeleting
        s.Refresh(pb.RefreshRequest())
        assert _alive(cloud) == [m for m in before if m != victim]
        assert cloud.desired["g"] == 4
        assert driver.removals == [[victim]] and driver.pushes == []  # the removal lowered the size
        _delete(s, victim)  # again: idempotent, nothing else goes
        s.Refresh(pb.RefreshRequest())
        assert len(_alive(cloud)) == 4 and _target(s) == 4
    finally:
        handle.stop(1)


def test_decrease_below_listed_is_refused_without_touching_the_cloud() -> None:
    cloud = _cloud(initial=3)
    driver = CountingDriver(cloud)
    handle = _serve(PoolProvider(driver, inline_workers=True))
    try:
        s = stub(channel(handle))
        s.Refresh(pb.RefreshRequest())
        with pytest.raises(grpc.RpcError) as err:
            s.NodeGroupDecreaseTargetSize(pb.NodeGroupDecreaseTargetSizeRequest(id="g", delta=-1))
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "DeleteNodes" in (err.value.details() or "")
        s.Refresh(pb.RefreshRequest())
        assert driver.pushes == [] and driver.removals == [] and len(_alive(cloud)) == 3
        # lowering a target that is above the listed count only drops placeholders
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="g", delta=2))
        s.NodeGroupDecreaseTargetSize(pb.NodeGroupDecreaseTargetSizeRequest(id="g", delta=-2))
        assert _target(s) == 3
        s.Refresh(pb.RefreshRequest())
        assert driver.pushes == [] and len(_alive(cloud)) == 3  # coalesced into nothing to send
    finally:
        handle.stop(1)


class GatedDriver(CountingDriver):
    """The first push blocks until the test opens the gate: the RPCs keep arriving meanwhile, as
    they would while a real cloud answers slowly."""

    def __init__(self, cloud: SimCloud) -> None:
        super().__init__(cloud)
        self.gate = threading.Event()
        self.entered = threading.Event()

    def set_size(self, group: str, size: int) -> None:
        self.entered.set()
        assert self.gate.wait(10)
        super().set_size(group, size)


def test_fifty_concurrent_increases_stop_at_max_with_few_pushes() -> None:
    cloud = _cloud(max_size=20)
    driver = GatedDriver(cloud)
    provider = PoolProvider(driver, concurrency=4)
    handle = _serve(provider)
    try:
        ch = channel(handle)
        s = stub(ch)

        def one(_: int) -> grpc.StatusCode:
            try:
                s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="g", delta=1), timeout=5)
                return grpc.StatusCode.OK
            except grpc.RpcError as exc:
                return exc.code()

        with ThreadPoolExecutor(50) as pool:
            codes = list(pool.map(one, range(50)))  # all answered while the first push is held
        driver.gate.set()
        assert codes.count(grpc.StatusCode.OK) == 20
        assert codes.count(grpc.StatusCode.FAILED_PRECONDITION) == 30
        assert provider.wait_idle(10)
        assert _target(s) == 20
        assert 1 <= len(driver.pushes) <= 3 and max(driver.pushes) == 20
        s.Refresh(pb.RefreshRequest())
        assert len(_alive(cloud)) == 20 and _target(s) == 20
    finally:
        handle.stop(1)


def test_faults_on_thirty_percent_of_calls_end_with_exactly_the_asked_size() -> None:
    cloud = _cloud(max_size=30, initial=2)
    driver = CountingDriver(cloud, fault_rate=0.3, seed=7)
    provider = PoolProvider(driver, concurrency=2, max_backoff=0.02, max_attempts=50)
    handle = _serve(provider)
    try:
        s = stub(channel(handle))
        s.Refresh(pb.RefreshRequest())
        for _ in range(10):
            s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="g", delta=1))
        victims = _alive(cloud)[:2]
        _delete(s, *victims)
        _eventually(s, lambda: provider.wait_idle(0.01) and len(_alive(cloud)) == 10)
        assert _target(s) == 10 and cloud.desired["g"] == 10
        assert not set(victims) & set(_alive(cloud))
        assert driver.faults > 0
    finally:
        handle.stop(1)


def test_capacity_failure_shows_as_class_one_on_placeholders_and_ca_recovers_the_target() -> None:
    cloud = _cloud(initial=1, stockout_after=2)
    handle = _serve(PoolProvider(CountingDriver(cloud), inline_workers=True))
    try:
        s = stub(channel(handle))
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="g", delta=3))
        s.Refresh(pb.RefreshRequest())
        s.Refresh(pb.RefreshRequest())
        instances = _instances(s)
        pending = [i for i in instances if i.id.startswith("sim://pending-")]
        assert len(pending) == 2 and len(instances) == 4
        for i in pending:
            assert i.status.errorInfo.instanceErrorClass == 1
            assert i.status.errorInfo.errorCode == "STOCKOUT"
        _delete(s, *(i.id for i in pending))  # what CA does with failed instances
        assert _target(s) == 2
        s.Refresh(pb.RefreshRequest())
        assert _target(s) == 2 and cloud.desired["g"] == 2
        assert not [i for i in _instances(s) if i.id.startswith("sim://pending-")]
    finally:
        handle.stop(1)


def test_min_size_holds_under_concurrent_single_deletes() -> None:
    cloud = _cloud(initial=12, min_size=5)
    driver = CountingDriver(cloud)
    provider = PoolProvider(driver, concurrency=4)
    handle = _serve(provider)
    try:
        s = stub(channel(handle))
        s.Refresh(pb.RefreshRequest())
        victims = _alive(cloud)[:10]

        def one(mid: str) -> grpc.StatusCode:
            try:
                _delete(s, mid)
                return grpc.StatusCode.OK
            except grpc.RpcError as exc:
                return exc.code()

        with ThreadPoolExecutor(10) as pool:
            codes = list(pool.map(one, victims))
        assert codes.count(grpc.StatusCode.OK) == 7
        assert provider.wait_idle(10)
        s.Refresh(pb.RefreshRequest())
        assert len(_alive(cloud)) == 5 and _target(s) == 5
        removed = {mid for batch in driver.removals for mid in batch}
        assert removed <= set(victims) and len(removed) == 7
        assert len(driver.removals) < 7  # batched
    finally:
        handle.stop(1)


def test_restart_mid_scale_up_recovers_from_the_cloud_and_the_journal(tmp_path: Path) -> None:
    cloud = _cloud(initial=2, delay=60.0)
    clock = [1000.0]
    cloud.clock = lambda: clock[0]
    journal = tmp_path / "state.json"
    first = PoolProvider(
        CountingDriver(cloud), inline_workers=True, clock=lambda: clock[0], state_file=journal
    )
    handle = _serve(first)
    s = stub(channel(handle))
    s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="g", delta=3))
    s.Refresh(pb.RefreshRequest())  # pushed: the cloud holds 5 (3 booting)
    s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="g", delta=2))  # accepted, not yet sent
    handle.stop(0)

    second = PoolProvider(
        CountingDriver(cloud), inline_workers=True, clock=lambda: clock[0], state_file=journal
    )
    handle = _serve(second)
    try:
        s = stub(channel(handle))
        assert _target(s) == 7  # the journaled wanted size
        s.Refresh(pb.RefreshRequest())
        assert cloud.desired["g"] == 7
        ids = {i.id for i in _instances(s)}
        assert ids == set(_alive(cloud)) and len(ids) == 7
    finally:
        handle.stop(0)

    third = PoolProvider(CountingDriver(cloud), inline_workers=True, clock=lambda: clock[0])  # no journal
    handle = _serve(third)
    try:
        s = stub(channel(handle))
        assert _target(s) == 7 and {i.id for i in _instances(s)} == set(_alive(cloud))
    finally:
        handle.stop(0)


def test_a_corrupt_journal_is_one_line_naming_the_file(tmp_path: Path) -> None:
    journal = tmp_path / "state.json"
    journal.write_text('{"version": 2, "pools": [')
    with pytest.raises(ConfigError) as err:
        PoolProvider(CountingDriver(_cloud()), inline_workers=True, state_file=journal)
    assert str(journal) in str(err.value) and "\n" not in str(err.value)


class AsyncDriver(CountingDriver):
    """Pushes finish asynchronously: each returns an Operation whose outcome the test decides."""

    def __init__(self, cloud: SimCloud) -> None:
        super().__init__(cloud)
        self.outcomes: dict[str, OperationStatus] = {}
        self.polls = 0

    def set_size(self, group: str, size: int) -> Operation:
        super().set_size(group, size)
        ref = f"op-{len(self.pushes)}"
        self.outcomes.setdefault(ref, OperationStatus(OperationState.PENDING))
        return Operation(group, "scale", ref)

    def poll(self, operation: Operation) -> OperationStatus:
        self.polls += 1
        return self.outcomes[operation.ref]


def test_a_failed_operation_becomes_error_info_and_is_never_waited_for() -> None:
    from cloudprovider_grpc.core.clouderrors import ErrorClass, InstanceError

    cloud = _cloud(initial=1, stockout_after=1)
    clock = [1000.0]
    cloud.clock = lambda: clock[0]
    driver = AsyncDriver(cloud)
    handle = _serve(PoolProvider(driver, inline_workers=True, clock=lambda: clock[0]))
    try:
        s = stub(channel(handle))
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="g", delta=2))
        s.Refresh(pb.RefreshRequest())
        assert driver.pushes == [3] and _target(s) == 3  # accepted; the operation is pending
        clock[0] += 5
        s.Refresh(pb.RefreshRequest())
        assert driver.polls >= 1 and _target(s) == 3
        driver.outcomes["op-1"] = OperationStatus(
            OperationState.FAILED,
            InstanceError("QUOTA", "instance quota exceeded", ErrorClass.OUT_OF_RESOURCES),
        )
        clock[0] += 30
        s.Refresh(pb.RefreshRequest())
        pending = [i for i in _instances(s) if "pending" in i.id]
        assert len(pending) == 2
        assert {i.status.errorInfo.errorCode for i in pending} == {"QUOTA"}
        _delete(s, *(i.id for i in pending))
        s.Refresh(pb.RefreshRequest())
        assert _target(s) == 1 and cloud.desired["g"] == 1
    finally:
        handle.stop(0)


def test_sim_pool_mode_from_configuration() -> None:
    provider = build_provider("sim", ProviderContext(options={"shape": "pools"}, inline_workers=True))
    assert isinstance(provider, PoolProvider)
    provider.start()
    try:
        assert [g.id for g in provider.node_groups()] == ["general", "highmem", "gpu"]
        assert provider.target_size("general") == 1
    finally:
        provider.stop(0)


class DiscoveringDriver(CountingDriver):
    """Groups exist only once the cloud has been listed (VKE pools, SKS nodepools, SPC pools)."""

    def groups(self):
        return []


def test_journal_entries_wait_for_groups_discovered_after_start(tmp_path: Path) -> None:
    cloud = _cloud(initial=1)
    journal = tmp_path / "state.json"
    first = PoolProvider(DiscoveringDriver(cloud), inline_workers=True, state_file=journal)
    handle = _serve(first)
    s = stub(channel(handle))
    assert [g.id for g in s.NodeGroups(pb.NodeGroupsRequest()).nodeGroups] == ["g"]  # discovered at start
    s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="g", delta=4))  # accepted, not yet sent
    handle.stop(0)
    assert cloud.desired["g"] == 1

    second = PoolProvider(DiscoveringDriver(cloud), inline_workers=True, state_file=journal)
    assert second.node_groups() == ()  # nothing known before the first listing
    handle = _serve(second)
    try:
        s = stub(channel(handle))
        assert _target(s) == 5  # restored when the group was discovered
        s.Refresh(pb.RefreshRequest())
        assert cloud.desired["g"] == 5 and len(_alive(cloud)) == 5
    finally:
        handle.stop(0)


class NotYetDriver(CountingDriver):
    """Refuses to remove each named machine the first `refusals` times, as something the cloud cannot
    remove yet (an ESS instance still Pending: `IncorrectInstanceStatus`, transient)."""

    def __init__(self, cloud: SimCloud, refusals: int) -> None:
        super().__init__(cloud)
        self.refusals = refusals

    def remove_machines(self, group: str, machines: Sequence[Machine]) -> RemoveOutcome:
        if self.refusals > 0:
            self.refusals -= 1
            return RemoveOutcome(failed={m.id: CloudError("still Pending", transient=True) for m in machines})
        return super().remove_machines(group, machines)


def test_a_machine_the_cloud_cannot_remove_yet_is_removed_later_not_dropped() -> None:
    cloud = _cloud(initial=3)
    clock = [1000.0]
    cloud.clock = lambda: clock[0]
    driver = NotYetDriver(cloud, refusals=2)
    handle = _serve(PoolProvider(driver, inline_workers=True, clock=lambda: clock[0]))
    try:
        s = stub(channel(handle))
        s.Refresh(pb.RefreshRequest())
        victim = _alive(cloud)[0]
        _delete(s, victim)
        for _ in range(3):  # refused twice, each retried after a backoff
            s.Refresh(pb.RefreshRequest())
            states = {i.id: i.status.instanceState for i in _instances(s)}
            assert victim not in states or states[victim] == pb.InstanceStatus.instanceDeleting
            assert _target(s) == 2
            clock[0] += 120
        s.Refresh(pb.RefreshRequest())
        assert driver.refusals == 0 and driver.removals == [[victim]]
        assert victim not in _alive(cloud) and len(_alive(cloud)) == 2 and _target(s) == 2
    finally:
        handle.stop(1)
