"""The pool-shaped driver against the real emulator: eager discovery, asynchronous changes, polls."""

from __future__ import annotations

import logging

import pytest

from cloudprovider_grpc.core.clouderrors import CloudError, ErrorClass
from cloudprovider_grpc.emulators.exoscale import ExoscaleEmulator
from cloudprovider_grpc.k8s.template import Taint
from cloudprovider_grpc.providers.contract import InstanceState
from cloudprovider_grpc.providers.driver import Operation, OperationState, Pool
from cloudprovider_grpc.providers.exoscale import ExoscaleDriver
from cloudprovider_grpc.providers.exoscale.discovery import instance_state
from tests.providers.exoscale.conftest import KEY, SECRET, ZONE, make_driver, spec
from tests.support.servers import ManualClock

pytestmark = pytest.mark.integration


def pending(op: Operation | None) -> Operation:
    assert op is not None, "the change finished synchronously; an operation was expected"
    return op


def by_name(pools: list[Pool]) -> dict[str, Pool]:
    return {p.config.name: p for p in pools}


def calls(emulator: ExoscaleEmulator) -> list[str]:
    return [emulator.operation_of(e.method, e.path) for e in emulator.request_log()]


def test_eager_discovery_of_the_configured_cluster(emulator: ExoscaleEmulator) -> None:
    driver = make_driver(emulator)
    pools = by_name(driver.list_pools())
    assert set(pools) == {"workers", "gpu"}  # staging's nodepool and the standalone pool are not ours
    workers = pools["workers"]
    np = emulator.nodepool_by_name("workers")
    assert workers.config.id == np["instance-pool"]["id"]  # the in-tree group id: the Instance Pool id
    assert "SKS nodepool workers" in workers.config.debug and "cluster prod" in workers.config.debug
    assert workers.desired == 2 and pools["gpu"].desired == 0  # a nodepool with no node is a group
    assert [m.state for m in workers.machines] == [InstanceState.RUNNING] * 2
    assert all(m.id == f"exoscale://{m.handle}" for m in workers.machines)
    assert (workers.config.min_size, workers.config.max_size) == (1, 50)  # in-tree: min 1, max = quota
    # first listing: quota, one cluster listing, the two instance types, one member listing per pool
    assert sorted(calls(emulator)) == sorted(
        [
            "get-quota",
            "list-sks-clusters",
            "get-instance-type",
            "get-instance-type",
            "list-instances",
            "list-instances",
        ]
    )
    emulator.clear_log()
    driver.list_pools()
    assert sorted(calls(emulator)) == ["list-instances", "list-instances", "list-sks-clusters"]


