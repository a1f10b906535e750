"""The externalgrpc CloudProvider servicer: each RPC mapped onto the provider contract.

This is the only module that knows both the wire schema and the contract. It owns:
- old/new field compatibility (responses fill the legacy and the current fields; requests read the
  current field first and fall back to the legacy one — see proto/.../externalgrpc.proto);
- error mapping: ProviderError subclasses carry their status code; anything else becomes INTERNAL
  with a generic message (the traceback goes to the log, never to the caller), so CA never sees
  UNKNOWN or a stack trace;
- per-RPC metrics (count and latency by method and status code).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import grpc
from google.protobuf import any_pb2, duration_pb2, timestamp_pb2

from cloudprovider_grpc import metrics
from cloudprovider_grpc.errors import InvalidArgument, NotImplementedByProvider, ProviderError
from cloudprovider_grpc.k8s.node import encode_template_node
from cloudprovider_grpc.k8s.resources import parse_pod, pod_requests
from cloudprovider_grpc.k8s.template import NodeTemplate
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc
from cloudprovider_grpc.providers.contract import AutoscalingOptions, CloudProvider, NodeGroup, NodeRef

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["CloudProvider"].full_name
_NS = 1_000_000_000
R = TypeVar("R")


class _Timer:
    """Pre-resolved metric children per (method, code): label lookups are the costliest part of
    recording a metric, and these RPCs must stay well under a millisecond."""

    def __init__(self) -> None:
        self._children: dict[tuple[str, str], tuple[Any, Any]] = {}
        self._lock = threading.Lock()

    def observe(self, method: str, code: grpc.StatusCode, seconds: float) -> None:
        key = (method, code.name)
        child = self._children.get(key)
        if child is None:
            with self._lock:
                child = self._children.setdefault(
                    key, (metrics.RPC_REQUESTS.labels(*key), metrics.RPC_LATENCY.labels(*key))
                )
        child[0].inc()
        child[1].observe(seconds)


_TIMER = _Timer()


def _rpc(fn: Callable[..., R]) -> Callable[..., R]:
    """Map provider errors to statuses, hide unexpected ones, and record metrics."""
    method = fn.__name__

    @functools.wraps(fn)
    def wrapper(self: CloudProviderServicer, request: Any, context: grpc.ServicerContext) -> R:
        start = time.perf_counter()
        code = grpc.StatusCode.OK
        try:
            return fn(self, request, context)
        except ProviderError as exc:
            code = exc.code
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL):
                log.warning("%s failed: %s", method, exc.message)
            context.abort(code, exc.message)
        except Exception:
            code = grpc.StatusCode.INTERNAL
            log.exception("%s failed unexpectedly", method)
            context.abort(code, f"{method}: internal error in cloudprovider-grpc (details in the server log)")
        finally:
            _TIMER.observe(method, code, time.perf_counter() - start)
        raise AssertionError("unreachable")  # context.abort always raises

    return wrapper


def _node_ref(node: pb.ExternalGrpcNode) -> NodeRef:
    # the request's map fields are read-only Mappings already; copying them cost more than the lookup
    return NodeRef(node.providerID, node.name, node.labels, node.annotations)


def _group_pb(group: NodeGroup) -> pb.NodeGroup:
    return pb.NodeGroup(id=group.id, minSize=group.min_size, maxSize=group.max_size, debug=group.debug)


def _time(msg: Any, new: str, old: str) -> datetime | None:
    for name in (new, old):
        if msg.HasField(name):
            ts: timestamp_pb2.Timestamp = getattr(msg, name)
            return datetime.fromtimestamp(ts.seconds + ts.nanos / 1e9, tz=UTC)
    return None


def _period(msg: Any, new_start: str, new_end: str) -> tuple[datetime, datetime]:
    start = _time(msg, new_start, "startTime")
    end = _time(msg, new_end, "endTime")
    if start is None or end is None:
        raise InvalidArgument(f"{new_start} and {new_end} are required")
    if end < start:
        raise InvalidArgument(f"{new_end} ({end.isoformat()}) is before {new_start} ({start.isoformat()})")
    return start, end


def _seconds(opts: pb.NodeGroupAutoscalingOptions, new: str, old: str, default: float) -> float:
    if opts.HasField(new):
        d: duration_pb2.Duration = getattr(opts, new)
        return d.seconds + d.nanos / 1e9
    if opts.HasField(old):
        return getattr(opts, old).duration / _NS  # legacy meta/v1 Duration holds nanoseconds
    return default


def options_from_pb(opts: pb.NodeGroupAutoscalingOptions) -> AutoscalingOptions:
    base = AutoscalingOptions()
    return AutoscalingOptions(
        scale_down_utilization_threshold=opts.scaleDownUtilizationThreshold,
        scale_down_gpu_utilization_threshold=opts.scaleDownGpuUtilizationThreshold,
        scale_down_unneeded_time=_seconds(
            opts, "scaleDownUnneededDuration", "scaleDownUnneededTime", base.scale_down_unneeded_time
        ),
        scale_down_unready_time=_seconds(
            opts, "scaleDownUnreadyDuration", "scaleDownUnreadyTime", base.scale_down_unready_time
        ),
        max_node_provision_time=_seconds(
            opts, "MaxNodeProvisionDuration", "MaxNodeProvisionTime", base.max_node_provision_time
        ),
        zero_or_max_node_scaling=opts.zeroOrMaxNodeScaling,
        ignore_daemonsets_utilization=opts.ignoreDaemonSetsUtilization,
    )


def options_to_pb(o: AutoscalingOptions) -> pb.NodeGroupAutoscalingOptions:
    """Both duration encodings, always present: CA <= 1.34.1 dereferences 3/4/5 without nil checks."""

    def new(seconds: float) -> duration_pb2.Duration:
        whole = int(seconds)
        return duration_pb2.Duration(seconds=whole, nanos=round((seconds - whole) * _NS))

    def old(seconds: float) -> pb.LegacyDuration:
        return pb.LegacyDuration(duration=round(seconds * _NS))

    return pb.NodeGroupAutoscalingOptions(
        scaleDownUtilizationThreshold=o.scale_down_utilization_threshold,
        scaleDownGpuUtilizationThreshold=o.scale_down_gpu_utilization_threshold,
        scaleDownUnneededTime=old(o.scale_down_unneeded_time),
        scaleDownUnreadyTime=old(o.scale_down_unready_time),
        MaxNodeProvisionTime=old(o.max_node_provision_time),
        zeroOrMaxNodeScaling=o.zero_or_max_node_scaling,
        ignoreDaemonSetsUtilization=o.ignore_daemonsets_utilization,
        scaleDownUnneededDuration=new(o.scale_down_unneeded_time),
        scaleDownUnreadyDuration=new(o.scale_down_unready_time),
        MaxNodeProvisionDuration=new(o.max_node_provision_time),
    )


class CloudProviderServicer(pb_grpc.CloudProviderServicer):
    """All 15 RPCs over one CloudProvider."""

    def __init__(self, provider: CloudProvider) -> None:
        self.provider = provider
        self._templates: dict[str, tuple[NodeTemplate, bytes]] = {}
        self._templates_lock = threading.Lock()
        self._groups_answer: tuple[object, pb.NodeGroupsResponse] = (None, pb.NodeGroupsResponse())
        # CA asks NodeGroupForNode for every node several times a loop: answers are reused per group
        # object (providers return the same NodeGroup object while the group is unchanged)
        self._for_node_answers: dict[str, tuple[NodeGroup, pb.NodeGroupForNodeResponse]] = {}

    # ---- cloud-provider level ----
    @_rpc
    def NodeGroups(
        self, request: pb.NodeGroupsRequest, context: grpc.ServicerContext
    ) -> pb.NodeGroupsResponse:
        groups = self.provider.node_groups()
        key, answer = self._groups_answer
        if key is not groups:
            answer = pb.NodeGroupsResponse(nodeGroups=[_group_pb(g) for g in groups])
            self._groups_answer = (groups, answer)
        return answer

    @_rpc
    def NodeGroupForNode(
        self, request: pb.NodeGroupForNodeRequest, context: grpc.ServicerContext
    ) -> pb.NodeGroupForNodeResponse:
        group = self.provider.node_group_for_node(_node_ref(request.node))
        if group is None:
            # an empty NodeGroup (id "") tells CA the node belongs to no group (upstream fix #7334)
            return pb.NodeGroupForNodeResponse(nodeGroup=pb.NodeGroup())
        cached = self._for_node_answers.get(group.id)
        if cached is None or cached[0] is not group:
            cached = (group, pb.NodeGroupForNodeResponse(nodeGroup=_group_pb(group)))
            self._for_node_answers[group.id] = cached
        return cached[1]

    @_rpc
    def PricingNodePrice(
        self, request: pb.PricingNodePriceRequest, context: grpc.ServicerContext
    ) -> pb.PricingNodePriceResponse:
        start, end = _period(request, "startTimestamp", "endTimestamp")
        return pb.PricingNodePriceResponse(
            price=self.provider.node_price(_node_ref(request.node), start, end)
        )

    @_rpc
    def PricingPodPrice(
        self, request: pb.PricingPodPriceRequest, context: grpc.ServicerContext
    ) -> pb.PricingPodPriceResponse:
        raw = request.pod_bytes or request.pod  # CA >= 1.34.2 sends pod_bytes; older CAs the embedded Pod
        if not raw:
            raise InvalidArgument("pod_bytes (or the legacy pod field) is required")
        start, end = _period(request, "startTimestamp", "endTimestamp")
        try:
            pod = parse_pod(raw)
        except ValueError as exc:
            raise InvalidArgument(f"pod_bytes is not a valid v1.Pod: {exc}") from None
        requests = {name: float(v) for name, v in pod_requests(pod).items()}
        return pb.PricingPodPriceResponse(price=self.provider.pod_price(requests, start, end))

    @_rpc
    def GPULabel(self, request: pb.GPULabelRequest, context: grpc.ServicerContext) -> pb.GPULabelResponse:
        return pb.GPULabelResponse(label=self.provider.gpu_label())

    @_rpc
    def GetAvailableGPUTypes(
        self, request: pb.GetAvailableGPUTypesRequest, context: grpc.ServicerContext
    ) -> pb.GetAvailableGPUTypesResponse:
        resp = pb.GetAvailableGPUTypesResponse()
        for gpu_type in self.provider.gpu_types():
            resp.gpuTypes[gpu_type].CopyFrom(any_pb2.Any())  # CA reads only the keys
        return resp

    @_rpc
    def Cleanup(self, request: pb.CleanupRequest, context: grpc.ServicerContext) -> pb.CleanupResponse:
        self.provider.cleanup()
        return pb.CleanupResponse()

    @_rpc
    def Refresh(self, request: pb.RefreshRequest, context: grpc.ServicerContext) -> pb.RefreshResponse:
        self.provider.refresh()
        return pb.RefreshResponse()

    # ---- node-group level ----
    @_rpc
    def NodeGroupTargetSize(
        self, request: pb.NodeGroupTargetSizeRequest, context: grpc.ServicerContext
    ) -> pb.NodeGroupTargetSizeResponse:
        return pb.NodeGroupTargetSizeResponse(targetSize=self.provider.target_size(request.id))

    @_rpc
    def NodeGroupIncreaseSize(
        self, request: pb.NodeGroupIncreaseSizeRequest, context: grpc.ServicerContext
    ) -> pb.NodeGroupIncreaseSizeResponse:
        self.provider.increase_size(request.id, request.delta)
        return pb.NodeGroupIncreaseSizeResponse()

    @_rpc
    def NodeGroupDeleteNodes(
        self, request: pb.NodeGroupDeleteNodesRequest, context: grpc.ServicerContext
    ) -> pb.NodeGroupDeleteNodesResponse:
        if not request.nodes:
            raise InvalidArgument("nodes must name at least one node")
        self.provider.delete_nodes(request.id, [_node_ref(n) for n in request.nodes])
        return pb.NodeGroupDeleteNodesResponse()

    @_rpc
    def NodeGroupDecreaseTargetSize(
        self, request: pb.NodeGroupDecreaseTargetSizeRequest, context: grpc.ServicerContext
    ) -> pb.NodeGroupDecreaseTargetSizeResponse:
        self.provider.decrease_target_size(request.id, request.delta)
        return pb.NodeGroupDecreaseTargetSizeResponse()

    @_rpc
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

    @_rpc
    def NodeGroupTemplateNodeInfo(
        self, request: pb.NodeGroupTemplateNodeInfoRequest, context: grpc.ServicerContext
    ) -> pb.NodeGroupTemplateNodeInfoResponse:
        raw = self._template_bytes(request.id)
        # nodeInfo (legacy, CA <= 1.34.x) and nodeBytes (CA >= 1.34.2) carry the same v1.Node bytes
        return pb.NodeGroupTemplateNodeInfoResponse(nodeInfo=raw, nodeBytes=raw)

    @_rpc
    def NodeGroupGetOptions(
        self, request: pb.NodeGroupAutoscalingOptionsRequest, context: grpc.ServicerContext
    ) -> pb.NodeGroupAutoscalingOptionsResponse:
        d = request.defaults
        if (
            request.HasField("defaults")
            and d.HasField("scaleDownUnneededTime")
            and not d.HasField("MaxNodeProvisionTime")
            and not d.HasField("MaxNodeProvisionDuration")
        ):
            # CA 1.25-1.28 never read MaxNodeProvisionTime from the answer and use 0 (issue #5935);
            # leaving the RPC unimplemented makes them keep their own defaults instead
            self.provider.target_size(request.id)  # still NOT_FOUND for unknown groups
            raise NotImplementedByProvider(
                "per-group options are not served to cluster-autoscaler < 1.29 (kubernetes/autoscaler#5935)"
            )
        defaults = options_from_pb(d) if request.HasField("defaults") else AutoscalingOptions()
        merged = self.provider.options(request.id, defaults)
        return pb.NodeGroupAutoscalingOptionsResponse(nodeGroupAutoscalingOptions=options_to_pb(merged))

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
            raise ProviderError(f"template for node group {group_id!r} is invalid: {exc}") from None
        with self._templates_lock:
            self._templates[group_id] = (template, raw)
        return raw
