"""The pool-shape driver against the emulator: listing, states, failures, changes, templates."""

from __future__ import annotations

import pytest

from cloudprovider_grpc.core.clouderrors import CloudError, ErrorClass
from cloudprovider_grpc.emulators import FaultPlan
from cloudprovider_grpc.emulators.alicloud import AliCloudEmulator
from cloudprovider_grpc.providers.alicloud.catalogue import GPU_LABEL, gpu_label_value
from cloudprovider_grpc.providers.contract import InstanceState, NodeRef
from cloudprovider_grpc.providers.driver import OperationState
from cloudprovider_grpc.providers.registry import NodesSpec
from tests.providers.alicloud.conftest import GPU_GROUP, GROUP_A, GROUP_B, REGION, make_driver
from tests.support.servers import ManualClock

pytestmark = pytest.mark.integration

ID = r"^cn-hangzhou\.i-[a-z0-9]+$"


def pool(driver, gid):
    return next(p for p in driver.list_pools() if p.config.id == gid)


def test_listing_one_group_call_and_one_instance_call_per_group(emulator: AliCloudEmulator) -> None:
    driver = make_driver(emulator)
    emulator.clear_log()
    driver.list_pools()  # the first listing also loads each group's template (configuration, type, zone)
    assert set(emulator.actions()) == {
        "DescribeScalingGroups",
        "DescribeScalingInstances",
        "DescribeScalingConfigurations",
        "DescribeInstanceTypes",
        "DescribeVSwitches",
    }
    emulator.clear_log()
    pools = driver.list_pools()
    assert [p.config.id for p in pools] == [GROUP_A, GROUP_B, GPU_GROUP]
    assert sorted(emulator.actions()) == ["DescribeScalingGroups"] + ["DescribeScalingInstances"] * 3
    a = pools[0]
    assert a.desired == 2 and len(a.machines) == 2 and a.failure is None and a.listing_error is None
    for m in a.machines:
        assert (
            m.id == f"{REGION}.{m.handle}" and m.handle.startswith("i-") and m.state == InstanceState.RUNNING
        )
        assert m.handle[2:].isalnum() and m.handle == m.handle.lower()


def test_lifecycle_states_map_to_ca_states(emulator: AliCloudEmulator, emu_clock: ManualClock) -> None:
    driver = make_driver(emulator)
    driver.set_size(GROUP_A, 4)
    states = sorted(m.state for m in pool(driver, GROUP_A).machines)
    assert states == [InstanceState.RUNNING] * 2 + [InstanceState.CREATING] * 2
    first, second = (i["InstanceId"] for i in emulator.group_instances(GROUP_A)[:2])
    emulator.set_lifecycle(first, "Protected")
    emu_clock.advance(31)
    emulator.set_lifecycle(second, "Removing")
    by_handle = {m.handle: m.state for m in pool(driver, GROUP_A).machines}
    assert by_handle[first] == InstanceState.RUNNING and by_handle[second] == InstanceState.DELETING
    assert sorted(by_handle.values()).count(InstanceState.RUNNING) == 3


def test_desired_capacity_or_the_in_tree_counters(emulator: AliCloudEmulator) -> None:
    emulator.add_group({"ScalingGroupId": "asg-bp1counters", "EnableDesiredCapacity": False}, instances=3)
    driver = make_driver(emulator, nodes=(NodesSpec(0, 5, "asg-bp1counters"),))
    assert pool(driver, "asg-bp1counters").desired == 3
    assert "DesiredCapacity" not in emulator.group_record("asg-bp1counters")


def test_a_group_that_is_gone_fails_alone(emulator: AliCloudEmulator) -> None:
    emulator.groups[GROUP_B]["LifecycleState"] = "Inactive"
    pools = {p.config.id: p for p in make_driver(emulator).list_pools()}
    assert (
        pools[GROUP_B].listing_error is not None
        and pools[GROUP_B].listing_error.code == "InvalidScalingGroupId.NotFound"
    )
    assert pools[GROUP_A].listing_error is None and len(pools[GROUP_A].machines) == 2


