"""End to end over real sockets: gRPC client -> our server -> Cherry client -> Cherry emulator.

The provider runs with real background workers (IncreaseSize returns before anything is created);
the emulator's provisioning runs on a manual clock so "deploying" and "deployed" are steps we take.
Waits poll Refresh + NodeGroupNodes until a condition holds (bounded), never sleep a fixed time.
"""

from __future__ import annotations

import base64
import dataclasses
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from cloudprovider_grpc.config.settings import Settings
from cloudprovider_grpc.emulators import FaultPlan
from cloudprovider_grpc.emulators.cherry import CherryEmulator
from cloudprovider_grpc.k8s.node import decode_node
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.providers.cherry import CherryDriver, make_client
from cloudprovider_grpc.providers.cherry.config import load_config
from cloudprovider_grpc.providers.contract import CloudProvider
from cloudprovider_grpc.providers.machinery.machines.provider import MachineProvider
from cloudprovider_grpc.providers.registry import NodesSpec, ProviderContext, build_provider
from cloudprovider_grpc.server.assembly import ServerHandle, start_server
from tests.providers.cherry.conftest import PROJECT, example_ctx
from tests.support.servers import ManualClock, channel, stub
from tests.support.waits import eventually, instances, refresh, target

pytestmark = pytest.mark.integration

CREATING = pb.InstanceStatus.instanceCreating
RUNNING = pb.InstanceStatus.instanceRunning
DELETING = pb.InstanceStatus.instanceDeleting
REAL_ID = re.compile(r"^cherryservers://\d+$")


@contextmanager
def serving(provider: CloudProvider) -> Iterator[tuple[ServerHandle, object]]:
    handle = start_server(Settings(address="127.0.0.1:0", metrics_address=""), provider=provider)
    ch = channel(handle)
    try:
        yield handle, stub(ch)
    finally:
        ch.close()
        handle.stop(grace=2)


def managed(ctx: ProviderContext, **kw) -> MachineProvider:
    """What build() makes, with a short create backoff so fault tests finish quickly."""
    config = load_config(ctx)
    return MachineProvider(
        CherryDriver(config, make_client(config)), catalog_ttl=config.tuning.catalog_ttl, **kw
    )


def pool_servers(emu: CherryEmulator, pool: str) -> list[dict]:
    return [r for r in emu.server_records(PROJECT) if r["tags"].get("k8s-nodepool") == pool]


def test_scale_up_by_three_then_delete_two(emulator: CherryEmulator, emu_clock: ManualClock) -> None:
    # each create is answered after 1 s, so we can see IncreaseSize return before any server exists
    emulator.set_faults(FaultPlan(rate=1.0, kinds=("slow",), slow_seconds=1.0, methods=frozenset({"POST"})))
    provider = build_provider("cherry", example_ctx(emulator, options={"read-timeout": 5.0}))
    with serving(provider) as (_, s):
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="pool1", delta=3), timeout=5)
        assert pool_servers(emulator, "pool1") == []  # returned at once: nothing created yet
        now = instances(s, "pool1")
        assert len(now) == 3 and {i.status.instanceState for i in now} == {CREATING}
        assert target(s, "pool1") == 3

        eventually(s, lambda: all(REAL_ID.match(i.id) for i in instances(s, "pool1")))
        assert {i.status.instanceState for i in instances(s, "pool1")} == {CREATING}  # deploying
        emulator.set_faults(None)
        emu_clock.advance(61)
        refresh(s)
        running = instances(s, "pool1")
        assert len(running) == 3 and {i.status.instanceState for i in running} == {RUNNING}

        servers = pool_servers(emulator, "pool1")
        assert sorted(f"cherryservers://{r['id']}" for r in servers) == sorted(i.id for i in running)
        for r in servers:
            assert r["tags"]["k8s-cluster"] == "cluster1" and r["tags"]["k8s-nodepool"] == "pool1"
            assert (r["plan"], r["region"], r["image"]) == ("e5_1620v4", "eu_nord_1", "ubuntu_18_04")
            assert re.fullmatch(r"k8s-cluster1-pool1-[ac-z]{8}", r["hostname"])
            script = base64.b64decode(r["user_data"]).decode()
            assert "--token abcdef.0123456789abcdef 10.1.2.3:6443" in script and "{{" not in script
        assert len({r["hostname"] for r in servers}) == 3

        # one registered node (name = hostname) by providerID, one unregistered (name == providerID)
        registered, unregistered, keep = servers
        nodes = [
            pb.ExternalGrpcNode(
                providerID=f"cherryservers://{registered['id']}", name=registered["hostname"]
            ),
            pb.ExternalGrpcNode(
                providerID=f"cherryservers://{unregistered['id']}",
                name=f"cherryservers://{unregistered['id']}",
            ),
        ]
        s.NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(id="pool1", nodes=nodes), timeout=5)
        assert target(s, "pool1") == 1
        eventually(s, lambda: len(pool_servers(emulator, "pool1")) == 1)
        assert [r["id"] for r in pool_servers(emulator, "pool1")] == [keep["id"]]
        eventually(s, lambda: [i.id for i in instances(s, "pool1")] == [f"cherryservers://{keep['id']}"])
        assert target(s, "pool1") == 1

        # the template node for pool2 comes from plan 113's catalogue entry
        raw = s.NodeGroupTemplateNodeInfo(
            pb.NodeGroupTemplateNodeInfoRequest(id="pool2"), timeout=5
        ).nodeBytes
        node = decode_node(raw)
        assert node.status.capacity["cpu"].string == "8" and node.status.capacity["memory"].string == "64Gi"
        assert node.metadata.labels["node.kubernetes.io/instance-type"] == "e5_1620v4"
        assert node.metadata.labels["pool"] == "pool2"
        price = s.PricingNodePrice(
            pb.PricingNodePriceRequest(
                node=pb.ExternalGrpcNode(providerID=f"cherryservers://{keep['id']}", name=keep["hostname"]),
                startTimestamp={"seconds": 0},
                endTimestamp={"seconds": 7200},
            ),
            timeout=5,
        ).price
        assert price == pytest.approx(2 * 0.2466)
        gpu = s.GPULabel(pb.GPULabelRequest(), timeout=5).label
        assert gpu == "cherryservers.com/gpu"


