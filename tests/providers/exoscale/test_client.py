"""The signing client: the research's four signature vectors, the reference signer, errors, retries."""

from __future__ import annotations

import logging

import pytest
import requests
from exoscale_auth import ExoscaleV2Auth

from cloudprovider_grpc.core.clouderrors import CloudError, ErrorClass
from cloudprovider_grpc.emulators import FaultPlan
from cloudprovider_grpc.emulators.exoscale import ExoscaleEmulator
from cloudprovider_grpc.formats.exoscale_signature import authorization
from cloudprovider_grpc.providers.exoscale import ExoscaleClient
from cloudprovider_grpc.providers.exoscale.client import ExoscaleAuth
from tests.providers.exoscale.conftest import KEY, SECRET

pytestmark = pytest.mark.integration

POOL = "11111111-2222-3333-4444-555555555555"
BASE = "https://api-ch-gva-2.exoscale.com"

# vultr-exoscale.md B2: key EXOtestkey, secret testsecret, expires 1700000000, checked there
# against requests-exoscale-auth 1.1.2
VECTORS = [
    ("GET", f"/v2/instance-pool/{POOL}", b"", "+jBmnSqkG/nYbdCWS/geXrPZ5t9FH5VCdn+vK2844IM=", ""),
    (
        "PUT",
        f"/v2/instance-pool/{POOL}:scale",
        b'{"size":3}',
        "L1p4fZtVPe3jGUN5/jwMMcNXCW3PK1TPkDzdjbCnzXg=",
        "",
    ),
    (
        "PUT",
        f"/v2/instance-pool/{POOL}:scale",
        b'{"size": 3}',
        "+lKG4GXEYj0+oX57HnBP+gz5Vkb3Bjm1m4Zmtrgk5c8=",
        "",
    ),
    (
        "GET",
        "/v2/instance?manager-type=instance-pool&manager-id=abcd",
        b"",
        "rXbuNBaeO31J6u3fOaPKeTudqQMnbm+KUxBeu78Vu6s=",
        ",signed-query-args=manager-id;manager-type",
    ),
]


@pytest.mark.parametrize(("method", "path", "body", "signature", "pragma"), VECTORS)
def test_signature_vectors(method: str, path: str, body: bytes, signature: str, pragma: str) -> None:
    header = authorization("EXOtestkey", "testsecret", method, BASE + path, body, 1_700_000_000)
    assert header == (
        f"EXO2-HMAC-SHA256 credential=EXOtestkey{pragma},expires=1700000000,signature={signature}"
    )


@pytest.mark.parametrize(("method", "path", "body", "signature", "pragma"), VECTORS)
def test_auth_object_matches_the_reference_signer(
    method: str, path: str, body: bytes, signature: str, pragma: str
) -> None:
    """Our requests auth and Exoscale's own (requests-exoscale-auth) sign a prepared request alike."""
    ours = requests.Request(method, BASE + path, data=body or None).prepare()
    ExoscaleAuth("EXOtestkey", "testsecret", now=lambda: 1_700_000_000 - 600)(ours)
    theirs = requests.Request(method, BASE + path, data=body or None).prepare()
    ExoscaleV2Auth("EXOtestkey", "testsecret")._sign_request(theirs, 1_700_000_000)
    assert ours.headers["Authorization"] == theirs.headers["Authorization"]
    assert ours.headers["Authorization"].endswith(signature)


def client(emulator: ExoscaleEmulator, key: str = KEY, secret: str = SECRET, **kw: object) -> ExoscaleClient:
    kw.setdefault("rate_limit_per_s", None)
    kw.setdefault("timeout", (1.0, 2.0))
    return ExoscaleClient(emulator.base_url, key, secret, **kw)  # type: ignore[arg-type]


def test_signed_requests_are_accepted_including_query_and_body(emulator: ExoscaleEmulator) -> None:
    c = client(emulator)
    pool = next(p for p in c.list_instance_pools() if p["name"] == "batch")
    assert len(c.list_pool_instances(pool["id"])) == 1
    op = c.scale_instance_pool(pool["id"], 2)
    assert op["state"] == "pending" and op["reference"]["id"] == pool["id"]


