"""The template Node: what CA decodes from nodeBytes, checked field by field and on the raw wire."""

from __future__ import annotations

import pytest

from cloudprovider_grpc.k8s.node import (
    ENVELOPE_MAGIC,
    decode_node,
    encode_template_node,
    strip_envelope,
    template_node_name,
)
from cloudprovider_grpc.k8s.template import NodeTemplate, Taint
from cloudprovider_grpc.protos import k8s_pb2
from tests.k8s_support.wire import fields, map_entries, sub

pytestmark = pytest.mark.unit

GPU_TEMPLATE = NodeTemplate(
    capacity={"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1", "ephemeral-storage": "100Gi"},
    reserved={"cpu": "100m", "memory": "1Gi", "ephemeral-storage": "10Gi"},
    labels={"accelerator": "nvidia-a100", "kubernetes.io/arch": "arm64"},
    taints=(Taint("nvidia.com/gpu", "present", "NoSchedule"),),
    instance_type="gpu-8c-32g",
    region="eu-nord-1",
    zone="eu-nord-1a",
    arch="amd64",
    annotations={"cloudprovider-grpc/plan": "gpu"},
)


def test_template_round_trips_every_field() -> None:
    node = decode_node(encode_template_node(GPU_TEMPLATE, "gpu"))

    assert node.metadata.name == "template-node-for-gpu" == template_node_name("gpu")
    assert dict(node.metadata.labels) == {
        "kubernetes.io/os": "linux",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "arm64",  # template labels win over the standard ones
        "beta.kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "gpu-8c-32g",
        "beta.kubernetes.io/instance-type": "gpu-8c-32g",
        "topology.kubernetes.io/region": "eu-nord-1",
        "topology.kubernetes.io/zone": "eu-nord-1a",
        "kubernetes.io/hostname": "template-node-for-gpu",
        "accelerator": "nvidia-a100",
    }
    assert dict(node.metadata.annotations) == {"cloudprovider-grpc/plan": "gpu"}
    assert [(t.key, t.value, t.effect) for t in node.spec.taints] == [
        ("nvidia.com/gpu", "present", "NoSchedule")
    ]

    capacity = {k: v.string for k, v in node.status.capacity.items()}
    allocatable = {k: v.string for k, v in node.status.allocatable.items()}
    assert capacity == {
        "cpu": "8",
        "memory": "32Gi",
        "nvidia.com/gpu": "1",
        "ephemeral-storage": "100Gi",
        "pods": "110",
    }
    # allocatable = capacity - reserved: 8 - 0.1 = 7.9 cores -> "7900m"; 32Gi - 1Gi = 31Gi;
    # 100Gi - 10Gi = 90Gi; GPU and pods untouched.
    assert allocatable == {
        "cpu": "7900m",
        "memory": "31Gi",
        "nvidia.com/gpu": "1",
        "ephemeral-storage": "90Gi",
        "pods": "110",
    }

    conditions = {c.type: (c.status, c.reason) for c in node.status.conditions}
    assert conditions == {
        "Ready": ("True", "KubeletReady"),
        "NetworkUnavailable": ("False", "RouteCreated"),
        "MemoryPressure": ("False", "KubeletHasSufficientMemory"),
        "DiskPressure": ("False", "KubeletHasNoDiskPressure"),
        "PIDPressure": ("False", "KubeletHasSufficientPID"),
    }
    assert all(c.message for c in node.status.conditions)
    assert node.status.nodeInfo.operatingSystem == "linux"
    assert node.status.nodeInfo.architecture == "amd64"


def test_minimal_template_has_no_optional_labels() -> None:
    node = decode_node(encode_template_node(NodeTemplate(capacity={"cpu": "2", "memory": "4Gi"}), "small"))
    assert set(node.metadata.labels) == {
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
        "kubernetes.io/hostname",
    }
    assert len(node.spec.taints) == 0
    assert node.status.allocatable["pods"].string == "110"


def test_quantities_are_written_canonical() -> None:
    template = NodeTemplate(
        capacity={"cpu": "4000m", "memory": "16384Mi", "ephemeral-storage": "107374182400"},
        reserved={"cpu": "0.25", "memory": "512Mi"},
        pods=58,
    )
    node = decode_node(encode_template_node(template, "g"))
    assert {k: v.string for k, v in node.status.capacity.items()} == {
        "cpu": "4",  # 4000m
        "memory": "16Gi",  # 16384Mi
        "ephemeral-storage": "107374182400",  # = 100Gi, but a DecimalSI input stays decimal
        "pods": "58",
    }
    # 4 - 0.25 = 3.75 -> 3750m; 16Gi - 512Mi = 15.5Gi = 15872Mi
    assert node.status.allocatable["cpu"].string == "3750m"
    assert node.status.allocatable["memory"].string == "15872Mi"


def test_allocatable_never_negative() -> None:
    template = NodeTemplate(capacity={"cpu": "1", "memory": "1Gi"}, reserved={"cpu": "2", "memory": "1Gi"})
    node = decode_node(encode_template_node(template, "g"))
    assert node.status.allocatable["cpu"].string == "0"
    assert node.status.allocatable["memory"].string == "0"


