"""GetOptions answers keep every duration field present, even at zero: CA <= 1.34.1 reads the
legacy fields 3/4/5 without a nil check, so an absent one would crash it."""

from __future__ import annotations

import pytest

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.providers.contract import AutoscalingOptions
from cloudprovider_grpc.wire import options_from_pb, options_to_pb

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
