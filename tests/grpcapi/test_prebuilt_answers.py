"""The per-node RPCs answer from prebuilt bytes (service.Prebuilt): over a real port, every
answer still follows the state and the request it belongs to, never a previous call's."""

from __future__ import annotations

import urllib.request

import grpc
import pytest

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from tests.support.servers import ManualClock, channel, sim_server, stub

pytestmark = pytest.mark.integration

OPTIONS = {
    "provisioning_delay": 0,
    "groups": [
        {"id": "a", "min_size": 0, "max_size": 5, "initial_size": 2},
        {"id": "b", "min_size": 0, "max_size": 5, "initial_size": 2},
        {"id": "tuned", "min_size": 0, "max_size": 5, "options": {"scale_down_unneeded_time": 300.0}},
    ],
}


def defaults(threshold: float, unneeded: int) -> pb.NodeGroupAutoscalingOptions:
    d = pb.NodeGroupAutoscalingOptions(scaleDownUtilizationThreshold=threshold)
    d.scaleDownUnneededDuration.seconds = unneeded
    d.MaxNodeProvisionDuration.seconds = 900
    d.MaxNodeProvisionTime.duration = 900 * 10**9  # as CA 1.34.2 sends them: 1.35-1.36 get no options
    return d


def test_options_answers_follow_the_defaults_of_each_request(clock: ManualClock) -> None:
    with sim_server(OPTIONS, clock=clock) as handle, channel(handle) as ch:
        s = stub(ch)

        def options(request: pb.NodeGroupAutoscalingOptionsRequest) -> pb.NodeGroupAutoscalingOptions:
            return s.NodeGroupGetOptions(request, timeout=5).nodeGroupAutoscalingOptions

        first = options(pb.NodeGroupAutoscalingOptionsRequest(id="tuned", defaults=defaults(0.4, 600)))
        other = options(pb.NodeGroupAutoscalingOptionsRequest(id="tuned", defaults=defaults(0.7, 600)))
        again = options(pb.NodeGroupAutoscalingOptionsRequest(id="tuned", defaults=defaults(0.4, 600)))
        assert first.scaleDownUtilizationThreshold == pytest.approx(0.4)
        assert other.scaleDownUtilizationThreshold == pytest.approx(0.7)
        assert again == first
        assert first.scaleDownUnneededDuration.seconds == 300  # the group's override wins over CA's 600
        # no defaults at all: our defaults; defaults present but empty: CA's zero values, echoed
        absent = options(pb.NodeGroupAutoscalingOptionsRequest(id="tuned"))
        empty = options(pb.NodeGroupAutoscalingOptionsRequest(id="tuned", defaults={}))
        assert absent.scaleDownUtilizationThreshold == pytest.approx(0.5)
        assert empty.scaleDownUtilizationThreshold == 0.0

        # the legacy request of CA 1.25-1.28 gets no options (OK, empty), an unknown group NOT_FOUND,
        # a group without overrides no options either, and the answered form still answers after all
        legacy = pb.NodeGroupAutoscalingOptions(scaleDownUtilizationThreshold=0.5)
        legacy.scaleDownUnneededTime.duration = 600 * 10**9
        for _ in range(2):
            answer = s.NodeGroupGetOptions(pb.NodeGroupAutoscalingOptionsRequest(id="tuned", defaults=legacy))
            assert not answer.HasField("nodeGroupAutoscalingOptions")
        with pytest.raises(grpc.RpcError) as info:
            s.NodeGroupGetOptions(pb.NodeGroupAutoscalingOptionsRequest(id="nope", defaults=legacy))
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        answer = s.NodeGroupGetOptions(
            pb.NodeGroupAutoscalingOptionsRequest(id="a", defaults=defaults(0.4, 600))
        )
        assert not answer.HasField("nodeGroupAutoscalingOptions")  # "a" has no overrides
        assert (
            options(pb.NodeGroupAutoscalingOptionsRequest(id="tuned", defaults=defaults(0.4, 600))) == first
        )


def ok_count(handle, method: str) -> float:
    """Our request counter for `method` with status OK (the registry is process-wide: tests compare)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{handle.metrics_port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    line = f'cloudprovider_grpc_rpc_requests_total{{code="OK",method="{method}"}} '
    found = [float(row[len(line) :]) for row in text.splitlines() if row.startswith(line)]
    return found[0] if found else 0.0


def test_target_size_and_group_answers_follow_the_state(clock: ManualClock) -> None:
    with sim_server(OPTIONS, clock=clock) as handle, channel(handle) as ch:
        s = stub(ch)
        before = {m: ok_count(handle, m) for m in ("NodeGroupTargetSize", "NodeGroupForNode")}

        def target(gid: str) -> int:
            return s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id=gid), timeout=5).targetSize

        assert (target("a"), target("b")) == (2, 2)
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="a", delta=2))
        assert (target("a"), target("b")) == (4, 2)  # equal sizes share an answer; a change moves one
        s.NodeGroupDecreaseTargetSize(pb.NodeGroupDecreaseTargetSizeRequest(id="a", delta=-1))
        assert (target("a"), target("b")) == (3, 2)

        member = s.NodeGroupNodes(pb.NodeGroupNodesRequest(id="b")).instances[0].id
        found = s.NodeGroupForNode(pb.NodeGroupForNodeRequest(node=pb.ExternalGrpcNode(providerID=member)))
        assert (found.nodeGroup.id, found.nodeGroup.maxSize) == ("b", 5)
        stranger = s.NodeGroupForNode(
            pb.NodeGroupForNodeRequest(node=pb.ExternalGrpcNode(providerID="x://1"))
        )
        assert stranger.nodeGroup.id == ""
        again = s.NodeGroupForNode(pb.NodeGroupForNodeRequest(node=pb.ExternalGrpcNode(providerID=member)))
        assert again.nodeGroup.id == "b"

        # metrics keep their labels (method, the status code's name) and count every call
        assert ok_count(handle, "NodeGroupTargetSize") == before["NodeGroupTargetSize"] + 6
        assert ok_count(handle, "NodeGroupForNode") == before["NodeGroupForNode"] + 3
