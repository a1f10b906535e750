"""Clouds whose create carries no token (SPC's): a create whose answer was lost is never sent
again; the listings adopt the machine it made, also across a restart through the journal.
Everything goes through a real gRPC port."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.providers.driver import CloudError, Machine, MachineListing
from cloudprovider_grpc.providers.machinery.machines.provider import MachineProvider
from cloudprovider_grpc.providers.sim import SimCloud, SimDriver
from tests.support.machine_worlds import alive as _alive
from tests.support.machine_worlds import serve as _serve
from tests.support.machine_worlds import sim_cloud as _cloud
from tests.support.servers import channel, stub
from tests.support.waits import poll

pytestmark = pytest.mark.integration


class UntokenedDriver(SimDriver):
    """A cloud whose create cannot carry a token (SPC): the machine is created without it, and the
    first create's answer is lost after the cloud carried it out."""

    create_carries_token = False

    def __init__(self, cloud: SimCloud) -> None:
        super().__init__(cloud)
        self.creates = 0

    def create_machine(self, group: str, token: str) -> Machine:
        self.creates += 1
        machine = super().create_machine(group, "")
        if self.creates == 1:
            raise CloudError("read timed out", transient=True)
        return machine


def test_untokened_create_with_a_lost_answer_is_adopted_never_resent() -> None:
    cloud = _cloud(initial=1)
    driver = UntokenedDriver(cloud)
    provider = MachineProvider(driver, inline_workers=True)
    handle = _serve(provider)
    try:
        s = stub(channel(handle))
        s.Refresh(pb.RefreshRequest())  # the baseline listing
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="g", delta=2))
        s.Refresh(pb.RefreshRequest())  # both creates run; the first one's answer is lost
        s.Refresh(pb.RefreshRequest())  # the listing adopts the machine it made
        s.Refresh(pb.RefreshRequest())
        assert driver.creates == 2  # never re-sent
        assert len(_alive(cloud)) == 3
        assert s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="g")).targetSize == 3
        ids = sorted(i.id for i in s.NodeGroupNodes(pb.NodeGroupNodesRequest(id="g")).instances)
        assert ids == _alive(cloud)  # no placeholder left: the lost one was adopted
    finally:
        handle.stop(1)


def test_untokened_creations_never_sent_are_sent_after_a_restart(tmp_path: Path) -> None:
    """The journal records whether a create request may have left: one that never did is sent after
    a restart at once; it does not wait to be adopted (untokened clouds cannot look it up)."""
    cloud = _cloud()
    journal = tmp_path / "state.json"

    class Untokened(SimDriver):
        create_carries_token = False

    first = MachineProvider(Untokened(cloud), inline_workers=True, state_file=journal)
    handle = _serve(first)
    stub(channel(handle)).NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="g", delta=2))
    handle.stop(0)  # before any Refresh: nothing was sent
    assert _alive(cloud) == []

    second = MachineProvider(Untokened(cloud), inline_workers=True, state_file=journal)
    handle = _serve(second)
    try:
        s = stub(channel(handle))
        s.Refresh(pb.RefreshRequest())
        s.Refresh(pb.RefreshRequest())
        assert len(_alive(cloud)) == 2
        assert s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="g")).targetSize == 2
        ids = sorted(i.id for i in s.NodeGroupNodes(pb.NodeGroupNodesRequest(id="g")).instances)
        assert ids == _alive(cloud)
    finally:
        handle.stop(0)


class LaggingUntokenedDriver(UntokenedDriver):
    """UntokenedDriver whose listings do not show the machines its own creates made yet (a
    cloud's listing that lags behind its creates), so no listing of this life adopts them."""

    def __init__(self, cloud: SimCloud) -> None:
        super().__init__(cloud)
        self.made: set[str] = set()

    def create_machine(self, group: str, token: str) -> Machine:
        before = set(_alive(self.cloud))
        try:
            return super().create_machine(group, token)
        finally:
            self.made |= set(_alive(self.cloud)) - before

    def list_machines(self) -> MachineListing:
        return MachineListing([m for m in self.cloud.list_machines() if m.id not in self.made])


def _restart_after_a_lost_untokened_answer(
    tmp_path: Path, keep_known: bool
) -> tuple[int, list[str], list[str]]:
    """Life one: a baseline listing, then a scale-up by one whose create the cloud carried out but
    whose answer was lost, and the process ends before any listing shows the machine (as kill -9
    right after the cloud acted). Life two starts from the journal (without its `known` list when
    not `keep_known`, as journals written before it was kept) and lists once. Returns life two's
    target, the ids CA sees and the cloud's machines."""
    cloud = _cloud(initial=1)
    journal = tmp_path / "state.json"
    first_driver = LaggingUntokenedDriver(cloud)
    handle = _serve(MachineProvider(first_driver, inline_workers=True, state_file=journal))
    s = stub(channel(handle))
    s.Refresh(pb.RefreshRequest())  # the baseline listing
    s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="g", delta=1))
    s.Refresh(pb.RefreshRequest())  # the create runs, its answer is lost, no listing shows it yet
    handle.stop(0)
    assert first_driver.creates == 1 and len(_alive(cloud)) == 2
    doc = json.loads(journal.read_text())
    entry = doc["groups"]["g"]
    assert [c["sent"] for c in entry["creations"]] == [True]
    assert len(set(_alive(cloud)) - set(entry["known"])) == 1  # the machine the lost answer was about
    if not keep_known:
        del entry["known"]
        journal.write_text(json.dumps(doc))

    second_driver = UntokenedDriver(cloud)
    second_driver.creates = 1  # its creates answer
    handle = _serve(MachineProvider(second_driver, inline_workers=True, state_file=journal))
    try:
        s = stub(channel(handle))
        s.Refresh(pb.RefreshRequest())  # the first listing after the restart
        assert second_driver.creates == 1  # never re-sent
        target = s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="g")).targetSize
        ids = sorted(i.id for i in s.NodeGroupNodes(pb.NodeGroupNodesRequest(id="g")).instances)
    finally:
        handle.stop(0)
    return target, ids, _alive(cloud)