def test_controller_nodes_are_not_in_any_group(emulator: CherryEmulator) -> None:
    sid = emulator.next_id
    with serving(build_provider("cherry", example_ctx(emulator))) as (_, s):
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="pool1", delta=1), timeout=5)
        eventually(s, lambda: all(REAL_ID.match(i.id) for i in instances(s, "pool1")))
        labels = {"node-role.kubernetes.io/control-plane": ""}
        node = pb.ExternalGrpcNode(providerID=f"cherryservers://{sid}", name="x", labels=labels)
        got = s.NodeGroupForNode(pb.NodeGroupForNodeRequest(node=node), timeout=5).nodeGroup
        assert got.id == ""
        node = pb.ExternalGrpcNode(providerID=f"cherryservers://{sid}", name="x")
        assert s.NodeGroupForNode(pb.NodeGroupForNodeRequest(node=node), timeout=5).nodeGroup.id == "pool1"


def test_scale_up_of_ten_under_thirty_percent_faults_ends_with_exactly_ten(emulator: CherryEmulator) -> None:
    # seed 6: the first ten POSTs meet a 429, a 5xx before and one after processing, and a timeout
    emulator.set_faults(FaultPlan(rate=0.3, seed=6, slow_seconds=0.6))
    ctx = example_ctx(emulator, options={"read-timeout": 0.3, "retries": 3})
    with serving(managed(ctx, max_backoff=0.5)) as (handle, s):
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="pool1", delta=10), timeout=5)
        eventually(
            s,
            lambda: (
                len(pool_servers(emulator, "pool1")) >= 10
                and all(REAL_ID.match(i.id) for i in instances(s, "pool1"))
            ),
            timeout=120,
        )
        emulator.set_faults(None)
        # let requests the client gave up on finish in the cloud, then reconcile once more
        eventually(s, lambda: emulator.in_flight() == 0 and handle.provider.wait_idle(5))
        refresh(s)  # a late-executed create shows up as a second server with the same token...
        assert handle.provider.wait_idle(10)  # ...and the managed layer deletes it in the background
        refresh(s)
        post_faults = {e.fault for e in emulator.request_log() if e.fault and e.method == "POST"}
        assert {"throttle", "error", "error_after", "slow"} <= post_faults
        assert any(e.fault for e in emulator.request_log() if e.method == "GET")
        servers = pool_servers(emulator, "pool1")
        assert len(servers) == 10
        assert len({r["tags"]["k8s-create-token"] for r in servers}) == 10
        assert sorted(i.id for i in instances(s, "pool1")) == sorted(
            f"cherryservers://{r['id']}" for r in servers
        )
        assert target(s, "pool1") == 10


