"""The Vultr API emulator over real HTTP, driven with plain `requests` (no code of ours in between).

The official Python SDK (vultr-python-client 1.0.2 on PyPI) cannot be the oracle here: it hard-pins
`typing_extensions~=4.3.0` and `urllib3~=1.26.7`, and pip finds no resolution with pydantic 2
(`typing-extensions>=4.16`); its node-pool model also lacks `labels`, `taints` and node `status`.
The shapes below follow govultr's decoding structs and the API v2 documentation instead.
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import pytest
import requests

from cloudprovider_grpc.emulators.vultr import VultrEmulator
from cloudprovider_grpc.providers.vultr import build_emulator
from cloudprovider_grpc.providers.vultr.config import EMULATOR_DEMO_CLUSTER
from tests.providers.vultr.conftest import (
    CLUSTER,
    PROVISION_SECONDS,
    TOKEN,
    H,
    new_emulator,
    patch,
    pools_url,
    vultr_ctx,
)
from tests.support.servers import BackendClock, ManualClock

pytestmark = pytest.mark.integration


def all_pools(emu: VultrEmulator, per_page: int | None = None) -> tuple[list[dict], int]:
    """Every pool by following cursors; also how many pages it took."""
    pools: list[dict] = []
    cursor, pages = "", 0
    while True:
        params: dict = {"per_page": per_page} if per_page else {}
        if cursor:
            params["cursor"] = cursor
        body = requests.get(pools_url(emu), headers=H, params=params, timeout=5).json()
        pages += 1
        pools.extend(body["node_pools"])
        assert body["meta"]["total"] == 3
        cursor = body["meta"]["links"]["next"]
        if not cursor:
            return pools, pages


def test_auth_and_error_shape(emulator: VultrEmulator) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Token {TOKEN}"}):
        r = requests.get(pools_url(emulator), headers=headers, timeout=5)
        assert r.status_code == 401
        assert r.json() == {"error": "Invalid API token.", "status": 401}
    r = requests.get(pools_url(emulator, str(uuid.uuid4())), headers=H, timeout=5)
    assert r.status_code == 404 and r.json()["status"] == 404 and "not found" in r.json()["error"]
    r = patch(emulator, str(uuid.uuid4()), {"node_quantity": 2})
    assert r.status_code == 404


def test_cursor_pagination_with_a_small_default_page(emulator: VultrEmulator) -> None:
    pools, pages = all_pools(emulator)  # default page size 2: 3 pools on 2 pages
    assert pages == 2 and [p["label"] for p in pools] == ["general", "gpu", "system"]
    assert all_pools(emulator, per_page=1)[1] == 3
    assert all_pools(emulator, per_page=100)[1] == 1
    first = requests.get(pools_url(emulator), headers=H, params={"per_page": 1}, timeout=5).json()
    assert first["meta"]["links"]["prev"] == ""
    r = requests.get(pools_url(emulator), headers=H, params={"cursor": "%%%"}, timeout=5)
    assert r.status_code == 400 and r.json()["status"] == 400


def test_pool_and_node_shapes(emulator: VultrEmulator) -> None:
    pool = emulator.pool_record(emulator.pool_id("gpu"))
    assert {
        "id", "label", "plan", "status", "node_quantity", "min_nodes", "max_nodes", "auto_scaler",
        "tag", "labels", "taints", "nodes", "date_created", "date_updated",
    } <= set(pool)  # fmt: skip
    assert pool["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    node = pool["nodes"][0]
    uuid.UUID(node["id"])
    assert node["label"].startswith("gpu-") and len(node["label"]) == len("gpu-") + 13
    assert node["status"] == "active" and node["date_created"].endswith("+00:00")
    cluster = requests.get(f"{emulator.base_url}kubernetes/clusters/{CLUSTER}", headers=H, timeout=5).json()
    assert cluster["vke_cluster"]["region"] == "ewr" and len(cluster["vke_cluster"]["node_pools"]) == 3


def test_patch_up_adds_pending_nodes_that_turn_active(
    emulator: VultrEmulator, emu_clock: ManualClock
) -> None:
    pid = emulator.pool_id("general")
    r = patch(emulator, pid, {"node_quantity": 5})
    assert r.status_code == 202
    pool = r.json()["node_pool"]
    assert pool["node_quantity"] == 5 and pool["status"] == "pending"
    assert sorted(n["status"] for n in pool["nodes"]) == ["active"] * 2 + ["pending"] * 3
    emu_clock.advance(PROVISION_SECONDS)
    pool = emulator.pool_record(pid)
    assert pool["status"] == "active" and {n["status"] for n in pool["nodes"]} == {"active"}


def test_patch_down_deletes_random_nodes(emulator: VultrEmulator) -> None:
    """What the in-tree README warns about: VKE, not the caller, picks the nodes to delete."""
    pid = emulator.pool_id("general")
    patch(emulator, pid, {"node_quantity": 12})
    before = emulator.node_ids(pid)
    r = patch(emulator, pid, {"node_quantity": 6})
    assert r.json()["node_pool"]["node_quantity"] == 6
    after = emulator.node_ids(pid)
    assert len(after) == 6 and set(after) <= set(before)
    assert after != before[:6] and after != before[6:]  # not the oldest or the newest: random
    [(where, victims)] = emulator.random_deletions
    assert where == pid and sorted(victims) == sorted(set(before) - set(after))


def test_delete_node_lowers_node_quantity_and_last_node_stays(emulator: VultrEmulator) -> None:
    pid = emulator.pool_id("general")
    first, second = emulator.node_ids(pid)
    r = requests.delete(f"{pools_url(emulator)}/{pid}/nodes/{first}", headers=H, timeout=5)
    assert r.status_code == 204 and r.content == b""
    assert emulator.pool_record(pid)["node_quantity"] == 1 and emulator.node_ids(pid) == [second]
    again = requests.delete(f"{pools_url(emulator)}/{pid}/nodes/{first}", headers=H, timeout=5)
    assert again.status_code == 404
    last = requests.delete(f"{pools_url(emulator)}/{pid}/nodes/{second}", headers=H, timeout=5)
    assert last.status_code == 400 and emulator.node_ids(pid) == [second]


def test_recycle_replaces_the_node_and_keeps_the_quantity(emulator: VultrEmulator) -> None:
    pid = emulator.pool_id("general")
    old = emulator.node_ids(pid)[0]
    r = requests.post(f"{pools_url(emulator)}/{pid}/nodes/{old}/recycle", headers=H, timeout=5)
    assert r.status_code == 204
    pool = emulator.pool_record(pid)
    assert old not in emulator.node_ids(pid) and pool["node_quantity"] == 2
    assert sorted(n["status"] for n in pool["nodes"]) == ["active", "pending"]


def test_invalid_quantities_and_the_account_limit(emu_clock: ManualClock) -> None:
    with new_emulator(emu_clock, node_limit=8) as emu:  # 5 nodes seeded
        pid = emu.pool_id("general")
        for bad in (0, -1, "3", 2.5, True):
            r = patch(emu, pid, {"node_quantity": bad})
            assert r.status_code == 400 and r.json()["status"] == 400, bad
        assert patch(emu, pid, {"node_quantity": 5}).status_code == 202  # 8 nodes: at the limit
        r = patch(emu, pid, {"node_quantity": 6})
        assert r.status_code == 400 and "quota" in r.json()["error"]
        assert emu.pool_record(pid)["node_quantity"] == 5


def test_a_sold_out_plan_refuses_growth_until_capacity_comes_back(emu_clock: ManualClock) -> None:
    """`stock`: new nodes of a plan the location can still provide. Growth beyond it answers 400 and
    leaves the pool as it was; other plans scale on; a deleted node gives its capacity back."""
    with new_emulator(emu_clock, stock={"vc2-4c-8gb": 1}) as emu:  # general: vc2-4c-8gb, 2 nodes
        general, gpu = emu.pool_id("general"), emu.pool_id("gpu")
        r = patch(emu, general, {"node_quantity": 4})
        assert r.status_code == 400 and r.json()["status"] == 400
        assert "sold out" in r.json()["error"] and "vc2-4c-8gb" in r.json()["error"]
        assert emu.pool_record(general)["node_quantity"] == 2 and len(emu.node_ids(general)) == 2
        assert patch(emu, gpu, {"node_quantity": 3}).status_code == 202  # another plan: no limit
        assert patch(emu, general, {"node_quantity": 3}).status_code == 202  # the last one in stock
        assert patch(emu, general, {"node_quantity": 4}).status_code == 400
        victim = emu.node_ids(general)[0]
        gone = requests.delete(f"{pools_url(emu)}/{general}/nodes/{victim}", headers=H, timeout=5)
        assert gone.status_code == 204
        assert patch(emu, general, {"node_quantity": 3}).status_code == 202  # its capacity came back
        assert emu.stock == {"vc2-4c-8gb": 0}


def test_stale_echo_is_applied_but_echoes_the_old_quantity(emulator: VultrEmulator) -> None:
    pid = emulator.pool_id("general")
    emulator.stale_echoes = 1
    assert patch(emulator, pid, {"node_quantity": 4}).json()["node_pool"]["node_quantity"] == 2
    assert emulator.pool_record(pid)["node_quantity"] == 4
    assert patch(emulator, pid, {"node_quantity": 4}).json()["node_pool"]["node_quantity"] == 4


def test_rate_limit_answers_429_with_the_error_shape(emu_clock: ManualClock) -> None:
    # the limit on the hand-driven clock (a BackendClock), which stands still: 60 requests in one
    # instant exceed 30/s however slowly this machine sends them
    with new_emulator(BackendClock(emu_clock), rate_limit_per_s=30.0) as emu:
        codes = [requests.get(pools_url(emu), headers=H, timeout=5) for _ in range(60)]
        limited = [r for r in codes if r.status_code == 429]
        assert limited, "60 back-to-back requests must exceed 30/s"
        assert limited[0].json() == {"error": "Too Many Requests", "status": 429}


def test_plans_with_type_filter_and_gpu_fields(emulator: VultrEmulator) -> None:
    body = requests.get(f"{emulator.base_url}plans", headers=H, params={"per_page": 500}, timeout=5).json()
    by_id = {p["id"]: p for p in body["plans"]}
    assert by_id["vc2-1c-2gb"]["ram"] == 2048 and by_id["vc2-1c-2gb"]["vcpu_count"] == 1
    assert by_id["vcg-a16-6c-64g-16vram"]["gpu_type"] == "NVIDIA_A16"
    gpu = requests.get(f"{emulator.base_url}plans", headers=H, params={"type": "vcg"}, timeout=5).json()
    assert {p["type"] for p in gpu["plans"]} == {"vcg"}


def test_plans_need_no_api_key(emulator: VultrEmulator) -> None:
    r = requests.get(f"{emulator.base_url}plans", timeout=5)
    assert r.status_code == 200 and r.json()["plans"], r.text
    # the rest of the API still wants one
    assert requests.get(pools_url(emulator), timeout=5).status_code == 401


def test_state_file_survives_restart(tmp_path: Path, emu_clock: ManualClock) -> None:
    state = tmp_path / "vultr.json"
    with new_emulator(emu_clock, state_file=state) as emu:
        pid = emu.pool_id("general")
        patch(emu, pid, {"node_quantity": 4})
        nodes = emu.node_ids(pid)
    emu2 = VultrEmulator(tokens=[], clock=emu_clock, state_file=state)
    with emu2:
        assert emu2.node_ids(pid) == nodes
        assert requests.get(pools_url(emu2), headers=H, timeout=5).status_code == 200  # token restored


def test_build_emulator_is_seeded_from_the_configuration(tmp_path: Path) -> None:
    fixed = "7e2e0000-0000-4000-8000-0000000000f1"
    pools = [
        {"label": "only", "plan": "vc2-1c-2gb", "max_nodes": 4},
        {"id": fixed, "label": "named", "plan": "vc2-2c-4gb"},
    ]
    ctx = vultr_ctx(options={"emulator": {"pools": pools, "stock": {"vc2-2c-4gb": 0}}})
    emu = build_emulator(ctx, "127.0.0.1:0", None)
    try:
        body = requests.get(pools_url(emu), headers=H, timeout=5).json()
        assert [(p["label"], p["max_nodes"]) for p in body["node_pools"]] == [("only", 4), ("named", 10)]
        assert body["node_pools"][1]["id"] == fixed
        refused = patch(emu, fixed, {"node_quantity": 2})
        assert refused.status_code == 400 and "sold out" in refused.json()["error"]
    finally:
        emu.stop()
    # nothing configured: the demo cluster, the default key
    bare = dataclasses.replace(ctx, cloud_config=None, options={}, env={})
    emu = build_emulator(bare, "127.0.0.1:0", None)
    try:
        r = requests.get(
            pools_url(emu, EMULATOR_DEMO_CLUSTER),
            headers={"Authorization": "Bearer vultr-emulator-token"},
            timeout=5,
        )
        assert sorted((p["label"], p["auto_scaler"]) for p in r.json()["node_pools"]) == [
            ("general", True), ("highmem", True), ("system", False),
        ]  # fmt: skip
    finally:
        emu.stop()