def test_nodes_specs_select_nodepools_and_standalone_pools(
    emulator: ExoscaleEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    driver = make_driver(emulator, nodes=(spec("0:7:workers"), spec("2:4:batch"), spec("1:2:missing")))
    pools = by_name(driver.list_pools())
    assert set(pools) == {"workers", "batch"}
    assert (pools["workers"].config.min_size, pools["workers"].config.max_size) == (
        0,
        7,
    )  # nodepools scale to 0
    assert pools["batch"].desired == 1 and "instance pool batch" in pools["batch"].config.debug
    assert "--nodes missing names no nodepool" in caplog.text


def test_standalone_pool_min_size_is_at_least_one(emulator: ExoscaleEmulator) -> None:
    driver = make_driver(emulator, env={"EXOSCALE_INSTANCE_POOLS": "batch"}, nodes=(spec("0:3:batch"),))
    (batch,) = driver.list_pools()
    assert (batch.config.min_size, batch.config.max_size) == (1, 3)


def test_several_clusters_need_the_setting(emulator: ExoscaleEmulator) -> None:
    driver = make_driver(emulator, env={})
    with pytest.raises(CloudError, match="has 2 SKS clusters; set EXOSCALE_SKS_CLUSTER"):
        driver.list_pools()
    # with a standalone pool configured, that part still works
    driver = make_driver(emulator, env={"EXOSCALE_INSTANCE_POOLS": "*"})
    assert set(by_name(driver.list_pools())) == {"batch"}


def test_unlimited_quota_means_no_quota_bound(emulator: ExoscaleEmulator) -> None:
    emulator.quota_limit = -1
    driver = make_driver(emulator, options={"unbounded-max-size": 300})
    assert {p.config.max_size for p in driver.list_pools()} == {300}


def test_unreadable_quota_falls_back_and_warns(
    emulator: ExoscaleEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    emulator.add_key(KEY, SECRET, operations={"list-sks-clusters", "list-instances", "get-instance-type"})
    driver = make_driver(emulator)
    assert {p.config.max_size for p in driver.list_pools()} == {1000}
    assert "cannot read the instance quota" in caplog.text and SECRET not in caplog.text


def test_member_listing_refused_is_a_per_pool_error_not_a_failed_refresh(emulator: ExoscaleEmulator) -> None:
    emulator.add_key(KEY, SECRET, operations={"list-sks-clusters", "get-quota", "get-instance-type"})
    pools = make_driver(emulator).list_pools()
    assert len(pools) == 2 and all(
        p.listing_error is not None and p.listing_error.status == 403 for p in pools
    )


def test_cluster_listing_failure_keeps_known_groups(emulator: ExoscaleEmulator) -> None:
    driver = make_driver(emulator)
    first = by_name(driver.list_pools())
    emulator.add_key(KEY, SECRET, operations={"list-instances", "get-quota", "get-instance-type"})
    # nothing could be listed this time: the listing fails as a whole (Refresh UNAVAILABLE, as when
    # every Cherry project fails), and the groups last seen are kept
    with pytest.raises(CloudError, match="list-sks-clusters"):
        driver.list_pools()
    assert {g.id for g in driver.groups()} == {p.config.id for p in first.values()}


def test_set_size_returns_the_pending_operation_and_polls_it(
    emulator: ExoscaleEmulator, clock: ManualClock
) -> None:
    emulator.operation_polls = 2
    driver = make_driver(emulator)
    workers = by_name(driver.list_pools())["workers"]
    op = driver.set_size(workers.config.id, 5)
    assert op is not None and op.kind == "scale"
    assert emulator.nodepool_by_name("workers")["size"] == 5
    assert driver.poll(op).state == OperationState.PENDING
    assert driver.poll(op).state == OperationState.SUCCEEDED
    pool = by_name(driver.list_pools())["workers"]
    assert pool.desired == 5
    assert (
        sorted(m.state for m in pool.machines) == [InstanceState.RUNNING] * 2 + [InstanceState.CREATING] * 3
    )
    clock.advance(30)
    assert {m.state for m in by_name(driver.list_pools())["workers"].machines} == {InstanceState.RUNNING}


def test_remove_evicts_exactly_those_and_skips_members_already_going(emulator: ExoscaleEmulator) -> None:
    driver = make_driver(emulator)
    workers = by_name(driver.list_pools())["workers"]
    doomed, kept = workers.machines
    outcome = driver.remove_machines(workers.config.id, [doomed])
    assert not outcome.failed and outcome.operation is not None and outcome.operation.kind == "remove"
    assert driver.poll(outcome.operation).state == OperationState.SUCCEEDED
    members = {m["id"]: m["state"] for m in emulator.pool_members(workers.config.id)}
    assert members == {doomed.handle: "destroying", kept.handle: "running"}
    assert emulator.nodepool_by_name("workers")["size"] == 1
    emulator.clear_log()
    again = driver.remove_machines(workers.config.id, [doomed])  # the same batch, retried
    assert again.operation is None and calls(emulator) == ["list-instances"]
    assert emulator.nodepool_by_name("workers")["size"] == 1


def test_failed_operation_becomes_the_error_ca_sees(
    emulator: ExoscaleEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    driver = make_driver(emulator)
    gid = by_name(driver.list_pools())["workers"].config.id
    emulator.fail_next.append(("failure", "fault", "hypervisor unavailable"))
    status = driver.poll(pending(driver.set_size(gid, 4)))
    assert status.state == OperationState.FAILED and status.error is not None
    assert status.error.error_class == ErrorClass.OTHER
    assert "failure (fault): hypervisor unavailable" in status.error.message
    assert "hypervisor unavailable" in caplog.text
    emulator.fail_next.append(("timeout", "unavailable", ""))
    status = driver.poll(pending(driver.set_size(gid, 4)))
    assert status.state == OperationState.FAILED and status.error is not None
    assert "timeout (unavailable)" in status.error.message


def test_quota_failure_is_out_of_resources(emulator: ExoscaleEmulator) -> None:
    emulator.quota_limit = 5
    driver = make_driver(emulator)
    gid = by_name(driver.list_pools())["workers"].config.id
    status = driver.poll(pending(driver.set_size(gid, 9)))
    assert status.state == OperationState.FAILED and status.error is not None
    assert (
        status.error.error_class == ErrorClass.OUT_OF_RESOURCES and "Quota exceeded" in status.error.message
    )
    emulator.quota_mode = "reject"
    with pytest.raises(CloudError) as info:
        driver.set_size(gid, 9)
    assert info.value.error_class == ErrorClass.OUT_OF_RESOURCES and not info.value.transient


def test_busy_pool_is_sent_again_from_poll_not_waited_for(emulator: ExoscaleEmulator) -> None:
    driver = make_driver(emulator, options={"operation-retries": 2})
    gid = by_name(driver.list_pools())["workers"].config.id
    emulator.fail_next += [("failure", "conflict", "busy pool"), ("failure", "busy", "still busy")]
    op = pending(driver.set_size(gid, 3))
    assert emulator.nodepool_by_name("workers")["size"] == 2
    assert driver.poll(op).state == OperationState.PENDING  # conflict: sent again
    assert driver.poll(op).state == OperationState.PENDING  # busy: sent again
    assert driver.poll(op).state == OperationState.SUCCEEDED
    assert emulator.nodepool_by_name("workers")["size"] == 3
    emulator.fail_next += [("failure", "conflict", "x")] * 3
    op = pending(driver.set_size(gid, 4))
    assert [driver.poll(op).state for _ in range(3)] == [OperationState.PENDING] * 2 + [OperationState.FAILED]


def test_template_from_instance_type_and_nodepool(emulator: ExoscaleEmulator) -> None:
    driver = make_driver(emulator, options={"reserved": {"cpu": "200m", "memory": "1Gi"}})
    pools = by_name(driver.list_pools())
    workers = driver.template(pools["workers"].config.id)
    assert workers is not None
    assert workers.capacity == {"cpu": "4", "memory": str(8 * 1024**3), "ephemeral-storage": "50Gi"}
    assert workers.reserved == {"cpu": "200m", "memory": "1Gi"}
    assert (workers.instance_type, workers.zone, workers.region) == ("standard.large", ZONE, ZONE)
    assert workers.labels == {"tier": "app"}
    gpu = driver.template(pools["gpu"].config.id)
    assert gpu is not None and gpu.capacity["nvidia.com/gpu"] == "1" and gpu.instance_type == "gpua5000.small"
    assert gpu.taints == (Taint("nvidia.com/gpu", "present", "NoSchedule"),)
    assert driver.hourly_price(pools["gpu"].config.id) is None  # no documented price source
    assert driver.gpu_types() == [] and driver.gpu_label == ""  # no documented GPU model label


def test_catalogue_refresh_rereads_quota_and_types(emulator: ExoscaleEmulator) -> None:
    driver = make_driver(emulator)
    driver.list_pools()
    emulator.quota_limit = 9
    emulator.clear_log()
    driver.refresh_catalog()
    assert sorted(calls(emulator)) == ["get-instance-type", "get-instance-type", "get-quota"]
    assert {p.config.max_size for p in driver.list_pools()} == {9}


@pytest.mark.parametrize(
    ("state", "expected", "error"),
    [
        ("starting", InstanceState.CREATING, False),
        ("running", InstanceState.RUNNING, False),
        ("stopping", InstanceState.DELETING, False),
        ("destroying", InstanceState.DELETING, False),
        ("expunging", InstanceState.DELETING, False),
        ("destroyed", InstanceState.DELETING, False),
        ("error", InstanceState.CREATING, True),
        ("stopped", InstanceState.RUNNING, False),
    ],
)
def test_instance_states(state: str, expected: InstanceState, error: bool) -> None:
    got, err = instance_state({"id": "x", "state": state})
    assert got == expected and (err is not None) == error


def test_error_instance_surfaces_with_its_error(emulator: ExoscaleEmulator) -> None:
    driver = make_driver(emulator)
    workers = by_name(driver.list_pools())["workers"]
    emulator.set_instance_state(workers.machines[0].handle, "error")
    broken = by_name(driver.list_pools())["workers"].machines[0]
    assert broken.error is not None and broken.error.code == "exoscale-instance-error"


def test_driver_repr_and_logs_hold_no_secret(
    emulator: ExoscaleEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    driver: ExoscaleDriver = make_driver(emulator)
    driver.list_pools()
    for text in (repr(driver), caplog.text):
        assert SECRET not in text and KEY not in text


def test_evict_whose_answer_was_lost_is_not_repeated(
    emulator: ExoscaleEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    """The :evict is carried out but answered 502; the HTTP layer sends the PUT again and the API
    refuses the non-members (400): the driver sees them evicted, and the size dropped once."""
    caplog.set_level(logging.INFO)
    driver = make_driver(emulator)
    workers = by_name(driver.list_pools())["workers"]
    doomed = workers.machines[0]
    emulator.lose_next_answers = 1
    outcome = driver.remove_machines(workers.config.id, [doomed])
    assert not outcome.failed and outcome.operation is None
    assert [e.status for e in emulator.request_log() if e.method == "PUT"] == [502, 400]
    assert emulator.nodepool_by_name("workers")["size"] == 1
    assert "were already evicted" in caplog.text


def test_scale_whose_answer_was_lost_is_safe_to_resend(emulator: ExoscaleEmulator) -> None:
    driver = make_driver(emulator)
    gid = by_name(driver.list_pools())["workers"].config.id
    emulator.lose_next_answers = 1
    op = pending(driver.set_size(gid, 4))  # absolute: the re-sent PUT changes nothing more
    assert driver.poll(op).state == OperationState.SUCCEEDED
    assert emulator.nodepool_by_name("workers")["size"] == 4 and len(emulator.pool_members(gid)) == 4


def test_one_broken_pool_never_takes_the_others_down(emulator: ExoscaleEmulator) -> None:
    driver = make_driver(emulator)
    first = by_name(driver.list_pools())
    emulator.broken_pools.add(first["workers"].config.id)
    again = by_name(driver.list_pools())
    broken = again["workers"].listing_error
    assert broken is not None and broken.transient and "temporarily unavailable" in broken.message
    assert again["gpu"].listing_error is None and again["gpu"].desired == 0
