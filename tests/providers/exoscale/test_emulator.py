"""The emulator, driven by Exoscale's own SDK (python-exoscale, a test dependency) as its oracle,
every answer validated against the OpenAPI document the SDK ships (the `emulator` fixture's
recorder), plus the state machines, signature checks and faults our backend relies on."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import exoscale.api.v2 as sdk
import pytest
import requests
from exoscale.api.exceptions import (
    ExoscaleAPIAuthException,
    ExoscaleAPIClientException,
    ExoscaleAPIServerException,
)

from cloudprovider_grpc.emulators.exoscale import ExoscaleEmulator
from cloudprovider_grpc.formats.exoscale_signature import authorization
from cloudprovider_grpc.providers.exoscale.config import load_config
from cloudprovider_grpc.providers.exoscale.wiring import emulator_for
from cloudprovider_grpc.providers.registry import ProviderContext
from tests.providers.exoscale.conftest import KEY, SECRET
from tests.providers.exoscale.openapi import Recorder
from tests.support.servers import ManualClock

pytestmark = pytest.mark.integration


@pytest.fixture
def api(
    emulator: ExoscaleEmulator, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> Iterator[sdk.Client]:
    """The official client pointed at the emulator; its operation waits advance the emulator's
    virtual clock instead of sleeping (the only stand-in: the SDK sleeps 3 s between polls)."""
    monkeypatch.setattr(sdk, "_sleep", lambda start: clock.advance(sdk._poll_interval(clock() - start)))
    monkeypatch.setattr(sdk, "_time", clock)
    yield sdk.Client(KEY, SECRET, url=emulator.base_url.rstrip("/"))


def ids(api: sdk.Client) -> dict[str, str]:
    cluster = next(c for c in api.list_sks_clusters()["sks-clusters"] if c["name"] == "prod")
    workers = next(n for n in cluster["nodepools"] if n["name"] == "workers")
    batch = next(p for p in api.list_instance_pools()["instance-pools"] if p["name"] == "batch")
    return {
        "cluster": cluster["id"],
        "nodepool": workers["id"],
        "np_pool": workers["instance-pool"]["id"],
        "pool": batch["id"],
    }


def test_sdk_oracle_every_operation_we_use(
    api: sdk.Client, emulator: ExoscaleEmulator, clock: ManualClock, recorder: Recorder
) -> None:
    emulator.operation_polls = 2
    ref = ids(api)
    pool = api.get_instance_pool(id=ref["np_pool"])
    assert pool["manager"] == {"id": ref["nodepool"], "type": "sks-nodepool"}
    assert api.get_sks_nodepool(id=ref["cluster"], sks_nodepool_id=ref["nodepool"])["size"] == 2
    members = api.list_instances(manager_id=ref["np_pool"], manager_type="instance-pool")["instances"]
    assert {m["id"] for m in members} == {i["id"] for i in pool["instances"]}
    one = api.get_instance(id=members[0]["id"])
    assert one["manager"] == {"id": ref["np_pool"], "type": "instance-pool"} and one["state"] == "running"
    itype = api.get_instance_type(id=pool["instance-type"]["id"])
    assert (itype["family"], itype["size"], itype["cpus"], itype["memory"]) == (
        "standard",
        "large",
        4,
        8 * 1024**3,
    )
    assert api.get_quota(entity="instance") == {"resource": "instance", "usage": 4, "limit": 50}

    # each change answers a pending operation the SDK's own wait() follows to success
    op = api.scale_sks_nodepool(id=ref["cluster"], sks_nodepool_id=ref["nodepool"], size=4)
    assert op["state"] == "pending" and op["reference"]["link"] == f"/v2/sks-cluster/{ref['cluster']}"
    assert api.wait(op["id"])["state"] == "success"
    op = api.evict_sks_nodepool_members(
        id=ref["cluster"], sks_nodepool_id=ref["nodepool"], instances=[members[0]["id"]]
    )
    assert api.wait(op["id"])["state"] == "success"
    assert api.get_sks_nodepool(id=ref["cluster"], sks_nodepool_id=ref["nodepool"])["size"] == 3
    op = api.scale_instance_pool(id=ref["pool"], size=3)
    api.wait(op["id"])
    batch = api.get_instance_pool(id=ref["pool"])
    op = api.evict_instance_pool_members(id=ref["pool"], instances=[batch["instances"][0]["id"]])
    assert api.get_operation(id=op["id"])["state"] == "pending"  # the first of two polls
    assert api.wait(op["id"])["state"] == "success"
    assert api.get_instance_pool(id=ref["pool"])["size"] == 2
    assert set(recorder.seen) >= {
        "list-sks-clusters", "list-instance-pools", "get-instance-pool", "get-sks-nodepool", "list-instances",
        "get-instance", "get-instance-type", "get-quota", "scale-sks-nodepool", "evict-sks-nodepool-members",
        "scale-instance-pool", "evict-instance-pool-members", "get-operation",
    }  # fmt: skip


def test_sdk_sees_failed_operations_with_their_reason(api: sdk.Client, emulator: ExoscaleEmulator) -> None:
    ref = ids(api)
    emulator.fail_next.append(("failure", "conflict", "Instance Pool is being updated"))
    op = api.scale_instance_pool(id=ref["pool"], size=2)
    with pytest.raises(ExoscaleAPIServerException, match="Operation error: failure, conflict"):
        api.wait(op["id"])
    assert api.get_instance_pool(id=ref["pool"])["size"] == 1  # a failed change changed nothing
    emulator.fail_next.append(("timeout", "unavailable", ""))
    op = api.scale_instance_pool(id=ref["pool"], size=2)
    with pytest.raises(ExoscaleAPIServerException, match="timeout, unavailable"):
        api.wait(op["id"])


def test_sdk_max_wait_on_a_held_operation(api: sdk.Client, emulator: ExoscaleEmulator) -> None:
    ref = ids(api)
    emulator.hold_operations = 600
    op = api.scale_instance_pool(id=ref["pool"], size=2)
    with pytest.raises(ExoscaleAPIClientException, match="max wait time"):
        api.wait(op["id"], max_wait_time=60)
    assert api.wait(op["id"])["state"] == "success"  # virtual time passes the ten minutes


def test_sdk_errors_map_as_the_sdk_expects(api: sdk.Client, emulator: ExoscaleEmulator) -> None:
    with pytest.raises(ExoscaleAPIClientException, match="404"):
        api.get_instance_pool(id="00000000-0000-4000-8000-000000000000")
    with pytest.raises(ExoscaleAPIClientException, match="not a member"):
        api.evict_instance_pool_members(
            id=ids(api)["pool"], instances=["00000000-0000-4000-8000-000000000000"]
        )
    emulator.add_key("EXOlimited", "limited-secret", operations={"list-sks-clusters"})
    limited = sdk.Client("EXOlimited", "limited-secret", url=emulator.base_url.rstrip("/"))
    limited.list_sks_clusters()
    with pytest.raises(ExoscaleAPIAuthException, match="scale-instance-pool"):
        limited.scale_instance_pool(id=ids(api)["pool"], size=2)
    with pytest.raises(ExoscaleAPIAuthException, match="invalid request signature"):
        sdk.Client(KEY, "wrong", url=emulator.base_url.rstrip("/")).list_sks_clusters()


def signed_put(
    emulator: ExoscaleEmulator, path: str, signed_body: bytes, sent_body: bytes, query: str = ""
) -> requests.Response:
    url = emulator.base_url.rstrip("/") + path
    header = authorization(
        KEY, SECRET, "PUT", url + (f"?{query}" if query else ""), signed_body, 4_000_000_000
    )
    return requests.put(
        url, data=sent_body, headers={"Authorization": header, "Content-Type": "application/json"}, timeout=5
    )


def test_signature_covers_the_exact_body_bytes(emulator: ExoscaleEmulator, api: sdk.Client) -> None:
    pool = ids(api)["pool"]
    path = f"/instance-pool/{pool}:scale"
    assert signed_put(emulator, path, b'{"size": 2}', b'{"size": 2}').status_code == 200
    # same JSON value, different bytes: refused
    refused = signed_put(emulator, path, b'{"size": 3}', b'{"size":3}')
    assert refused.status_code == 403 and refused.json() == {"message": "invalid request signature"}


def test_unsigned_query_argument_is_refused(emulator: ExoscaleEmulator) -> None:
    url = emulator.base_url + "instance"
    header = authorization(KEY, SECRET, "GET", url, b"", 4_000_000_000)
    resp = requests.get(
        url, params={"manager-type": "instance-pool"}, headers={"Authorization": header}, timeout=5
    )
    assert resp.status_code == 403 and "not signed" in resp.json()["message"]


def test_scale_up_members_start_then_run_and_pool_state_follows(
    api: sdk.Client, emulator: ExoscaleEmulator, clock: ManualClock
) -> None:
    ref = ids(api)
    api.scale_sks_nodepool(id=ref["cluster"], sks_nodepool_id=ref["nodepool"], size=5)
    states = sorted(m["state"] for m in emulator.pool_members(ref["np_pool"]))
    assert states == ["running"] * 2 + ["starting"] * 3
    assert emulator.pool_view(ref["np_pool"])["state"] == "scaling-up"
    assert emulator.nodepool_by_name("workers")["state"] == "scaling"
    clock.advance(30)
    assert [m["state"] for m in emulator.pool_members(ref["np_pool"])] == ["running"] * 5
    assert emulator.nodepool_by_name("workers") | {
        "state": "running",
        "size": 5,
    } == emulator.nodepool_by_name("workers")


def test_scale_down_and_evict_destroy_then_forget(
    api: sdk.Client, emulator: ExoscaleEmulator, clock: ManualClock
) -> None:
    ref = ids(api)
    api.scale_sks_nodepool(id=ref["cluster"], sks_nodepool_id=ref["nodepool"], size=1)
    assert sorted(m["state"] for m in emulator.pool_members(ref["np_pool"])) == ["destroying", "running"]
    assert emulator.pool_view(ref["np_pool"])["state"] == "scaling-down"
    clock.advance(10)
    assert [m["state"] for m in emulator.pool_members(ref["np_pool"])] == ["running"]
    assert emulator.pool_view(ref["np_pool"]) | {"size": 1, "state": "running"} == emulator.pool_view(
        ref["np_pool"]
    )


def test_quota_unlimited_and_exceeded(api: sdk.Client, emulator: ExoscaleEmulator) -> None:
    ref = ids(api)
    emulator.quota_limit = 5
    op = api.scale_instance_pool(id=ref["pool"], size=3)
    with pytest.raises(ExoscaleAPIServerException, match="failure, forbidden"):
        api.wait(op["id"])
    failed = api.get_operation(id=op["id"])
    assert "Quota exceeded" in failed["message"]
    emulator.quota_limit = -1
    assert api.get_quota(entity="instance")["limit"] == -1
    api.wait(api.scale_instance_pool(id=ref["pool"], size=40)["id"])
    assert api.get_instance_pool(id=ref["pool"])["size"] == 40


def test_capacity_per_instance_type_fails_only_its_scale_ups(
    api: sdk.Client, emulator: ExoscaleEmulator, clock: ManualClock
) -> None:
    """`stock`: instances of a type the zone can still create. A scale-up beyond it fails its
    operation (`unavailable`, the OpenAPI's reason) and changes nothing; other types scale on; the
    capacity of evicted members comes back."""
    ref = ids(api)
    emulator.stock = {emulator.find_type("standard.small")["id"]: 1}  # batch: standard.small, size 1
    op = api.scale_instance_pool(id=ref["pool"], size=3)
    with pytest.raises(ExoscaleAPIServerException, match="failure, unavailable"):
        api.wait(op["id"])
    assert "Not enough capacity for instance type standard.small" in api.get_operation(id=op["id"])["message"]
    assert api.get_instance_pool(id=ref["pool"])["size"] == 1
    api.wait(api.scale_sks_nodepool(id=ref["cluster"], sks_nodepool_id=ref["nodepool"], size=4)["id"])
    api.wait(api.scale_instance_pool(id=ref["pool"], size=2)["id"])  # the last one left
    clock.advance(60)
    members = [i["id"] for i in api.get_instance_pool(id=ref["pool"])["instances"]]
    with pytest.raises(ExoscaleAPIServerException, match="unavailable"):
        api.wait(api.scale_instance_pool(id=ref["pool"], size=3)["id"])
    api.wait(api.evict_instance_pool_members(id=ref["pool"], instances=members[:1])["id"])
    api.wait(api.scale_instance_pool(id=ref["pool"], size=2)["id"])  # the evicted one's capacity
    assert api.get_instance_pool(id=ref["pool"])["size"] == 2


def test_a_configured_seed_names_its_nodepools_and_pools(recorder: Recorder) -> None:
    """`exoscale.emulator.nodepools` replaces the demo cloud, with fixed ids where given (the group
    id is the Instance Pool id), and `stock` reaches the emulator."""
    pool_id = "e2e00000-0000-4000-8000-0000000000c1"
    options = {
        "emulator": {
            "stock": {"standard.large": 0},
            "nodepools": [
                {"name": "a", "instance-pool-id": pool_id, "instance-type": "standard.large",
                 "labels": {"role": "a"}},
                {"name": "b", "size": 1, "taints": {"dedicated": {"value": "b", "effect": "NoSchedule"}}},
            ],
        }
    }  # fmt: skip
    config = load_config(ProviderContext(options=options, emulate=True))
    emulator = emulator_for(config, "127.0.0.1:0", None)
    emulator.observer = recorder
    with emulator:
        api = sdk.Client(config.api_key, config.api_secret, url=emulator.base_url.rstrip("/"))
        [cluster] = api.list_sks_clusters()["sks-clusters"]
        a, b = cluster["nodepools"]
        assert (a["name"], a["instance-pool"]["id"], a["size"], a["labels"]) == (
            "a",
            pool_id,
            0,
            {"role": "a"},
        )
        assert (b["name"], b["size"], b["taints"]) == (
            "b",
            1,
            {"dedicated": {"value": "b", "effect": "NoSchedule"}},
        )
        pools = {p["id"] for p in api.list_instance_pools()["instance-pools"]}
        assert pools == {pool_id, b["instance-pool"]["id"]}  # no demo standalone pool
        op = api.scale_sks_nodepool(id=cluster["id"], sks_nodepool_id=a["id"], size=1)
        failed = api.get_operation(id=op["id"])
        assert (failed["state"], failed["reason"]) == ("failure", "unavailable")
    assert not recorder.problems, recorder.problems


def test_conflict_mode_fails_changes_to_a_busy_pool(api: sdk.Client, emulator: ExoscaleEmulator) -> None:
    ref = ids(api)
    emulator.conflict_mode = "reject"
    api.scale_instance_pool(id=ref["pool"], size=2)  # now scaling-up
    op = api.scale_instance_pool(id=ref["pool"], size=3)
    with pytest.raises(ExoscaleAPIServerException, match="conflict"):
        api.wait(op["id"])


def test_standalone_pool_cannot_be_emptied_but_a_nodepool_can(
    api: sdk.Client, emulator: ExoscaleEmulator
) -> None:
    ref = ids(api)
    with pytest.raises(ExoscaleAPIClientException, match="at least 1"):
        api.scale_instance_pool(id=ref["pool"], size=0)
    api.wait(api.scale_sks_nodepool(id=ref["cluster"], sks_nodepool_id=ref["nodepool"], size=0)["id"])
    assert api.get_sks_nodepool(id=ref["cluster"], sks_nodepool_id=ref["nodepool"])["size"] == 0


@pytest.mark.parametrize("body", [{}, {"size": -1}, {"size": "3"}, {"size": True}])
def test_bad_scale_bodies_are_400(
    api: sdk.Client, emulator: ExoscaleEmulator, body: dict[str, object]
) -> None:
    pool = ids(api)["pool"]
    raw = json.dumps(body).encode()
    resp = signed_put(emulator, f"/instance-pool/{pool}:scale", raw, raw)
    assert resp.status_code == 400 and resp.json()["message"].startswith("invalid request body")


def test_state_file_survives_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "exo.json"
    first = ExoscaleEmulator(keys={KEY: SECRET}, state_file=state)
    cid = first.add_cluster("prod")
    first.add_nodepool(cid, "workers", size=2)
    with first:
        api = sdk.Client(KEY, SECRET, url=first.base_url.rstrip("/"))
        np = api.list_sks_clusters()["sks-clusters"][0]["nodepools"][0]
        api.scale_sks_nodepool(id=cid, sks_nodepool_id=np["id"], size=3)
    with ExoscaleEmulator(keys={}, state_file=state) as second:
        api = sdk.Client(KEY, SECRET, url=second.base_url.rstrip("/"))
        assert api.get_sks_nodepool(id=cid, sks_nodepool_id=np["id"])["size"] == 3


def test_the_openapi_check_catches_drift() -> None:
    """The validator every emulator answer goes through is not a rubber stamp."""
    from tests.providers.exoscale.openapi import query_errors, request_errors, response_errors

    op = "/v2/operation/5a921187-19c7-4df4-8f4f-f31e78de5857"
    assert (
        response_errors("GET", op, 200, {"id": "5a921187-19c7-4df4-8f4f-f31e78de5857", "state": "pending"})
        == []
    )
    assert response_errors("GET", op, 200, {"id": "not-a-uuid", "state": "done"})  # bad uuid, unknown state
    pool = "/v2/instance-pool/5a921187-19c7-4df4-8f4f-f31e78de5857"
    assert response_errors("GET", pool, 200, {"size": 0})  # a standalone pool is never empty
    assert response_errors("GET", pool, 404, {"error": "no message key"})
    assert request_errors("PUT", pool + ":scale", b'{"size": -1}')
    assert query_errors("GET", "/v2/instance", {"manager-type": ["sks-nodepool"]})  # enum: instance-pool only
    assert query_errors("GET", "/v2/instance", {"bogus": ["1"]})


def test_an_iam_deny_on_one_nodepool_covers_it_and_its_instance_pool(
    api: sdk.Client, emulator: ExoscaleEmulator
) -> None:
    known = ids(api)
    emulator.denied_resources.add(known["nodepool"])
    with pytest.raises(ExoscaleAPIAuthException, match="IAM policy denies"):
        api.scale_sks_nodepool(id=known["cluster"], sks_nodepool_id=known["nodepool"], size=3)
    with pytest.raises(ExoscaleAPIAuthException):
        api.list_instances(manager_type="instance-pool", manager_id=known["np_pool"])
    assert emulator.pool_view(known["np_pool"])["size"] == 2
    assert api.list_instances(manager_type="instance-pool", manager_id=known["pool"])["instances"]
    assert api.list_sks_clusters()["sks-clusters"]  # listing the clusters names no denied resource
