"""Our externalgrpc schema against upstream's, and wire compatibility with older CA releases.

`../shared/golden/externalgrpc/*.json` hold the wire facts (package, methods, every field's name,
number, label, type, type_name, enum values) of upstream `externalgrpc.proto` at CA master, 1.34.2,
1.33.0 and 1.25.0, generated with protoc from the upstream files.

1. Our descriptor must equal master exactly, plus only the legacy declarations that keep CA
   <= 1.34.x working (CA's `cloudprovider/externalgrpc/externalgrpc_node_group.go` at each tag:
   up to 1.34.1 reads `nodeInfo`, 1.34.2 prefers `nodeBytes`, 1.35 on reads only `nodeBytes`).
2. Each old release's schema is rebuilt here as a real descriptor from its golden JSON (package
   renamed so all can share one pool). Its k8s references point at stand-ins with the upstream
   field numbers: meta/v1 `Duration{int64 duration = 1}`, `Time{int64 seconds = 1; int32 nanos = 2}`
   and, for Node/Pod, our own k8s subset (checked against Go's bytes in test_k8s_golden.py).
   Messages built with our pb2 must read correctly under each old schema, and the other way round.
"""

from __future__ import annotations

import json
from fractions import Fraction
from functools import cache
from typing import Any

import pytest
from google.protobuf import (
    any_pb2,
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    message_factory,
    timestamp_pb2,
)
from google.protobuf.descriptor_pb2 import DescriptorProto, FieldDescriptorProto, FileDescriptorProto
from google.protobuf.message import Message

from cloudprovider_grpc.k8s.node import encode_template_node
from cloudprovider_grpc.k8s.resources import parse_pod, pod_requests
from cloudprovider_grpc.k8s.template import NodeTemplate
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.protos import k8s_pb2
from tests.k8s_support.wire import GOLDEN

pytestmark = pytest.mark.unit

PACKAGE = "clusterautoscaler.cloudprovider.v1.externalgrpc"
OLD_RELEASES = ["v1.25.0", "v1.33.0", "v1.34.2"]


def load_golden(release: str) -> dict[str, Any]:
    path = GOLDEN / "externalgrpc" / f"{release}.json"
    if not path.is_file():
        pytest.fail(f"golden schema {path} is missing (expected the shared/ folder beside the checkout)")
    return json.loads(path.read_text())


# ---- our descriptor in the golden JSON's shape -----------------------------------------------------


def _label(field: FieldDescriptorProto) -> str:
    return FieldDescriptorProto.Label.Name(field.label).removeprefix("LABEL_").lower()


def _type(field: FieldDescriptorProto) -> str:
    return FieldDescriptorProto.Type.Name(field.type).removeprefix("TYPE_").lower()


def describe_ours() -> tuple[dict[str, Any], FileDescriptorProto]:
    proto = FileDescriptorProto()
    pb.DESCRIPTOR.CopyToProto(proto)
    messages: dict[str, Any] = {}

    def walk(message: DescriptorProto, prefix: str) -> None:
        name = f"{prefix}.{message.name}"
        fields = []
        for f in message.field:
            entry = {"label": _label(f), "name": f.name, "number": f.number, "type": _type(f)}
            if f.type_name:
                entry["type_name"] = f.type_name.lstrip(".")
            fields.append(entry)
        messages[name] = {"fields": fields, "map_entry": message.options.map_entry}
        for enum in message.enum_type:
            messages[f"{name}.{enum.name}"] = {"enum": {v.name: v.number for v in enum.value}}
        for nested in message.nested_type:
            walk(nested, name)

    for message in proto.message_type:
        walk(message, proto.package)
    for enum in proto.enum_type:
        messages[f"{proto.package}.{enum.name}"] = {"enum": {v.name: v.number for v in enum.value}}
    services = {
        service.name: {
            m.name: {"input": m.input_type.lstrip("."), "output": m.output_type.lstrip(".")}
            for m in service.method
        }
        for service in proto.service
    }
    return {
        "package": proto.package,
        "syntax": proto.syntax,
        "messages": messages,
        "services": services,
    }, proto


