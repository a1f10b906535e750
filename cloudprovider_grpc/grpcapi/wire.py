"""Conversions between the externalgrpc wire messages and the provider contract's values.

What makes them worth a module: the protocol carries most values twice (a legacy field and its
successor, see proto/), and CA's releases differ in which one they send and which one they read
back, so reading prefers the current field and falls back to the legacy one, writing always fills
both. Values CA could not have meant (times outside Timestamp's range, malformed or negative
durations, non-finite ratios) are refused as INVALID_ARGUMENT naming the field. The service's full
name lives here too: the servicer, the health service, the front and tracing all name it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf import duration_pb2, timestamp_pb2
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError

from cloudprovider_grpc.core.errors import InvalidArgument
from cloudprovider_grpc.k8s.resources import parse_pod, pod_requests
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.providers.contract import AutoscalingOptions, Instance, NodeGroup, NodeRef

#: "clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider", as the descriptor spells it
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["CloudProvider"].full_name

_NS = 1_000_000_000


def node_ref(node: pb.ExternalGrpcNode) -> NodeRef:
    # the request's map fields are read-only Mappings already; copying them cost more than the lookup
    return NodeRef(node.providerID, node.name, node.labels, node.annotations)


def group_pb(group: NodeGroup) -> pb.NodeGroup:
    return pb.NodeGroup(id=group.id, minSize=group.min_size, maxSize=group.max_size, debug=group.debug)


def nodes_pb(instances: list[Instance]) -> pb.NodeGroupNodesResponse:
    resp = pb.NodeGroupNodesResponse()
    for inst in instances:
        out = resp.instances.add(id=inst.id)
        out.status.instanceState = int(inst.state)  # type: ignore[assignment]  # a proto enum field
        if inst.error is not None:
            out.status.errorInfo.errorCode = inst.error.code
            out.status.errorInfo.errorMessage = inst.error.message
            out.status.errorInfo.instanceErrorClass = int(inst.error.error_class)
    return resp


def pod_bytes(request: pb.PricingPodPriceRequest) -> bytes:
    """The priced pod's encoded v1.Pod: CA >= 1.34.2 sends pod_bytes; older CAs the embedded Pod."""
    raw = request.pod_bytes or request.pod
    if not raw:
        raise InvalidArgument("pod_bytes (or the legacy pod field) is required")
    return raw


def pod_requests_of(raw: bytes) -> dict[str, float]:
    """The resource requests of the pod in `raw` (see pod_bytes), as numbers to price."""
    try:
        pod = parse_pod(raw)
    except ValueError as exc:
        raise InvalidArgument(f"pod_bytes is not a valid v1.Pod: {exc}") from None
    try:
        return {name: float(v) for name, v in pod_requests(pod).items()}
    except OverflowError:  # "1e1000" is a valid Quantity, but no price can be computed from it
        raise InvalidArgument("pod_bytes: the pod's resource requests are too large to price") from None


