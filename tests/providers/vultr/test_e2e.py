"""End to end over real sockets: gRPC client -> our server (pool machinery) -> Vultr client -> the
Vultr emulator. One test per promise of the Vultr backend.

The provider runs with real background workers (IncreaseSize returns before anything is sent); the
emulator's provisioning runs on a manual clock so `pending` and `active` are steps we take. Waits poll
Refresh + an RPC until a condition holds (bounded), never sleep a fixed time.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
import requests

from cloudprovider_grpc.config.settings import Settings
from cloudprovider_grpc.emulators import FaultPlan
from cloudprovider_grpc.emulators.vultr import VultrEmulator
from cloudprovider_grpc.k8s.node import decode_node
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.providers.contract import CloudProvider
from cloudprovider_grpc.providers.registry import NodesSpec, ProviderContext, build_provider
from cloudprovider_grpc.server.assembly import ServerHandle, start_server
from tests.providers.vultr.conftest import PROVISION_SECONDS, new_emulator, vultr_ctx
from tests.support.servers import ManualClock, channel, stub
from tests.support.waits import eventually, instances, refresh, target

pytestmark = pytest.mark.integration


CREATING = pb.InstanceStatus.instanceCreating
RUNNING = pb.InstanceStatus.instanceRunning
REAL_ID = re.compile(r"^vultr://[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}$")


@contextmanager
def serving(provider: CloudProvider) -> Iterator[tuple[ServerHandle, object]]:
    handle = start_server(Settings(address="127.0.0.1:0", metrics_address=""), provider=provider)
    ch = channel(handle)
    try:
        yield handle, stub(ch)
    finally:
        ch.close()
        handle.stop(grace=2)


def quantity(emu: VultrEmulator, pool: str) -> int:
    return int(emu.pool_record(pool)["node_quantity"])


def pushes(emu: VultrEmulator, pool: str) -> list[int | None]:
    with emu.lock:
        return [q for pid, q in emu.patches if pid == pool]


def test_scale_up_by_three_then_delete_one_named_node(
    emulator: VultrEmulator, emu_clock: ManualClock
) -> None:
    general = emulator.pool_id("general")
    with serving(build_provider("vultr", vultr_ctx(emulator))) as (_, s):
        refresh(s)
        groups = {g.id: g for g in s.NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups}
        assert set(groups) == {general, emulator.pool_id("gpu")}  # "system" is not autoscaled
        assert (groups[general].minSize, groups[general].maxSize) == (1, 20)
        assert target(s, general) == 2

        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=general, delta=3), timeout=5)
        assert target(s, general) == 5
        now = instances(s, general)
        assert len(now) == 5 and sum(i.status.instanceState == CREATING for i in now) == 3
        eventually(
            s,
            lambda: (
                len(emulator.node_ids(general)) == 5
                and all(REAL_ID.match(i.id) for i in instances(s, general))
            ),
        )
        assert pushes(emulator, general) == [5]  # one size push
        assert sorted(i.status.instanceState for i in instances(s, general)) == [RUNNING] * 2 + [CREATING] * 3

        emu_clock.advance(PROVISION_SECONDS)
        refresh(s)
        running = instances(s, general)
        assert {i.status.instanceState for i in running} == {RUNNING}
        assert sorted(i.id for i in running) == sorted(f"vultr://{n}" for n in emulator.node_ids(general))

        # delete one named node (as CA sends it: providerID, name, VKE's labels)
        victim = emulator.pool_record(general)["nodes"][3]
        node = pb.ExternalGrpcNode(
            providerID=f"vultr://{victim['id']}",
            name=victim["label"],
            labels={"vke.vultr.com/node-pool": "general", "vke.vultr.com/node-id": victim["id"]},
        )
        got = s.NodeGroupForNode(pb.NodeGroupForNodeRequest(node=node), timeout=5).nodeGroup
        assert got.id == general
        others = [n for n in emulator.node_ids(general) if n != victim["id"]]
        s.NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(id=general, nodes=[node]), timeout=5)
        assert target(s, general) == 4
        eventually(s, lambda: victim["id"] not in emulator.node_ids(general))
        assert emulator.node_ids(general) == others  # exactly that node went
        assert quantity(emulator, general) == 4  # node_quantity dropped by one
        assert pushes(emulator, general) == [5] and emulator.random_deletions == []  # ... without a PATCH
        eventually(
            s, lambda: sorted(i.id for i in instances(s, general)) == sorted(f"vultr://{n}" for n in others)
        )
        assert target(s, general) == 4

        # template and price from the plan catalogue
        raw = s.NodeGroupTemplateNodeInfo(
            pb.NodeGroupTemplateNodeInfoRequest(id=general), timeout=5
        ).nodeBytes
        tpl = decode_node(raw)
        assert tpl.status.capacity["cpu"].string == "4" and tpl.status.capacity["memory"].string == "8Gi"
        assert tpl.metadata.labels["node.kubernetes.io/instance-type"] == "vc2-4c-8gb"
        assert tpl.metadata.labels["topology.kubernetes.io/region"] == "ewr"
        assert tpl.metadata.labels["vke.vultr.com/node-pool"] == "general"
        price = s.PricingNodePrice(
            pb.PricingNodePriceRequest(
                node=pb.ExternalGrpcNode(providerID=f"vultr://{others[0]}", name="n"),
                startTimestamp={"seconds": 0},
                endTimestamp={"seconds": 7300 * 36},  # 73 hours
            ),
            timeout=5,
        ).price
        assert price == pytest.approx(73 * 40.0 / 730)
        assert s.GPULabel(pb.GPULabelRequest(), timeout=5).label == "nvidia.com/gpu.product"


def test_decrease_below_the_listed_count_is_refused_without_a_patch(emulator: VultrEmulator) -> None:
    general = emulator.pool_id("general")
    with serving(build_provider("vultr", vultr_ctx(emulator))) as (handle, s):
        refresh(s)
        with pytest.raises(grpc.RpcError) as info:
            s.NodeGroupDecreaseTargetSize(
                pb.NodeGroupDecreaseTargetSizeRequest(id=general, delta=-1), timeout=5
            )
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert handle.provider.wait_idle(5)
        refresh(s)
        assert pushes(emulator, general) == [] and target(s, general) == 2
        assert len(emulator.node_ids(general)) == 2 and emulator.random_deletions == []


def test_fifty_concurrent_increases_end_at_max_with_few_pushes(emulator: VultrEmulator) -> None:
    general = emulator.pool_id("general")  # 2 nodes, max 20
    with serving(build_provider("vultr", vultr_ctx(emulator))) as (handle, s):
        refresh(s)
        barrier = threading.Barrier(50)
        codes: list[grpc.StatusCode] = []

        def one() -> None:
            barrier.wait()
            try:
                s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=general, delta=1), timeout=10)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as err:
                codes.append(err.code())

        threads = [threading.Thread(target=one) for _ in range(50)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert codes.count(grpc.StatusCode.OK) == 18
        assert set(codes) == {grpc.StatusCode.OK, grpc.StatusCode.FAILED_PRECONDITION}
        assert target(s, general) == 20
        eventually(s, lambda: quantity(emulator, general) == 20 and handle.provider.wait_idle(1))
        assert target(s, general) == 20
        sent = pushes(emulator, general)
        assert 1 <= len(sent) <= 3 and max(q or 0 for q in sent) == 20, sent  # never above max
        assert len(emulator.node_ids(general)) == 20 and emulator.random_deletions == []


@pytest.mark.slow
def test_scale_up_by_ten_under_thirty_percent_faults_ends_with_exactly_the_asked_size(
    emu_clock: ManualClock,
) -> None:
    # 5xx before and after processing, 429, timeouts (slow beyond the 1 s read timeout), dropped answers
    faults = FaultPlan(rate=0.3, seed=4, slow_seconds=1.3)
    with new_emulator(emu_clock, faults=faults, rate_limit_per_s=None) as emulator:
        general = emulator.pool_id("general")
        ctx = vultr_ctx(emulator, options={"read_timeout": 1.0})
        with serving(build_provider("vultr", ctx)) as (handle, s):
            eventually(s, lambda: refresh(s))
            s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=general, delta=10), timeout=5)
            eventually(
                s, lambda: quantity(emulator, general) == 12 and handle.provider.wait_idle(1), timeout=120
            )
            emulator.set_faults(None)
            eventually(s, lambda: emulator.in_flight() == 0 and handle.provider.wait_idle(5))
            eventually(
                s,
                lambda: (
                    len(instances(s, general)) == 12
                    and all(REAL_ID.match(i.id) for i in instances(s, general))
                ),
            )
            assert target(s, general) == 12
            assert quantity(emulator, general) == 12 and len(emulator.node_ids(general)) == 12
            assert max(q or 0 for q in pushes(emulator, general)) == 12  # never pushed past the ask
            assert emulator.random_deletions == []  # ... nor below the nodes VKE had
            # seed 4: the first PATCH is applied and its answer dropped (the push's outcome is unknown)
            assert next(e.fault for e in emulator.request_log() if e.method == "PATCH") == "drop"
            faults_seen = {e.fault for e in emulator.request_log() if e.fault}
            assert {"error", "throttle"} & faults_seen and {"slow", "drop", "error_after"} & faults_seen


def test_a_capacity_failure_shows_as_error_class_1_on_the_placeholders(emu_clock: ManualClock) -> None:
    with new_emulator(emu_clock, node_limit=6) as emulator:  # 5 nodes seeded: one more fits
        general = emulator.pool_id("general")
        with serving(build_provider("vultr", vultr_ctx(emulator))) as (_, s):
            refresh(s)
            s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=general, delta=3), timeout=5)

            def failed() -> list[pb.Instance]:
                return [i for i in instances(s, general) if i.status.HasField("errorInfo")]

            eventually(s, lambda: len(failed()) == 3)
            for inst in failed():
                assert inst.id.startswith("vultr://pending-") and inst.status.instanceState == CREATING
                assert inst.status.errorInfo.instanceErrorClass == 1
                assert "quota" in inst.status.errorInfo.errorMessage
            assert quantity(emulator, general) == 2  # the cloud refused: nothing was created
            # CA deletes the failed placeholders; the target comes back down without a cloud call
            nodes = [pb.ExternalGrpcNode(providerID=i.id, name=i.id) for i in failed()]
            s.NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(id=general, nodes=nodes), timeout=5)
            assert target(s, general) == 2


@pytest.mark.parametrize(
    "journal",
    [
        pytest.param(True, id="with-state-file"),
        pytest.param(False, id="cloud-only"),
    ],
)
def test_restart_mid_scale_up_recovers_target_and_membership_from_the_cloud(
    emulator: VultrEmulator, tmp_path: Path, journal: bool
) -> None:
    general = emulator.pool_id("general")
    state = tmp_path / "vultr-state.json" if journal else None
    ctx = dataclasses.replace(vultr_ctx(emulator), state_file=state)
    # first server: one scale-up lands (node_quantity 5), a second is accepted but every PATCH is
    # refused while it runs, so it is still pending when the server stops
    with serving(build_provider("vultr", ctx)) as (handle, s):
        refresh(s)
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=general, delta=3), timeout=5)
        eventually(s, lambda: quantity(emulator, general) == 5 and handle.provider.wait_idle(1))
        emulator.set_faults(FaultPlan(rate=1.0, kinds=("error",), methods=frozenset({"PATCH"})))
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=general, delta=2), timeout=5)
        assert target(s, general) == 7
    emulator.set_faults(None)
    assert quantity(emulator, general) == 5
    with serving(build_provider("vultr", ctx)) as (handle, s):
        if journal:  # the accepted push resumes: nothing lost
            eventually(s, lambda: quantity(emulator, general) == 7 and target(s, general) == 7, timeout=20)
        else:  # target and membership from the cloud; CA asks again for the rest
            refresh(s)
            assert target(s, general) == 5
        eventually(
            s,
            lambda: (
                sorted(i.id for i in instances(s, general) if REAL_ID.match(i.id))
                == sorted(f"vultr://{n}" for n in emulator.node_ids(general))
            ),
        )
        assert len(emulator.node_ids(general)) == (7 if journal else 5)


def test_emulate_mode_needs_no_other_configuration() -> None:
    """`serve --provider vultr --emulate` alone: the demo cluster with two autoscaled pools."""
    provider = build_provider(
        "vultr", ProviderContext(emulate=True, options={"emulator": {"provision_seconds": 0}})
    )
    with serving(provider) as (_, s):
        refresh(s)
        groups = s.NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups
        assert sorted(g.debug.split()[2] for g in groups) == ["general", "highmem"]
        gid = next(g.id for g in groups if "general" in g.debug)
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=gid, delta=2), timeout=5)
        eventually(
            s,
            lambda: (
                [i.status.instanceState for i in instances(s, gid)] == [RUNNING] * 3
                and all(REAL_ID.match(i.id) for i in instances(s, gid))
            ),
        )
        base_url = provider.driver.client.http.base_url
    with pytest.raises(requests.ConnectionError):  # the emulator stopped with the server
        requests.get(base_url + "v2/plans", timeout=2)


def test_nodes_flag_narrows_the_discovered_pools(emulator: VultrEmulator) -> None:
    ctx = dataclasses.replace(vultr_ctx(emulator), nodes=(NodesSpec(0, 4, "gpu"),))
    with serving(build_provider("vultr", ctx)) as (_, s):
        refresh(s)
        [group] = s.NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups
        assert (group.id, group.minSize, group.maxSize) == (emulator.pool_id("gpu"), 1, 4)


def test_the_cross_backend_entry_names_real_groups() -> None:
    """tests/support/backends.py: the real-CA run's pools exist under their fixed ids, at their min
    size, and the scarce one's plan is sold out (class 1 on the placeholder, which CA deletes)."""
    import yaml

    from tests.support.backends import backend

    be = backend("vultr")
    ctx = ProviderContext(options=yaml.safe_load(be.e2e_config)["vultr"], emulate=True)
    with serving(build_provider("vultr", ctx)) as (_, s):
        refresh(s)
        groups = {g.id: g for g in s.NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups}
        assert set(groups) == {be.e2e_group, be.stockout_group}
        for gid, g in groups.items():
            assert target(s, gid) == g.minSize == 1 and g.maxSize >= 2
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=be.stockout_group, delta=1), timeout=5)

        def failed() -> list[pb.Instance]:
            return [i for i in instances(s, be.stockout_group) if i.status.HasField("errorInfo")]

        eventually(s, lambda: len(failed()) == 1)
        (placeholder,) = failed()
        assert placeholder.status.errorInfo.instanceErrorClass == 1
        assert "sold out" in placeholder.status.errorInfo.errorMessage
        node = pb.ExternalGrpcNode(providerID=placeholder.id, name=placeholder.id)
        s.NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(id=be.stockout_group, nodes=[node]), timeout=5)
        assert target(s, be.stockout_group) == 1