def test_an_untokened_create_that_landed_before_a_restart_is_adopted_at_the_first_listing(
    tmp_path: Path,
) -> None:
    """The journal keeps the machines known when a create without a token left, so the first
    listing after a restart tells the machine that create made from those there before: it is
    adopted at once, not shown beside a placeholder that would only fail after `failed_ttl`."""
    target, ids, alive = _restart_after_a_lost_untokened_answer(tmp_path, keep_known=True)
    assert len(alive) == 2
    assert target == 2 and ids == alive


def test_an_older_journal_without_known_machines_waits_for_a_newcomer(tmp_path: Path) -> None:
    """A journal written before the known machines were kept still loads; its first listing is the
    baseline, so the machine that landed is not adopted and its placeholder waits: the target is
    one over the machines for a while, and nothing is created twice."""
    target, ids, alive = _restart_after_a_lost_untokened_answer(tmp_path, keep_known=False)
    assert len(alive) == 2
    assert target == 3 and ids[:2] == alive and "pending-" in ids[2]


class HeldAnswerDriver(SimDriver):
    """An untokened cloud whose first create's answer is lost before the cloud acted (no machine),
    and whose later creates make their machine at once but answer only when the test says so: a
    listing taken meanwhile already shows the machine of a create still in flight."""

    create_carries_token = False

    def __init__(self, cloud: SimCloud, *, lose_first: bool) -> None:
        super().__init__(cloud)
        self.lose_first = lose_first
        self.made = threading.Event()
        self.release = threading.Event()
        self.answered = threading.Event()

    def create_machine(self, group: str, token: str) -> Machine:
        if self.lose_first:
            self.lose_first = False
            raise CloudError("read timed out", transient=True)
        machine = super().create_machine(group, "")
        self.made.set()
        assert self.release.wait(30), "the test never released the create's answer"
        self.answered.set()
        return machine


@pytest.mark.parametrize("late_landing", [False, True], ids=["lost", "lands-late"])
def test_a_machine_of_a_create_in_flight_is_never_adopted_for_a_lost_one(
    tmp_path: Path, late_landing: bool
) -> None:
    """After a restart, a create whose answer was lost waits to adopt a newcomer. A create of this
    life whose machine is listed before its answer arrives makes such a newcomer too: it must stay
    that create's, or the two placeholders would collapse into one machine and CA's target would
    drop by one it never asked to remove. The listing taken meanwhile adopts nothing; a machine the
    lost create made that appears in it (`lands-late`) is adopted once the running create answered."""
    cloud = _cloud(initial=1)
    journal = tmp_path / "state.json"
    handle = _serve(
        MachineProvider(HeldAnswerDriver(cloud, lose_first=True), inline_workers=True, state_file=journal)
    )
    s = stub(channel(handle))
    s.Refresh(pb.RefreshRequest())  # the baseline listing
    s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="g", delta=1))
    s.Refresh(pb.RefreshRequest())  # the create is sent, its answer lost, the cloud made nothing
    handle.stop(0)
    assert len(_alive(cloud)) == 1
    assert [c["sent"] for c in json.loads(journal.read_text())["groups"]["g"]["creations"]] == [True]

    driver = HeldAnswerDriver(cloud, lose_first=False)
    handle = _serve(MachineProvider(driver, state_file=journal))
    try:
        s = stub(channel(handle))
        s.Refresh(pb.RefreshRequest())  # the first listing after the restart: nothing new
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="g", delta=1))
        s.Refresh(pb.RefreshRequest())
        assert driver.made.wait(30), "the second create never ran"
        if late_landing:
            SimDriver(cloud).create_machine("g", "")  # the lost create's machine, at last
        s.Refresh(pb.RefreshRequest())  # lists the new machine(s) while the create has not answered
        driver.release.set()
        assert driver.answered.wait(30)
        machines = 3 if late_landing else 2

        def settled() -> pb.NodeGroupNodesResponse | None:
            s.Refresh(pb.RefreshRequest())
            nodes = s.NodeGroupNodes(pb.NodeGroupNodesRequest(id="g"))
            return nodes if len([i for i in nodes.instances if "pending-" not in i.id]) == machines else None

        nodes = poll(settled, 30, "the machines to be shown")
        assert len(_alive(cloud)) == machines
        # the initial machine, the running create's and the lost create's: as a machine once it
        # landed, else as the placeholder that still waits for it
        assert s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="g")).targetSize == 3
        ids = sorted(i.id for i in nodes.instances)
        if late_landing:
            assert ids == _alive(cloud)
        else:
            assert ids[:2] == _alive(cloud) and "pending-" in ids[2]
    finally:
        driver.release.set()
        handle.stop(0)
