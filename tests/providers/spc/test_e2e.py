"""End to end over real sockets: gRPC client -> our server -> SPC client -> SPC emulator, one test per
promise of the SPC backend.

The provider runs with real background workers (IncreaseSize returns before anything is added);
the emulator's node states run on a manual clock, so `draft`, `building` and `running` are steps we
take. Waits poll Refresh + NodeGroupNodes until a condition holds (bounded), never a fixed sleep.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import grpc
import pytest

from cloudprovider_grpc.config.settings import Settings
from cloudprovider_grpc.emulators import FaultPlan
from cloudprovider_grpc.emulators.spc import SpcEmulator
from cloudprovider_grpc.k8s.node import decode_node
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.providers.contract import CloudProvider
from cloudprovider_grpc.providers.registry import build_provider
from cloudprovider_grpc.server.assembly import ServerHandle, start_server
from tests.providers.spc.conftest import BUILDING, CLUSTER, DELETING, DRAFT, PROVISIONED, pools, spc_ctx
from tests.support.servers import ManualClock, channel, stub
from tests.support.waits import eventually, instances, refresh, target

pytestmark = pytest.mark.integration

CREATING = pb.InstanceStatus.instanceCreating
RUNNING = pb.InstanceStatus.instanceRunning
DELETING_STATE = pb.InstanceStatus.instanceDeleting
AWS_ID = "aws:///us-west-2a/i-"


@contextmanager
def serving(provider: CloudProvider) -> Iterator[tuple[ServerHandle, Any]]:
    handle = start_server(Settings(address="127.0.0.1:0", metrics_address=""), provider=provider)
    ch = channel(handle)
    try:
        yield handle, stub(ch)
    finally:
        ch.close()
        handle.stop(grace=2)


def group_nodes(emu: SpcEmulator, gid: str) -> list[dict[str, Any]]:
    return [n for n in emu.node_records(CLUSTER) if n["group_name"] == gid]


def first_group(emu: SpcEmulator) -> str:
    return next(iter(pools(emu)))


def grpc_node(record: dict[str, Any], *, registered: bool = True) -> pb.ExternalGrpcNode:
    pid = f"aws:///{record['zone']}/{record['provider_node_id']}"
    labels = {
        "stackpoint.io/node_group": record["group_name"],
        "stackpoint.io/instance_id": record["instance_id"],
    }
    if not registered:  # CA's synthetic node for an instance that never registered
        return pb.ExternalGrpcNode(providerID=pid, name=pid)
    return pb.ExternalGrpcNode(providerID=pid, name=record["instance_id"], labels=labels)


def test_scale_up_by_three_returns_at_once_then_draft_building_running(
    emulator: SpcEmulator, emu_clock: ManualClock
) -> None:
    gid = first_group(emulator)
    # every add is answered after 1 s: IncreaseSize must return before any node exists
    emulator.set_faults(FaultPlan(rate=1.0, kinds=("slow",), slow_seconds=1.0, methods=frozenset({"POST"})))
    with serving(build_provider("spc", spc_ctx(emulator, options={"read-timeout": 5.0}))) as (_, s):
        assert target(s, gid) == 1
        started = time.monotonic()
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=gid, delta=3), timeout=5)
        assert time.monotonic() - started < 1.0 and len(group_nodes(emulator, gid)) == 1
        now = instances(s, gid)
        assert len(now) == 4 and sum(1 for i in now if i.id.startswith("spc://pending-")) == 3
        assert target(s, gid) == 4

        def new_ones() -> list[pb.Instance]:
            return [i for i in instances(s, gid) if i.status.instanceState != RUNNING]

        eventually(s, lambda: len(new_ones()) == 3 and not any(i.id.startswith("spc://") for i in new_ones()))
        assert [n["state"] for n in group_nodes(emulator, gid)][1:] == ["draft"] * 3
        assert {i.status.instanceState for i in new_ones()} == {CREATING}
        assert all(i.id.startswith("spc") and "-worker-" in i.id for i in new_ones())  # named until built
        emulator.set_faults(None)

        emu_clock.advance(DRAFT)
        assert refresh(s)
        assert [n["state"] for n in group_nodes(emulator, gid)][1:] == ["building"] * 3
        assert all(i.id.startswith(AWS_ID) and i.status.instanceState == CREATING for i in new_ones())
        emu_clock.advance(BUILDING + PROVISIONED)
        assert refresh(s)
        got = instances(s, gid)
        assert len(got) == 4 and {i.status.instanceState for i in got} == {RUNNING}
        records = group_nodes(emulator, gid)
        assert sorted(i.id for i in got) == sorted(f"{AWS_ID}{r['provider_node_id'][2:]}" for r in records)
        assert target(s, gid) == 4
        assert sum(1 for e in emulator.request_log() if e.method == "POST") == 3


def test_deleting_one_named_node_removes_exactly_it(emulator: SpcEmulator, emu_clock: ManualClock) -> None:
    gid = first_group(emulator)
    with serving(build_provider("spc", spc_ctx(emulator))) as (handle, s):
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=gid, delta=3), timeout=5)
        eventually(s, lambda: len(group_nodes(emulator, gid)) == 4)
        emu_clock.advance(DRAFT + BUILDING + PROVISIONED)
        eventually(s, lambda: {i.status.instanceState for i in instances(s, gid)} == {RUNNING})
        first, victim, third, fourth = group_nodes(emulator, gid)
        s.NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(id=gid, nodes=[grpc_node(victim)]), timeout=5)
        assert target(s, gid) == 3
        assert handle.provider.wait_idle(10)
        states = {n["pk"]: n["state"] for n in group_nodes(emulator, gid)}
        assert states == {
            first["pk"]: "running",
            victim["pk"]: "deleting",
            third["pk"]: "running",
            fourth["pk"]: "running",
        }
        got = {i.id: i.status.instanceState for i in instances(s, gid)}
        assert got[grpc_node(victim).providerID] == DELETING_STATE
        emu_clock.advance(DELETING)
        assert refresh(s)
        assert [n["pk"] for n in group_nodes(emulator, gid)] == [first["pk"], third["pk"], fourth["pk"]]
        assert len(instances(s, gid)) == 3 and target(s, gid) == 3
        # a node whose providerID is not the derived one is found by its stackpoint.io/instance_id label
        odd = pb.ExternalGrpcNode(
            providerID="gce://elsewhere/z/x",
            name="x",
            labels={"stackpoint.io/instance_id": fourth["instance_id"]},
        )
        assert s.NodeGroupForNode(pb.NodeGroupForNodeRequest(node=odd), timeout=5).nodeGroup.id == gid
        s.NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(id=gid, nodes=[odd]), timeout=5)
        assert handle.provider.wait_idle(10)
        assert {n["pk"]: n["state"] for n in group_nodes(emulator, gid)} == {
            first["pk"]: "running",
            third["pk"]: "running",
            fourth["pk"]: "deleting",
        }


@pytest.mark.parametrize("fault", ["slow", "drop"])
def test_a_create_performed_but_answered_with_a_timeout_ends_with_exactly_the_asked_nodes(
    emulator: SpcEmulator, fault: str
) -> None:
    """`slow`: the add is carried out after the client's read timeout fired; `drop`: carried out
    and the connection closed without an answer. Either way the outcome is unknown to us; the add
    is never re-sent and the next listings adopt the new nodes."""
    gid = first_group(emulator)
    emulator.set_faults(FaultPlan(rate=1.0, kinds=(fault,), slow_seconds=1.0, methods=frozenset({"POST"})))
    with serving(build_provider("spc", spc_ctx(emulator, options={"read-timeout": 0.3}))) as (handle, s):
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=gid, delta=2), timeout=5)
        assert target(s, gid) == 3
        eventually(
            s,
            lambda: (
                emulator.in_flight() == 0
                and handle.provider.wait_idle(5)
                and len(group_nodes(emulator, gid)) == 3
                and not any(i.id.startswith("spc://pending-") for i in instances(s, gid))
            ),
        )
        for _ in range(3):  # more loops change nothing
            assert refresh(s)
        posts = [e for e in emulator.request_log() if e.method == "POST"]
        assert len(posts) == 2 and all(e.fault == fault and e.processed for e in posts)
        assert len(group_nodes(emulator, gid)) == 3 and target(s, gid) == 3
        assert sorted(i.id for i in instances(s, gid)) == sorted(
            n["instance_id"] if not n["provider_node_id"] else f"aws:///us-west-2a/{n['provider_node_id']}"
            for n in group_nodes(emulator, gid)
        )


def test_a_failed_node_shows_error_info_and_the_target_recovers_after_ca_deletes_it(
    emulator: SpcEmulator, emu_clock: ManualClock
) -> None:
    gid = first_group(emulator)
    emulator.fail_next = 1
    with serving(build_provider("spc", spc_ctx(emulator))) as (handle, s):
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=gid, delta=1), timeout=5)
        eventually(s, lambda: len(group_nodes(emulator, gid)) == 2)
        emu_clock.advance(DRAFT)
        assert refresh(s)
        (bad,) = [i for i in instances(s, gid) if i.status.HasField("errorInfo")]
        assert bad.status.instanceState == CREATING and bad.id.startswith(AWS_ID)
        assert bad.status.errorInfo.instanceErrorClass == 99
        assert (
            bad.status.errorInfo.errorCode == "SPC_NODE_FAILED"
            and "failed to build" in bad.status.errorInfo.errorMessage
        )
        assert target(s, gid) == 2
        # CA deletes the failed instance (a synthetic node: name == providerID) and backs off
        node = pb.ExternalGrpcNode(providerID=bad.id, name=bad.id)
        s.NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(id=gid, nodes=[node]), timeout=5)
        assert target(s, gid) == 1
        assert handle.provider.wait_idle(10)
        emu_clock.advance(DELETING)
        assert refresh(s)
        assert len(group_nodes(emulator, gid)) == 1 and target(s, gid) == 1
        assert [i.status.instanceState for i in instances(s, gid)] == [RUNNING]


def test_a_node_stuck_in_draft_shows_error_info_and_the_target_recovers(emulator: SpcEmulator) -> None:
    gid = first_group(emulator)
    emulator.stuck_next = 1
    ctx = spc_ctx(emulator, options={"draft-timeout": 0.5})  # on the server's real clock
    with serving(build_provider("spc", ctx)) as (handle, s):
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=gid, delta=1), timeout=5)
        eventually(s, lambda: any(i.status.HasField("errorInfo") for i in instances(s, gid)))
        (stuck,) = [i for i in instances(s, gid) if i.status.HasField("errorInfo")]
        assert stuck.status.errorInfo.errorCode == "SPC_NODE_STUCK_IN_DRAFT"
        assert (
            stuck.status.errorInfo.instanceErrorClass == 99
            and "in draft" in stuck.status.errorInfo.errorMessage
        )
        record = next(n for n in group_nodes(emulator, gid) if n["state"] == "draft")
        assert stuck.id == record["instance_id"]  # no provider id yet: the node's name
        s.NodeGroupDeleteNodes(
            pb.NodeGroupDeleteNodesRequest(
                id=gid, nodes=[pb.ExternalGrpcNode(providerID=stuck.id, name=stuck.id)]
            ),
            timeout=5,
        )
        assert target(s, gid) == 1 and handle.provider.wait_idle(10)
        assert (
            next(n for n in emulator.node_records(CLUSTER) if n["pk"] == record["pk"])["state"] == "deleting"
        )


def test_the_template_decodes_with_the_labels_scale_from_zero_needs(emulator: SpcEmulator) -> None:
    gid = list(pools(emulator))[1]  # the empty m4.xlarge pool
    with serving(build_provider("spc", spc_ctx(emulator))) as (_, s):
        assert target(s, gid) == 0
        raw = s.NodeGroupTemplateNodeInfo(pb.NodeGroupTemplateNodeInfoRequest(id=gid), timeout=5).nodeBytes
        node = decode_node(raw)
        labels = dict(node.metadata.labels)
        assert labels["stackpoint.io/node_group"] == gid
        assert labels["stackpoint.io/role"] == "worker"
        assert labels["node.kubernetes.io/instance-type"] == "m4.xlarge"
        assert labels["topology.kubernetes.io/zone"] == "us-west-2a"
        assert (
            node.status.capacity["cpu"].string == "4" and node.status.capacity["memory"].string == "16000Mi"
        )


def test_a_quiet_ca_loop_costs_one_pool_listing_and_one_node_listing(emulator: SpcEmulator) -> None:
    gid = first_group(emulator)
    with serving(build_provider("spc", spc_ctx(emulator))) as (_, s):
        (worker,) = [n for n in group_nodes(emulator, gid)]
        emulator.clear_log()
        assert refresh(s)
        assert [(e.method, e.path.rsplit("/", 1)[-1]) for e in emulator.request_log()] == [
            ("GET", "nodepools"),
            ("GET", "nodes"),
        ]
        emulator.clear_log()
        groups = s.NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups
        for g in groups:
            target(s, g.id)
            instances(s, g.id)
            s.NodeGroupTemplateNodeInfo(pb.NodeGroupTemplateNodeInfoRequest(id=g.id), timeout=5)
        for _ in range(3):
            s.NodeGroupForNode(pb.NodeGroupForNodeRequest(node=grpc_node(worker)), timeout=5)
        s.GPULabel(pb.GPULabelRequest(), timeout=5)
        s.GetAvailableGPUTypes(pb.GetAvailableGPUTypesRequest(), timeout=5)
        with pytest.raises(grpc.RpcError) as err:
            s.PricingNodePrice(
                pb.PricingNodePriceRequest(
                    node=grpc_node(worker), startTimestamp={"seconds": 0}, endTimestamp={"seconds": 3600}
                ),
                timeout=5,
            )
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED  # SPC documented no prices
        assert emulator.request_log() == []


def test_a_pool_out_of_capacity_shows_out_of_resources(emulator: SpcEmulator) -> None:
    """An add the provider refuses for capacity is class 1 (OUT_OF_RESOURCES): CA tries another group."""
    emulator.add_pool(CLUSTER, name="scarce", size="m4.xlarge", min_count=0, max_count=3, capacity=0)
    with serving(build_provider("spc", spc_ctx(emulator))) as (handle, s):
        gid = next(g for g in pools(emulator) if g.endswith("-pool-3"))
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=gid, delta=2), timeout=5)
        assert handle.provider.wait_idle(10)
        got = instances(s, gid)
        assert len(got) == 2 and all(i.status.instanceState == CREATING for i in got)
        assert {i.status.errorInfo.instanceErrorClass for i in got} == {1}
        assert all("InsufficientInstanceCapacity" in i.status.errorInfo.errorMessage for i in got)
        assert group_nodes(emulator, gid) == []
        nodes = [pb.ExternalGrpcNode(providerID=i.id, name=i.id) for i in got]
        s.NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(id=gid, nodes=nodes), timeout=5)
        assert target(s, gid) == 0


def test_the_cross_backend_entry_names_real_groups() -> None:
    """tests/support/backends.py: the real-CA run's groups exist, and the stockout group never builds."""
    import yaml

    from cloudprovider_grpc.providers.registry import ProviderContext
    from tests.support.backends import backend

    be = backend("spc")
    ctx = ProviderContext(options=yaml.safe_load(be.e2e_config)["spc"], emulate=True)
    with serving(build_provider("spc", ctx)) as (handle, s):
        groups = {g.id: g for g in s.NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups}
        assert set(groups) == {be.e2e_group, be.stockout_group}
        assert target(s, be.e2e_group) == 0 and groups[be.e2e_group].maxSize >= 2
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=be.stockout_group, delta=1), timeout=5)
        assert handle.provider.wait_idle(10)
        (failed,) = instances(s, be.stockout_group)
        assert failed.status.errorInfo.instanceErrorClass == 1
    conformance = yaml.safe_load(be.conformance_config)
    assert conformance["provider"] == "spc" and conformance["emulate"] is True
