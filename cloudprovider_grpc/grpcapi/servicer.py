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
from typing import Any, TypeVar

import grpc
from google.protobuf import any_pb2
from google.protobuf.descriptor import MethodDescriptor

from cloudprovider_grpc.config.secrets import redact
from cloudprovider_grpc.core.errors import (
    InvalidArgument,
    NotImplementedByProvider,
    ProviderError,
    Unavailable,
)
from cloudprovider_grpc.grpcapi import rawparse
from cloudprovider_grpc.grpcapi.getoptions import OptionsAnswers
from cloudprovider_grpc.grpcapi.prebuilt import Memo, Prebuilt
from cloudprovider_grpc.grpcapi.wire import group_pb, node_ref, period
from cloudprovider_grpc.ha.handover import WRITES, HandOverRelay
from cloudprovider_grpc.k8s.node import encode_template_node
from cloudprovider_grpc.k8s.resources import parse_pod, pod_requests
from cloudprovider_grpc.k8s.template import NodeTemplate
from cloudprovider_grpc.observability import metrics, tracing
from cloudprovider_grpc.observability.logs import OncePer
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc
from cloudprovider_grpc.providers.contract import CloudProvider, NodeGroup

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["CloudProvider"].full_name
R = TypeVar("R")


class _Timer:
    """Pre-resolved metric tallies per (method, code): label lookups are the costliest part of
    recording a metric, and these RPCs must stay well under a millisecond. Keyed by the status enum
    itself: reading `code.name` on every call cost more than the dictionary lookup."""

    def __init__(self) -> None:
        self._children: dict[tuple[str, grpc.StatusCode], Any] = {}

    def observe(self, method: str, code: grpc.StatusCode, seconds: float) -> None:
        key = (method, code)
        tally = self._children.get(key)
        if tally is None:
            tally = self._children.setdefault(key, metrics.RPC.tally(method, code))
        tally.observe(seconds)


_TIMER = _Timer()


#: longest message we send back: ids are echoed in messages, and a status message travels in HTTP/2
#: metadata, which grpcio caps at 8 KiB by default; a longer one turns NOT_FOUND into RESOURCE_EXHAUSTED
MAX_MESSAGE = 1024
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(32), 127)}


def safe_message(message: str, limit: int = MAX_MESSAGE) -> str:
    """One line, at most `limit` characters, no registered secret: control characters are escaped,
    and an overlong message keeps its head and tail (the echoed input is usually in between) with a
    note of what was cut."""
    line = redact(message).translate(_CONTROL)
    if len(line) <= limit:
        return line
    keep = (limit - 60) // 2
    omitted = len(line) - 2 * keep
    return f"{line[:keep]}...[{omitted} of {len(line)} characters omitted]...{line[-keep:]}"


class ShuttingDown(Unavailable):
    """An RPC that arrived after shutdown began: answered at once and not executed, so the caller
    knows nothing happened (a CANCELLED call leaves it guessing)."""


class Gate:
    """Admission of RPCs. Open while serving; `close()` at shutdown makes new RPCs answer UNAVAILABLE
    without running, and `wait_idle()` lets shutdown wait for the admitted ones to finish."""

    def __init__(self) -> None:
        # over a plain Lock (the default is an RLock): every RPC enters and leaves, and it is cheaper
        self._cond = threading.Condition(threading.Lock())
        self._open = True
        self._active = 0
        self._last_arrival = 0.0

    def enter(self) -> bool:
        with self._cond:
            self._last_arrival = time.monotonic()
            if self._open:
                self._active += 1
            return self._open

    def leave(self) -> None:
        with self._cond:
            self._active -= 1
            if self._active == 0:
                self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._open = False

    @property
    def active(self) -> int:
        return self._active

    def wait_idle(self, timeout: float) -> bool:
        """True when no admitted RPC is running any more; False when `timeout` ran out first."""
        with self._cond:
            return self._cond.wait_for(lambda: self._active == 0, timeout=max(timeout, 0.0))

    def wait_quiet(self, quiet: float, deadline: float) -> bool:
        """Wait until no admitted RPC runs and none arrived for `quiet` seconds (clients told
        UNAVAILABLE have gone away), or until the monotonic `deadline`. Closing the port while calls
        still arrive would cut those off as CANCELLED, which leaves the caller guessing."""
        while True:
            now = time.monotonic()
            if now >= deadline:
                return False
            if not self.wait_idle(deadline - now):
                return False
            since = time.monotonic() - self._last_arrival
            if since >= quiet:
                return True
            time.sleep(min(quiet - since, max(deadline - time.monotonic(), 0.0)))


def _invoke(method: str, context: grpc.ServicerContext, call: Callable[..., R], *args: Any) -> R:
    """The one place that turns a handler's outcome (`call(*args)`) into a gRPC status and records its
    metrics. Arguments are passed through rather than bound in a closure: no allocation per call.

    ProviderError carries its status and a caller-safe message; anything else is a bug and becomes
    INTERNAL with a generic message (the traceback goes to the log only), so CA never sees UNKNOWN."""
    start = time.perf_counter()
    code = grpc.StatusCode.OK
    span = tracing.start_rpc(SERVICE_NAME, method) if tracing.TRACER is not None else None
    try:
        return call(*args)
    except ProviderError as exc:
        code = exc.code
        message = safe_message(exc.message)
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL) and not isinstance(
            exc, ShuttingDown
        ):
            log.warning("%s failed: %s", method, message)
        context.abort(code, message)
    except Exception:
        code = grpc.StatusCode.INTERNAL
        log.exception("%s failed unexpectedly", method)
        context.abort(code, f"{method}: internal error in cloudprovider-grpc (details in the server log)")
    finally:
        _TIMER.observe(method, code, time.perf_counter() - start)
        if span is not None:
            tracing.end_rpc(span, code)
    raise AssertionError("unreachable")  # context.abort always raises


