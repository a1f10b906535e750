"""The Vultr client against the real emulator: precise errors from `{"error", "status"}` bodies,
govultr-like retries of safe calls, cursor pagination, and no blind re-send of a PATCH."""

from __future__ import annotations

import pytest

from cloudprovider_grpc.core.clouderrors import CloudError, ErrorClass, MachineGone
from cloudprovider_grpc.emulators import FaultPlan
from cloudprovider_grpc.emulators.vultr import VultrEmulator
from cloudprovider_grpc.providers.vultr import VultrClient
from tests.providers.vultr.conftest import CLUSTER, TOKEN, new_emulator
from tests.support.servers import ManualClock

pytestmark = pytest.mark.integration


def client(emu: VultrEmulator, token: str = TOKEN, **kw) -> VultrClient:
    kw.setdefault("rate_limit_per_s", None)
    kw.setdefault("max_elapsed", 20.0)
    return VultrClient(f"http://{emu.address}/", token, **kw)


def calls(emu: VultrEmulator, method: str) -> list[int | None]:
    return [e.status for e in emu.request_log() if e.method == method]


def test_listing_follows_every_cursor(emulator: VultrEmulator) -> None:
    c = client(emulator, page_size=1)
    assert [p["label"] for p in c.list_node_pools(CLUSTER)] == ["general", "gpu", "system"]
    gets = [e for e in emulator.request_log() if e.method == "GET"]
    assert len(gets) == 3 and [e.query.get("per_page") for e in gets] == [["1"]] * 3
    assert "cursor" not in gets[0].query and all("cursor" in e.query for e in gets[1:])
    emulator.clear_log()
    assert len(client(emulator).list_node_pools(CLUSTER)) == 3  # page size 100: one call
    assert len(emulator.request_log()) == 1


def test_wrong_key_is_a_precise_permanent_error_without_the_key(emulator: VultrEmulator) -> None:
    secret = "WRONGKEY0123456789"
    with pytest.raises(CloudError) as info:
        client(emulator, token=secret).list_node_pools(CLUSTER)
    err = info.value
    assert (err.status, err.transient) == (401, False)
    assert "HTTP 401: Invalid API token." in err.message and secret not in err.message
    assert calls(emulator, "GET") == [401]  # not retried


def test_unknown_cluster_and_node(emulator: VultrEmulator) -> None:
    c = client(emulator)
    with pytest.raises(CloudError) as info:
        c.list_node_pools("00000000-0000-4000-8000-000000000000")
    assert info.value.status == 404 and "Kubernetes cluster not found." in info.value.message
    pid = emulator.pool_id("general")
    with pytest.raises(MachineGone):
        c.delete_node(CLUSTER, pid, "00000000-0000-4000-8000-000000000001")


def test_gets_and_deletes_are_retried_on_5xx_and_429(emu_clock: ManualClock) -> None:
    plan = FaultPlan(rate=0.5, kinds=("error", "throttle"), seed=3, retry_after="0")
    with new_emulator(emu_clock, faults=plan, rate_limit_per_s=None) as emu:
        c = client(emu, retries=8)
        for _ in range(5):
            assert len(c.list_node_pools(CLUSTER)) == 3
        assert {500, 502, 503, 429} & set(calls(emu, "GET"))
        pid = emu.pool_id("general")
        node = emu.node_ids(pid)[0]
        c.delete_node(CLUSTER, pid, node)
        assert node not in emu.node_ids(pid)


def test_a_patch_is_never_resent_after_it_may_have_been_applied(emu_clock: ManualClock) -> None:
    plan = FaultPlan(rate=1.0, kinds=("error_after",), methods=frozenset({"PATCH"}))
    with new_emulator(emu_clock, faults=plan, rate_limit_per_s=None) as emu:
        pid = emu.pool_id("general")
        with pytest.raises(CloudError) as info:
            client(emu).set_node_quantity(CLUSTER, pid, 3)
        assert info.value.transient
        assert len(calls(emu, "PATCH")) == 1  # applied once, answered 5xx, left to the machinery
        assert emu.pool_record(pid)["node_quantity"] == 3


def test_a_throttled_patch_is_retried(emu_clock: ManualClock) -> None:
    """429 means the API refused before doing anything, so even a PATCH is sent again."""
    plan = FaultPlan(rate=0.5, kinds=("throttle",), methods=frozenset({"PATCH"}), seed=1, retry_after="0")
    with new_emulator(emu_clock, faults=plan, rate_limit_per_s=None) as emu:
        pid = emu.pool_id("general")
        c = client(emu, retries=10)
        for size in (3, 4, 5):
            assert c.set_node_quantity(CLUSTER, pid, size)["node_quantity"] == size
        assert 429 in calls(emu, "PATCH")


def test_quota_refusal_is_out_of_resources(emu_clock: ManualClock) -> None:
    with new_emulator(emu_clock, node_limit=6, rate_limit_per_s=None) as emu:
        pid = emu.pool_id("general")
        with pytest.raises(CloudError) as info:
            client(emu).set_node_quantity(CLUSTER, pid, 10)
        err = info.value
        assert (err.error_class, err.transient, err.status) == (ErrorClass.OUT_OF_RESOURCES, False, 400)
        assert "quota" in err.message
        with pytest.raises(CloudError) as bad:
            client(emu).set_node_quantity(CLUSTER, pid, 0)
        assert bad.value.error_class == ErrorClass.OTHER and "at least 1" in bad.value.message


def test_a_sold_out_plan_is_out_of_resources(emu_clock: ManualClock) -> None:
    with new_emulator(emu_clock, stock={"vc2-4c-8gb": 0}, rate_limit_per_s=None) as emu:
        with pytest.raises(CloudError) as info:
            client(emu).set_node_quantity(CLUSTER, emu.pool_id("general"), 3)
        err = info.value
        assert (err.error_class, err.transient, err.status) == (ErrorClass.OUT_OF_RESOURCES, False, 400)
        assert "sold out" in err.message


def test_the_api_rate_limit_is_survived(emu_clock: ManualClock) -> None:
    """The emulator's bucket (scaled down from Vultr's 30/s so the test stays short) answers 429;
    the client retries through it, and a client limit under the API's never meets it."""
    with new_emulator(emu_clock, rate_limit_per_s=10.0) as emu:
        greedy = client(emu, rate_limit_per_s=None, retries=6)
        for _ in range(30):
            greedy.list_plans()
        assert calls(emu, "GET").count(200) == 30 and 429 in calls(emu, "GET")
        emu.clear_log()
        emu.reset_rate_limits()
        polite = client(emu, rate_limit_per_s=8.0)
        for _ in range(12):
            polite.list_plans()
        assert set(calls(emu, "GET")) == {200}
