"""The SPC client on the shared HTTP layer, against the emulator: errors, retries, no blind re-POST."""

from __future__ import annotations

import pytest

from cloudprovider_grpc.core.clouderrors import CloudError, ErrorClass, MachineGone
from cloudprovider_grpc.emulators import EmulatorServer, FaultPlan, Response
from cloudprovider_grpc.emulators.spc import SpcEmulator
from cloudprovider_grpc.emulators.spc.emulator import INITIAL_MASTER
from cloudprovider_grpc.providers.spc import SpcClient
from tests.providers.spc.conftest import CLUSTER, ORG, TOKEN, pools

pytestmark = pytest.mark.integration


def client(emu: SpcEmulator, token: str = TOKEN, org: int = ORG, cluster: int = CLUSTER, **kw) -> SpcClient:
    kw.setdefault("rate_limit_per_s", None)
    return SpcClient(emu.base_url, token, org, cluster, timeout=(1.0, 1.0), **kw)


def calls(emu: SpcEmulator, method: str) -> int:
    return sum(1 for e in emu.request_log() if e.method == method)


def test_errors_carry_the_apis_detail_and_never_the_token(emulator: SpcEmulator) -> None:
    with pytest.raises(CloudError) as err:
        client(emulator, token="wrong-token-123").list_nodes()
    assert err.value.status == 401 and not err.value.transient
    assert "HTTP 401: Invalid token." in err.value.message and "wrong-token-123" not in err.value.message
    with pytest.raises(CloudError) as err:
        client(emulator, org=99, cluster=13).list_node_pools()
    assert err.value.status == 403 and "You do not have permission" in err.value.message
    with pytest.raises(CloudError, match=r"HTTP 404: Not found\."):
        client(emulator, cluster=404).list_nodes()


def test_reads_are_retried_and_a_post_is_never_resent(emulator: SpcEmulator) -> None:
    emulator.set_faults(
        FaultPlan(rate=1.0, kinds=("error",), error_statuses=(503,), methods=frozenset({"GET"}))
    )
    c = client(emulator, retries=2)
    with pytest.raises(CloudError) as err:
        c.list_nodes()
    assert err.value.transient and calls(emulator, "GET") == 3  # first try + 2 retries
    emulator.set_faults(
        FaultPlan(rate=1.0, kinds=("error_after",), error_statuses=(502,), methods=frozenset({"POST"}))
    )
    pool = next(iter(pools(emulator).values()))
    before = pool["node_count"]
    with pytest.raises(CloudError) as err:
        c.add_to_pool(pool["pk"], "t2.medium", 1)
    assert err.value.transient and calls(emulator, "POST") == 1  # processed, answered 502: not re-sent
    assert pool["node_count"] == before + 1


def test_add_returns_the_new_nodes_and_quota_refusals_are_out_of_resources(emulator: SpcEmulator) -> None:
    pool = next(iter(pools(emulator).values()))
    (node,) = client(emulator).add_to_pool(pool["pk"], "t2.medium", 1)
    assert node["state"] == "draft" and node["group_name"] == f"autoscaling-{pool['instance_id']}"
    emulator.node_limit = 1
    with pytest.raises(CloudError) as err:
        client(emulator).add_to_pool(pool["pk"], "t2.medium", 1)
    assert err.value.error_class == ErrorClass.OUT_OF_RESOURCES and not err.value.transient


def test_can_delete_and_delete(emulator: SpcEmulator) -> None:
    master = next(n for n in emulator.node_records(CLUSTER) if n["role"] == "master")
    c = client(emulator)
    with pytest.raises(CloudError) as err:
        c.can_delete(master["pk"])
    assert (
        INITIAL_MASTER in err.value.message and err.value.code == "NOT_DELETABLE" and not err.value.transient
    )
    worker = next(n for n in emulator.node_records(CLUSTER) if n["role"] == "worker")
    c.can_delete(worker["pk"])
    c.delete_node(worker["pk"])
    emulator.deleting_seconds = 0
    with pytest.raises(MachineGone):
        c.delete_node(987654)
    with pytest.raises(MachineGone):
        c.can_delete(987654)


def test_a_non_array_answer_is_a_transient_error() -> None:
    """A paginated-looking object (not what SPC answers) is refused, not read as an empty cluster."""
    paged = EmulatorServer()
    paged.route("GET", "/orgs/1/clusters/1/nodes", lambda req: Response(200, {"results": []}))
    with paged, pytest.raises(CloudError, match="expected a JSON array") as err:
        SpcClient(paged.base_url, TOKEN, 1, 1, rate_limit_per_s=None).list_nodes()
    assert err.value.transient