def _rpc(fn: Callable[..., R]) -> Callable[..., R]:
    """A typed handler (request message in, response message out) guarded by `_invoke`; the
    undecorated function stays reachable as `__wrapped__` for the raw-bytes path."""
    method = fn.__name__

    @functools.wraps(fn)
    def wrapper(self: CloudProviderServicer, request: Any, context: grpc.ServicerContext) -> R:
        response = _invoke(method, context, fn, self, request, context)
        return response.message if isinstance(response, Prebuilt) else response

    return wrapper


#: the RPCs CA asks per node, which the compiled front answers from its cache
CACHEABLE = ("NodeGroupGetOptions", "NodeGroupForNode", "NodeGroupTargetSize")
#: the trailer carrying the provider's state version to the front (stripped there, never seen by CA)
VERSION_TRAILER = "cpg-state-version"


def _send_version(
    context: grpc.ServicerContext, before: int | None, after: int | None, cacheable: bool
) -> None:
    """`N`: the state is at version N and this answer belongs to it; `N!`: raise to N, but do not
    store this answer (the state changed while it was computed, or the RPC is not cacheable)."""
    if after is None:
        return
    store = cacheable and before == after
    context.set_trailing_metadata(((VERSION_TRAILER, str(after) if store else f"{after}!"),))


def _raw_call(servicer: CloudProviderServicer, method: MethodDescriptor) -> Callable[[bytes, Any], bytes]:
    """A handler that gets the request as bytes and returns bytes: `handle(raw, context)`, served by
    grpcio (`method_handlers`) and by the compiled front's link (front/link.py) alike.

    Why not let grpcio deserialize: a body that does not parse makes grpcio log a full traceback at
    error level and keeps about 19 KB per failed request alive for good (RSS 58 -> 524 MB over 50,000
    fuzzed requests; it reproduces on a bare grpcio server). Parsing here answers INVALID_ARGUMENT with
    one line and costs nothing afterwards. A handler may also return ready-made response bytes."""
    name = method.name
    impl = getattr(type(servicer), name).__wrapped__
    parse_or_none = rawparse.parser(method)

    def parse(raw: bytes) -> Any:
        request = parse_or_none(raw)
        if request is None:
            raise InvalidArgument(rawparse.malformed_message(method, len(raw)))
        return request

    gate = servicer.gate
    provider = servicer.provider
    # Behind the compiled front, every answer carries the provider's state version in its trailer
    # (see cloudprovider_grpc/front), read AFTER the call ran, so the front knows of a change made by
    # a write or Refresh before the caller does. A read is cacheable only when the version was the
    # same before and after it was computed: then it belongs to that version.
    behind_front = servicer.behind_front
    cacheable = name in CACHEABLE
    # with leader election, writes (and, once a hand-over began, every call) pass the hand-over relay
    relay = servicer.relay
    write = name in WRITES

    def call(raw: bytes, context: grpc.ServicerContext) -> bytes:
        if not gate.enter():
            raise ShuttingDown(f"{name}: the server is shutting down; the request was not executed")
        before = provider.state_version() if behind_front and cacheable else None
        try:
            if relay is not None and (write or relay.engaged):
                response = relay.call(name, raw, context, lambda: impl(servicer, parse(raw), context))
            else:
                response = impl(servicer, parse(raw), context)
        finally:
            gate.leave()
            if behind_front:
                _send_version(context, before, provider.state_version(), cacheable)
        if isinstance(response, Prebuilt):
            return response.raw
        return response if isinstance(response, bytes) else response.SerializeToString()

    def handle(raw: bytes, context: grpc.ServicerContext) -> bytes:
        return _invoke(name, context, call, raw, context)

    return handle


def raw_calls(servicer: CloudProviderServicer) -> dict[str, Callable[[bytes, Any], bytes]]:
    """Every RPC of the service descriptor as `handle(raw request, context) -> raw response`, by
    method name: the one implementation behind both transports."""
    service = pb.DESCRIPTOR.services_by_name["CloudProvider"]
    return {m.name: _raw_call(servicer, m) for m in service.methods}


def method_handlers(servicer: CloudProviderServicer) -> dict[str, grpc.RpcMethodHandler]:
    """Every RPC of the service descriptor as a grpcio raw-bytes handler, by method name."""
    return {name: grpc.unary_unary_rpc_method_handler(call) for name, call in raw_calls(servicer).items()}


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
        #: admission of RPCs over the network (see Gate and server.ServerHandle.stop)
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
    @_rpc
    def NodeGroups(
        self, request: pb.NodeGroupsRequest, context: grpc.ServicerContext
    ) -> pb.NodeGroupsResponse:
        groups = self.provider.node_groups()
        key, answer = self._groups_answer
        if key is not groups:
            answer = pb.NodeGroupsResponse(nodeGroups=[group_pb(g) for g in groups])
            self._groups_answer = (groups, answer)
        return answer

    @_rpc
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

    @_rpc
    def PricingNodePrice(
        self, request: pb.PricingNodePriceRequest, context: grpc.ServicerContext
    ) -> pb.PricingNodePriceResponse:
        start, end = period(request, "startTimestamp", "endTimestamp")
        return pb.PricingNodePriceResponse(price=self.provider.node_price(node_ref(request.node), start, end))

    @_rpc
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
    ) -> Prebuilt:
        return self._target_answers.get(self.provider.target_size(request.id), _target_answer)

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
        self.provider.delete_nodes(request.id, [node_ref(n) for n in request.nodes])
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
