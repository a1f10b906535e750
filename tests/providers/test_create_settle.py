"""A create whose answer was lost is given time to land before its token is looked up.

A cloud can carry out a request after our client stopped waiting for it: a read timeout, or a
leader killed while its request sat in the cloud's queue. A look-up that comes before the request
lands finds nothing and creates the machine a second time (the surplus one is then deleted). The
machine shape therefore waits `create_settle` seconds after the outcome became unknown, or after a
restart found the creation in the journal, before it looks. The cloud here is the sim backend's
SimCloud on a hand-driven clock, behind a driver that lands a lost create `LAG` seconds late; every
call goes through a real gRPC port.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudprovider_grpc.config.settings import Settings
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.protos.externalgrpc_pb2_grpc import CloudProviderStub
from cloudprovider_grpc.providers.driver import CloudError, Machine
from cloudprovider_grpc.providers.machinery.machines.provider import MachineProvider
from cloudprovider_grpc.providers.sim import SimCloud, SimDriver, SimOptions
from cloudprovider_grpc.server.assembly import start_server
from tests.support.servers import ManualClock, channel, stub

pytestmark = pytest.mark.integration

#: how long after the client gave up the cloud carries the first create out
LAG = 3.0
#: the settle the machinery is given: longer than the lag
SETTLE = 5.0


class LaggingDriver(SimDriver):
    """The first create (or every one, with `lose_all`) times out, and the cloud carries it out
    `LAG` seconds later by `clock`: the next listing from then on shows the machine."""

    def __init__(self, cloud: SimCloud, clock: ManualClock, lose_all: bool = False) -> None:
        super().__init__(cloud)
        self.clock = clock
        self.lose_all = lose_all
        self.sent = 0
        self.queued: list[tuple[float, str, str]] = []  # (lands at, group, token)

    def _land(self) -> None:
        for item in [q for q in self.queued if q[0] <= self.clock()]:
            self.queued.remove(item)
            super().create_machine(item[1], item[2])

    def list_machines(self) -> list[Machine]:
        self._land()
        return super().list_machines()

    def create_machine(self, group: str, token: str) -> Machine:
        self.sent += 1
        if self.lose_all or self.sent == 1:
            self.queued.append((self.clock() + LAG, group, token))
            raise CloudError("read timed out", transient=True)
        return super().create_machine(group, token)


def _cloud() -> SimCloud:
    return SimCloud(
        SimOptions.model_validate(
            {
                "provisioning_delay": 0,
                "deletion_delay": 0,
                "groups": [{"id": "g", "min_size": 0, "max_size": 5, "initial_size": 0}],
            }
        )
    )


def _settle(s: CloudProviderStub, clock: ManualClock, seconds: float, step: float = 0.5) -> None:
    """Refresh every `step` seconds of the hand-driven clock for `seconds`: each Refresh runs the
    background attempts that are due (inline workers) and folds a listing in."""
    for _ in range(int(seconds / step)):
        s.Refresh(pb.RefreshRequest())
        clock.advance(step)
    s.Refresh(pb.RefreshRequest())


def test_a_timed_out_create_that_lands_late_is_found_not_sent_again() -> None:
    cloud, clock = _cloud(), ManualClock()
    driver = LaggingDriver(cloud, clock)
    provider = MachineProvider(
        driver, inline_workers=True, clock=clock, max_backoff=0.0, create_settle=SETTLE
    )
    handle = start_server(Settings(address="127.0.0.1:0", metrics_address=""), provider=provider)
    try:
        s = stub(channel(handle))
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="g", delta=1))
        _settle(s, clock, SETTLE + 2)
        assert driver.sent == 1  # the look-up found the late machine: nothing was sent twice
        assert cloud.calls["create"] == 1 and cloud.calls["delete"] == 0
        (instance,) = s.NodeGroupNodes(pb.NodeGroupNodesRequest(id="g")).instances
        assert instance.id in {m.id for m in cloud.machines.values()}
        assert s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="g")).targetSize == 1
    finally:
        handle.stop(1)


def test_without_a_settle_the_same_cloud_gets_a_duplicate_that_is_deleted() -> None:
    """The contrast that shows the settle is what prevents it: the dedupe is only the safety net."""
    cloud, clock = _cloud(), ManualClock()
    driver = LaggingDriver(cloud, clock)
    provider = MachineProvider(driver, inline_workers=True, clock=clock, max_backoff=0.0)
    handle = start_server(Settings(address="127.0.0.1:0", metrics_address=""), provider=provider)
    try:
        s = stub(channel(handle))
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="g", delta=1))
        _settle(s, clock, SETTLE + 2)
        assert driver.sent == 2 and cloud.calls["delete"] == 1
        assert len([m for m in cloud.machines.values() if m.deleted_at is None]) == 1
    finally:
        handle.stop(1)


def test_a_creation_resumed_from_the_journal_waits_for_the_dead_leaders_request(tmp_path: Path) -> None:
    cloud, clock = _cloud(), ManualClock()
    journal = tmp_path / "state.json"
    first_driver = LaggingDriver(cloud, clock, lose_all=True)
    first = MachineProvider(
        first_driver, inline_workers=True, clock=clock, state_file=journal, create_settle=SETTLE
    )
    handle = start_server(Settings(address="127.0.0.1:0", metrics_address=""), provider=first)
    s = stub(channel(handle))
    s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="g", delta=2))
    s.Refresh(pb.RefreshRequest())  # both requests leave; their answers are lost; the process dies
    handle.stop(0)
    assert first_driver.sent == 2 and cloud.calls["create"] == 0
    # the next life starts at once, on a cloud still working through the dead one's requests
    second_driver = LaggingDriver(cloud, clock)
    second_driver.queued, second_driver.sent = first_driver.queued, 1  # its own sends all succeed
    second = MachineProvider(
        second_driver, inline_workers=True, clock=clock, state_file=journal, create_settle=SETTLE
    )
    handle = start_server(Settings(address="127.0.0.1:0", metrics_address=""), provider=second)
    try:
        s = stub(channel(handle))
        assert s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="g")).targetSize == 2
        _settle(s, clock, SETTLE + 2)
        assert second_driver.sent == 1  # nothing sent again: both machines were found
        assert cloud.calls["create"] == 2 and cloud.calls["delete"] == 0
        assert len(s.NodeGroupNodes(pb.NodeGroupNodesRequest(id="g")).instances) == 2
    finally:
        handle.stop(1)
