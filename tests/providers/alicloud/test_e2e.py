"""End to end over real sockets, in each credential mode: gRPC client -> our server (PoolProvider,
real background workers) -> AliCloud client (V3 signatures) -> the AliCloud emulator on loopback.

The emulator's lifecycle runs on a manual clock, so Pending and InService are steps we take; waits
poll Refresh with a deadline, never a fixed sleep. One test per promise of the AliCloud backend.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from prometheus_client import REGISTRY

from cloudprovider_grpc.config.settings import Settings
from cloudprovider_grpc.emulators.alicloud import AliCloudEmulator
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.providers.registry import build_provider
from cloudprovider_grpc.server.assembly import start_server
from tests.providers.alicloud.conftest import ENV, GROUP_A, GROUP_B, REGION, SK, ctx_for, rrsa_env
from tests.support.servers import ManualClock, channel, stub
from tests.support.waits import eventually, instances, refresh, target

pytestmark = pytest.mark.integration

CREATING = pb.InstanceStatus.instanceCreating
RUNNING = pb.InstanceStatus.instanceRunning
DELETING = pb.InstanceStatus.instanceDeleting
REAL_ID = re.compile(rf"^{REGION}\.i-[a-z0-9]+$")
MODES = ["access-key", "rrsa", "ecs-ram-role"]


def env_for(mode: str, emulator: AliCloudEmulator, tmp_path: Path) -> dict[str, str]:
    if mode == "access-key":
        return dict(ENV)
    if mode == "rrsa":
        return rrsa_env(tmp_path)
    return {"METADATA_ENDPOINT": emulator.base_url}  # no REGION_ID: the metadata server names it


@contextmanager
def serving(emulator: AliCloudEmulator, env: dict[str, str]) -> Iterator[object]:
    provider = build_provider("alicloud", ctx_for(emulator, env))
    handle = start_server(Settings(address="127.0.0.1:0", metrics_address=""), provider=provider)
    ch = channel(handle)
    try:
        yield stub(ch)
    finally:
        ch.close()
        handle.stop(grace=2)


def delete(s, gid: str, *provider_ids: str) -> None:
    nodes = [pb.ExternalGrpcNode(providerID=p, name=p) for p in provider_ids]
    s.NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(id=gid, nodes=nodes), timeout=5)


@pytest.mark.parametrize("mode", MODES)
def test_scale_up_by_three_pending_then_in_service(
    emulator: AliCloudEmulator, emu_clock: ManualClock, tmp_path: Path, mode: str
) -> None:
    with serving(emulator, env_for(mode, emulator, tmp_path)) as s:
        assert refresh(s)
        emulator.clear_log()
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=GROUP_B, delta=3), timeout=5)
        assert target(s, GROUP_B) == 3
        assert {i.status.instanceState for i in instances(s, GROUP_B)} == {CREATING}
        eventually(s, lambda: sum(REAL_ID.match(i.id) is not None for i in instances(s, GROUP_B)) == 3)
        assert emulator.actions().count("ScaleWithAdjustment") == 1
        assert emulator.group_record(GROUP_B)["DesiredCapacity"] == 3
        assert [i["LifecycleState"] for i in emulator.group_instances(GROUP_B)] == ["Pending"] * 3
        assert {i.status.instanceState for i in instances(s, GROUP_B)} == {CREATING}
        emu_clock.advance(31)
        assert refresh(s)
        listed = instances(s, GROUP_B)
        assert len(listed) == 3 and {i.status.instanceState for i in listed} == {RUNNING}
        assert sorted(i.id for i in listed) == sorted(
            f"{REGION}.{i['InstanceId']}" for i in emulator.group_instances(GROUP_B)
        )
        assert target(s, GROUP_B) == 3 and emulator.actions().count("ScaleWithAdjustment") == 1


@pytest.mark.parametrize("mode", MODES)
def test_remove_one_named_node(emulator: AliCloudEmulator, tmp_path: Path, mode: str) -> None:
    before = [i["InstanceId"] for i in emulator.group_instances(GROUP_A)]
    with serving(emulator, env_for(mode, emulator, tmp_path)) as s:
        assert refresh(s)
        victim, keep = before
        # the CCM's alicloud:// form of the providerID names the same instance
        delete(s, GROUP_A, f"alicloud://{REGION}.{victim}")
        assert target(s, GROUP_A) == 1
        eventually(s, lambda: emulator.group_record(GROUP_A)["DesiredCapacity"] == 1)
        assert emulator.actions().count("RemoveInstances") == 1
        states = {i["InstanceId"]: i["LifecycleState"] for i in emulator.group_instances(GROUP_A)}
        assert states == {victim: "Removing", keep: "InService"}
        eventually(
            s,
            lambda: (
                {i.id: i.status.instanceState for i in instances(s, GROUP_A)}.get(f"{REGION}.{victim}")
                == DELETING
            ),
        )
        assert target(s, GROUP_A) == 1


@pytest.mark.parametrize("mode", MODES)
def test_failed_scale_out_is_error_info_class_1_and_the_target_recovers(
    emulator: AliCloudEmulator, emu_clock: ManualClock, tmp_path: Path, mode: str
) -> None:
    emulator.stock["ecs.g8y.xlarge"] = 0
    with serving(emulator, env_for(mode, emulator, tmp_path)) as s:
        assert refresh(s)
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=GROUP_B, delta=2), timeout=5)
        eventually(s, lambda: emulator.group_record(GROUP_B)["DesiredCapacity"] == 2)
        emu_clock.advance(6)  # the activity ends: Failed, OperationDenied.NoStock

        def failed() -> bool:
            listed = instances(s, GROUP_B)
            return len(listed) == 2 and all(
                i.status.errorInfo.errorCode == "OperationDenied.NoStock" for i in listed
            )

        eventually(s, failed)
        for i in instances(s, GROUP_B):
            assert i.status.instanceState == CREATING and i.status.errorInfo.instanceErrorClass == 1
            assert "out of stock" in i.status.errorInfo.errorMessage
        delete(s, GROUP_B, *(i.id for i in instances(s, GROUP_B)))  # what CA does with failed instances
        assert target(s, GROUP_B) == 0
        eventually(
            s, lambda: emulator.group_record(GROUP_B)["DesiredCapacity"] == 0 and target(s, GROUP_B) == 0
        )
        assert instances(s, GROUP_B) == []


@pytest.mark.parametrize("mode", MODES)
def test_a_refused_instance_is_reported_not_swallowed(
    emulator: AliCloudEmulator, emu_clock: ManualClock, tmp_path: Path, mode: str
) -> None:
    def failed_removals() -> float:
        return (
            REGISTRY.get_sample_value(
                "cloudprovider_grpc_machine_operations_total",
                {"backend": "alicloud", "operation": "remove", "result": "failed"},
            )
            or 0.0
        )

    with serving(emulator, env_for(mode, emulator, tmp_path)) as s:
        assert refresh(s)
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=GROUP_A, delta=1), timeout=5)
        eventually(s, lambda: len(emulator.group_instances(GROUP_A)) == 3)
        emu_clock.advance(31)
        assert refresh(s)
        ids = sorted(i.id for i in instances(s, GROUP_A))
        protected, *others = ids
        emulator.set_lifecycle(protected.partition(".")[2], "Protected")
        failures = failed_removals()
        delete(s, GROUP_A, *ids)
        eventually(s, lambda: emulator.group_record(GROUP_A)["DesiredCapacity"] == 1)
        assert failed_removals() == failures + 1
        gone = {i["InstanceId"]: i["LifecycleState"] for i in emulator.group_instances(GROUP_A)}
        assert gone[protected.partition(".")[2]] == "Protected"
        assert all(gone[o.partition(".")[2]] == "Removing" for o in others)
        eventually(
            s, lambda: {i.id: i.status.instanceState for i in instances(s, GROUP_A)}.get(protected) == RUNNING
        )
        assert target(s, GROUP_A) == 1


@pytest.mark.parametrize("mode", ["rrsa", "ecs-ram-role"])
def test_an_expired_sts_key_is_replaced_without_a_failed_rpc(
    emulator: AliCloudEmulator, tmp_path: Path, mode: str
) -> None:
    with serving(emulator, env_for(mode, emulator, tmp_path)) as s:
        assert refresh(s)
        emulator.expire_temporary_keys()
        emulator.clear_log()
        assert refresh(s)  # refreshed credentials: the Refresh succeeds
        statuses = [e.status for e in emulator.request_log()]
        assert statuses[0] == 400 and statuses[1:] and set(statuses[1:]) == {200}
        fetch = (
            "AssumeRoleWithOIDC"
            if mode == "rrsa"
            else "/latest/meta-data/Ram/security-credentials/ca-node-role"
        )
        assert emulator.actions()[1] == fetch
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=GROUP_B, delta=1), timeout=5)
        eventually(s, lambda: emulator.group_record(GROUP_B)["DesiredCapacity"] == 1)


def test_a_bad_signature_is_unavailable_without_the_secret(emulator: AliCloudEmulator) -> None:
    wrong = "Wrong-Secret-Value-123"
    with serving(emulator, {**ENV, "ACCESS_KEY_SECRET": wrong}) as s:
        with pytest.raises(grpc.RpcError) as err:
            s.Refresh(pb.RefreshRequest(), timeout=30)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        details = err.value.details() or ""
        assert "SignatureDoesNotMatch" in details and wrong not in details and SK not in details
        assert "string to sign" not in details and "\n" not in details


def test_discovered_groups_appear_in_node_groups(emulator: AliCloudEmulator) -> None:
    tag = {"TagKey": "k8s.io/cluster-autoscaler/enabled", "TagValue": ""}
    emulator.groups[GROUP_B]["Tags"] = [tag]
    ctx_env = dict(ENV)
    provider = build_provider(
        "alicloud",
        ctx_for(
            emulator,
            ctx_env,
            nodes=(),
            options={"auto-discovery": "asg:tag=k8s.io/cluster-autoscaler/enabled"},
        ),
    )
    handle = start_server(Settings(address="127.0.0.1:0", metrics_address=""), provider=provider)
    ch = channel(handle)
    try:
        s = stub(ch)
        assert refresh(s)
        groups = {
            g.id: (g.minSize, g.maxSize) for g in s.NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups
        }
        assert groups == {GROUP_B: (0, 30)}  # the group's own ESS bounds
        emulator.groups[GROUP_A]["Tags"] = [tag]
        assert refresh(s)
        assert {g.id for g in s.NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups} == {
            GROUP_A,
            GROUP_B,
        }
        assert len(instances(s, GROUP_A)) == 2
        tpl = s.NodeGroupTemplateNodeInfo(pb.NodeGroupTemplateNodeInfoRequest(id=GROUP_A), timeout=5)
        assert tpl.nodeBytes  # its template was loaded on the listing that found it
    finally:
        ch.close()
        handle.stop(grace=2)
