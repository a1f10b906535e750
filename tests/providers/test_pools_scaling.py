"""The pool shape of the shared machinery (providers/machinery/pools/provider.py) over a real gRPC port:
how sizes and deletions reach the cloud.

A scale-up is one push, a named deletion removes exactly that machine, a decrease never touches the
cloud, concurrent increases stop at the maximum and concurrent deletions at the minimum, faults on a
third of the calls still end at exactly the size asked, a stock-out shows on the placeholders, and a
machine the cloud cannot remove yet is removed later. The cloud and `CountingDriver` are in
tests/support/pools.py; restarts and asynchronous operations are in test_pools_recovery.py.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from cloudprovider_grpc.core.clouderrors import CloudError
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.providers.driver import Machine, RemoveOutcome
from cloudprovider_grpc.providers.machinery.pools.provider import PoolProvider
from cloudprovider_grpc.providers.sim import SimCloud
from tests.support.pools import (
    CountingDriver,
    _alive,
    _cloud,
    _delete,
    _eventually,
    _instances,
    _serve,
    _target,
)
from tests.support.servers import channel, stub

pytestmark = pytest.mark.integration

CREATING = pb.InstanceStatus.instanceCreating
RUNNING = pb.InstanceStatus.instanceRunning


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