def test_set_size_is_one_call_and_its_activity_is_polled(
    emulator: AliCloudEmulator, emu_clock: ManualClock
) -> None:
    driver = make_driver(emulator)
    emulator.clear_log()
    op = driver.set_size(GROUP_A, 5)
    assert emulator.actions() == ["ScaleWithAdjustment"] and op is not None and op.kind == "scale"
    assert driver.poll(op).state == OperationState.PENDING
    emu_clock.advance(31)
    assert driver.poll(op).state == OperationState.SUCCEEDED
    assert emulator.group_record(GROUP_A)["DesiredCapacity"] == 5
    assert (
        driver.set_size(GROUP_A, 99) is not None and emulator.group_record(GROUP_A)["DesiredCapacity"] == 30
    )


def test_a_stock_out_fails_the_activity_with_class_1(
    emulator: AliCloudEmulator, emu_clock: ManualClock
) -> None:
    driver = make_driver(emulator)
    emulator.stock["ecs.gn7i-c8g1.2xlarge"] = 0
    op = driver.set_size(GPU_GROUP, 2)
    listed = pool(driver, GPU_GROUP)
    assert listed.desired == 2 and listed.machines == () and listed.failure is None  # still in progress
    emu_clock.advance(6)
    status = driver.poll(op)
    assert status.state == OperationState.FAILED and status.error is not None
    assert (
        status.error.code == "OperationDenied.NoStock"
        and status.error.error_class == ErrorClass.OUT_OF_RESOURCES
    )
    emulator.clear_log()
    failed = pool(driver, GPU_GROUP)
    assert failed.failure == status.error
    # one activity call, for the group short of its desired capacity only
    assert emulator.actions().count("DescribeScalingActivities") == 1
    asked = [
        e.query["ScalingGroupId"]
        for e in emulator.request_log()
        if "PageSize" in e.query and "ScalingGroupId" in e.query and "PageNumber" not in e.query
    ]
    assert asked == [[GPU_GROUP]]


def test_remove_lowers_desired_and_reports_each_refused_instance(
    emulator: AliCloudEmulator, emu_clock: ManualClock
) -> None:
    driver = make_driver(emulator)
    driver.set_size(GROUP_A, 4)
    emu_clock.advance(31)
    machines = pool(driver, GROUP_A).machines
    keep, refused, *gone = machines
    emulator.set_lifecycle(refused.handle, "Protected")
    emulator.clear_log()
    outcome = driver.remove_machines(GROUP_A, [refused, *gone])
    assert emulator.actions() == ["RemoveInstances"]
    assert (
        list(outcome.failed) == [refused.id] and outcome.failed[refused.id].code == "IncorrectInstanceStatus"
    )
    assert outcome.operation is not None and outcome.operation.kind == "remove"
    record = emulator.group_record(GROUP_A)
    assert record["DesiredCapacity"] == 2 and record["RemovingCapacity"] == 2
    emu_clock.advance(11)
    assert driver.poll(outcome.operation).state == OperationState.SUCCEEDED
    assert {m.handle for m in pool(driver, GROUP_A).machines} == {keep.handle, refused.handle}
    # unprotected later, the same instance goes on the next request (a new ClientToken, not a replay)
    emulator.set_lifecycle(refused.handle, "InService")
    retry = driver.remove_machines(GROUP_A, [refused])
    assert not retry.failed and emulator.group_record(GROUP_A)["DesiredCapacity"] == 1


def test_a_removal_whose_answer_was_lost_is_not_repeated(
    emulator: AliCloudEmulator, emu_clock: ManualClock
) -> None:
    driver = make_driver(emulator)
    victim = pool(driver, GROUP_A).machines[0]
    emulator.set_faults(FaultPlan(rate=1.0, kinds=("drop",), methods=frozenset({"POST"})))
    try:
        driver.remove_machines(GROUP_A, [victim])
        raise AssertionError("a dropped answer must raise")
    except CloudError as err:
        assert err.transient and err.status is None  # processed, but we cannot know
    assert emulator.group_record(GROUP_A)["DesiredCapacity"] == 1  # it did happen
    emulator.set_faults(None)
    again = driver.remove_machines(GROUP_A, [victim])  # the machinery's retry: same ClientToken
    assert not again.failed and again.operation is not None
    assert emulator.group_record(GROUP_A)["DesiredCapacity"] == 1  # not removed twice
    assert len(emulator.activity_records(GROUP_A)) == 1