# The only declarations we add to master: old field numbers with wire-compatible types.
EXPECTED_EXTRAS = {
    ("NodeGroupTemplateNodeInfoResponse", "nodeInfo", 1, "bytes", None),
    ("PricingNodePriceRequest", "startTime", 2, "message", "google.protobuf.Timestamp"),
    ("PricingNodePriceRequest", "endTime", 3, "message", "google.protobuf.Timestamp"),
    ("PricingPodPriceRequest", "pod", 1, "bytes", None),
    ("PricingPodPriceRequest", "startTime", 2, "message", "google.protobuf.Timestamp"),
    ("PricingPodPriceRequest", "endTime", 3, "message", "google.protobuf.Timestamp"),
    ("NodeGroupAutoscalingOptions", "scaleDownUnneededTime", 3, "message", f"{PACKAGE}.LegacyDuration"),
    ("NodeGroupAutoscalingOptions", "scaleDownUnreadyTime", 4, "message", f"{PACKAGE}.LegacyDuration"),
    ("NodeGroupAutoscalingOptions", "MaxNodeProvisionTime", 5, "message", f"{PACKAGE}.LegacyDuration"),
}
# What upstream typed those same fields as, before master deleted them.
WIRE_COMPATIBLE = {
    "k8s.io.api.core.v1.Node": ("bytes", None),
    "k8s.io.api.core.v1.Pod": ("bytes", None),
    "k8s.io.apimachinery.pkg.apis.meta.v1.Time": ("message", "google.protobuf.Timestamp"),
    "k8s.io.apimachinery.pkg.apis.meta.v1.Duration": ("message", f"{PACKAGE}.LegacyDuration"),
}


def test_package_services_and_syntax_equal_master() -> None:
    master = load_golden("master")
    ours, _ = describe_ours()
    assert ours["package"] == master["package"] == PACKAGE
    assert ours["syntax"] == master["syntax"]
    assert ours["services"] == master["services"]
    assert len(ours["services"]["CloudProvider"]) == 15


def test_every_master_message_field_and_enum_is_ours_and_extras_are_exactly_the_legacy_set() -> None:
    master = load_golden("master")
    ours, proto = describe_ours()

    extras = set()
    for name, theirs in master["messages"].items():
        assert name in ours["messages"], f"message {name} missing"
        mine = ours["messages"][name]
        if "enum" in theirs:
            assert mine == theirs, f"enum {name} differs"
            continue
        assert mine["map_entry"] == theirs["map_entry"], name
        by_number = {f["number"]: f for f in mine["fields"]}
        for field in theirs["fields"]:
            assert by_number.get(field["number"]) == field, f"{name} field {field['number']}"
        master_numbers = {f["number"] for f in theirs["fields"]}
        short = name.removeprefix(PACKAGE + ".")
        for field in mine["fields"]:
            if field["number"] not in master_numbers:
                extras.add((short, field["name"], field["number"], field["type"], field.get("type_name")))
    assert extras == EXPECTED_EXTRAS

    extra_messages = set(ours["messages"]) - set(master["messages"])
    assert extra_messages == {f"{PACKAGE}.LegacyDuration"}
    assert ours["messages"][f"{PACKAGE}.LegacyDuration"] == {
        "fields": [{"label": "optional", "name": "duration", "number": 1, "type": "int64"}],
        "map_entry": False,
    }

    # Each legacy field is marked deprecated in our .proto.
    by_name = {m.name: m for m in proto.message_type}
    for message, field_name, *_ in EXPECTED_EXTRAS:
        (field,) = [f for f in by_name[message].field if f.name == field_name]
        assert field.options.deprecated, f"{message}.{field_name} should be [deprecated = true]"


def test_extras_are_the_fields_master_deleted_with_wire_compatible_types() -> None:
    old = load_golden("v1.34.2")["messages"]
    for message, field_name, number, our_type, our_type_name in EXPECTED_EXTRAS:
        (theirs,) = [f for f in old[f"{PACKAGE}.{message}"]["fields"] if f["number"] == number]
        assert theirs["name"] == field_name
        assert WIRE_COMPATIBLE[theirs["type_name"]] == (our_type, our_type_name)


# ---- old schemas rebuilt from the golden JSON ------------------------------------------------------

META_PACKAGE = "compat.meta"
STAND_INS = {
    "k8s.io.api.core.v1.Node": k8s_pb2.Node.DESCRIPTOR.full_name,
    "k8s.io.api.core.v1.Pod": k8s_pb2.Pod.DESCRIPTOR.full_name,
    "k8s.io.apimachinery.pkg.apis.meta.v1.Time": f"{META_PACKAGE}.Time",
    "k8s.io.apimachinery.pkg.apis.meta.v1.Duration": f"{META_PACKAGE}.Duration",
}