#: google.protobuf.Timestamp's documented range, 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z: what
#: Go's timestamppb accepts and Python's datetime can hold
_TS_MIN, _TS_MAX = -62_135_596_800, 253_402_300_799
#: the longest duration the legacy nanosecond field (int64) can carry back to CA: about 292 years
_MAX_DURATION = (2**63 - 1) // _NS
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _time(msg: Any, new: str, old: str) -> datetime | None:
    for name in (new, old):
        if msg.HasField(name):
            ts: timestamp_pb2.Timestamp = getattr(msg, name)
            if not _TS_MIN <= ts.seconds <= _TS_MAX or not 0 <= ts.nanos < _NS:
                raise InvalidArgument(
                    f"{name} is out of range: seconds={ts.seconds} nanos={ts.nanos} "
                    "(a time in the years 1 to 9999, nanos 0 to 999999999)"
                )
            return _EPOCH + timedelta(seconds=ts.seconds, microseconds=ts.nanos // 1000)
    return None


def period(msg: Any, new_start: str, new_end: str) -> tuple[datetime, datetime]:
    start = _time(msg, new_start, "startTime")
    end = _time(msg, new_end, "endTime")
    if start is None or end is None:
        raise InvalidArgument(f"{new_start} and {new_end} are required")
    if end < start:
        raise InvalidArgument(f"{new_end} ({end.isoformat()}) is before {new_start} ({start.isoformat()})")
    return start, end


def _seconds(opts: pb.NodeGroupAutoscalingOptions, new: str, old: str, default: float) -> float:
    """A duration CA sent, in seconds; INVALID_ARGUMENT naming the field when it is negative, malformed
    or too long to echo back in the legacy nanosecond field."""
    if opts.HasField(new):
        d: duration_pb2.Duration = getattr(opts, new)
        if not -_NS < d.nanos < _NS or (d.seconds and d.nanos and (d.seconds > 0) != (d.nanos > 0)):
            raise InvalidArgument(f"defaults.{new} is malformed: seconds={d.seconds} nanos={d.nanos}")
        value, field_name = d.seconds + d.nanos / 1e9, new
    elif opts.HasField(old):
        value, field_name = getattr(opts, old).duration / _NS, old  # legacy meta/v1 Duration: nanoseconds
    else:
        return default
    if not 0 <= value <= _MAX_DURATION:
        raise InvalidArgument(
            f"defaults.{field_name} is out of range: {value:g}s (0 to {_MAX_DURATION}s, what the legacy "
            "nanosecond field can carry)"
        )
    return value


def _ratio(value: float, name: str) -> float:
    if not math.isfinite(value):
        raise InvalidArgument(f"defaults.{name} must be a finite number, got {value}")
    return value


def options_from_pb(opts: pb.NodeGroupAutoscalingOptions) -> AutoscalingOptions:
    base = AutoscalingOptions()
    return AutoscalingOptions(
        scale_down_utilization_threshold=_ratio(
            opts.scaleDownUtilizationThreshold, "scaleDownUtilizationThreshold"
        ),
        scale_down_gpu_utilization_threshold=_ratio(
            opts.scaleDownGpuUtilizationThreshold, "scaleDownGpuUtilizationThreshold"
        ),
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


#: the fields by which a CA release from 1.29 on marks its NodeGroupGetOptions defaults: 1.29-1.34.1
#: always send MaxNodeProvisionTime (5), 1.33-1.34.1 also the two booleans (6, 7) when true, 1.34.2
#: and later the Duration fields (8, 9, 10), all of them as non-nil messages
#: (cluster-autoscaler-1.29.0 .. 1.36.x: cloudprovider/externalgrpc/externalgrpc_node_group.go, GetOptions)
_FROM_1_29 = (
    "MaxNodeProvisionTime",
    "scaleDownUnneededDuration",
    "scaleDownUnreadyDuration",
    "MaxNodeProvisionDuration",
)


#: the legacy nanosecond fields 3-5, which CA 1.34.2 still sends beside 8-10 and 1.35.0 and later
#: no longer do (cluster-autoscaler-1.34.2 / -1.35.0 externalgrpc_node_group.go, GetOptions)
_LEGACY_DURATIONS = ("scaleDownUnneededTime", "scaleDownUnreadyTime", "MaxNodeProvisionTime")
_CURRENT_DURATIONS = ("scaleDownUnneededDuration", "scaleDownUnreadyDuration", "MaxNodeProvisionDuration")

#: NodeGroupAutoscalingOptions field 11, `google.protobuf.Duration maxNodeStartupDuration`, as the
#: review thread of kubernetes/autoscaler#10266 shows it (listed in the CA 1.37.0 release notes; the
#: 1.37 tag's source was not readable here). Our schema does not declare it: it is recognised on the
#: wire, only as a length-delimited value that parses as a Duration, so that a different numbering
#: upstream (a bool there would be a varint) can never be misread.
STARTUP_FIELD = 11


def _ca_1_35_to_1_36(defaults: pb.NodeGroupAutoscalingOptions, unknown: bytes) -> bool:
    """The defaults of CA 1.35.0-1.36.x: the Duration fields 8-10 without the legacy 3-5 and nothing
    our schema does not know. A CA that also sends a field we do not know is newer: it gets that
    field echoed, so its own default comes back in whatever field it reads."""
    return (
        not unknown
        and any(defaults.HasField(name) for name in _CURRENT_DURATIONS)
        and not any(defaults.HasField(name) for name in _LEGACY_DURATIONS)
    )


def time_read_as_zero(defaults: pb.NodeGroupAutoscalingOptions, unknown: bytes) -> str | None:
    """The releases, and the time they would read as 0, of a CA whose client drops one of the
    answered option times; None for the releases that read every time they have. `unknown`: the
    fields of `defaults` our schema does not know (field 11 included), encoded.

    - CA 1.25-1.28 never read MaxNodeProvisionTime from the answer (kubernetes/autoscaler#5935).
    - CA 1.35.0-1.36.x have a per-group MaxNodeStartupTime (cluster-autoscaler-1.35.0
      config/autoscaling_options.go:54) that the client never fills from the answer, so it is 0
      whenever options are answered (cluster-autoscaler-1.36.1 externalgrpc_node_group.go:319-327;
      kubernetes/autoscaler#10245). With 0, a registered node that is not yet Ready is Unready from
      its first loop, not NotStarted (clusterstate/clusterstate.go:723-748): it stops counting as
      upcoming, so CA scales up again for the same pods (:1153-1155), and enough booting nodes make
      the whole cluster unhealthy, which stops every scale-up and scale-down (:493-503).
    """
    if from_ca_before_1_29(defaults):
        return "cluster-autoscaler 1.25 to 1.28 cannot read a max node provision time"
    if _ca_1_35_to_1_36(defaults, unknown):
        return "cluster-autoscaler 1.35 and 1.36 cannot read a max node startup time"
    return None


def startup_field(unknown: bytes) -> tuple[duration_pb2.Duration | None, bytes]:
    """From the unknown fields of CA's defaults: the field-11 Duration CA 1.37 and later send (None
    without one), and the other unknown fields, byte for byte, to echo. A field 11 of another wire
    type, or one whose bytes are no Duration, stays among the echoed fields untouched."""
    found: duration_pb2.Duration | None = None
    rest = bytearray()
    for number, wire, start, after_tag, pos in top_level_fields(unknown):
        if number == STARTUP_FIELD and wire == _LEN:
            size, body = _varint(unknown, after_tag)
            try:
                found = duration_pb2.Duration.FromString(unknown[body : body + size])
                continue
            except DecodeError:
                pass
        rest += unknown[start:pos]
    return found, bytes(rest)


def top_level_fields(raw: bytes) -> Iterator[tuple[int, int, int, int, int]]:
    """Each top-level field of a message's bytes: (number, wire type, where its tag starts, where
    its value starts, where it ends). Malformed bytes raise as `_varint` and `_skip` do."""
    pos = 0
    while pos < len(raw):
        start = pos
        tag, after_tag = _varint(raw, pos)
        number, wire = tag >> 3, tag & 7
        pos = _skip(raw, after_tag, number, wire)
        yield number, wire, start, after_tag, pos


def encode_varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def startup_seconds(d: duration_pb2.Duration) -> float:
    """Field 11's value in seconds, checked as the other durations are (InvalidArgument otherwise)."""
    probe = pb.NodeGroupAutoscalingOptions()
    probe.MaxNodeProvisionDuration.CopyFrom(d)
    try:
        return _seconds(probe, "MaxNodeProvisionDuration", "MaxNodeProvisionTime", 0.0)
    except InvalidArgument as exc:
        named = str(exc).replace("MaxNodeProvisionDuration", "maxNodeStartupDuration")
        raise InvalidArgument(named) from None


def startup_bytes(seconds: float) -> bytes:
    """Field 11 carrying `seconds` as a google.protobuf.Duration, encoded."""
    whole = int(seconds)
    body = duration_pb2.Duration(seconds=whole, nanos=round((seconds - whole) * _NS)).SerializeToString()
    return encode_varint(STARTUP_FIELD << 3 | _LEN) + encode_varint(len(body)) + body


def from_ca_before_1_29(defaults: pb.NodeGroupAutoscalingOptions) -> bool:
    """True for the `defaults` of CA 1.25-1.28's GetOptions request: they carry none of fields 5-10
    (no MaxNodeProvisionTime, no Duration field, both booleans false). Those releases send only
    fields 1-4 (cluster-autoscaler-1.25.0 .. 1.28.7, externalgrpc_node_group.go), and every later
    release sends field 5 or fields 8-10 on every call. A request without `defaults` comes from no
    CA release and is not asked about."""
    return not (
        any(defaults.HasField(name) for name in _FROM_1_29)
        or defaults.zeroOrMaxNodeScaling
        or defaults.ignoreDaemonSetsUtilization
    )


# protobuf wire types
_VARINT, _I64, _LEN, _SGROUP, _EGROUP, _I32 = 0, 1, 2, 3, 4, 5
_FIXED64 = {FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED64}
_FIXED32 = {FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_FIXED32, FieldDescriptor.TYPE_SFIXED32}
_DELIMITED = {FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES, FieldDescriptor.TYPE_MESSAGE}


def _wire_types(field: FieldDescriptor) -> tuple[int, ...]:
    """The wire types a parser accepts for `field`; any other one makes the field unknown."""
    if field.type in _DELIMITED:
        return (_LEN,)
    if field.type == FieldDescriptor.TYPE_GROUP:
        return (_SGROUP,)
    scalar = _I64 if field.type in _FIXED64 else _I32 if field.type in _FIXED32 else _VARINT
    return (scalar, _LEN) if field.is_repeated else (scalar,)  # a repeated scalar may come packed


def _varint(raw: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(raw) or shift > 63:
            raise ValueError("truncated varint")
        byte = raw[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _skip(raw: bytes, pos: int, number: int, wire: int) -> int:
    """The position after the value of a field whose tag ended at `pos`."""
    if wire == _VARINT:
        return _varint(raw, pos)[1]
    if wire in (_I64, _I32):
        end = pos + (8 if wire == _I64 else 4)
    elif wire == _LEN:
        size, pos = _varint(raw, pos)
        end = pos + size
    elif wire == _SGROUP:
        while True:
            tag, pos = _varint(raw, pos)
            if tag & 7 == _EGROUP:
                if tag >> 3 != number:
                    raise ValueError("mismatched end of group")
                return pos
            pos = _skip(raw, pos, tag >> 3, tag & 7)
    else:
        raise ValueError(f"wire type {wire}")
    if end > len(raw):
        raise ValueError("truncated field")
    return end


def unknown_fields(raw: bytes, descriptor: Any) -> bytes:
    """The fields of the encoded message `raw` that `descriptor` does not know (a number it does not
    declare, or a declared number with another wire type), byte for byte and in their order.
    `descriptor` is a message Descriptor (the generated classes' upb one or the pure-Python one).

    Why: a CA newer than our schema sends its defaults for options we do not know; echoing these
    bytes in the answer gives it its own defaults back for them. Only the top level is scanned."""
    out = bytearray()
    for number, wire, start, _after_tag, pos in top_level_fields(raw):
        field = descriptor.fields_by_number.get(number)
        if field is None or wire not in _wire_types(field):
            out += raw[start:pos]
    return bytes(out)
