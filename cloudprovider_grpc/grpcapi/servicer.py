"""The externalgrpc CloudProvider servicer: each RPC mapped onto the provider contract.

This is the only module that knows both the wire schema and the contract: each method maps its
request onto one call of the provider contract and the answer back, reading and filling the legacy
and the current fields alike (wire.py). Around the methods, and not in them: the status mapping and
per-RPC metrics (outcome.py, applied by `@rpc`), the raw-bytes handlers that parse requests and
serve both transports (handlers.py), and admission at shutdown (admission.py). Answers asked per node
are encoded once and reused (prebuilt.py), so that the per-node RPCs cost next to nothing.
"""

from __future__ import annotations

import logging
import threading

import grpc
from google.protobuf import any_pb2

from cloudprovider_grpc.core.errors import InvalidArgument, NotImplementedByProvider
from cloudprovider_grpc.grpcapi.admission import Gate
from cloudprovider_grpc.grpcapi.getoptions import OptionsAnswers
from cloudprovider_grpc.grpcapi.outcome import rpc, safe_message
from cloudprovider_grpc.grpcapi.prebuilt import Memo, Prebuilt
from cloudprovider_grpc.grpcapi.wire import group_pb, node_ref, period
from cloudprovider_grpc.ha.handover import HandOverRelay
from cloudprovider_grpc.k8s.node import encode_template_node
from cloudprovider_grpc.k8s.resources import parse_pod, pod_requests
from cloudprovider_grpc.k8s.template import NodeTemplate
from cloudprovider_grpc.observability.logs import OncePer
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc
from cloudprovider_grpc.providers.contract import CloudProvider, NodeGroup

log = logging.getLogger(__name__)


#: an empty NodeGroup (id "") tells CA the node belongs to no group (upstream fix #7334)
_NO_GROUP = Prebuilt.of(pb.NodeGroupForNodeResponse(nodeGroup=pb.NodeGroup()))


