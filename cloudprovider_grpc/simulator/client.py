"""A cluster-autoscaler-like externalgrpc client: CA's RPCs with CA's client-side caching.

Mirrors k/a `cluster-autoscaler/cloudprovider/externalgrpc/externalgrpc_cloud_provider.go` and
`externalgrpc_node_group.go` (README "Caching"):
- `Refresh()` first clears the NodeGroups and NodeGroupForNode caches, then calls the RPC.
- `NodeGroups` is cached until the next Refresh; an error returns [] and is not cached.
- `NodeGroupForNode` is cached per (node name, providerID) until the next Refresh, only for
  non-empty answers (a node in no group costs an RPC on every call).
- `GPULabel` and `GetAvailableGPUTypes` are cached forever after the first *success*.
- `NodeGroupTemplateNodeInfo` is cached on the node-group object, which CA rebuilds after every
  Refresh, so effectively once per group per loop.
- Everything else (TargetSize, Nodes, IncreaseSize, DeleteNodes, DecreaseTargetSize, GetOptions,
  the Pricing RPCs, Cleanup) is never cached. UNIMPLEMENTED means "not implemented" only for
  Pricing, TemplateNodeInfo and GetOptions, as in CA.
Every call is counted by method, so a run doubles as an RPC load profile of a CA loop.

Two transports carry the calls: `GrpcTransport` (a real channel, 5 s deadline per call as CA's
default `grpc_timeout`) and `InProcessTransport`, which hands the request bytes to the same
handlers grpcio calls, without a socket, for runs too long for sockets (the 24-hour benchmark); both
see identical bytes and the same request path.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import grpc
from google.protobuf import timestamp_pb2
from google.protobuf.message_factory import GetMessageClass

from cloudprovider_grpc.grpcapi.handlers import raw_calls
from cloudprovider_grpc.grpcapi.servicer import CloudProviderServicer
from cloudprovider_grpc.grpcapi.wire import startup_bytes, startup_field, unknown_fields
from cloudprovider_grpc.k8s.node import decode_node
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc
from cloudprovider_grpc.protos import k8s_pb2
from cloudprovider_grpc.providers.contract import NodeGroup

GRPC_TIMEOUT = 5.0  # CA's default grpc_timeout


class RpcError(Exception):
    """A failed RPC: gRPC status code name and details."""

    def __init__(self, method: str, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{method}: {code.name}: {details}")
        self.method = method
        self.code = code
        self.details = details

    @property
    def unimplemented(self) -> bool:
        return self.code == grpc.StatusCode.UNIMPLEMENTED


class Transport(Protocol):
    def call(self, method: str, request: Any) -> Any: ...

    def close(self) -> None: ...


class GrpcTransport:
    """Calls over a real gRPC channel to `address` (HOST:PORT), plaintext, like CA without TLS."""

    def __init__(self, address: str, timeout: float = GRPC_TIMEOUT) -> None:
        self.address = address
        self.timeout = timeout
        self._channel = grpc.insecure_channel(address)
        self._stub = pb_grpc.CloudProviderStub(self._channel)

    def wait_ready(self, timeout: float = GRPC_TIMEOUT) -> None:
        """Fail fast (UNAVAILABLE) when nothing answers at `address`: at the first failed connection
        attempt (a refused port fails at once, as CA's first call without wait-for-ready would), or
        after `timeout` when attempts hang."""
        settled = threading.Event()
        states: list[grpc.ChannelConnectivity] = []

        def seen(state: grpc.ChannelConnectivity) -> None:
            if state in (grpc.ChannelConnectivity.READY, grpc.ChannelConnectivity.TRANSIENT_FAILURE):
                states.append(state)
                settled.set()

        self._channel.subscribe(seen, try_to_connect=True)
        try:
            settled.wait(timeout)
        finally:
            self._channel.unsubscribe(seen)
        if not states or states[0] != grpc.ChannelConnectivity.READY:
            raise RpcError(
                "connect", grpc.StatusCode.UNAVAILABLE, f"no gRPC server reachable at {self.address}"
            )

    def call(self, method: str, request: Any) -> Any:
        try:
            return getattr(self._stub, method)(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            raise RpcError(method, exc.code(), exc.details() or "") from None

    def close(self) -> None:
        self._channel.close()


class _AbortError(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class _DirectContext:
    """What the request path needs from a ServicerContext when called without a socket: `abort`
    ends the call with a status, as grpcio's does; there is no deadline (`time_remaining` is None, as
    for a grpcio call sent without one); the state-version trailer, sent only when the servicer
    serves the compiled front, is kept in `trailing_metadata`."""

    def __init__(self) -> None:
        self.trailing_metadata: tuple[tuple[str, str], ...] = ()

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise _AbortError(code, details)

    def time_remaining(self) -> float | None:
        return None

    def set_trailing_metadata(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self.trailing_metadata = metadata


class _Encodings:
    """The wire encoding of request messages, memoised per message object.

    CA's loop sends the same request objects again and again (NodeGroupForNode for every node,
    every loop; `CAClient` builds each node's request once), so the encoding of an object seen before
    is reused. Entries hold the original object, so its id cannot be reused while the entry lives;
    the memo is emptied when it reaches `limit` entries (one-off messages never pile up)."""

    def __init__(self, limit: int = 8192) -> None:
        self.limit = limit
        self.memo: dict[int, tuple[Any, bytes]] = {}

    def __call__(self, msg: Any) -> bytes:
        hit = self.memo.get(id(msg))
        if hit is not None and hit[0] is msg:
            return hit[1]
        raw: bytes = msg.SerializeToString()
        if len(self.memo) >= self.limit:
            self.memo.clear()
        self.memo[id(msg)] = (msg, raw)
        return raw


class _Decodings:
    """Decoded answers of one method, memoised by their bytes: equal bytes decode to equal messages,
    and the server answers the per-node RPCs with the same encoded answer many times (prebuilt.py),
    so each distinct answer is decoded once and the same message object handed back (callers read
    answers, never change them). Emptied when it reaches `limit` entries."""

    def __init__(self, response_type: Any, limit: int = 1024) -> None:
        self.decode = response_type.FromString
        self.limit = limit
        self.memo: dict[bytes, Any] = {}

    def __call__(self, raw: bytes) -> Any:
        msg = self.memo.get(raw)
        if msg is None:
            msg = self.decode(raw)
            if len(self.memo) >= self.limit:
                self.memo.clear()
            self.memo[raw] = msg
        return msg


class InProcessTransport:
    """Calls the servicer through the same request path as grpcio and the compiled front, without a
    socket: the request is encoded, handed as bytes to the handler `grpcapi.handlers.raw_call` built
    for the method, and the answer's bytes decoded. So admission (a closed gate answers UNAVAILABLE),
    the parse of the request bytes (a malformed body answers INVALID_ARGUMENT), the hand-over relay
    of a leader-elected replica, the status mapping and the metrics are the ones a grpcio client
    meets. No step of that path is skipped; what the socket itself adds (HTTP/2 framing, the 5 s
    deadline of `GrpcTransport`) is absent.

    Repeats of the same request object reuse its encoding, and repeats of the same answer bytes
    reuse the decoded message (`_Encodings`, `_Decodings`). Callers must not mutate a request after
    sending it, nor an answer (`CAClient` never does)."""

    def __init__(self, servicer: CloudProviderServicer) -> None:
        self._handlers = raw_calls(servicer)
        self._context = _DirectContext()
        self._encode = _Encodings()
        service = pb.DESCRIPTOR.services_by_name["CloudProvider"]
        self._decoders = {m.name: _Decodings(GetMessageClass(m.output_type)) for m in service.methods}

    def call_raw(self, method: str, raw: bytes) -> bytes:
        """The encoded request in, the encoded answer out: what grpcio hands the same handler."""
        handler = self._handlers.get(method)
        if handler is None:  # what grpcio answers for a method the server does not serve
            raise RpcError(method, grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
        try:
            return handler(raw, self._context)
        except _AbortError as exc:
            raise RpcError(method, exc.code, exc.details) from None

    def call(self, method: str, request: Any) -> Any:
        # _Encodings inlined for the hit path: this runs for every NodeGroupForNode of a day
        hit = self._encode.memo.get(id(request))
        raw = hit[1] if hit is not None and hit[0] is request else self._encode(request)
        return self._decoders[method](self.call_raw(method, raw))

    def close(self) -> None:
        return None


#: a node group as the CA client sees it: the same shape as the server-side contract's NodeGroup
GroupInfo = NodeGroup


@dataclass(frozen=True)
class InstanceInfo:
    id: str
    state: int  # pb.InstanceStatus.InstanceState
    error_code: str = ""
    error_message: str = ""
    error_class: int = 0


@dataclass(frozen=True)
class GroupOptions:
    """NodeGroupGetOptions answer, durations in seconds."""

    scale_down_utilization_threshold: float
    scale_down_gpu_utilization_threshold: float
    scale_down_unneeded_time: float
    scale_down_unready_time: float
    max_node_provision_time: float
    zero_or_max_node_scaling: bool
    ignore_daemonsets_utilization: bool
    #: CA 1.37 and later only (options field 11); None from a release that does not carry it
    max_node_startup_time: float | None = None


#: CA's --max-node-startup-time default, the value CA 1.37 sends as its default in field 11
DEFAULT_STARTUP_TIME = 900.0


def _ts(t: datetime) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(t)
    return ts


def _seconds(msg: Any, new: str, old: str, default: float) -> float:
    if msg.HasField(new):
        d = getattr(msg, new)
        return d.seconds + d.nanos / 1e9
    if msg.HasField(old):
        return getattr(msg, old).duration / 1e9
    return default


class CAClient:
    """The RPC surface CA's core uses, with CA's caches (see the module docstring).

    `profile="lean"` keeps NodeGroupForNode answers across Refresh (a node never changes group),
    for long runs where CA's per-node re-asking each loop would dominate; decisions are the same,
    only the RPC counts differ from CA's."""

    def __init__(self, transport: Transport, profile: str = "ca") -> None:
        if profile not in ("ca", "lean"):
            raise ValueError(f"unknown RPC profile {profile!r} (ca or lean)")
        self.transport = transport
        self.profile = profile
        self.counts: Counter[str] = Counter()
        self._node_groups: list[GroupInfo] | None = None
        self._ngfn: dict[tuple[str, str], GroupInfo] = {}
        self._ngfn_requests: dict[tuple[str, str], pb.NodeGroupForNodeRequest] = {}
        self._ngfn_answers: dict[int, tuple[Any, GroupInfo | None]] = {}
        self._templates: dict[str, k8s_pb2.Node | None] = {}
        self._gpu_label: str | None = None
        self._gpu_types: list[str] | None = None
        #: the CA minor release whose NodeGroupGetOptions defaults are sent (see options)
        self.release: tuple[int, int] = (1, 34)

    def _call(self, method: str, request: Any) -> Any:
        self.counts[method] += 1
        return self.transport.call(method, request)

    # ---- cloud-provider level
    def refresh(self) -> None:
        self._node_groups = None
        if self.profile == "ca":
            self._ngfn.clear()
        self._templates.clear()  # new NodeGroup objects after Refresh carry no template cache
        self._call("Refresh", pb.RefreshRequest())

    def node_groups(self) -> list[GroupInfo]:
        if self._node_groups is not None:
            return self._node_groups
        try:
            resp = self._call("NodeGroups", pb.NodeGroupsRequest())
        except RpcError:
            return []
        self._node_groups = [GroupInfo(g.id, g.minSize, g.maxSize, g.debug) for g in resp.nodeGroups]
        return self._node_groups

    def node_group_for_node(
        self, name: str, provider_id: str, labels: Mapping[str, str] | None = None
    ) -> GroupInfo | None:
        key = (name, provider_id)
        hit = self._ngfn.get(key)
        if hit is not None:
            return hit
        # the request for one node is the same every loop: build it once (a node's labels never
        # change while it lives; a new node has a new name or providerID)
        req = self._ngfn_requests.get(key)
        if req is None:
            if len(self._ngfn_requests) >= 65536:  # nodes come and go: never grow without bound
                self._ngfn_requests.clear()
            node = pb.ExternalGrpcNode(providerID=provider_id, name=name, labels=dict(labels or {}))
            req = self._ngfn_requests[key] = pb.NodeGroupForNodeRequest(node=node)
        # _call inlined: this is the call CA makes for every node in every loop
        self.counts["NodeGroupForNode"] += 1
        resp = self.transport.call("NodeGroupForNode", req)
        # the in-process transport hands back the same decoded answer for the same server answer:
        # read its fields once
        seen = self._ngfn_answers.get(id(resp))
        if seen is not None and seen[0] is resp:
            info = seen[1]
        else:
            g = resp.nodeGroup
            info = GroupInfo(g.id, g.minSize, g.maxSize, g.debug) if g.id else None
            if len(self._ngfn_answers) >= 1024:
                self._ngfn_answers.clear()
            self._ngfn_answers[id(resp)] = (resp, info)
        if info is not None:
            self._ngfn[key] = info
        return info

    def group_ids_for_nodes(self, nodes: Iterable[Any]) -> dict[str, str | None]:
        """NodeGroupForNode for every node (objects with `name`, `provider_id`, `shape.labels`), by
        node name: the group's id or None. The same calls and caching as `node_group_for_node`
        node by node, in one loop (CA asks this for every node in every loop)."""
        out: dict[str, str | None] = {}
        cache = self._ngfn
        for n in nodes:
            hit = cache.get((n.name, n.provider_id))
            if hit is not None:
                out[n.name] = hit.id
            else:
                info = self.node_group_for_node(n.name, n.provider_id, n.shape.labels)
                out[n.name] = info.id if info is not None else None
        return out

    def gpu_label(self) -> str | None:
        if self._gpu_label is None:
            try:
                self._gpu_label = self._call("GPULabel", pb.GPULabelRequest()).label
            except RpcError:
                return None
        return self._gpu_label

    def gpu_types(self) -> list[str] | None:
        if self._gpu_types is None:
            try:
                resp = self._call("GetAvailableGPUTypes", pb.GetAvailableGPUTypesRequest())
            except RpcError:
                return None
            self._gpu_types = sorted(resp.gpuTypes)
        return self._gpu_types

    def cleanup(self) -> None:
        self._call("Cleanup", pb.CleanupRequest())

    # ---- node-group level (never cached unless noted)
    def target_size(self, group: str) -> int:
        return self._call("NodeGroupTargetSize", pb.NodeGroupTargetSizeRequest(id=group)).targetSize

    def increase_size(self, group: str, delta: int) -> None:
        self._call("NodeGroupIncreaseSize", pb.NodeGroupIncreaseSizeRequest(id=group, delta=delta))

    def decrease_target_size(self, group: str, delta: int) -> None:
        self._call(
            "NodeGroupDecreaseTargetSize", pb.NodeGroupDecreaseTargetSizeRequest(id=group, delta=delta)
        )

    def delete_nodes(self, group: str, nodes: Sequence[pb.ExternalGrpcNode]) -> None:
        self._call("NodeGroupDeleteNodes", pb.NodeGroupDeleteNodesRequest(id=group, nodes=list(nodes)))

    def nodes(self, group: str) -> list[InstanceInfo]:
        resp = self._call("NodeGroupNodes", pb.NodeGroupNodesRequest(id=group))
        out = []
        for inst in resp.instances:
            st = inst.status
            err = st.errorInfo if st.HasField("errorInfo") else None
            out.append(
                InstanceInfo(
                    inst.id,
                    st.instanceState,
                    err.errorCode if err else "",
                    err.errorMessage if err else "",
                    err.instanceErrorClass if err else 0,
                )
            )
        return out

    def template(self, group: str) -> k8s_pb2.Node | None:
        """The group's template Node, or None when the server does not implement it."""
        if group in self._templates:
            return self._templates[group]
        try:
            resp = self._call("NodeGroupTemplateNodeInfo", pb.NodeGroupTemplateNodeInfoRequest(id=group))
        except RpcError as exc:
            if exc.unimplemented:
                self._templates[group] = None
                return None
            raise
        raw = resp.nodeBytes or resp.nodeInfo
        node = decode_node(raw) if raw else None
        self._templates[group] = node
        return node

    def options(self, group: str, defaults: GroupOptions) -> GroupOptions | None:
        """Per-group options, or None when the server has none for the group or does not implement
        the RPC (CA keeps its flags). The defaults go out in the fields `release` sends them in
        (cloudprovider/externalgrpc/externalgrpc_node_group.go GetOptions at each release): the
        legacy nanosecond fields up to 1.34 (1.34.2 adds the Durations), the Durations alone on
        1.35-1.36, and from 1.37 the max node startup time too, as field 11: a server may answer
        each release differently (this project's answers 1.35-1.36 no options)."""
        d = pb.NodeGroupAutoscalingOptions(
            scaleDownUtilizationThreshold=defaults.scale_down_utilization_threshold,
            scaleDownGpuUtilizationThreshold=defaults.scale_down_gpu_utilization_threshold,
        )
        if self.release >= (1, 33):  # fields 6-7 came with 1.33
            d.zeroOrMaxNodeScaling = defaults.zero_or_max_node_scaling
            d.ignoreDaemonSetsUtilization = defaults.ignore_daemonsets_utilization
        for new, old, secs in (
            ("scaleDownUnneededDuration", "scaleDownUnneededTime", defaults.scale_down_unneeded_time),
            ("scaleDownUnreadyDuration", "scaleDownUnreadyTime", defaults.scale_down_unready_time),
            ("MaxNodeProvisionDuration", "MaxNodeProvisionTime", defaults.max_node_provision_time),
        ):
            if self.release >= (1, 34):
                getattr(d, new).FromNanoseconds(int(secs * 1e9))
            if self.release <= (1, 34) and (old != "MaxNodeProvisionTime" or self.release >= (1, 29)):
                getattr(d, old).duration = int(secs * 1e9)
        startup = self.release >= (1, 37)
        if startup:
            sent = defaults.max_node_startup_time
            d = pb.NodeGroupAutoscalingOptions.FromString(
                d.SerializeToString() + startup_bytes(DEFAULT_STARTUP_TIME if sent is None else sent)
            )
        try:
            resp = self._call(
                "NodeGroupGetOptions", pb.NodeGroupAutoscalingOptionsRequest(id=group, defaults=d)
            )
        except RpcError as exc:
            if exc.unimplemented:
                return None
            raise
        if not resp.HasField("nodeGroupAutoscalingOptions"):
            return None  # no per-group options: CA's client returns nil and CA keeps its flags
        o = resp.nodeGroupAutoscalingOptions
        answered = None
        if startup:
            field, _ = startup_field(unknown_fields(o.SerializeToString(), o.DESCRIPTOR))
            answered = 0.0 if field is None else field.seconds + field.nanos / 1e9
        return GroupOptions(
            o.scaleDownUtilizationThreshold,
            o.scaleDownGpuUtilizationThreshold,
            _seconds(
                o, "scaleDownUnneededDuration", "scaleDownUnneededTime", defaults.scale_down_unneeded_time
            ),
            _seconds(o, "scaleDownUnreadyDuration", "scaleDownUnreadyTime", defaults.scale_down_unready_time),
            _seconds(o, "MaxNodeProvisionDuration", "MaxNodeProvisionTime", defaults.max_node_provision_time),
            o.zeroOrMaxNodeScaling,
            o.ignoreDaemonSetsUtilization,
            answered,
        )

    def node_price(self, node: pb.ExternalGrpcNode, start: datetime, end: datetime) -> float | None:
        req = pb.PricingNodePriceRequest(node=node, startTimestamp=_ts(start), endTimestamp=_ts(end))
        req.startTime.CopyFrom(req.startTimestamp)
        req.endTime.CopyFrom(req.endTimestamp)
        try:
            return self._call("PricingNodePrice", req).price
        except RpcError:
            return None

    def pod_price(self, pod: k8s_pb2.Pod, start: datetime, end: datetime) -> float | None:
        raw = pod.SerializeToString(deterministic=True)
        req = pb.PricingPodPriceRequest(pod_bytes=raw, startTimestamp=_ts(start), endTimestamp=_ts(end))
        try:
            return self._call("PricingPodPrice", req).price
        except RpcError:
            return None
