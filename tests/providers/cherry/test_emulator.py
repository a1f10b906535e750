"""The Cherry API emulator over real HTTP, driven with plain `requests` (no code of ours in between)."""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path

import pytest
import requests

from cloudprovider_grpc.emulators.cherry import CherryEmulator
from cloudprovider_grpc.providers.cherry import build_emulator
from tests.providers.cherry.conftest import PROJECT, TOKEN, example_ctx
from tests.support.servers import ManualClock

pytestmark = pytest.mark.integration

H = {"Authorization": f"Bearer {TOKEN}"}


def create(emu: CherryEmulator, project: int = PROJECT, **body) -> requests.Response:
    body = {"plan": "e3_1240v3", "region": "eu_nord_1", "image": "ubuntu_22_04", **body}
    return requests.post(f"{emu.base_url}projects/{project}/servers", json=body, headers=H)


def test_auth_401_403_404(emulator: CherryEmulator) -> None:
    base = emulator.base_url
    r = requests.get(f"{base}projects/{PROJECT}/servers")
    assert (
        r.status_code == 401 and r.json()["code"] == 401 and r.headers["Content-Type"] == "application/json"
    )
    assert requests.get(f"{base}plans", headers={"Authorization": "Bearer nope"}).status_code == 401
    r = requests.get(f"{base}projects/777/servers", headers=H)  # project of team 200
    assert r.status_code == 403 and "another team" in r.json()["message"]
    assert requests.get(f"{base}projects/999/servers", headers=H).status_code == 404
    assert requests.get(f"{base}servers/1", headers=H).status_code == 404


def test_create_returns_full_server_json_and_state_is_inspectable(emulator: CherryEmulator) -> None:
    user_data = base64.b64encode(b"#cloud-config\n").decode()
    r = create(
        emulator, hostname="node-a", tags={"k8s-cluster": "c1"}, user_data=user_data, ssh_keys=["7", 8]
    )
    assert r.status_code == 201
    s = r.json()
    for key in (
        "id",
        "hostname",
        "state",
        "status",
        "plan",
        "region",
        "tags",
        "ip_addresses",
        "created_at",
        "href",
    ):
        assert key in s
    assert (s["hostname"], s["status"], s["tags"]) == ("node-a", "deploying", {"k8s-cluster": "c1"})
    assert s["plan"]["slug"] == "e3_1240v3" and s["region"]["slug"] == "eu_nord_1"
    assert s["ip_addresses"][0]["address_family"] == 4
    (record,) = emulator.server_records(PROJECT)
    assert (
        record["user_data"] == user_data
        and record["ssh_keys"] == [7, 8]
        and record["image"] == "ubuntu_22_04"
    )


def test_create_validation_errors_use_the_api_error_shape(emulator: CherryEmulator) -> None:
    cases = [
        ({"plan": "nope"}, "Given server plan was not found."),
        ({"region": "mars"}, "Given region was not found."),
        ({"image": "windows_95"}, "Given image was not found."),
        ({"user_data": "%%%"}, "user_data must be base64 encoded"),
        ({"ssh_keys": ["abc"]}, "ssh_keys must hold integer ids"),
        ({"project_id": 1}, "does not match"),
    ]
    for body, message in cases:
        r = create(emulator, **body)
        assert r.status_code == 400, body
        assert r.json()["code"] == 400 and message in r.json()["message"]
    assert emulator.server_records() == []


def test_plan_and_region_are_accepted_by_id_and_name_too(emulator: CherryEmulator) -> None:
    r = create(emulator, plan=113, region="EU-Nord-1")
    assert r.status_code == 201 and r.json()["plan"]["slug"] == "e5_1620v4"


def test_pagination_with_total_count(emulator: CherryEmulator) -> None:
    ids = [create(emulator, hostname=f"h{i}").json()["id"] for i in range(5)]
    url = f"{emulator.base_url}projects/{PROJECT}/servers"
    pages = []
    for offset in (0, 2, 4):
        r = requests.get(url, params={"limit": 2, "offset": offset}, headers=H)
        assert r.headers["X-Total-Count"] == "5"
        pages.append([s["id"] for s in r.json()])
    assert pages == [ids[0:2], ids[2:4], ids[4:5]]
    assert [s["id"] for s in requests.get(url, params={"limit": 0}, headers=H).json()] == ids
    assert requests.get(url, params={"limit": "x"}, headers=H).status_code == 400