def test_stockout_shows_error_class_1(emulator: CherryEmulator) -> None:
    emulator.set_stock({"e5_1620v4": {"*": 1}})
    with serving(build_provider("cherry", example_ctx(emulator))) as (_, s):
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="pool1", delta=3), timeout=5)

        def settled() -> bool:
            got = instances(s, "pool1")
            return (
                sum(1 for i in got if REAL_ID.match(i.id)) == 1
                and sum(1 for i in got if i.status.HasField("errorInfo")) == 2
            )

        eventually(s, settled)
        failed = [i for i in instances(s, "pool1") if i.status.HasField("errorInfo")]
        for inst in failed:
            assert inst.status.instanceState == CREATING
            assert inst.status.errorInfo.instanceErrorClass == 1
            assert inst.status.errorInfo.errorCode == "OUT_OF_STOCK"
            assert "out of stock" in inst.status.errorInfo.errorMessage
        assert len(pool_servers(emulator, "pool1")) == 1
        # CA deletes the failed placeholders; the target comes back down
        nodes = [pb.ExternalGrpcNode(providerID=i.id, name=i.id) for i in failed]
        s.NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(id="pool1", nodes=nodes), timeout=5)
        assert target(s, "pool1") == 1


@pytest.mark.parametrize("journal", [True, False], ids=["with-state-file", "cloud-only"])
def test_restart_mid_scale_up_recovers_from_the_cloud(
    emulator: CherryEmulator, tmp_path: Path, journal: bool
) -> None:
    state = tmp_path / "cherry-state.json" if journal else None
    # 2 requests/s: the scale-up is still running when we stop the server
    ctx = dataclasses.replace(
        example_ctx(emulator, options={"rate-limit": 2}), state_file=state, concurrency=1
    )
    with serving(build_provider("cherry", ctx)) as (_, s):
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="pool1", delta=5), timeout=5)
        deadline = time.monotonic() + 30
        while len(pool_servers(emulator, "pool1")) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    made = len(pool_servers(emulator, "pool1"))
    assert 2 <= made < 5  # stopped mid-way

    faster = dataclasses.replace(ctx, options={**ctx.options, "rate-limit": 1000})
    with serving(build_provider("cherry", faster)) as (_, s):
        if journal:  # the accepted creations resume: nothing lost
            eventually(s, lambda: len(pool_servers(emulator, "pool1")) == 5 and target(s, "pool1") == 5)
            eventually(s, lambda: all(REAL_ID.match(i.id) for i in instances(s, "pool1")))
        else:  # the target is what the cloud holds; CA asks again for the rest
            refresh(s)
            assert target(s, "pool1") == len(pool_servers(emulator, "pool1"))
        servers = pool_servers(emulator, "pool1")
        assert len({r["tags"]["k8s-create-token"] for r in servers}) == len(servers)  # nothing doubled
        assert sorted(i.id for i in instances(s, "pool1")) == sorted(
            f"cherryservers://{r['id']}" for r in servers
        )


def test_emulate_mode_runs_server_and_emulator_together() -> None:
    ctx = ProviderContext(
        nodes=(NodesSpec(0, 4, "workers"),),
        cluster_name="ci",
        emulate=True,
        options={
            "global": {"project-id": 42, "plan": "cloud_vps_1", "region": "eu_nord_1", "os": "ubuntu_24_04"},
            "emulator": {"deploy-seconds": 0, "stock": 2},
            "rate-limit": 1000,
        },
    )
    provider = build_provider("cherry", ctx)
    with serving(provider) as (_, s):
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="workers", delta=2), timeout=5)
        eventually(
            s,
            lambda: (
                [i.status.instanceState for i in instances(s, "workers")] == [RUNNING, RUNNING]
                and all(REAL_ID.match(i.id) for i in instances(s, "workers"))
            ),
        )
        base_url = provider.driver.client.http.base_url
    # the emulator stopped with the server
    import requests

    with pytest.raises(requests.ConnectionError):
        requests.get(base_url + "plans", timeout=2)


def test_the_encoded_template_is_reused_until_the_catalogue_reloads(emulator: CherryEmulator) -> None:
    """The Cherry driver builds a new template object per call; the machinery caches it per group,
    so the service's template-bytes cache hits for Cherry too (grpcapi/answers.py template_node)."""
    from cloudprovider_grpc.grpcapi.servicer import CloudProviderServicer

    provider = build_provider("cherry", example_ctx(emulator))
    provider.start()
    try:
        first = provider.template("pool1")
        assert provider.template("pool1") is first
        servicer = CloudProviderServicer(provider)
        raw = servicer._template_bytes("pool1")
        assert servicer._template_bytes("pool1") is raw  # the encoded bytes object itself is reused
    finally:
        provider.stop(0)
