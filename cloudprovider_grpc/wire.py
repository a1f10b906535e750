"""Conversions between the externalgrpc wire messages and the provider contract's values.

What makes them worth a module: the protocol carries most values twice (a legacy field and its
successor, see proto/), and CA's releases differ in which one they send and which one they read
back, so reading prefers the current field and falls back to the legacy one, writing always fills
both. Values CA could not have meant (times outside Timestamp's range, malformed or negative
durations, non-finite ratios) are refused as INVALID_ARGUMENT naming the field.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf import duration_pb2, timestamp_pb2

from cloudprovider_grpc.errors import InvalidArgument
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.providers.contract import AutoscalingOptions, NodeGroup, NodeRef

_NS = 1_000_000_000


def node_ref(node: pb.ExternalGrpcNode) -> NodeRef:
    # the request's map fields are read-only Mappings already; copying them cost more than the lookup
    return NodeRef(node.providerID, node.name, node.labels, node.annotations)


def group_pb(group: NodeGroup) -> pb.NodeGroup:
    return pb.NodeGroup(id=group.id, minSize=group.min_size, maxSize=group.max_size, debug=group.debug)


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