def test_remove_in_batches_of_twenty(emulator: AliCloudEmulator, emu_clock: ManualClock) -> None:
    driver = make_driver(emulator)
    driver.set_size(GROUP_A, 25)
    emu_clock.advance(31)
    machines = pool(driver, GROUP_A).machines
    assert len(machines) == 25
    emulator.clear_log()
    outcome = driver.remove_machines(GROUP_A, machines[:23])
    assert emulator.actions() == ["RemoveInstances", "RemoveInstances"] and not outcome.failed
    assert outcome.operation is not None and len(outcome.operation.ref.split(",")) == 2
    assert emulator.group_record(GROUP_A)["DesiredCapacity"] == 2


def test_templates_from_configuration_and_catalogue(emulator: AliCloudEmulator) -> None:
    driver = make_driver(emulator)
    assert driver.template(GROUP_A) is None  # nothing is known before the first listing
    emulator.clear_log()
    driver.list_pools()
    assert emulator.actions().count("DescribeVSwitches") == 3  # one per group's first vSwitch
    a = driver.template(GROUP_A)
    assert a is not None and (a.instance_type, a.region, a.arch) == ("ecs.g7.xlarge", REGION, "amd64")
    assert a.capacity == {"cpu": "4", "memory": "16384Mi", "ephemeral-storage": "100Gi"}
    assert a.labels == {"pool": "a"} and a.zone == "cn-hangzhou-h"  # the first vSwitch's zone
    b = driver.template(GROUP_B)
    assert b is not None and b.arch == "arm64"
    gpu = driver.template(GPU_GROUP)
    assert gpu is not None and gpu.capacity["nvidia.com/gpu"] == "1" and gpu.capacity["memory"] == "30720Mi"
    assert gpu.labels[GPU_LABEL] == "NVIDIA-A10" and driver.gpu_types() == ["NVIDIA-A10"]
    assert gpu.zone == "cn-hangzhou-i"  # no instance yet: the zone comes from its vSwitch
    emulator.clear_log()
    driver.refresh_catalog()  # the TTL passed: configurations and types again, vSwitch zones are kept
    assert sorted(emulator.actions()) == ["DescribeInstanceTypes"] + ["DescribeScalingConfigurations"] * 3
    assert gpu_label_value("NVIDIA V100 SXM2") == "NVIDIA-V100-SXM2"


def test_nodes_match_by_alicloud_scheme_or_ack_node_name(emulator: AliCloudEmulator) -> None:
    driver = make_driver(emulator)
    assert driver.machine_of(NodeRef(provider_id="alicloud://cn-hangzhou.i-bp1abc")) == "cn-hangzhou.i-bp1abc"
    assert driver.machine_of(NodeRef(provider_id="", name="cn-hangzhou.i-bp1abc")) == "cn-hangzhou.i-bp1abc"
    assert driver.machine_of(NodeRef(provider_id="", name="worker-1")) is None
    assert (
        driver.machine_of(NodeRef(provider_id="cn-hangzhou.i-bp1abc")) is None
    )  # the plain form matches directly