def test_time_fields_are_absent_not_zero() -> None:
    raw = encode_template_node(GPU_TEMPLATE, "gpu")
    node = decode_node(raw)
    assert not node.metadata.HasField("creationTimestamp")
    assert not node.metadata.HasField("deletionTimestamp")
    for condition in node.status.conditions:
        assert not condition.HasField("lastHeartbeatTime")
        assert not condition.HasField("lastTransitionTime")
    for taint in node.spec.taints:
        assert not taint.HasField("timeAdded")
    # On the wire: ObjectMeta (Node field 1) has no field 8/9, NodeCondition (status 3 -> 4) no 3/4,
    # Taint (spec 2 -> 5) no 4.
    assert {f.number for f in fields(sub(raw, 1)[0])}.isdisjoint({8, 9})
    for condition in sub(raw, 3, 4):
        assert {f.number for f in fields(condition)}.isdisjoint({3, 4})
    for taint in sub(raw, 2, 5):
        assert 4 not in {f.number for f in fields(taint)}


def test_bytes_are_deterministic_with_sorted_map_keys() -> None:
    raw = encode_template_node(GPU_TEMPLATE, "gpu")
    # Same template with dicts built in another order gives the same bytes.
    shuffled = NodeTemplate(
        capacity=dict(reversed(list(GPU_TEMPLATE.capacity.items()))),
        reserved=dict(reversed(list(GPU_TEMPLATE.reserved.items()))),
        labels=dict(reversed(list(GPU_TEMPLATE.labels.items()))),
        taints=GPU_TEMPLATE.taints,
        instance_type=GPU_TEMPLATE.instance_type,
        region=GPU_TEMPLATE.region,
        zone=GPU_TEMPLATE.zone,
        annotations=GPU_TEMPLATE.annotations,
    )
    assert encode_template_node(shuffled, "gpu") == raw
    # Like Go's marshaller: map entries sorted by key, each with key and a non-empty Quantity.
    for path in ((3, 1), (3, 2), (1, 11)):
        keys = [key for key, _ in map_entries(raw, *path)]
        assert keys == sorted(keys), path
    for _, value in map_entries(raw, 3, 1) + map_entries(raw, 3, 2):
        (string,) = [f.value for f in fields(value) if f.number == 1]
        assert string  # an empty Quantity string would break Go's Unmarshal
    # Top-level fields in ascending order: metadata, spec, status.
    assert [f.number for f in fields(raw)] == [1, 2, 3]


@pytest.mark.parametrize(
    ("template", "group", "message"),
    [
        (NodeTemplate(capacity={"cpu": ""}), "g", r"capacity\['cpu'\].*empty"),
        (NodeTemplate(capacity={"memory": "16GB"}), "g", r"capacity\['memory'\]"),
        (NodeTemplate(capacity={"cpu": "-1"}), "g", "negative"),
        (NodeTemplate(capacity={"cpu": "1"}, reserved={"cpu": "1x"}), "g", r"reserved\['cpu'\]"),
        (NodeTemplate(capacity={"cpu": "1"}, reserved={"memory": "1Gi"}), "g", "capacity lacks: memory"),
        (NodeTemplate(capacity={"cpu": "1", "pods": "10"}), "g", "NodeTemplate.pods"),
        (NodeTemplate(capacity={"cpu": "1"}, pods=0), "g", "pods must be a positive integer"),
        (NodeTemplate(capacity={"cpu": "1"}, taints=(Taint("k", "v", "Sometimes"),)), "g", "effect"),
        (NodeTemplate(capacity={"cpu": "1"}, taints=(Taint("", "v"),)), "g", "empty key"),
        (NodeTemplate(capacity={"cpu": "1"}), "", "group_id"),
        (NodeTemplate(capacity={"cpu": "1"}, arch=""), "g", "arch must not be empty"),
    ],
)
def test_bad_templates_are_rejected(template: NodeTemplate, group: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        encode_template_node(template, group)


def test_decode_rejects_what_go_rejects() -> None:
    node = k8s_pb2.Node()
    node.status.capacity["cpu"].string = "four"
    with pytest.raises(ValueError, match=r"status.capacity\['cpu'\]"):
        decode_node(node.SerializeToString())
    empty = k8s_pb2.Node()
    empty.status.allocatable["memory"].string = ""  # what an explicit empty Quantity looks like
    with pytest.raises(ValueError, match="empty string"):
        decode_node(empty.SerializeToString())
    with pytest.raises(ValueError, match=r"not a serialized v1\.Node"):
        decode_node(b"\x0a\xff")


def test_envelope_round_trip_and_errors() -> None:
    raw = encode_template_node(GPU_TEMPLATE, "gpu")
    unknown = k8s_pb2.Unknown(raw=raw, contentType="application/vnd.kubernetes.protobuf")
    unknown.typeMeta.apiVersion, unknown.typeMeta.kind = "v1", "Node"
    assert strip_envelope(ENVELOPE_MAGIC + unknown.SerializeToString()) == raw
    with pytest.raises(ValueError, match="k8s"):
        strip_envelope(raw)
    with pytest.raises(ValueError, match="no raw object"):
        strip_envelope(ENVELOPE_MAGIC)
    with pytest.raises(ValueError, match="malformed"):
        strip_envelope(ENVELOPE_MAGIC + b"\x12\x05ab")
