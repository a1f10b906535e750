"""End to end over real sockets: gRPC client -> our server -> signing client -> Exoscale emulator.

One test per promise of the Exoscale backend. The provider runs with real background workers (a push
happens after the RPC returned); the emulator's state machines run on a manual clock so "starting"
and "running" are steps we take. Waits poll Refresh with a deadline, never sleep a fixed time.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import grpc
import pytest

from cloudprovider_grpc.config.settings import Settings
from cloudprovider_grpc.emulators.exoscale import ExoscaleEmulator
from cloudprovider_grpc.k8s.node import decode_node
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.providers.registry import build_provider
from cloudprovider_grpc.server.assembly import start_server
from tests.providers.exoscale.conftest import KEY, SECRET, ctx_for, spec
from tests.support.servers import ManualClock, channel, stub
from tests.support.waits import eventually, instances, refresh, target

pytestmark = pytest.mark.integration

CREATING = pb.InstanceStatus.instanceCreating
RUNNING = pb.InstanceStatus.instanceRunning
DELETING = pb.InstanceStatus.instanceDeleting
REAL_ID = re.compile(r"^exoscale://[0-9a-f-]{36}$")


@contextmanager
def serving(emulator: ExoscaleEmulator, **overrides: Any) -> Iterator[Any]:
    overrides.setdefault("env", {"EXOSCALE_SKS_CLUSTER": "prod"})
    provider = build_provider("exoscale", ctx_for(emulator, **overrides))
    handle = start_server(Settings(address="127.0.0.1:0", metrics_address=""), provider=provider)
    ch = channel(handle)
    try:
        yield stub(ch)
    finally:
        ch.close()
        handle.stop(grace=2)


def groups(s: Any) -> dict[str, pb.NodeGroup]:
    return {g.debug.split()[3]: g for g in s.NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups}


def puts(emulator: ExoscaleEmulator) -> list[str]:
    return [e.path for e in emulator.request_log() if e.method == "PUT"]


def test_nodepool_without_nodes_is_a_group_from_the_first_refresh(emulator: ExoscaleEmulator) -> None:
    with serving(emulator) as s:
        assert refresh(s)
        found = groups(s)
        assert set(found) == {"workers", "gpu"}
        gpu = found["gpu"]
        assert gpu.id == emulator.nodepool_by_name("gpu")["instance-pool"]["id"]
        assert instances(s, gpu.id) == [] and target(s, gpu.id) == 0
        # scale from zero: a template from the instance type and the nodepool's taints
        info = s.NodeGroupTemplateNodeInfo(pb.NodeGroupTemplateNodeInfoRequest(id=gpu.id), timeout=5)
        node = decode_node(info.nodeBytes)
        assert node.status.capacity["nvidia.com/gpu"].string == "1"
        assert node.metadata.labels["node.kubernetes.io/instance-type"] == "gpua5000.small"
        assert [t.key for t in node.spec.taints] == ["nvidia.com/gpu"]


def test_scale_up_by_three_returns_at_once_then_creating_then_running(
    emulator: ExoscaleEmulator, clock: ManualClock
) -> None:
    emulator.hold_operations = 600  # the operation stays pending for ten (virtual) minutes
    with serving(emulator) as s:
        assert refresh(s)
        gid = groups(s)["workers"].id
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=gid, delta=3), timeout=5)
        assert target(s, gid) == 5
        assert [i.status.instanceState for i in instances(s, gid)].count(CREATING) == 3
        eventually(s, lambda: sum(bool(REAL_ID.match(i.id)) for i in instances(s, gid)) == 5)
        states = sorted(i.status.instanceState for i in instances(s, gid))
        assert states == [RUNNING, RUNNING, CREATING, CREATING, CREATING]
        assert emulator.nodepool_by_name("workers")["size"] == 5
        assert any(op["state"] == "pending" for op in emulator.operations.values())
        clock.advance(30)
        eventually(s, lambda: {i.status.instanceState for i in instances(s, gid)} == {RUNNING})
        assert target(s, gid) == 5
        np = emulator.nodepool_by_name("workers")
        # one absolute :scale for the whole request, on the nodepool (not its instance pool)
        assert puts(emulator) == [
            f"/v2/sks-cluster/{emulator.nodepools[np['id']]['cluster']}/nodepool/{np['id']}:scale"
        ]


def test_evicting_one_named_node_removes_exactly_it(emulator: ExoscaleEmulator) -> None:
    with serving(emulator, nodes=(spec("0:5:workers"),)) as s:
        assert refresh(s)
        gid = groups(s)["workers"].id
        victim, survivor = sorted(i.id for i in instances(s, gid))
        node = pb.ExternalGrpcNode(providerID=victim, name="pool-node-1")
        s.NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(id=gid, nodes=[node]), timeout=5)
        assert target(s, gid) == 1
        eventually(s, lambda: emulator.nodepool_by_name("workers")["size"] == 1)
        members = {f"exoscale://{m['id']}": m["state"] for m in emulator.pool_members(gid)}
        assert members == {victim: "destroying", survivor: "running"}
        assert [p.rsplit(":", 1)[1] for p in puts(emulator)] == ["evict"]
        eventually(s, lambda: {i.id: i.status.instanceState for i in instances(s, gid)}[victim] == DELETING)
        assert target(s, gid) == 1


def test_failed_operation_shows_on_placeholders_and_target_recovers(
    emulator: ExoscaleEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    emulator.quota_limit = 5  # 4 instances in use: room for one more
    with serving(emulator) as s:
        assert refresh(s)
        gid = groups(s)["workers"].id
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=gid, delta=3), timeout=5)

        def failed() -> bool:
            return any(i.status.HasField("errorInfo") for i in instances(s, gid))

        eventually(s, failed)
        placeholders = [i for i in instances(s, gid) if i.id.startswith("exoscale://pending-")]
        assert len(placeholders) == 3
        err = placeholders[0].status.errorInfo
        assert err.instanceErrorClass == 1 and "Quota exceeded" in err.errorMessage  # OutOfResources
        assert "Quota exceeded" in caplog.text
        assert emulator.nodepool_by_name("workers")["size"] == 2  # nothing changed in the cloud
        # CA deletes the failed placeholders: the target is the cloud's again
        nodes = [pb.ExternalGrpcNode(providerID=p.id, name=p.id) for p in placeholders]
        s.NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(id=gid, nodes=nodes), timeout=5)
        assert target(s, gid) == 2
        eventually(s, lambda: len(instances(s, gid)) == 2 and not failed())


def test_decrease_target_below_listed_is_refused_without_an_api_call(emulator: ExoscaleEmulator) -> None:
    with serving(emulator) as s:
        assert refresh(s)
        gid = groups(s)["workers"].id
        emulator.clear_log()
        with pytest.raises(grpc.RpcError) as info:
            s.NodeGroupDecreaseTargetSize(pb.NodeGroupDecreaseTargetSizeRequest(id=gid, delta=-1), timeout=5)
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "below the 2 machines" in info.value.details()
        assert emulator.request_log() == [] and target(s, gid) == 2


@pytest.mark.parametrize("case", ["wrong-signature", "missing-operation"])
def test_refused_request_is_unavailable_with_a_clear_message(
    emulator: ExoscaleEmulator, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    env = {"EXOSCALE_SKS_CLUSTER": "prod"}
    if case == "wrong-signature":
        env["EXOSCALE_API_SECRET"] = "wrong-" + SECRET
        expected = "invalid request signature"
    else:
        emulator.add_key(KEY, SECRET, operations={"get-quota", "list-instances"})
        expected = "not allowed to perform operation list-sks-clusters"
    with serving(emulator, env=env) as s, pytest.raises(grpc.RpcError) as info:
        s.Refresh(pb.RefreshRequest(), timeout=30)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    details = info.value.details()
    assert expected in details and "list-sks-clusters" in details and "\n" not in details
    for text in (details, caplog.text):
        assert SECRET not in text and KEY not in text


def test_held_operation_never_holds_an_rpc(emulator: ExoscaleEmulator) -> None:
    """With the emulator holding every operation pending, every RPC still answers from memory
    (no timing is asserted; benchmarks/exoscale_api_calls.py prints the figures)."""
    emulator.hold_operations = 600
    with serving(emulator) as s:
        assert refresh(s)
        gid = groups(s)["workers"].id
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=gid, delta=1), timeout=5)
        eventually(s, lambda: emulator.nodepool_by_name("workers")["size"] == 3)
        victim = next(i.id for i in instances(s, gid) if REAL_ID.match(i.id))
        node = pb.ExternalGrpcNode(providerID=victim, name=victim)
        s.NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(id=gid, nodes=[node]), timeout=5)
        eventually(s, lambda: emulator.nodepool_by_name("workers")["size"] == 2)
        assert {op["state"] for op in emulator.operations.values()} == {"pending"}
        assert target(s, gid) == 2


def test_one_broken_pool_keeps_what_was_known_and_the_others_scale(emulator: ExoscaleEmulator) -> None:
    with serving(emulator) as s:
        assert refresh(s)
        workers, gpu = groups(s)["workers"].id, groups(s)["gpu"].id
        known = sorted(i.id for i in instances(s, workers))
        emulator.broken_pools.add(workers)
        refresh(s)  # Refresh still succeeds
        assert sorted(i.id for i in instances(s, workers)) == known and target(s, workers) == 2
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=gpu, delta=1), timeout=5)
        eventually(s, lambda: emulator.nodepool_by_name("gpu")["size"] == 1)
        emulator.broken_pools.clear()
        eventually(
            s, lambda: len(instances(s, gpu)) == 1 and REAL_ID.match(instances(s, gpu)[0].id) is not None
        )


def test_the_cross_backend_entry_names_real_groups() -> None:
    """tests/support/backends.py: the real-CA run's nodepools exist under their fixed Instance Pool
    ids, empty, and the scarce one's instance type has no capacity: its scale operation fails and the
    failure shows on the placeholder, which CA deletes."""
    import yaml

    from cloudprovider_grpc.providers.registry import NodesSpec, ProviderContext
    from tests.support.backends import backend

    be = backend("exoscale")
    doc = yaml.safe_load(be.e2e_config)
    ctx = ProviderContext(
        options=doc["exoscale"], nodes=tuple(NodesSpec.parse(n) for n in doc["nodes"]), emulate=True
    )
    handle = start_server(
        Settings(address="127.0.0.1:0", metrics_address=""), provider=build_provider("exoscale", ctx)
    )
    ch = channel(handle)
    try:
        s = stub(ch)
        assert refresh(s)
        found = {g.id: g for g in s.NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups}
        assert set(found) == {be.e2e_group, be.stockout_group}
        for gid, g in found.items():
            assert target(s, gid) == g.minSize == 0 and g.maxSize >= 1
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=be.stockout_group, delta=1), timeout=5)

        def failed() -> list[pb.Instance]:
            return [i for i in instances(s, be.stockout_group) if i.status.HasField("errorInfo")]

        # Refresh at about CA's pace: in a tighter loop the listings (urgent) take nearly every token
        # of the client's rate limit (10/s), and the operation poll gets one only every 2 s
        deadline = time.monotonic() + 30
        while not failed():
            assert time.monotonic() < deadline, "the failed operation never reached the placeholder"
            time.sleep(0.5)
            assert refresh(s)
        (placeholder,) = failed()
        assert "unavailable" in placeholder.status.errorInfo.errorMessage
        # a zone out of capacity is out of resources for CA (class 1), like a quota
        assert placeholder.status.errorInfo.instanceErrorClass == 1
        assert placeholder.status.errorInfo.errorCode == "OUT_OF_CAPACITY"
        node = pb.ExternalGrpcNode(providerID=placeholder.id, name=placeholder.id)
        s.NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(id=be.stockout_group, nodes=[node]), timeout=5)
        assert target(s, be.stockout_group) == 0
    finally:
        ch.close()
        handle.stop(grace=2)
