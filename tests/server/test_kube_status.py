"""`serve --kube-status` on the suite's real kube-apiserver: a failing scale-up (the Cherry emulator
out of stock) records MachineCreateFailed and StockOut Events on the status ConfigMap, the
ConfigMap names the group's back-off, and a ten-minute failure loop (on an injected clock) leaves
the Events bounded as client-go's correlator bounds cluster-autoscaler's."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from cloudprovider_grpc.config.settings import Settings
from cloudprovider_grpc.emulators.cherry import CherryEmulator
from cloudprovider_grpc.observability.events import SPAM_BURST
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.providers.contract import NodeRef
from cloudprovider_grpc.providers.machinery.activity import Occurrence
from cloudprovider_grpc.providers.registry import build_provider
from cloudprovider_grpc.server.assembly import start_server
from cloudprovider_grpc.server.kubereport import CONFIGMAP, LAST_UPDATED, KubeReporter
from cloudprovider_grpc.server.status import snapshot
from tests.providers.cherry.conftest import PROJECT, TOKEN, example_ctx
from tests.support.controlplane import ControlPlane
from tests.support.rbac import grants, wait_allowed
from tests.support.servers import BackendClock, ManualClock, channel, stub
from tests.support.waits import poll

pytestmark = pytest.mark.integration

STANDALONE_RBAC = Path(__file__).resolve().parents[2] / "manifests" / "standalone" / "kube-status.yaml"


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
            groups = {g["name"]: g for g in yaml.safe_load(cm.data["status"])["nodeGroups"]}
            return groups["pool1"] if groups["pool1"]["scaleUp"]["status"] == "Backoff" else None

        pool1 = poll(backoff, 30, "the back-off of pool1 in the status ConfigMap")
        # CA's names for the same concepts (clusterstate/api/types.go), ours beside them
        assert pool1["scaleUp"]["backoffInfo"]["errorCode"] == "StockOut"
        assert "OUT_OF_STOCK" in pool1["scaleUp"]["backoffInfo"]["errorMessage"]
        assert pool1["health"]["status"] == "Unhealthy"
        assert pool1["lastCloudError"]["code"] == "OUT_OF_STOCK"
        assert pool1["instances"]["failed"] == 1
        everything = json.dumps(core.read_namespaced_config_map(CONFIGMAP, ns).data) + "".join(
            e.message for e in _events(core, ns)
        )
        assert TOKEN not in everything
    finally:
        handle.stop(grace=1)


def test_events_stay_bounded_under_a_ten_minute_failure_loop(
    control_plane: ControlPlane, sold_out: CherryEmulator
) -> None:
    """CA's loop every 10 s for 10 minutes against a cloud that refuses every create: scale up by
    one, see the failure, delete the failed placeholder, again. 60 failures x 2 Events; client-go's
    bucket lets 25 through at once and then one per 5 minutes per object."""
    ns = control_plane.namespace("flood")
    core = _core(control_plane)
    clock = ManualClock(start=time.time())
    provider = build_provider("cherry", example_ctx(sold_out, inline_workers=True, clock=BackendClock(clock)))
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
    counts = {e.reason: e.count for e in events}
    # the bucket is per object, shared by both reasons; each later write carries the count reached
    # by then: MachineCreateFailed took the refills (at 300 s and 600 s, first in their round)
    assert counts == {"MachineCreateFailed": rounds, "StockOut": SPAM_BURST // 2}


def test_the_standalone_rbac_is_enough_for_the_configmap_and_the_events(control_plane: ControlPlane) -> None:
    """manifests/standalone/kube-status.yaml, moved into a fresh namespace, lets the server's own
    ServiceAccount do everything `--kube-status` does, and not more than that on ConfigMaps."""
    ns = control_plane.namespace("rbac")
    suffix = ns.rsplit("-", 1)[1]
    objects = list(yaml.safe_load_all(STANDALONE_RBAC.read_text()))
    for o in objects:
        meta = o["metadata"]
        meta["name"] = f"{meta['name']}-{suffix}"  # Roles in `default` and ClusterRoles are shared
        if meta.get("namespace") == "kube-system":
            meta["namespace"] = ns
        for subject in o.get("subjects", []):
            subject["namespace"] = ns
        if "roleRef" in o:
            o["roleRef"]["name"] = f"{o['roleRef']['name']}-{suffix}"
    kubeconfig = control_plane.token_kubeconfig(ns, "cloudprovider-grpc")
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    wait_allowed(control_plane, kubeconfig, *grants(objects))  # the write counts below allow no refusal
    node = f"worker-{suffix}"
    control_plane.kubectl(
        "apply",
        "-f",
        "-",
        input=yaml.safe_dump({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}),
    )
    core = _core_from(kubeconfig)
    doc = {"groups": [{"id": "pool1", "target": 1}]}
    reporter = KubeReporter(core, ns, lambda: dict(doc), identity="rbac-test")
    reporter.occurred(Occurrence("StockOut", "pool1: out of stock", "pool1", warning=True))
    reporter.occurred(Occurrence("StockOut", "pool1: out of stock", "pool1", warning=True))  # a patch
    reporter.occurred(Occurrence("MachineDeleted", f"deleted {node}", "pool1", node=node))
    reporter.flush()
    doc["groups"][0]["target"] = 2
    reporter.flush()  # an update of the ConfigMap
    assert (reporter.configmap_writes, reporter.event_writes) == (2, 3)
    admin = _core(control_plane)
    # what an operator types for CA's own status ConfigMap works on ours
    text = control_plane.kubectl("get", "cm", CONFIGMAP, "-n", ns, "-o", "jsonpath={.data.status}").stdout
    status = yaml.safe_load(text)
    assert status["nodeGroups"][0]["cloudProviderTarget"] == 2
    assert status["nodeGroups"][0]["health"]["cloudProviderTarget"] == 2
    assert status["autoscalerStatus"] == "Running"
    stamp = admin.read_namespaced_config_map(CONFIGMAP, ns).metadata.annotations[LAST_UPDATED]
    # Go's time.Time layout, as CA's own annotation: 2006-01-02 15:04:05.999999999 -0700 MST
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{1,9})? \+0000 UTC", stamp), stamp
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{1,9})? \+0000 UTC", status["time"])
    (stock_out,) = [e for e in _events(admin, ns) if e.reason == "StockOut"]
    assert stock_out.count == 2
    on_node = [e for e in _events(admin, "default") if e.involved_object.name == node]
    assert [(e.reason, e.involved_object.kind) for e in on_node] == [("MachineDeleted", "Node")]
    assert on_node[0].involved_object.uid == admin.read_node(node).metadata.uid
    # nothing beyond its own ConfigMap
    control_plane.kubectl("create", "configmap", "other", "-n", ns)
    denied = control_plane.kubectl("get", "configmap", "other", "-n", ns, check=False, kubeconfig=kubeconfig)
    assert denied.returncode != 0 and "forbidden" in denied.stderr


def _core_from(kubeconfig: Path) -> Any:
    return kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(config_file=str(kubeconfig)))