def _meta_stand_in() -> FileDescriptorProto:
    """meta/v1 Time and Duration with upstream numbers and types (apimachinery generated.proto)."""
    f = FileDescriptorProto(name="compat/meta.proto", package=META_PACKAGE, syntax="proto2")
    opt, i64, i32 = (
        FieldDescriptorProto.LABEL_OPTIONAL,
        FieldDescriptorProto.TYPE_INT64,
        FieldDescriptorProto.TYPE_INT32,
    )
    time = f.message_type.add(name="Time")
    time.field.add(name="seconds", number=1, label=opt, type=i64)
    time.field.add(name="nanos", number=2, label=opt, type=i32)
    f.message_type.add(name="Duration").field.add(name="duration", number=1, label=opt, type=i64)
    return f


def package_for(release: str) -> str:
    return "compat." + release.replace(".", "_")


def file_from_golden(release: str) -> FileDescriptorProto:
    doc = load_golden(release)
    package = package_for(release)
    f = FileDescriptorProto(
        name=f"compat/{release}/externalgrpc.proto", package=package, syntax=doc["syntax"]
    )
    f.dependency.extend(
        [
            any_pb2.DESCRIPTOR.name,
            duration_pb2.DESCRIPTOR.name,
            timestamp_pb2.DESCRIPTOR.name,
            k8s_pb2.DESCRIPTOR.name,
            "compat/meta.proto",
        ]
    )

    def rename(type_name: str) -> str:
        if type_name in STAND_INS:
            return "." + STAND_INS[type_name]
        if type_name.startswith(doc["package"] + "."):
            return "." + package + type_name.removeprefix(doc["package"])
        assert type_name.startswith("google.protobuf."), type_name
        return "." + type_name

    containers: dict[str, Any] = {}
    # Parents before children: "A" before "A.B".
    for full_name in sorted(doc["messages"], key=lambda n: n.count(".")):
        item = doc["messages"][full_name]
        relative = full_name.removeprefix(doc["package"] + ".")
        parent_name, _, short = relative.rpartition(".")
        parent = containers[parent_name] if parent_name else f
        if "enum" in item:
            enum = parent.enum_type.add(name=short)
            for value_name, number in sorted(item["enum"].items(), key=lambda kv: kv[1]):
                enum.value.add(name=value_name, number=number)
            continue
        message = parent.message_type.add(name=short) if parent is f else parent.nested_type.add(name=short)
        message.options.map_entry = item["map_entry"]
        for field in item["fields"]:
            added = message.field.add(
                name=field["name"],
                number=field["number"],
                label=FieldDescriptorProto.Label.Value("LABEL_" + field["label"].upper()),
                type=FieldDescriptorProto.Type.Value("TYPE_" + field["type"].upper()),
            )
            if "type_name" in field:
                added.type_name = rename(field["type_name"])
        containers[relative] = message
    service = f.service.add(name="CloudProvider")
    for method, io in doc["services"]["CloudProvider"].items():
        service.method.add(name=method, input_type=rename(io["input"]), output_type=rename(io["output"]))
    return f


@cache
def old_pool() -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    for module in (any_pb2, duration_pb2, timestamp_pb2, k8s_pb2):
        proto = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(proto)
        pool.Add(proto)
    pool.Add(_meta_stand_in())
    for release in [*OLD_RELEASES, "master"]:
        pool.Add(file_from_golden(release))
    return pool


def old(release: str, message: str) -> type[Message]:
    return message_factory.GetMessageClass(
        old_pool().FindMessageTypeByName(f"{package_for(release)}.{message}")
    )


def test_rebuilt_old_schemas_have_the_golden_shape() -> None:
    # The rebuilt descriptors are what the golden JSON describes (guards the builder itself).
    for release in OLD_RELEASES:
        doc = load_golden(release)
        for full_name, item in doc["messages"].items():
            if "fields" not in item:
                continue
            descriptor = old_pool().FindMessageTypeByName(
                package_for(release) + full_name.removeprefix(doc["package"])
            )
            assert sorted((f.name, f.number) for f in descriptor.fields) == sorted(
                (f["name"], f["number"]) for f in item["fields"]
            )
    assert (
        "MaxNodeProvisionTime" not in old("v1.25.0", "NodeGroupAutoscalingOptions").DESCRIPTOR.fields_by_name
    )
    assert (
        old("v1.33.0", "NodeGroupTemplateNodeInfoResponse")
        .DESCRIPTOR.fields_by_name["nodeInfo"]
        .message_type.full_name
        == k8s_pb2.Node.DESCRIPTOR.full_name
    )


# ---- the durations' wire bytes ------------------------------------------------------------------


