"""GetOptions answers keep every duration field present, even at zero: CA <= 1.34.1 reads the
legacy fields 3/4/5 without a nil check, so an absent one would crash it."""

from __future__ import annotations

import logging
from unittest import mock

import pytest

from cloudprovider_grpc.grpcapi.wire import (
    from_ca_before_1_29,
    options_from_pb,
    options_to_pb,
    startup_bytes,
    startup_field,
    time_read_as_zero,
    unknown_fields,
)
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.providers.contract import AutoscalingOptions

pytestmark = pytest.mark.unit


def test_zero_durations_are_still_on_the_wire() -> None:
    zero = AutoscalingOptions(
        scale_down_unneeded_time=0, scale_down_unready_time=0, max_node_provision_time=0
    )
    raw = options_to_pb(zero).SerializeToString()
    # field 3, 4, 5 (legacy) and 8, 9, 10 (Duration) as empty length-delimited messages: tag, length 0
    for tag in (0x1A, 0x22, 0x2A, 0x42, 0x4A, 0x52):
        assert bytes([tag, 0x00]) in raw, hex(tag)
    parsed = pb.NodeGroupAutoscalingOptions.FromString(raw)
    assert all(
        parsed.HasField(f) for f in ("scaleDownUnneededTime", "scaleDownUnreadyTime", "MaxNodeProvisionTime")
    )


def test_fractional_seconds_round_trip_through_both_encodings() -> None:
    opts = AutoscalingOptions(scale_down_unneeded_time=90.5, max_node_provision_time=1.25)
    msg = options_to_pb(opts)
    assert msg.scaleDownUnneededTime.duration == 90_500_000_000
    assert (msg.scaleDownUnneededDuration.seconds, msg.scaleDownUnneededDuration.nanos) == (90, 500_000_000)
    assert options_from_pb(msg) == opts
    legacy_only = pb.NodeGroupAutoscalingOptions()
    legacy_only.MaxNodeProvisionTime.duration = 1_250_000_000
    assert options_from_pb(legacy_only).max_node_provision_time == 1.25


def test_the_defaults_of_ca_1_25_to_1_28_are_told_apart_by_fields_5_to_10() -> None:
    legacy = {"scaleDownUnneededTime": {"duration": 1}, "scaleDownUnreadyTime": {"duration": 2}}
    assert from_ca_before_1_29(pb.NodeGroupAutoscalingOptions(**legacy))
    assert from_ca_before_1_29(pb.NodeGroupAutoscalingOptions())  # all zero: still none of 5-10
    for later in (
        {"MaxNodeProvisionTime": {}},  # 1.29-1.34.1, even at zero
        {"zeroOrMaxNodeScaling": True},
        {"ignoreDaemonSetsUtilization": True},
        {"scaleDownUnneededDuration": {}},
        {"scaleDownUnreadyDuration": {}},
        {"MaxNodeProvisionDuration": {}},
    ):
        assert not from_ca_before_1_29(pb.NodeGroupAutoscalingOptions(**legacy, **later)), later


def test_unknown_fields_are_found_byte_for_byte_whatever_their_wire_type() -> None:
    known = pb.NodeGroupAutoscalingOptions(scaleDownUtilizationThreshold=0.5, zeroOrMaxNodeScaling=True)
    known.scaleDownUnneededDuration.seconds = 60
    extra = (
        bytes.fromhex("c8 3e 05")  # 1001, varint
        + bytes.fromhex("d1 3e")
        + bytes(range(8))  # 1002, fixed64
        + bytes.fromhex("da 3e 02 68 69")  # 1003, length-delimited
        + bytes.fromhex("e3 3e 08 01 e4 3e")  # 1004, a group holding field 1 = 1
        + bytes.fromhex("ed 3e 01 02 03 04")  # 1005, fixed32
        + bytes.fromhex("08 07")  # field 1 (a double) sent as a varint: unknown to a parser too
    )
    raw = known.SerializeToString()
    mixed = raw[:9] + extra + raw[9:]  # after field 1, before the others
    assert unknown_fields(mixed, pb.NodeGroupAutoscalingOptions.DESCRIPTOR) == extra
    assert unknown_fields(raw, pb.NodeGroupAutoscalingOptions.DESCRIPTOR) == b""
    # what protobuf keeps of them and writes back is the same bytes
    parsed = pb.NodeGroupAutoscalingOptions.FromString(mixed)
    assert parsed.scaleDownUtilizationThreshold == 0.5
    assert unknown_fields(parsed.SerializeToString(), pb.NodeGroupAutoscalingOptions.DESCRIPTOR) == extra
    with pytest.raises(ValueError):
        unknown_fields(bytes.fromhex("e3 3e 08 01"), pb.NodeGroupAutoscalingOptions.DESCRIPTOR)  # no end


def test_the_withheld_overrides_warning_names_every_group_asked_since_the_last(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from cloudprovider_grpc.grpcapi.getoptions import _OverridesWithheld

    caplog.set_level(logging.WARNING, logger="cloudprovider_grpc.grpcapi")
    clock = [100.0]
    warning = _OverridesWithheld(interval=60.0)
    old = "cluster-autoscaler 1.25 to 1.28 cannot read a max node provision time"
    with mock.patch("cloudprovider_grpc.observability.logs.time.monotonic", lambda: clock[0]):
        warning.note("a", old)
        warning.note("b", old)
        warning.note("c", old)
        clock[0] += 61
        warning.note("a", old)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "node groups 'a' are not applied" in lines[0] and "(0 more" in lines[0]
    assert "node groups 'a', 'b', 'c' are not applied" in lines[1] and "(2 more" in lines[1]


def test_field_11_is_a_startup_time_only_as_a_duration() -> None:
    duration = bytes.fromhex("5a 03 08 84 07")  # field 11, length-delimited: Duration{seconds: 900}
    varint = bytes.fromhex("58 01")  # field 11 as a varint (a bool, say)
    junk = bytes.fromhex("5a 02 ff ff")  # length-delimited, but no Duration
    other = bytes.fromhex("c8 3e 05")
    found, rest = startup_field(other + duration + varint)
    assert found is not None and found.seconds == 900 and rest == other + varint
    assert startup_field(varint + junk) == (None, varint + junk)
    assert startup_bytes(900.0) == duration
    assert startup_bytes(1.5) == bytes.fromhex("5a 08 08 01 10 80 ca b5 ee 01")


def test_the_releases_that_would_read_a_time_as_0_are_told_by_their_defaults() -> None:
    current = pb.NodeGroupAutoscalingOptions()
    current.MaxNodeProvisionDuration.seconds = 900
    assert "1.35 and 1.36" in (time_read_as_zero(current, b"") or "")
    assert time_read_as_zero(current, bytes.fromhex("5a 03 08 84 07")) is None  # 1.37: field 11
    assert time_read_as_zero(current, bytes.fromhex("58 01")) is None  # a newer CA: fields echoed
    both = pb.NodeGroupAutoscalingOptions.FromString(current.SerializeToString())
    both.MaxNodeProvisionTime.duration = 900 * 10**9
    assert time_read_as_zero(both, b"") is None  # 1.34.2
    assert "1.25 to 1.28" in (time_read_as_zero(pb.NodeGroupAutoscalingOptions(), b"") or "")