@pytest.mark.parametrize("status", [401, 403])
def test_wrong_secret_is_refused_with_a_clear_message_and_no_secret(
    emulator: ExoscaleEmulator, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    emulator.auth_failure_status = status
    wrong = "not-the-" + SECRET
    caplog.set_level(logging.DEBUG)
    with pytest.raises(CloudError) as info:
        client(emulator, secret=wrong).list_sks_clusters()
    err = info.value
    assert err.status == status and not err.transient
    assert "invalid request signature" in err.message and "list-sks-clusters" in err.message
    for text in (err.message, caplog.text):
        assert wrong not in text and SECRET not in text and KEY not in text


def test_unknown_key_and_expired_signature_are_refused(emulator: ExoscaleEmulator) -> None:
    with pytest.raises(CloudError, match="invalid API key"):
        client(emulator, key="EXOunknown").list_sks_clusters()
    with pytest.raises(CloudError, match="expired"):
        client(emulator, now=lambda: 1_000_000_000.0).list_sks_clusters()


def test_key_without_the_operation_gets_403(emulator: ExoscaleEmulator) -> None:
    emulator.add_key("EXOreadonly", "ro-secret", operations={"list-sks-clusters", "list-instances"})
    c = client(emulator, key="EXOreadonly", secret="ro-secret")
    assert c.list_sks_clusters()
    with pytest.raises(CloudError, match="not allowed to perform operation list-instance-pools") as info:
        c.list_instance_pools()
    assert info.value.status == 403


def test_error_message_comes_from_the_message_body(emulator: ExoscaleEmulator) -> None:
    with pytest.raises(CloudError, match=r"HTTP 404: Instance Pool [0-9a-f-]+ not found"):
        client(emulator).scale_instance_pool("00000000-0000-4000-8000-000000000000", 1)


def test_quota_refusal_is_out_of_resources(emulator: ExoscaleEmulator) -> None:
    emulator.quota_mode, emulator.quota_limit = "reject", 4
    pool = next(p for p in client(emulator).list_instance_pools() if p["name"] == "batch")
    with pytest.raises(CloudError) as info:
        client(emulator).scale_instance_pool(pool["id"], 9)
    assert info.value.error_class == ErrorClass.OUT_OF_RESOURCES and "Quota exceeded" in info.value.message


def test_reads_are_retried_through_server_errors(emulator: ExoscaleEmulator) -> None:
    emulator.set_faults(FaultPlan(rate=1.0, kinds=("error",), methods=frozenset({"GET"})))
    c = client(emulator, retries=2)
    with pytest.raises(CloudError) as info:
        c.list_sks_clusters()
    assert info.value.transient
    assert [e.fault for e in emulator.request_log()] == ["error"] * 3
    emulator.set_faults(None)
    assert c.list_sks_clusters()


def test_slow_answer_times_out_as_transient(emulator: ExoscaleEmulator) -> None:
    emulator.set_faults(FaultPlan(rate=1.0, kinds=("slow",), slow_seconds=1.5))
    with pytest.raises(CloudError, match="no response within") as info:
        client(emulator, retries=0, timeout=(1.0, 0.3)).list_sks_clusters()
    assert info.value.transient


def test_rate_limit_lets_an_idle_clients_refresh_through_at_once(emulator: ExoscaleEmulator) -> None:
    """The client-side limit only smooths sustained load: a second's worth of calls (a Refresh's
    cluster, pools and member listings) goes out without waiting; calls beyond it wait their turn."""
    waits: list[float] = []
    c = client(emulator, rate_limit_per_s=10.0, sleep=waits.append)
    pools = c.list_instance_pools()
    c.list_sks_clusters()
    for _ in range(8):
        c.list_pool_instances(pools[0]["id"])
    assert waits == []
    for _ in range(200):  # ~2 ms each on loopback: far more than 10 a second
        c.list_sks_clusters()
        if waits:
            break
    assert waits and all(0 < w <= 0.1 + 1e-9 for w in waits)


def test_conflict_is_transient_and_quota_is_out_of_resources() -> None:
    from cloudprovider_grpc.providers.exoscale.client import classify

    busy = classify(CloudError("HTTP 409: Instance Pool is busy", status=409))
    assert busy.transient
    quota = classify(CloudError("HTTP 400: Quota exceeded for resource instance", status=400))
    assert quota.error_class == ErrorClass.OUT_OF_RESOURCES and not quota.transient
    other = classify(CloudError("HTTP 400: invalid request body", status=400))
    assert other.error_class == ErrorClass.OTHER and not other.transient
