"""The write gate in both shapes of the machinery, over the sim cloud in process: a dry run refuses
and records every write; a leader's term that ends while work is queued lets none of it reach the
cloud, nor the journal; a new writer resumes from the journal the old one left."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from cloudprovider_grpc.core.errors import FailedPrecondition, Unavailable
from cloudprovider_grpc.ha.term_gate import LeaderGate
from cloudprovider_grpc.providers.contract import NodeRef
from cloudprovider_grpc.providers.machinery.gate import DRY_RUN_WRITES, DryRunGate, Write
from cloudprovider_grpc.providers.machinery.journal import Journal
from cloudprovider_grpc.providers.machinery.machines.provider import MachineProvider
from cloudprovider_grpc.providers.machinery.pools.provider import PoolProvider
from cloudprovider_grpc.providers.sim import SimCloud, SimDriver, SimOptions
from cloudprovider_grpc.providers.sim.cloud import SimPoolDriver
from tests.support.servers import ManualClock

pytestmark = pytest.mark.unit


def _cloud(initial: int = 0) -> SimCloud:
    return SimCloud(
        SimOptions.model_validate(
            {
                "provisioning_delay": 0,
                "deletion_delay": 0,
                "groups": [{"id": "g", "min_size": 0, "max_size": 20, "initial_size": initial}],
            }
        )
    )


def _alive(cloud: SimCloud) -> list[str]:
    return sorted(m.id for m in cloud.machines.values() if m.deleted_at is None)


def _provider(shape: str, cloud: SimCloud, **kwargs: object) -> MachineProvider | PoolProvider:
    if shape == "machines":
        return MachineProvider(SimDriver(cloud), inline_workers=True, **kwargs)  # type: ignore[arg-type]
    return PoolProvider(SimPoolDriver(cloud), inline_workers=True, **kwargs)  # type: ignore[arg-type]


def test_write_descriptions() -> None:
    assert Write("sim", "create", "g", 2).describe() == "create 2 machines in g"
    assert Write("sim", "create", "g", 1).describe() == "create 1 machine in g"
    assert Write("sim", "set_size", "g", 5).describe() == "set the size of g to 5"
    assert Write("sim", "delete", "g", 1, ("sim://g-1",)).describe() == "delete 1 machine (sim://g-1) in g"


@pytest.mark.parametrize("shape", ["machines", "pools"])
def test_dry_run_refuses_every_write_rpc_and_changes_nothing(
    shape: str, caplog: pytest.LogCaptureFixture
) -> None:
    cloud = _cloud(initial=2)
    provider = _provider(shape, cloud, gate=DryRunGate())
    provider.start()
    before = provider.target_size("g"), _alive(cloud)
    counted = DRY_RUN_WRITES.labels("sim", "create")._value.get()
    victim = before[1][0]
    with caplog.at_level(logging.INFO, logger="cloudprovider_grpc.providers.machinery.gate"):
        with pytest.raises(FailedPrecondition, match="dry run: would create 3 machines in g"):
            provider.increase_size("g", 3)
        with pytest.raises(FailedPrecondition, match=f"would delete 1 machine \\({victim}\\) in g"):
            provider.delete_nodes("g", [NodeRef(name=victim, provider_id=victim)])
    provider.refresh()
    provider.wait_idle(5)
    assert (provider.target_size("g"), _alive(cloud)) == before
    assert DRY_RUN_WRITES.labels("sim", "create")._value.get() == counted + 1
    assert [r.getMessage() for r in caplog.records if "would" in r.getMessage()] == [
        "dry run: would create 3 machines in g",
        f"dry run: would delete 1 machine ({victim}) in g",
    ]
    provider.stop(0)


@pytest.mark.parametrize("shape", ["machines", "pools"])
def test_a_term_that_ends_with_work_queued_writes_nothing(shape: str, tmp_path: Path) -> None:
    """Fencing: accepted within the term, the term ends before the background job runs: the job
    meets the gate at its driver call and the cloud and the journal stay as they were."""
    clock = ManualClock()
    gate = LeaderGate(renew_deadline=10, clock=clock)
    journal = tmp_path / "journal.json"
    cloud = _cloud()
    provider = _provider(shape, cloud, gate=gate, clock=clock, state_file=journal)
    with pytest.raises(Unavailable, match="not the leader"):
        provider.increase_size("g", 1)  # a standby records nothing
    gate.begin(term=3, started=clock())
    provider.start()
    with pytest.raises(Unavailable, match="not the leader"):
        provider.increase_size("g", 1)  # not before the takeover is done
    gate.answer(True)
    provider.increase_size("g", 4)
    saved = journal.read_text()
    clock.advance(10.5)  # frozen past the renew deadline, as a SIGSTOPped leader would be
    assert not gate.valid()
    provider.refresh()  # runs the queued jobs (inline mode)
    provider.wait_idle(5)
    assert _alive(cloud) == []
    assert journal.read_text() == saved  # not the journal either: the next leader owns it
    with pytest.raises(Unavailable):
        provider.increase_size("g", 1)
    provider.stop(0)

    # the next leader resumes the journal the old one left, and the cloud gets exactly 4
    gate2 = LeaderGate(renew_deadline=10, clock=clock)
    successor = _provider(shape, cloud, gate=gate2, clock=clock, state_file=journal)
    successor.start()  # a standby: resumes nothing
    successor.wait_idle(5)
    assert _alive(cloud) == []
    gate2.begin(term=4, started=clock())
    successor.take_over()
    gate2.answer(True)
    for _ in range(5):
        successor.refresh()
        successor.wait_idle(5)
    assert len(_alive(cloud)) == 4
    assert successor.target_size("g") == 4
    successor.stop(0)


def test_a_journal_write_overtaken_by_the_end_of_the_term_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    """The gate is asked again after the new journal is on disk and before it replaces the old one:
    a writer whose term ended while it wrote (frozen mid-write) leaves the successor's file intact."""
    path = tmp_path / "journal.json"
    journal = Journal(path, backend="sim", shape="machines")
    journal.save({"groups": {}})
    successor_wrote = path.read_bytes()
    journal.save({"groups": {"g": {"creations": ["t1"], "deleting": []}}}, still=lambda: False)
    assert path.read_bytes() == successor_wrote
    assert sorted(p.name for p in tmp_path.iterdir()) == ["journal.json"]  # no temporary file left
    journal.save({"groups": {"g": {"creations": ["t1"], "deleting": []}}}, still=lambda: True)
    assert journal.load()["groups"] == {"g": {"creations": ["t1"], "deleting": []}}
