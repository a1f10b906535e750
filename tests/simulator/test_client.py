"""The CA-like client against our real server on a loopback port: CA's caching, RPC counting."""

import grpc
import pytest

from cloudprovider_grpc.config.settings import Settings
from cloudprovider_grpc.grpcapi.wire import SERVICE_NAME
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.providers.registry import ProviderContext, build_provider
from cloudprovider_grpc.server.assembly import start_server
from cloudprovider_grpc.simulator.client import GRPC_TIMEOUT, CAClient, GroupOptions, GrpcTransport, RpcError

pytestmark = pytest.mark.integration

SIM = {
    "provisioning_delay": 0,
    "groups": [
        {
            "id": "general",
            "min_size": 1,
            "max_size": 5,
            "initial_size": 1,
            "capacity": {"cpu": "4", "memory": "16Gi"},
            "price_per_hour": 0.2,
        },
        {
            "id": "gpu",
            "min_size": 0,
            "max_size": 2,
            "capacity": {"cpu": "8", "memory": "32Gi"},
            "gpu": {"count": 1},
            "options": {"scale_down_unneeded_time": 300},
        },
    ],
}
DEFAULTS = GroupOptions(0.5, 0.5, 600.0, 1200.0, 900.0, False, False)


@pytest.fixture(scope="module")
def server():
    handle = start_server(
        Settings(address="127.0.0.1:0", metrics_address=""),
        provider=build_provider("sim", ProviderContext(options=SIM, inline_workers=True)),
    )
    yield handle
    handle.stop(grace=1.0)


@pytest.fixture
def client(server):
    t = GrpcTransport(server.address)
    yield CAClient(t)
    t.close()


def test_node_groups_and_node_group_for_node_cached_until_refresh(client):
    client.refresh()
    assert [g.id for g in client.node_groups()] == ["general", "gpu"]
    client.node_groups()
    assert client.counts["NodeGroups"] == 1
    g = client.node_group_for_node("general-0", "sim://general/0")
    assert (g.id, g.min_size, g.max_size) == ("general", 1, 5)
    client.node_group_for_node("general-0", "sim://general/0")
    assert client.counts["NodeGroupForNode"] == 1
    client.refresh()
    client.node_groups()
    client.node_group_for_node("general-0", "sim://general/0")
    assert (client.counts["NodeGroups"], client.counts["NodeGroupForNode"], client.counts["Refresh"]) == (
        2,
        2,
        2,
    )


def test_nodes_outside_any_group_are_never_cached(client):
    assert client.node_group_for_node("control-plane", "") is None
    assert client.node_group_for_node("control-plane", "") is None
    assert client.counts["NodeGroupForNode"] == 2


def test_templates_cached_per_loop_and_gpu_answers_forever(client):
    client.refresh()
    node = client.template("gpu")
    assert node.status.capacity["nvidia.com/gpu"].string == "1"
    client.template("gpu")
    assert client.counts["NodeGroupTemplateNodeInfo"] == 1
    client.refresh()
    client.template("gpu")
    assert client.counts["NodeGroupTemplateNodeInfo"] == 2
    label = client.gpu_label()
    assert label and client.gpu_label() == label
    assert client.gpu_types() == ["nvidia-tesla-t4"] == client.gpu_types()
    assert (client.counts["GPULabel"], client.counts["GetAvailableGPUTypes"]) == (1, 1)


def test_uncached_calls_and_options(client):
    for _ in range(3):
        client.target_size("general")
    assert client.counts["NodeGroupTargetSize"] == 3
    # gpu overrides the unneeded time; everything else echoes the defaults we sent
    opts = client.options("gpu", DEFAULTS)
    assert opts.scale_down_unneeded_time == 300.0
    assert (opts.scale_down_utilization_threshold, opts.max_node_provision_time) == (0.5, 900.0)
    # general has no overrides: an answer without options, which CA reads as "use your flags"
    assert client.options("general", DEFAULTS) is None
    assert client.options("general", DEFAULTS) is None
    assert client.counts["NodeGroupGetOptions"] == 3


def test_errors_carry_the_status(client):
    with pytest.raises(RpcError) as err:
        client.target_size("nope")
    assert err.value.code.name == "NOT_FOUND"
    with pytest.raises(RpcError) as err:
        client.increase_size("general", 99)
    assert err.value.code.name == "FAILED_PRECONDITION"


