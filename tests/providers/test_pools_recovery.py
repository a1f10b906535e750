"""The pool shape of the shared machinery (providers/machinery/pools/provider.py) over a real gRPC port:
what survives a restart and what arrives later.

A restart mid scale-up recovers from the cloud and the journal, a corrupt journal is one line naming
the file, an asynchronous operation that fails becomes error info and is never waited for, journal
entries wait for groups discovered after start, and the sim runs in pool mode from its
configuration. The cloud and `CountingDriver` are in tests/support/pools.py; how sizes and deletions
reach the cloud is in test_pools_scaling.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudprovider_grpc.core.errors import ConfigError
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.providers.driver import Operation, OperationState, OperationStatus
from cloudprovider_grpc.providers.machinery.pools.provider import PoolProvider
from cloudprovider_grpc.providers.registry import ProviderContext, build_provider
from cloudprovider_grpc.providers.sim import SimCloud
from tests.support.pools import CountingDriver, _alive, _cloud, _delete, _instances, _serve, _target
from tests.support.servers import channel, stub

pytestmark = pytest.mark.integration


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