def test_groups_discovered_by_tag_on_every_listing(emulator: AliCloudEmulator) -> None:
    enabled = {"TagKey": "k8s.io/cluster-autoscaler/enabled", "TagValue": ""}
    for gid, tags in (
        ("asg-bp1disco00000000001", [enabled, {"TagKey": "cluster", "TagValue": "c1"}]),
        ("asg-bp1disco00000000002", [enabled, {"TagKey": "cluster", "TagValue": "c2"}]),
    ):
        emulator.add_group({"ScalingGroupId": gid, "MinSize": 1, "MaxSize": 7, "Tags": tags})
    options = {"auto-discovery": "asg:tag=k8s.io/cluster-autoscaler/enabled,cluster=c1"}
    driver = make_driver(emulator, nodes=(NodesSpec(2, 9, GROUP_A),), options=options)
    driver.list_pools()
    emulator.clear_log()
    pools = {p.config.id: p for p in driver.list_pools()}
    assert sorted(pools) == sorted([GROUP_A, "asg-bp1disco00000000001"])
    found = pools["asg-bp1disco00000000001"].config
    assert (found.min_size, found.max_size, found.name) == (1, 7, "asg-bp1disco00000000001")
    assert (pools[GROUP_A].config.min_size, pools[GROUP_A].config.max_size) == (2, 9)  # --nodes wins
    # one discovery listing, one by id for the --nodes group without the tags
    assert emulator.actions().count("DescribeScalingGroups") == 2
    emulator.groups["asg-bp1disco00000000002"]["Tags"][1]["TagValue"] = "c1"  # tagged later
    emulator.groups["asg-bp1disco00000000001"]["Tags"] = []  # untagged
    assert sorted(g.id for g in driver.groups()) == sorted(pools)
    driver.list_pools()
    assert sorted(g.id for g in driver.groups()) == sorted([GROUP_A, "asg-bp1disco00000000002"])
    assert driver.template("asg-bp1disco00000000002") is None  # no configuration seeded for it


def test_a_newer_scale_out_hides_an_older_failure(emulator: AliCloudEmulator, emu_clock: ManualClock) -> None:
    driver = make_driver(emulator)
    emulator.fail_next_scale_out(GROUP_B, "Rejected", "QuotaExceed.ElasticQuota", "quota reached")
    driver.set_size(GROUP_B, 1)
    emu_clock.advance(6)
    failure = pool(driver, GROUP_B).failure
    assert failure is not None and failure.code == "QuotaExceed.ElasticQuota"
    assert failure.error_class == ErrorClass.OUT_OF_RESOURCES and "Rejected" in failure.message
    driver.set_size(GROUP_B, 2)  # CA asks again: the new activity runs
    assert pool(driver, GROUP_B).failure is None
    emu_clock.advance(31)
    listed = pool(driver, GROUP_B)
    assert listed.failure is None and len(listed.machines) == 2


def test_an_activity_ess_forgot_is_not_pending_forever(emulator: AliCloudEmulator) -> None:
    driver = make_driver(emulator)
    op = driver.set_size(GROUP_B, 1)
    assert op is not None
    emulator.activities.clear()
    assert driver.poll(op).state == OperationState.SUCCEEDED


def test_launch_template_groups(emulator: AliCloudEmulator) -> None:
    base = {"SystemDisk": {"Size": 60}, "Tags": {"InstanceTag": [{"Key": "pool", "Value": "lt"}]}}
    emulator.add_launch_template(
        "lt-bp1test0000000001",
        {**base, "InstanceType": "ecs.c7.large"},
        {**base, "InstanceType": "ecs.r7.xlarge", "ZoneId": "cn-hangzhou-j"},
        default=1,
    )
    for gid, version, overrides in (
        ("asg-bp1ltdefault0000001", "Default", []),
        ("asg-bp1ltlatest00000001", "Latest", []),
        ("asg-bp1ltoverride000001", "1", [{"InstanceType": "ecs.g7.2xlarge", "WeightedCapacity": 1}]),
    ):
        emulator.add_group(
            {
                "ScalingGroupId": gid,
                "LaunchTemplateId": "lt-bp1test0000000001",
                "LaunchTemplateVersion": version,
                "LaunchTemplateOverrides": overrides,
                "MaxSize": 5,
            }
        )
    nodes = tuple(
        NodesSpec(0, 5, g)
        for g in ("asg-bp1ltdefault0000001", "asg-bp1ltlatest00000001", "asg-bp1ltoverride000001")
    )
    driver = make_driver(emulator, nodes=nodes)
    driver.list_pools()
    default = driver.template("asg-bp1ltdefault0000001")
    assert default is not None and default.instance_type == "ecs.c7.large"
    assert default.labels == {"pool": "lt"} and default.capacity["ephemeral-storage"] == "60Gi"
    latest = driver.template("asg-bp1ltlatest00000001")
    assert latest is not None and (latest.instance_type, latest.zone) == ("ecs.r7.xlarge", "cn-hangzhou-j")
    override = driver.template("asg-bp1ltoverride000001")
    assert override is not None and override.instance_type == "ecs.g7.2xlarge"  # the override comes first