def test_stock_runs_out_and_deletion_returns_it(emulator: CherryEmulator) -> None:
    emulator.set_stock({"e3_1240v3": {"eu_nord_1": 1}})
    first = create(emulator)
    assert first.status_code == 201
    r = create(emulator)
    assert r.status_code == 400 and "out of stock" in r.json()["message"]
    plans = requests.get(f"{emulator.base_url}plans", headers=H).json()
    plan = next(p for p in plans if p["slug"] == "e3_1240v3")
    assert next(r for r in plan["available_regions"] if r["slug"] == "eu_nord_1")["stock_qty"] == 0
    assert requests.delete(f"{emulator.base_url}servers/{first.json()['id']}", headers=H).status_code == 204
    assert create(emulator).status_code == 201


def test_deploying_becomes_deployed_on_the_emulator_clock(
    emulator: CherryEmulator, emu_clock: ManualClock
) -> None:
    sid = create(emulator).json()["id"]
    url = f"{emulator.base_url}servers/{sid}"
    assert requests.get(url, headers=H).json()["status"] == "deploying"
    emu_clock.advance(61)
    s = requests.get(url, headers=H).json()
    assert (s["state"], s["status"]) == ("active", "deployed")
    emulator.fail_next_deployments = 1
    failed = create(emulator).json()
    assert failed["status"] == "failed deployment"


def test_delete_then_404_and_optional_terminating_linger(
    emulator: CherryEmulator, emu_clock: ManualClock
) -> None:
    sid = create(emulator).json()["id"]
    url = f"{emulator.base_url}servers/{sid}"
    r = requests.delete(url, headers=H)
    assert r.status_code == 204 and r.content == b""
    assert requests.get(url, headers=H).status_code == 404
    assert requests.delete(url, headers=H).status_code == 404
    emulator.terminate_seconds = 30
    sid = create(emulator).json()["id"]
    url = f"{emulator.base_url}servers/{sid}"
    requests.delete(url, headers=H)
    assert requests.get(url, headers=H).json()["state"] == "terminating"
    emu_clock.advance(31)
    assert requests.get(url, headers=H).status_code == 404


def test_tags_can_be_updated_with_put(emulator: CherryEmulator) -> None:
    sid = create(emulator).json()["id"]
    r = requests.put(f"{emulator.base_url}servers/{sid}", json={"tags": {"k8s-nodepool": "p"}}, headers=H)
    assert r.status_code == 201 and r.json()["tags"] == {"k8s-nodepool": "p"}


def test_state_file_survives_restart(tmp_path: Path) -> None:
    state = tmp_path / "cherry.json"
    with CherryEmulator(tokens={TOKEN: 1}, projects={PROJECT: 1}, state_file=state) as emu:
        sid = create(emu, hostname="keep-me").json()["id"]
    with CherryEmulator(state_file=state) as emu:
        r = requests.get(f"{emu.base_url}servers/{sid}", headers=H)
        assert r.status_code == 200 and r.json()["hostname"] == "keep-me"
        assert create(emu).json()["id"] == sid + 1


def test_build_emulator_is_seeded_from_the_configuration(tmp_path: Path) -> None:
    ctx = example_ctx(options={"emulator": {"stock": {"e5_1620v4": {"eu_nord_1": 3}}}})
    emu = build_emulator(ctx, "127.0.0.1:0", tmp_path / "state.json")
    try:
        assert emu.address.startswith("127.0.0.1:") and emu.base_url.endswith("/v1/")
        assert requests.get(f"{emu.base_url}projects/{PROJECT}/servers", headers=H).status_code == 200
        plans = requests.get(f"{emu.base_url}plans", headers=H).json()
        e5 = next(p for p in plans if p["slug"] == "e5_1620v4")
        assert next(r["stock_qty"] for r in e5["available_regions"] if r["slug"] == "eu_nord_1") == 3
    finally:
        emu.stop()
    # an incomplete configuration still gives a usable emulator: default token, project 1
    bare = dataclasses.replace(ctx, env={}, nodes=(), cloud_config=None, options={})
    emu = build_emulator(bare, "127.0.0.1:0", None)
    try:
        r = requests.get(
            f"{emu.base_url}projects/1/servers", headers={"Authorization": "Bearer cherry-emulator-token"}
        )
        assert r.status_code == 200 and r.json() == []
    finally:
        emu.stop()
