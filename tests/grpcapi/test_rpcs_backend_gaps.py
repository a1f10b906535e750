"""The RPCs over a real loopback port when the backend falls short: a cloud that knows no machine
shapes and no prices answers the optional RPCs UNIMPLEMENTED and the required ones as usual, a bug
in a backend is INTERNAL without its details, and a template Go cannot parse is UNIMPLEMENTED with
one warning. The RPCs against a complete backend are in test_rpcs.py.
"""

from __future__ import annotations

import logging

import grpc
import pytest

from cloudprovider_grpc.config.settings import Settings
from cloudprovider_grpc.k8s.template import NodeTemplate
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.providers.contract import InstanceState
from cloudprovider_grpc.providers.driver import CloudError, GroupConfig, Machine, MachineDriver
from cloudprovider_grpc.providers.machinery.machines.provider import MachineProvider
from cloudprovider_grpc.server.assembly import start_server
from tests.support.rpc_calls import code_of, make_pod, ts
from tests.support.servers import channel, stub

pytestmark = pytest.mark.integration


class _BareDriver(MachineDriver):
    """A cloud that knows no machine shapes and no prices (like in-tree Vultr or Exoscale)."""

    name = "bare"
    id_prefix = "bare://"

    def groups(self) -> list[GroupConfig]:
        return [GroupConfig("pool", 0, 5)]

    def list_machines(self) -> list[Machine]:
        return [Machine("bare://1", "pool", InstanceState.RUNNING, "bare-1")]

    def create_machine(self, group: str, token: str) -> Machine:
        raise CloudError("read-only test cloud")

    def delete_machine(self, machine: Machine) -> None:
        raise CloudError("read-only test cloud")


def test_optional_rpcs_when_backend_lacks_them() -> None:
    settings = Settings(address="127.0.0.1:0", metrics_address="")
    handle = start_server(settings, provider=MachineProvider(_BareDriver(), inline_workers=True))
    try:
        s = stub(channel(handle))
        un = grpc.StatusCode.UNIMPLEMENTED
        assert code_of(s.NodeGroupTemplateNodeInfo, pb.NodeGroupTemplateNodeInfoRequest(id="pool"))[0] == un
        # GetOptions never answers UNIMPLEMENTED for a known group: OK with no options
        answer = s.NodeGroupGetOptions(pb.NodeGroupAutoscalingOptionsRequest(id="pool"), timeout=5)
        assert not answer.HasField("nodeGroupAutoscalingOptions")
        node = pb.ExternalGrpcNode(providerID="bare://1")
        assert (
            code_of(
                s.PricingNodePrice,
                pb.PricingNodePriceRequest(node=node, startTimestamp=ts(0), endTimestamp=ts(1)),
            )[0]
            == un
        )
        assert (
            code_of(
                s.PricingPodPrice,
                pb.PricingPodPriceRequest(
                    pod_bytes=make_pod("1", "1Gi"), startTimestamp=ts(0), endTimestamp=ts(1)
                ),
            )[0]
            == un
        )
        # the required RPCs still work, GPU ones succeed with empty answers
        assert s.GPULabel(pb.GPULabelRequest()).label == ""
        assert len(s.GetAvailableGPUTypes(pb.GetAvailableGPUTypesRequest()).gpuTypes) == 0
        assert s.NodeGroupForNode(pb.NodeGroupForNodeRequest(node=node)).nodeGroup.id == "pool"
    finally:
        handle.stop(1)


class _BuggyDriver(_BareDriver):
    """A backend with a bug: describing a machine shape blows up."""

    def template(self, group: str):
        raise KeyError("plan 'x1' missing from /secret/path")


def test_a_backend_bug_is_internal_without_details() -> None:
    settings = Settings(address="127.0.0.1:0", metrics_address="")
    handle = start_server(settings, provider=MachineProvider(_BuggyDriver(), inline_workers=True))
    try:
        s = stub(channel(handle))
        code, msg = code_of(s.NodeGroupTemplateNodeInfo, pb.NodeGroupTemplateNodeInfoRequest(id="pool"))
        assert code == grpc.StatusCode.INTERNAL  # never UNKNOWN
        assert (
            msg
            == "NodeGroupTemplateNodeInfo: internal error in cloudprovider-grpc (details in the server log)"
        )
        assert (
            s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="pool")).targetSize == 1
        )  # still serving
    finally:
        handle.stop(1)


class _BadTemplateDriver(_BareDriver):
    """A cloud whose catalogue gives a machine shape Go cannot parse (a negative quantity)."""

    def template(self, group: str) -> NodeTemplate | None:
        return NodeTemplate(capacity={"cpu": "-2", "memory": "4Gi"})


def test_an_invalid_template_is_unimplemented_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    """UNIMPLEMENTED, not INTERNAL: from CA 1.29.0 a group whose template is "not implemented" is
    skipped, while any other error abandons the whole loop on 1.29.0-1.31.3, 1.32.0-1.32.2 and 1.33.0."""
    caplog.set_level(logging.WARNING, logger="cloudprovider_grpc.grpcapi")
    settings = Settings(address="127.0.0.1:0", metrics_address="")
    handle = start_server(settings, provider=MachineProvider(_BadTemplateDriver(), inline_workers=True))
    try:
        s = stub(channel(handle))
        for _ in range(3):
            code, msg = code_of(s.NodeGroupTemplateNodeInfo, pb.NodeGroupTemplateNodeInfoRequest(id="pool"))
            assert code == grpc.StatusCode.UNIMPLEMENTED
            assert msg.startswith("template for node group 'pool' is invalid: ") and "negative" in msg
    finally:
        handle.stop(1)
    warned = [r.getMessage() for r in caplog.records if "is invalid" in r.getMessage()]
    assert len(warned) == 1 and "answered UNIMPLEMENTED" in warned[0], warned