def test_pricing_rpcs(client):
    from datetime import UTC, datetime, timedelta

    start = datetime(2026, 1, 1, tzinfo=UTC)
    node = pb.ExternalGrpcNode(providerID="sim://general/0", name="general-0")
    assert client.node_price(node, start, start + timedelta(hours=2)) == pytest.approx(0.4)  # 0.2/h x 2h
    from cloudprovider_grpc.simulator.model import pod_proto

    # a 1-cpu pod is a quarter of a general node (the cheapest priced group it fits): 0.2 x 1/4
    pod = pod_proto("p", "default", [{"cpu": "1", "memory": "1Gi"}])
    assert client.pod_price(pod, start, start + timedelta(hours=1)) == pytest.approx(0.05)
    # gpu has no price: its node price fails and the client reports None
    assert client.node_price(pb.ExternalGrpcNode(name="template-node-for-gpu-1"), start, start) is None


def test_in_process_transport_takes_ready_made_response_bytes():
    # service handlers may answer with prebuilt response bytes (the raw-bytes server path); the
    # in-process transport decodes them with the method's response type
    from cloudprovider_grpc.grpcapi.outcome import rpc
    from cloudprovider_grpc.grpcapi.servicer import CloudProviderServicer
    from cloudprovider_grpc.simulator.client import InProcessTransport

    class Servicer(CloudProviderServicer):
        @rpc
        def NodeGroups(self, request, context):
            return pb.NodeGroupsResponse(nodeGroups=[pb.NodeGroup(id="a", maxSize=3)]).SerializeToString()

    servicer = Servicer(build_provider("sim", ProviderContext(options=SIM, inline_workers=True)))
    resp = InProcessTransport(servicer).call("NodeGroups", pb.NodeGroupsRequest())
    assert [(g.id, g.maxSize) for g in resp.nodeGroups] == [("a", 3)]


def _grpc_raw(address: str, method: str, raw: bytes) -> tuple[grpc.StatusCode, str]:
    """A grpcio client sending `raw` as the request body of `method`: the status it gets."""
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(f"/{SERVICE_NAME}/{method}", lambda b: b, lambda b: b)
        try:
            call(raw, timeout=GRPC_TIMEOUT)
        except grpc.RpcError as exc:
            return exc.code(), exc.details()
    raise AssertionError(f"{method} answered OK")


def _in_process_raw(transport, method: str, raw: bytes) -> tuple[grpc.StatusCode, str]:
    try:
        transport.call_raw(method, raw)
    except RpcError as exc:
        return exc.code, exc.details
    raise AssertionError(f"{method} answered OK")


def test_in_process_calls_take_the_request_path_of_grpcio_clients():
    """The in-process transport hands request bytes to the handlers grpcio runs: a malformed body
    and a call after shutdown began reach it with the status and message a grpcio client gets, and
    a well-formed call answers the same bytes."""
    from cloudprovider_grpc.grpcapi.servicer import CloudProviderServicer
    from cloudprovider_grpc.simulator.client import InProcessTransport

    cloud = build_provider("sim", ProviderContext(options=SIM, inline_workers=True))
    handle = start_server(Settings(address="127.0.0.1:0", metrics_address=""), provider=cloud)
    servicer = CloudProviderServicer(cloud)
    transport = InProcessTransport(servicer)
    try:
        request = pb.NodeGroupTargetSizeRequest(id="general").SerializeToString()
        with grpc.insecure_channel(handle.address) as channel:
            stub = channel.unary_unary(f"/{SERVICE_NAME}/NodeGroupTargetSize", lambda b: b, lambda b: b)
            assert transport.call_raw("NodeGroupTargetSize", request) == stub(request, timeout=GRPC_TIMEOUT)

        malformed = b"\xff\xff\xff"
        got = _in_process_raw(transport, "NodeGroupForNode", malformed)
        assert got[0] == grpc.StatusCode.INVALID_ARGUMENT
        assert got == _grpc_raw(handle.address, "NodeGroupForNode", malformed)

        # admission: once the gate is closed, neither caller's request runs
        handle.gate.close()
        servicer.gate.close()
        before = cloud.target_size("general")
        grow = pb.NodeGroupIncreaseSizeRequest(id="general", delta=1).SerializeToString()
        got = _in_process_raw(transport, "NodeGroupIncreaseSize", grow)
        assert got[0] == grpc.StatusCode.UNAVAILABLE and "shutting down" in got[1]
        assert got == _grpc_raw(handle.address, "NodeGroupIncreaseSize", grow)
        assert cloud.target_size("general") == before
    finally:
        handle.stop(grace=1.0)