def test_duration_wire_bytes() -> None:
    # meta/v1 Duration carries nanoseconds, google.protobuf.Duration seconds and nanos (k8s.io/apimachinery
    # pkg/apis/meta/v1/generated.proto; google/protobuf/duration.proto).
    legacy = pb.LegacyDuration(duration=600 * 10**9).SerializeToString()
    assert legacy == bytes.fromhex("08 80 e0 a5 96 bb 11")
    assert duration_pb2.Duration(seconds=600).SerializeToString() == bytes.fromhex("08 d8 04")
    meta_duration = message_factory.GetMessageClass(
        old_pool().FindMessageTypeByName(f"{META_PACKAGE}.Duration")
    )
    assert meta_duration(duration=600 * 10**9).SerializeToString() == legacy


# ---- our responses read by old CAs ---------------------------------------------------------------

TEMPLATE = NodeTemplate(
    capacity={"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}, reserved={"cpu": "100m"}
)


def test_template_response_reads_under_every_release() -> None:
    node_bytes = encode_template_node(TEMPLATE, "gpu")
    wire = pb.NodeGroupTemplateNodeInfoResponse(nodeInfo=node_bytes, nodeBytes=node_bytes).SerializeToString()

    for release in OLD_RELEASES:
        response = old(release, "NodeGroupTemplateNodeInfoResponse").FromString(wire)
        assert response.HasField("nodeInfo"), release  # CA <= 1.34.1 reads only this
        node = response.nodeInfo
        assert node.metadata.name == "template-node-for-gpu", release
        assert node.status.capacity["cpu"].string == "4"
        assert node.status.capacity["memory"].string == "16Gi"
        assert node.status.capacity["nvidia.com/gpu"].string == "1"
        assert node.status.allocatable["cpu"].string == "3900m"  # 4 - 0.1
        assert node.status.allocatable["pods"].string == "110"
        assert node.SerializeToString(deterministic=True) == node_bytes
    assert old("v1.34.2", "NodeGroupTemplateNodeInfoResponse").FromString(wire).nodeBytes == node_bytes
    assert old("master", "NodeGroupTemplateNodeInfoResponse").FromString(wire).nodeBytes == node_bytes


SECONDS = {"unneeded": 600, "unready": 1200, "provision": 900}


def our_options_response() -> bytes:
    options = pb.NodeGroupAutoscalingOptions(
        scaleDownUtilizationThreshold=0.5,
        scaleDownGpuUtilizationThreshold=0.25,
        zeroOrMaxNodeScaling=True,
        ignoreDaemonSetsUtilization=True,
    )
    options.scaleDownUnneededTime.duration = SECONDS["unneeded"] * 10**9
    options.scaleDownUnreadyTime.duration = SECONDS["unready"] * 10**9
    options.MaxNodeProvisionTime.duration = SECONDS["provision"] * 10**9
    options.scaleDownUnneededDuration.seconds = SECONDS["unneeded"]
    options.scaleDownUnreadyDuration.seconds = SECONDS["unready"]
    options.MaxNodeProvisionDuration.seconds = SECONDS["provision"]
    return pb.NodeGroupAutoscalingOptionsResponse(nodeGroupAutoscalingOptions=options).SerializeToString()


@pytest.mark.parametrize("release", OLD_RELEASES)
def test_options_response_reads_under_old_releases(release: str) -> None:
    response = old(release, "NodeGroupAutoscalingOptionsResponse").FromString(our_options_response())
    options = response.nodeGroupAutoscalingOptions
    assert options.scaleDownUtilizationThreshold == 0.5
    assert options.scaleDownGpuUtilizationThreshold == 0.25
    # Old CAs dereference these without nil checks: they must be present, in nanoseconds.
    assert options.HasField("scaleDownUnneededTime") and options.HasField("scaleDownUnreadyTime")
    assert options.scaleDownUnneededTime.duration == 600_000_000_000
    assert options.scaleDownUnreadyTime.duration == 1_200_000_000_000
    fields = options.DESCRIPTOR.fields_by_name
    if release == "v1.25.0":
        assert {"MaxNodeProvisionTime", "zeroOrMaxNodeScaling"}.isdisjoint(fields)  # 1.25 has fields 1-4
    else:
        assert options.MaxNodeProvisionTime.duration == 900_000_000_000
        assert options.zeroOrMaxNodeScaling and options.ignoreDaemonSetsUtilization
    if release == "v1.34.2":
        assert options.scaleDownUnneededDuration.seconds == 600
        assert options.scaleDownUnreadyDuration.seconds == 1200
        assert options.MaxNodeProvisionDuration.seconds == 900


def test_options_response_reads_under_master() -> None:
    response = old("master", "NodeGroupAutoscalingOptionsResponse").FromString(our_options_response())
    options = response.nodeGroupAutoscalingOptions
    assert (options.scaleDownUnneededDuration.seconds, options.MaxNodeProvisionDuration.seconds) == (600, 900)
    assert "scaleDownUnneededTime" not in options.DESCRIPTOR.fields_by_name


# ---- old CAs' requests read by us -------------------------------------------------------------------

START, END = 1_767_225_600, 1_767_229_200  # 2026-01-01T00:00:00Z and one hour later


def _old_pod(release: str) -> Message:
    pod_class = old(release, "PricingPodPriceRequest").DESCRIPTOR.fields_by_name["pod"].message_type
    pod = message_factory.GetMessageClass(pod_class)()
    pod.metadata.name = "web-0"
    pod.spec.containers.add(name="app").resources.requests["cpu"].string = "500m"
    pod.spec.containers.add(name="log").resources.requests["cpu"].string = "250m"
    pod.spec.containers[0].resources.requests["memory"].string = "1Gi"
    return pod


@pytest.mark.parametrize("release", OLD_RELEASES)
def test_pod_price_request_from_old_release(release: str) -> None:
    request = old(release, "PricingPodPriceRequest")()
    request.pod.CopyFrom(_old_pod(release))
    request.startTime.seconds, request.endTime.seconds = START, END
    ours = pb.PricingPodPriceRequest.FromString(request.SerializeToString())
    assert ours.pod  # field 1 arrives as the embedded Pod's bytes
    pod = parse_pod(ours.pod)
    assert pod.metadata.name == "web-0"
    # 500m + 250m = 0.75 cores; memory 1Gi
    assert pod_requests(pod) == {"cpu": Fraction(3, 4), "memory": 2**30}
    assert (ours.startTime.seconds, ours.endTime.seconds) == (START, END)
    assert not ours.pod_bytes and not ours.HasField("startTimestamp")


def test_pod_price_request_from_1_34_2_carries_both_forms() -> None:
    request = old("v1.34.2", "PricingPodPriceRequest")()
    request.pod.CopyFrom(_old_pod("v1.34.2"))
    request.pod_bytes = request.pod.SerializeToString()
    request.startTime.seconds = request.startTimestamp.seconds = START
    request.endTime.seconds = request.endTimestamp.seconds = END
    ours = pb.PricingPodPriceRequest.FromString(request.SerializeToString())
    assert parse_pod(ours.pod_bytes) == parse_pod(ours.pod)
    assert (ours.startTimestamp.seconds, ours.endTimestamp.seconds) == (START, END)


@pytest.mark.parametrize("release", OLD_RELEASES)
def test_node_price_request_from_old_release(release: str) -> None:
    request = old(release, "PricingNodePriceRequest")()
    request.node.name, request.node.providerID = "node-1", "sim://general/1"
    request.startTime.seconds, request.endTime.seconds = START, END
    ours = pb.PricingNodePriceRequest.FromString(request.SerializeToString())
    assert (ours.node.name, ours.node.providerID) == ("node-1", "sim://general/1")
    assert (ours.startTime.seconds, ours.endTime.seconds) == (START, END)


@pytest.mark.parametrize("release", OLD_RELEASES)
def test_options_request_defaults_from_old_release(release: str) -> None:
    request = old(release, "NodeGroupAutoscalingOptionsRequest")(id="general")
    request.defaults.scaleDownUtilizationThreshold = 0.5
    request.defaults.scaleDownUnneededTime.duration = 600 * 10**9
    request.defaults.scaleDownUnreadyTime.duration = 1200 * 10**9
    if release != "v1.25.0":
        request.defaults.MaxNodeProvisionTime.duration = 900 * 10**9
    ours = pb.NodeGroupAutoscalingOptionsRequest.FromString(request.SerializeToString())
    assert ours.id == "general"
    assert ours.defaults.scaleDownUnneededTime.duration == 600 * 10**9
    assert ours.defaults.scaleDownUnreadyTime.duration == 1200 * 10**9
    # Which generation sent it shows in which duration fields are present (externalgrpc.proto at
    # each tag: the golden schemas above).
    assert ours.defaults.HasField("MaxNodeProvisionTime") == (release != "v1.25.0")
    assert not ours.defaults.HasField("scaleDownUnneededDuration")
