"""`serve --kube-status` on the suite's real kube-apiserver: a failing scale-up (the Cherry emulator
out of stock) records MachineCreateFailed and StockOut Events on the status ConfigMap, the
ConfigMap names the group's back-off, and a ten-minute failure loop (on an injected clock) leaves
the Events bounded as client-go's correlator bounds cluster-autoscaler's."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest

from cloudprovider_grpc.config import Settings
from cloudprovider_grpc.events import SPAM_BURST
from cloudprovider_grpc.kubereport import CONFIGMAP, KubeReporter
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.providers.cherry import CherryEmulator
from cloudprovider_grpc.providers.contract import NodeRef
from cloudprovider_grpc.providers.registry import build_provider
from cloudprovider_grpc.server import start_server
from cloudprovider_grpc.status import snapshot
from tests.cherry.conftest import PROJECT, TOKEN, example_ctx
from tests.support.controlplane import ControlPlane
from tests.support.servers import ManualClock, channel, stub
from tests.support.waits import poll

pytestmark = pytest.mark.integration


@pytest.fixture
def sold_out() -> Iterator[CherryEmulator]:
    """A Cherry API with no server left in stock anywhere: every create is refused with 400."""
    emu = CherryEmulator(tokens={TOKEN: 100}, projects={PROJECT: 100}, stock={"*": {"*": 0}})
    with emu:
        yield emu


def _core(plane: ControlPlane) -> Any:
    return kubernetes.client.CoreV1Api(
        kubernetes.config.new_client_from_config(config_file=str(plane.kubeconfig))
    )


def _events(core: Any, namespace: str) -> list[Any]:
    return list(core.list_namespaced_event(namespace).items)


def test_a_failing_scale_up_records_events_and_names_the_backoff_in_the_status_configmap(
    control_plane: ControlPlane, sold_out: CherryEmulator
) -> None:
    ns = control_plane.namespace("status")
    core = _core(control_plane)
    provider = build_provider("cherry", example_ctx(sold_out, inline_workers=True))
    settings = Settings(
        address="127.0.0.1:0",
        metrics_address="127.0.0.1:0",
        front="off",
        kube_status=True,
        kube_status_namespace=ns,
        leader_elect={"kubeconfig": control_plane.kubeconfig},
    )
    handle = start_server(settings, provider=provider)
    try:
        s = stub(channel(handle))
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="pool1", delta=1))
        s.Refresh(pb.RefreshRequest())  # inline workers: the create is sent (and refused) here

        def both() -> dict[str, Any] | None:
            found = {e.reason: e for e in _events(core, ns)}
            return found if {"MachineCreateFailed", "StockOut"} <= set(found) else None

        events = poll(both, 30, "MachineCreateFailed and StockOut Events")
        for reason in ("MachineCreateFailed", "StockOut"):
            e = events[reason]
            assert e.type == "Warning" and e.count == 1
            assert (e.involved_object.kind, e.involved_object.name) == ("ConfigMap", CONFIGMAP)
            assert e.involved_object.uid  # kubectl describe selects Events by the object's uid
            assert e.source.component == "cloudprovider-grpc"
            assert "out of stock" in e.message and "pool1" in e.message

        def backoff() -> dict[str, Any] | None:
            cm = core.read_namespaced_config_map(CONFIGMAP, ns)
            groups = {g["id"]: g for g in json.loads(cm.data["status"])["groups"]}
            return groups["pool1"] if "backoff" in groups["pool1"] else None

        pool1 = poll(backoff, 30, "the back-off of pool1 in the status ConfigMap")
        assert pool1["backoff"]["reason"] == "StockOut"
        assert pool1["last_error"]["code"] == "OUT_OF_STOCK"
        assert pool1["instances"]["failed"] == 1
        everything = json.dumps(core.read_namespaced_config_map(CONFIGMAP, ns).data) + "".join(
            e.message for e in _events(core, ns)
        )
        assert TOKEN not in everything
    finally:
        handle.stop(grace=1)


@pytest.mark.slow
def test_events_stay_bounded_under_a_ten_minute_failure_loop(
    control_plane: ControlPlane, sold_out: CherryEmulator
) -> None:
    """CA's loop every 10 s for 10 minutes against a cloud that refuses every create: scale up by
    one, see the failure, delete the failed placeholder, again. 60 failures x 2 Events; client-go's
    bucket lets 25 through at once and then one per 5 minutes per object."""
    ns = control_plane.namespace("flood")
    core = _core(control_plane)
    clock = ManualClock(start=time.time())
    provider = build_provider("cherry", example_ctx(sold_out, inline_workers=True, clock=clock))
    reporter = KubeReporter(core, ns, lambda: snapshot(provider), identity="flood-test", clock=clock)
    provider.activity.listen(reporter.occurred, reporter.refreshed)  # type: ignore[attr-defined]
    provider.start()
    try:
        rounds = 61  # t = 0, 10, ..., 600 s
        for _ in range(rounds):
            provider.increase_size("pool1", 1)
            provider.refresh()
            failed = [i for i in provider.nodes("pool1") if i.error is not None]
            assert len(failed) == 1, "the cloud refused the create"
            provider.delete_nodes("pool1", [NodeRef(provider_id=failed[0].id, name=failed[0].id)])
            reporter.flush()
            clock.advance(10)
    finally:
        provider.stop(timeout=1)
    events = _events(core, ns)
    by_reason = {e.reason: e for e in events}
    assert set(by_reason) == {"MachineCreateFailed", "StockOut"}
    assert len(events) == 2  # one Event per reason: identical failures bump a count
    event_writes = reporter.event_writes
    assert reporter.configmap_writes >= 1
    allowed = SPAM_BURST + 2  # 600 s refill two tokens at 1/300 s
    assert event_writes <= allowed, f"{event_writes} Event writes"
    assert reporter.correlator.skipped == 2 * rounds - event_writes
    for e in events:
        # the last write that got through carries the count reached by then
        assert SPAM_BURST // 2 <= e.count <= rounds
        assert e.count > 1