def _target_answer(size: int) -> Prebuilt:
    return Prebuilt.of(pb.NodeGroupTargetSizeResponse(targetSize=size))


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
        self._templates: dict[str, tuple[NodeTemplate, bytes]] = {}
        self._templates_lock = threading.Lock()
        self._groups_answer: tuple[object, pb.NodeGroupsResponse] = (None, pb.NodeGroupsResponse())
        # CA asks NodeGroupForNode for every node several times a loop: answers are reused per group
        # object (providers return the same NodeGroup object while the group is unchanged)
        self._for_node_answers: dict[str, tuple[NodeGroup, Prebuilt]] = {}
        # the per-node RPCs' answers by value (see Prebuilt), each a pure function of its key
        self._target_answers: Memo[int, Prebuilt] = Memo(4096)
        self._options = OptionsAnswers(provider)
        self._invalid_templates = OncePer(60.0)

    # ---- cloud-provider level ----
    @rpc
    def NodeGroups(
        self, request: pb.NodeGroupsRequest, context: grpc.ServicerContext
    ) -> pb.NodeGroupsResponse:
        groups = self.provider.node_groups()
        key, answer = self._groups_answer
        if key is not groups:
            answer = pb.NodeGroupsResponse(nodeGroups=[group_pb(g) for g in groups])
            self._groups_answer = (groups, answer)
        return answer

    @rpc
    def NodeGroupForNode(
        self, request: pb.NodeGroupForNodeRequest, context: grpc.ServicerContext
    ) -> Prebuilt:
        group = self.provider.node_group_for_node(node_ref(request.node))
        if group is None:
            return _NO_GROUP
        cached = self._for_node_answers.get(group.id)
        if cached is None or cached[0] is not group:
            cached = (group, Prebuilt.of(pb.NodeGroupForNodeResponse(nodeGroup=group_pb(group))))
            self._for_node_answers[group.id] = cached
        return cached[1]

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
        raw = request.pod_bytes or request.pod  # CA >= 1.34.2 sends pod_bytes; older CAs the embedded Pod
        if not raw:
            raise InvalidArgument("pod_bytes (or the legacy pod field) is required")
        start, end = period(request, "startTimestamp", "endTimestamp")
        try:
            pod = parse_pod(raw)
        except ValueError as exc:
            raise InvalidArgument(f"pod_bytes is not a valid v1.Pod: {exc}") from None
        try:
            requests = {name: float(v) for name, v in pod_requests(pod).items()}
        except OverflowError:  # "1e1000" is a valid Quantity, but no price can be computed from it
            raise InvalidArgument("pod_bytes: the pod's resource requests are too large to price") from None
        return pb.PricingPodPriceResponse(price=self.provider.pod_price(requests, start, end))

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
        return pb.RefreshResponse()

    # ---- node-group level ----
    @rpc
    def NodeGroupTargetSize(
        self, request: pb.NodeGroupTargetSizeRequest, context: grpc.ServicerContext
    ) -> Prebuilt:
        return self._target_answers.get(self.provider.target_size(request.id), _target_answer)

    @rpc
    def NodeGroupIncreaseSize(
        self, request: pb.NodeGroupIncreaseSizeRequest, context: grpc.ServicerContext
    ) -> pb.NodeGroupIncreaseSizeResponse:
        self.provider.increase_size(request.id, request.delta)
        return pb.NodeGroupIncreaseSizeResponse()

    @rpc
    def NodeGroupDeleteNodes(
        self, request: pb.NodeGroupDeleteNodesRequest, context: grpc.ServicerContext
    ) -> pb.NodeGroupDeleteNodesResponse:
        if not request.nodes:
            raise InvalidArgument("nodes must name at least one node")
        self.provider.delete_nodes(request.id, [node_ref(n) for n in request.nodes])
        return pb.NodeGroupDeleteNodesResponse()

    @rpc
    def NodeGroupDecreaseTargetSize(
        self, request: pb.NodeGroupDecreaseTargetSizeRequest, context: grpc.ServicerContext
    ) -> pb.NodeGroupDecreaseTargetSizeResponse:
        self.provider.decrease_target_size(request.id, request.delta)
        return pb.NodeGroupDecreaseTargetSizeResponse()

    @rpc
    def NodeGroupNodes(
        self, request: pb.NodeGroupNodesRequest, context: grpc.ServicerContext
    ) -> pb.NodeGroupNodesResponse:
        resp = pb.NodeGroupNodesResponse()
        for inst in self.provider.nodes(request.id):
            out = resp.instances.add(id=inst.id)
            out.status.instanceState = int(inst.state)  # type: ignore[assignment]  # a proto enum field
            if inst.error is not None:
                out.status.errorInfo.errorCode = inst.error.code
                out.status.errorInfo.errorMessage = inst.error.message
                out.status.errorInfo.instanceErrorClass = int(inst.error.error_class)
        return resp

    @rpc
    def NodeGroupTemplateNodeInfo(
        self, request: pb.NodeGroupTemplateNodeInfoRequest, context: grpc.ServicerContext
    ) -> pb.NodeGroupTemplateNodeInfoResponse:
        raw = self._template_bytes(request.id)
        # nodeInfo (legacy, CA <= 1.34.x) and nodeBytes (CA >= 1.34.2) carry the same v1.Node bytes
        return pb.NodeGroupTemplateNodeInfoResponse(nodeInfo=raw, nodeBytes=raw)

    @rpc
    def NodeGroupGetOptions(
        self, request: pb.NodeGroupAutoscalingOptionsRequest, context: grpc.ServicerContext
    ) -> Prebuilt:
        """Never UNIMPLEMENTED for a known group: see getoptions.py for what each CA release is
        answered and why."""
        return self._options.answer(request)

    def _template_bytes(self, group_id: str) -> bytes:
        """The encoded template node, reused while the provider's template is unchanged.

        The rule: the cached bytes are reused when the provider returns the same template object
        (the shared machinery caches each group's template until the catalogue reloads) or an equal
        one (a backend that builds a new object per call); anything else is encoded afresh."""
        template = self.provider.template(group_id)
        cached = self._templates.get(group_id)
        if cached is not None and (cached[0] is template or cached[0] == template):
            return cached[1]
        try:
            raw = encode_template_node(template, group_id)
        except ValueError as exc:
            # UNIMPLEMENTED, not INTERNAL: from 1.32 CA skips a group whose template is "not
            # implemented" but abandons the whole template build, and so its loop, on any other
            # error (cluster-autoscaler-1.32.0 processors/nodeinfosprovider/mixed_nodeinfos_processor.go);
            # releases before 1.32 abandon it on both
            message = f"template for node group {group_id!r} is invalid: {exc}"
            suppressed = self._invalid_templates.due()
            if suppressed is not None:
                log.warning(
                    "NodeGroupTemplateNodeInfo: %s; answered UNIMPLEMENTED (%d more since the last "
                    "warning; at most one warning per %.0fs)",
                    safe_message(message),
                    suppressed,
                    self._invalid_templates.interval,
                )
            raise NotImplementedByProvider(message) from None
        with self._templates_lock:
            self._templates[group_id] = (template, raw)
        return raw
