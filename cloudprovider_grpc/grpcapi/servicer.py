"""The externalgrpc CloudProvider servicer: each RPC mapped onto the provider contract.

This is the only module that knows both the wire schema and the contract, and each method does no
more than map its request onto the contract and the answer back. What surrounds the methods lives
where its concern says: the field conversions, legacy and current fields alike (wire.py); answers
kept between calls (answers.py, getoptions.py); the status mapping and per-RPC metrics (outcome.py,
applied by `@rpc`); the raw-bytes handlers that parse requests and serve every caller
(handlers.py); admission at shutdown (admission.py).
"""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2

from cloudprovider_grpc.core.errors import InvalidArgument
from cloudprovider_grpc.grpcapi.admission import Gate
from cloudprovider_grpc.grpcapi.answers import Answers
from cloudprovider_grpc.grpcapi.getoptions import OptionsAnswers
from cloudprovider_grpc.grpcapi.outcome import rpc
from cloudprovider_grpc.grpcapi.prebuilt import Prebuilt
from cloudprovider_grpc.grpcapi.template_sources import TemplatelessWarning
from cloudprovider_grpc.grpcapi.wire import node_ref, nodes_pb, period, pod_bytes, pod_requests_of
from cloudprovider_grpc.ha.handover import HandOverRelay
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc
from cloudprovider_grpc.providers.contract import CloudProvider


class CloudProviderServicer(pb_grpc.CloudProviderServicer):
    """All 15 RPCs over one CloudProvider."""

    def __init__(
        self, provider: CloudProvider, *, behind_front: bool = False, relay: HandOverRelay | None = None
    ) -> None:
        self.provider = provider
        #: a leader-elected replica's hand-over relay (handover.py), else None
        self.relay = relay
        #: served through the compiled front: answers carry the state version in their trailer
        self.behind_front = behind_front
        #: admission of RPCs over the network (see admission.Gate and server.ServerHandle.stop)
        self.gate = Gate()
        self._answers = Answers()
        self._options = OptionsAnswers(provider)
        self._templateless = TemplatelessWarning()

    # ---- cloud-provider level ----
    @rpc
    def NodeGroups(
        self, request: pb.NodeGroupsRequest, context: grpc.ServicerContext
    ) -> pb.NodeGroupsResponse:
        return self._answers.node_groups(self.provider.node_groups())

    @rpc
    def NodeGroupForNode(
        self, request: pb.NodeGroupForNodeRequest, context: grpc.ServicerContext
    ) -> Prebuilt:
        return self._answers.for_node(self.provider.node_group_for_node(node_ref(request.node)))

    @rpc
    def PricingNodePrice(
        self, request: pb.PricingNodePriceRequest, context: grpc.ServicerContext
    ) -> pb.PricingNodePriceResponse:
        start, end = period(request, "startTimestamp", "endTimestamp")
        return pb.PricingNodePriceResponse(price=self.provider.node_price(node_ref(request.node), start, end))

    @rpc
    def PricingPodPrice(
        self, request: pb.PricingPodPriceRequest, context: grpc.ServicerContext
    ) -> pb.PricingPodPriceResponse:
        raw = pod_bytes(request)
        start, end = period(request, "startTimestamp", "endTimestamp")
        return pb.PricingPodPriceResponse(price=self.provider.pod_price(pod_requests_of(raw), start, end))

    @rpc
    def GPULabel(self, request: pb.GPULabelRequest, context: grpc.ServicerContext) -> pb.GPULabelResponse:
        return pb.GPULabelResponse(label=self.provider.gpu_label())

    @rpc
    def GetAvailableGPUTypes(
        self, request: pb.GetAvailableGPUTypesRequest, context: grpc.ServicerContext
    ) -> pb.GetAvailableGPUTypesResponse:
        resp = pb.GetAvailableGPUTypesResponse()
        for gpu_type in self.provider.gpu_types():
            resp.gpuTypes[gpu_type].CopyFrom(any_pb2.Any())  # CA reads only the keys
        return resp

    @rpc
    def Cleanup(self, request: pb.CleanupRequest, context: grpc.ServicerContext) -> pb.CleanupResponse:
        self.provider.cleanup()
        return pb.CleanupResponse()

    @rpc
    def Refresh(self, request: pb.RefreshRequest, context: grpc.ServicerContext) -> pb.RefreshResponse:
        self.provider.refresh()
        self._templateless.check(self.provider)  # from memory: the listing just made is all it reads
        return pb.RefreshResponse()

    # ---- node-group level ----
    @rpc
    def NodeGroupTargetSize(
        self, request: pb.NodeGroupTargetSizeRequest, context: grpc.ServicerContext
    ) -> Prebuilt:
        return self._answers.target_size(self.provider.target_size(self._gid(request.id)))

    @rpc
    def NodeGroupIncreaseSize(
        self, request: pb.NodeGroupIncreaseSizeRequest, context: grpc.ServicerContext
    ) -> pb.NodeGroupIncreaseSizeResponse:
        self.provider.increase_size(self._gid(request.id), request.delta)
        return pb.NodeGroupIncreaseSizeResponse()

    @rpc
    def NodeGroupDeleteNodes(
        self, request: pb.NodeGroupDeleteNodesRequest, context: grpc.ServicerContext
    ) -> pb.NodeGroupDeleteNodesResponse:
        if not request.nodes:
            raise InvalidArgument("nodes must name at least one node")
        self.provider.delete_nodes(self._gid(request.id), [node_ref(n) for n in request.nodes])
        return pb.NodeGroupDeleteNodesResponse()

    @rpc
    def NodeGroupDecreaseTargetSize(
        self, request: pb.NodeGroupDecreaseTargetSizeRequest, context: grpc.ServicerContext
    ) -> pb.NodeGroupDecreaseTargetSizeResponse:
        self.provider.decrease_target_size(self._gid(request.id), request.delta)
        return pb.NodeGroupDecreaseTargetSizeResponse()

    @rpc
    def NodeGroupNodes(
        self, request: pb.NodeGroupNodesRequest, context: grpc.ServicerContext
    ) -> pb.NodeGroupNodesResponse:
        return nodes_pb(self.provider.nodes(self._gid(request.id)))

    @rpc
    def NodeGroupTemplateNodeInfo(
        self, request: pb.NodeGroupTemplateNodeInfoRequest, context: grpc.ServicerContext
    ) -> pb.NodeGroupTemplateNodeInfoResponse:
        raw = self._template_bytes(self._gid(request.id))
        # nodeInfo (legacy, CA <= 1.34.x) and nodeBytes (CA >= 1.34.2) carry the same v1.Node bytes
        return pb.NodeGroupTemplateNodeInfoResponse(nodeInfo=raw, nodeBytes=raw)

    @rpc
    def NodeGroupGetOptions(
        self, request: pb.NodeGroupAutoscalingOptionsRequest, context: grpc.ServicerContext
    ) -> Prebuilt:
        """Never UNIMPLEMENTED for a known group: see getoptions.py for what each CA release is
        answered and why."""
        request.id = self._gid(request.id)
        return self._options.answer(request)

    def _gid(self, ref: str) -> str:
        """A group id from what the caller sent: CA sends ids; a person at `cloudprovider-grpc
        scale` may type the cloud's name for the group instead (contract.resolve_group)."""
        return self.provider.resolve_group(ref)

    def _template_bytes(self, group_id: str) -> bytes:
        """The encoded template node, reused while the provider's template is unchanged (answers.py)."""
        return self._answers.template_node(group_id, self.provider.template(group_id))
