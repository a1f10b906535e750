"""What each cluster-autoscaler client generation is answered, over a real gRPC port, with the compiled
front and without it.

The requests are built field for field as CA's client builds them at each generation's first release
(cloudprovider/externalgrpc/externalgrpc_node_group.go, GetOptions, at cluster-autoscaler-1.25.0,
1.29.0, 1.33.0, 1.34.2, 1.35.0), and as a CA newer than our schema would: the same plus fields we do
not know. Answers are compared as bytes: "the same answer" means the same bytes on the wire.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
from google.protobuf import duration_pb2

from cloudprovider_grpc.grpcapi.wire import SERVICE_NAME, options_to_pb
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.providers.contract import AutoscalingOptions
from cloudprovider_grpc.server.assembly import ServerHandle
from tests.support.servers import channel, sim_server

pytestmark = pytest.mark.integration

NS = 10**9
OPTIONS = {
    "provisioning_delay": 0,
    "groups": [
        {"id": "plain", "min_size": 0, "max_size": 5, "initial_size": 1},
        {"id": "tuned", "min_size": 0, "max_size": 5, "options": {"scale_down_unneeded_time": 300.0}},
        {"id": "strict", "min_size": 0, "max_size": 5, "options": {"scale_down_utilization_threshold": 0.3}},
        {"id": "slow", "min_size": 0, "max_size": 5, "options": {"max_node_startup_time": 1800.0}},
    ],
}
#: CA's own defaults in these requests (its flags): 0.5, 0.5, 10m, 20m, 15m
CA = AutoscalingOptions(0.5, 0.5, 600.0, 1200.0, 900.0, False, True)


def _legacy(d: pb.NodeGroupAutoscalingOptions, *, provision: bool) -> None:
    d.scaleDownUnneededTime.duration = int(CA.scale_down_unneeded_time * NS)
    d.scaleDownUnreadyTime.duration = int(CA.scale_down_unready_time * NS)
    if provision:
        d.MaxNodeProvisionTime.duration = int(CA.max_node_provision_time * NS)


def _current(d: pb.NodeGroupAutoscalingOptions) -> None:
    d.scaleDownUnneededDuration.seconds = int(CA.scale_down_unneeded_time)
    d.scaleDownUnreadyDuration.seconds = int(CA.scale_down_unready_time)
    d.MaxNodeProvisionDuration.seconds = int(CA.max_node_provision_time)


def defaults_of(generation: str) -> bytes:
    """The `defaults` a CA of `generation` sends, encoded."""
    d = pb.NodeGroupAutoscalingOptions(
        scaleDownUtilizationThreshold=CA.scale_down_utilization_threshold,
        scaleDownGpuUtilizationThreshold=CA.scale_down_gpu_utilization_threshold,
    )
    if generation not in ("1.25-1.28", "1.29-1.32"):  # 1.33 and later send the booleans (Go omits false)
        d.ignoreDaemonSetsUtilization = CA.ignore_daemonsets_utilization
    if generation in ("1.25-1.28", "1.29-1.32", "1.33-1.34.1", "1.34.2"):
        _legacy(d, provision=generation != "1.25-1.28")
    if generation in ("1.34.2", "1.35-1.36", "1.37+"):
        _current(d)
    raw = d.SerializeToString()
    if generation == "1.37+":
        raw += startup(CA.max_node_startup_time)
    return raw


def startup(seconds: int | float) -> bytes:
    """Field 11 as CA 1.37 sends it: `google.protobuf.Duration maxNodeStartupDuration = 11` (the review
    thread of kubernetes/autoscaler#10266)."""
    body = duration_pb2.Duration(seconds=int(seconds)).SerializeToString()
    return _tag(11, 2) + _varint(len(body)) + body


GENERATIONS = ("1.25-1.28", "1.29-1.32", "1.33-1.34.1", "1.34.2", "1.35-1.36", "1.37+")
#: the generations answered every override (1.25-1.28 and 1.35-1.36 would read one time as 0)
ANSWERED = ("1.29-1.32", "1.33-1.34.1", "1.34.2", "1.37+")


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _tag(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def unknown(seed: int) -> bytes:
    """Fields no schema of ours declares, one of every wire type (varint, fixed64, length-delimited,
    a group holding a varint, fixed32), with values that depend on `seed`; plus field 1 of the
    message under a wire type it is not declared with in any of our messages' field 1 (fixed32)."""
    return (
        _tag(9001, 0)
        + _varint(300 + seed)
        + _tag(9002, 1)
        + bytes([seed] * 8)
        + _tag(9003, 2)
        + _varint(5)
        + b"new"
        + bytes([0x30 + seed, 0x21])
        + _tag(9004, 3)
        + _tag(1, 0)
        + _varint(seed)
        + _tag(9004, 4)
        + _tag(9005, 5)
        + bytes([seed, 1, 2, 3])
        + _tag(1, 5)
        + bytes([seed, 9, 9, 9])
    )


def request(group: str, defaults: bytes | None) -> bytes:
    out = _tag(1, 2) + _varint(len(group)) + group.encode()
    if defaults is not None:
        out += _tag(2, 2) + _varint(len(defaults)) + defaults
    return out


def options_body(answer: bytes) -> bytes | None:
    """Field 1 (nodeGroupAutoscalingOptions) of an encoded answer, None when it has none."""
    if not answer:
        return None
    assert answer[0] == 0x0A, answer.hex()
    size, pos = 0, 1
    shift = 0
    while True:
        byte = answer[pos]
        pos += 1
        size |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            break
    assert len(answer) == pos + size, answer.hex()
    return answer[pos:]


@contextmanager
def server(front: str, compiled_front: Path | None) -> Iterator[tuple[ServerHandle, grpc.Channel]]:
    if front == "auto" and compiled_front is None:
        pytest.skip("the compiled front could not be built here (no Go toolchain); CI requires it")
    with sim_server(OPTIONS, front=front) as handle, channel(handle) as ch:
        assert (handle.front is not None) == (front == "auto")
        yield handle, ch


def raw_call(ch: grpc.Channel, method: str) -> Callable[[bytes], bytes]:
    call = ch.unary_unary(f"/{SERVICE_NAME}/{method}")
    return lambda body: call(body, timeout=5)


def status_of(call: Callable[[bytes], bytes], body: bytes) -> tuple[str, str | bytes]:
    """("OK", answer bytes) or (code name, message): comparable across calls."""
    try:
        return "OK", call(body)
    except grpc.RpcError as exc:
        return exc.code().name, exc.details()


@pytest.fixture(params=["auto", "off"])
def front(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_ca_1_25_to_1_28_gets_no_options_for_any_group(
    front: str, compiled_front: Path | None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="cloudprovider_grpc.grpcapi")
    with server(front, compiled_front) as (_, ch):
        options = raw_call(ch, "NodeGroupGetOptions")
        legacy = defaults_of("1.25-1.28")
        for group in ("plain", "tuned", "strict", "tuned"):
            assert options(request(group, legacy)) == b"", group  # OK, no nodeGroupAutoscalingOptions
        assert status_of(options, request("nope", legacy)) == ("NOT_FOUND", "node group 'nope' not found")
        # what the same groups answer to CA 1.29 and later: their overrides
        later = options_body(options(request("tuned", defaults_of("1.29-1.32"))))
        assert later is not None
        assert pb.NodeGroupAutoscalingOptions.FromString(later).scaleDownUnneededTime.duration == 300 * NS
    warnings = [r.getMessage() for r in caplog.records if "are not applied" in r.getMessage()]
    # one warning a minute at most: the first request for a group with overrides; the others wait
    assert len(warnings) == 1, warnings
    assert "'tuned'" in warnings[0] and "'plain'" not in warnings[0]
    assert "cluster-autoscaler 1.25 to 1.28" in warnings[0] and "would use 0" in warnings[0]


@pytest.mark.parametrize("generation", ANSWERED)
def test_later_generations_get_overrides_and_nothing_for_a_group_without(
    generation: str, front: str, compiled_front: Path | None
) -> None:
    with server(front, compiled_front) as (_, ch):
        options = raw_call(ch, "NodeGroupGetOptions")
        defaults = defaults_of(generation)
        # CA 1.37 gets its startup time back in field 11, the group's own where it has one
        tail = startup(CA.max_node_startup_time) if generation == "1.37+" else b""
        for _ in range(2):  # computed by Python, then (with the front) from its cache
            assert options(request("plain", defaults)) == b""
            body = options_body(options(request("tuned", defaults)))
            # CA's defaults with the group's override, in both duration encodings (CA <= 1.34.1 reads
            # the legacy ones without a nil check, 1.35 and later only the current ones); 1.29-1.32
            # send no booleans
            sent = replace(CA, ignore_daemonsets_utilization=generation != "1.29-1.32")
            expected = options_to_pb(sent.merged({"scale_down_unneeded_time": 300.0})).SerializeToString()
            assert body == expected + tail
        assert status_of(options, request("nope", defaults)) == ("NOT_FOUND", "node group 'nope' not found")


def test_ca_1_35_to_1_36_gets_no_options_for_any_group(
    front: str, compiled_front: Path | None, caplog: pytest.LogCaptureFixture
) -> None:
    """Their client drops the startup time of an answer and uses 0 (kubernetes/autoscaler#10245), so
    booting nodes would count as unready at once: they keep CA's own defaults, with a warning."""
    caplog.set_level(logging.WARNING, logger="cloudprovider_grpc.grpcapi")
    with server(front, compiled_front) as (_, ch):
        options = raw_call(ch, "NodeGroupGetOptions")
        for group in ("plain", "tuned", "slow", "tuned"):
            assert options(request(group, defaults_of("1.35-1.36"))) == b"", group
        assert status_of(options, request("nope", defaults_of("1.35-1.36")))[0] == "NOT_FOUND"
    warnings = [r.getMessage() for r in caplog.records if "are not applied" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "'tuned'" in warnings[0] and "'plain'" not in warnings[0]
    assert "cluster-autoscaler 1.35 and 1.36 cannot read a max node startup time" in warnings[0]


def test_ca_1_37_gets_the_group_startup_time_in_field_11(front: str, compiled_front: Path | None) -> None:
    """Field 11 as a Duration: the group's own value there (CA's where it has none); field 11 as a
    varint (another numbering upstream) is echoed untouched and never read as a time."""
    with server(front, compiled_front) as (_, ch):
        options = raw_call(ch, "NodeGroupGetOptions")
        sent = replace(CA, ignore_daemonsets_utilization=True)
        known = options_to_pb(sent).SerializeToString()
        for _ in range(2):
            assert options_body(options(request("slow", defaults_of("1.37+")))) == known + startup(1800)
            got = options_body(options(request("tuned", defaults_of("1.37+"))))
            tuned = options_to_pb(sent.merged({"scale_down_unneeded_time": 300.0})).SerializeToString()
            assert got == tuned + startup(CA.max_node_startup_time)
            varint = _tag(11, 0) + _varint(1)
            assert options_body(options(request("slow", defaults_of("1.35-1.36") + varint))) == known + varint
            # a field 11 whose bytes are no Duration is echoed too
            junk = _tag(11, 2) + _varint(2) + b"\xff\xff"
            assert options_body(options(request("slow", defaults_of("1.35-1.36") + junk))) == known + junk
            assert options(request("plain", defaults_of("1.37+"))) == b""


def _negative(generation: str) -> bytes:
    """`defaults` as `generation` sends them with `--scale-down-unneeded-time=-1m` (CA accepts negative
    duration flags: cluster-autoscaler-1.36.1 config/flags/flags.go:84-89,129)."""
    d = pb.NodeGroupAutoscalingOptions.FromString(defaults_of(generation))
    if d.HasField("scaleDownUnneededDuration"):
        d.scaleDownUnneededDuration.seconds = -60
    if d.HasField("scaleDownUnneededTime"):
        d.scaleDownUnneededTime.duration = -60 * NS
    return d.SerializeToString()


@pytest.mark.parametrize("generation", ["1.29-1.32", "1.34.2", "1.37+"])
def test_unusable_defaults_get_the_answer_of_a_request_without_them(
    generation: str, front: str, compiled_front: Path | None, caplog: pytest.LogCaptureFixture
) -> None:
    """A negative, malformed or out-of-range duration in CA's defaults: OK, with the group's options
    over our defaults (CA's flag defaults) or none, never an error that would stop CA's scale-down; one
    warning names what CA sent."""
    caplog.set_level(logging.WARNING, logger="cloudprovider_grpc.grpcapi")
    malformed = pb.NodeGroupAutoscalingOptions.FromString(defaults_of(generation))
    malformed.MaxNodeProvisionDuration.nanos = -5  # seconds 900, nanos -5: signs differ
    huge = pb.NodeGroupAutoscalingOptions.FromString(defaults_of(generation))
    huge.scaleDownUnreadyDuration.seconds = 10**15
    bad_startup = defaults_of(generation) + (startup(-30) if generation == "1.37+" else b"")
    with server(front, compiled_front) as (_, ch):
        options = raw_call(ch, "NodeGroupGetOptions")
        tail = startup(AutoscalingOptions().max_node_startup_time) if generation == "1.37+" else b""
        ours = AutoscalingOptions(scale_down_unneeded_time=300.0)
        expected = options_to_pb(ours).SerializeToString() + tail
        for defaults in (_negative(generation), malformed.SerializeToString(), huge.SerializeToString()):
            for _ in range(2):
                assert options(request("plain", defaults)) == b""
                assert options_body(options(request("tuned", defaults))) == expected
        if generation == "1.37+":
            assert options_body(options(request("tuned", bad_startup))) == expected
    warnings = [r.getMessage() for r in caplog.records if "cannot be used" in r.getMessage()]
    assert len(warnings) == 1, warnings  # one a minute
    assert "defaults.scaleDownUnneeded" in warnings[0] and "-60s" in warnings[0]
    assert "answered as a request without defaults" in warnings[0]
    assert not [r for r in caplog.records if r.exc_info]


def test_unknown_option_fields_come_back_unchanged(front: str, compiled_front: Path | None) -> None:
    """A CA newer than our schema (1.37 adds options we do not know) gets its own defaults back for
    them, byte for byte; requests differing only in those fields each get their own, also from the
    front's cache, and a group without overrides still gets no options at all."""
    newer = {seed: defaults_of("1.35-1.36") + unknown(seed) for seed in (1, 2)}
    expected_known = options_to_pb(CA.merged({"scale_down_utilization_threshold": 0.3})).SerializeToString()
    with server(front, compiled_front) as (_, ch):
        options = raw_call(ch, "NodeGroupGetOptions")
        for seed in (1, 2, 1, 2):
            body = options_body(options(request("strict", newer[seed])))
            assert body == expected_known + unknown(seed), seed
            assert options(request("plain", newer[seed])) == b""
        # unknown fields of the request itself (not of its defaults) are not echoed
        top = request("strict", defaults_of("1.34.2")) + unknown(3)
        assert options_body(options(top)) == expected_known


def _pod() -> bytes:
    from cloudprovider_grpc.protos import k8s_pb2

    pod = k8s_pb2.Pod()
    pod.metadata.name = "web-1"
    container = pod.spec.containers.add(name="web")
    container.resources.requests["cpu"].string = "1"
    container.resources.requests["memory"].string = "1Gi"
    return pod.SerializeToString()


def _node(provider_id: str, extra: bytes = b"") -> pb.ExternalGrpcNode:
    return pb.ExternalGrpcNode.FromString(
        pb.ExternalGrpcNode(providerID=provider_id, name="n", labels={"a": "1", "b": "2"}).SerializeToString()
        + extra
    )


def _reads(provider_id: str) -> list[tuple[str, bytes]]:
    """One request of every read RPC, answered from memory, with success and error answers."""
    window = {"startTimestamp": {"seconds": 0}, "endTimestamp": {"seconds": 3600}}
    return [
        ("NodeGroups", pb.NodeGroupsRequest().SerializeToString()),
        ("NodeGroupForNode", pb.NodeGroupForNodeRequest(node=_node(provider_id)).SerializeToString()),
        (
            "NodeGroupForNode",
            pb.NodeGroupForNodeRequest(node=_node(provider_id, unknown(7))).SerializeToString(),
        ),
        ("NodeGroupForNode", pb.NodeGroupForNodeRequest(node=_node("other://1")).SerializeToString()),
        (
            "PricingNodePrice",
            pb.PricingNodePriceRequest(node=_node(provider_id), **window).SerializeToString(),
        ),
        ("PricingNodePrice", pb.PricingNodePriceRequest(node=_node(provider_id)).SerializeToString()),
        ("PricingPodPrice", pb.PricingPodPriceRequest(pod_bytes=_pod(), **window).SerializeToString()),
        ("GPULabel", pb.GPULabelRequest().SerializeToString()),
        ("GetAvailableGPUTypes", pb.GetAvailableGPUTypesRequest().SerializeToString()),
        ("NodeGroupTargetSize", pb.NodeGroupTargetSizeRequest(id="plain").SerializeToString()),
        ("NodeGroupTargetSize", pb.NodeGroupTargetSizeRequest(id="nope").SerializeToString()),
        ("NodeGroupNodes", pb.NodeGroupNodesRequest(id="plain").SerializeToString()),
        ("NodeGroupTemplateNodeInfo", pb.NodeGroupTemplateNodeInfoRequest(id="plain").SerializeToString()),
        ("NodeGroupGetOptions", request("plain", defaults_of("1.35-1.36"))),
        ("NodeGroupGetOptions", request("tuned", defaults_of("1.34.2"))),
        ("NodeGroupGetOptions", request("tuned", defaults_of("1.25-1.28"))),
    ]


def test_every_request_with_unknown_fields_is_answered_as_without(
    front: str, compiled_front: Path | None
) -> None:
    with server(front, compiled_front) as (_, ch):
        nodes = pb.NodeGroupNodesResponse.FromString(
            raw_call(ch, "NodeGroupNodes")(pb.NodeGroupNodesRequest(id="plain").SerializeToString())
        )
        provider_id = nodes.instances[0].id
        for seed, (method, body) in enumerate(_reads(provider_id)):
            call = raw_call(ch, method)
            plain = status_of(call, body)
            assert status_of(call, body + unknown(seed % 200)) == plain, method
            assert status_of(call, body) == plain, method  # and the plain request again, after it
        # writes: the same effect and answer, and the same refusal
        size = raw_call(ch, "NodeGroupTargetSize")
        target = pb.NodeGroupTargetSizeRequest(id="plain").SerializeToString()
        increase = raw_call(ch, "NodeGroupIncreaseSize")
        one = pb.NodeGroupIncreaseSizeRequest(id="plain", delta=1).SerializeToString()
        assert increase(one) == increase(one + unknown(4)) == b""
        assert pb.NodeGroupTargetSizeResponse.FromString(size(target)).targetSize == 3
        too_many = pb.NodeGroupIncreaseSizeRequest(id="plain", delta=9).SerializeToString()
        assert status_of(increase, too_many + unknown(6)) == status_of(increase, too_many)
        delete = raw_call(ch, "NodeGroupDeleteNodes")
        foreign = pb.NodeGroupDeleteNodesRequest(id="plain", nodes=[_node("other://1")]).SerializeToString()
        refused = status_of(delete, foreign)
        assert refused[0] == "INVALID_ARGUMENT"
        assert status_of(delete, foreign + unknown(8)) == refused
        assert raw_call(ch, "Refresh")(pb.RefreshRequest().SerializeToString() + unknown(9)) == b""


def test_the_front_answers_every_generation_as_python_alone_does(compiled_front: Path | None) -> None:
    """The same requests, each generation's and a newer CA's, to a server behind the front and to one
    without it: the same bytes (or the same status and message) come back."""
    requests = [
        ("NodeGroupGetOptions", request(group, defaults_of(g) + extra))
        for group in ("plain", "tuned", "strict", "nope")
        for g in GENERATIONS
        for extra in (b"", unknown(11))
        if not (extra and g != "1.35-1.36")
    ]
    with server("auto", compiled_front) as (_, front_ch), server("off", compiled_front) as (_, python_ch):
        ids = [
            pb.NodeGroupNodesResponse.FromString(
                raw_call(ch, "NodeGroupNodes")(pb.NodeGroupNodesRequest(id="plain").SerializeToString())
            )
            .instances[0]
            .id
            for ch in (front_ch, python_ch)
        ]
        assert ids[0] == ids[1]  # the two sim clouds are the same
        for method, body in requests + _reads(ids[0]):
            for extra in (b"", unknown(12)):
                answers = [status_of(raw_call(ch, method), body + extra) for ch in (front_ch, python_ch)]
                assert answers[0] == answers[1], (method, body.hex(), extra.hex())
