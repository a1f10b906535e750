"""Our k8s subset against Node/Pod bytes written by Kubernetes' own Go code.

The fixtures (../shared/golden/k8s-api/<version>/core.v1.{Node,Pod}.{pb,json}) come from
kubernetes/api `testdata/`: every field is populated, the `.pb` is the apiserver envelope around
`v1.Node.Marshal()` / `v1.Pod.Marshal()` bytes, and the `.json` twin holds the same object. The
check is generic: for every field our subset declares, walk the parsed message and the JSON side by
side and require the JSON to hold the field with an equal value. Quantities must match Go's string
exactly and be canonical by our rules; Times are whole seconds (Go drops nanos).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from cloudprovider_grpc.k8s.node import decode_node, strip_envelope
from cloudprovider_grpc.k8s.quantity import canonical
from cloudprovider_grpc.k8s.resources import parse_pod, pod_requests
from cloudprovider_grpc.protos import k8s_pb2
from tests.k8s_support.wire import GOLDEN

pytestmark = pytest.mark.unit

VERSIONS = ["v0.37-head", "v1.35.0"]
QUANTITY = k8s_pb2.Quantity.DESCRIPTOR.full_name
TIME = k8s_pb2.Time.DESCRIPTOR.full_name


def golden(version: str, kind: str) -> tuple[bytes, bytes, dict[str, Any]]:
    base = GOLDEN / "k8s-api" / version / f"core.v1.{kind}"
    pb, js = Path(f"{base}.pb"), Path(f"{base}.json")
    if not pb.is_file():
        pytest.fail(f"golden fixture {pb} is missing (expected the shared/ folder beside the checkout)")
    data = pb.read_bytes()
    return data, strip_envelope(data), json.loads(js.read_text())


def json_time(text: str) -> int:
    return int(datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp())


def scalar_matches(value: Any, expected: Any, path: str) -> None:
    assert value == expected, f"{path}: parsed {value!r}, JSON {expected!r}"


def compare(message: Message, doc: dict[str, Any], path: str, seen: set[str]) -> None:
    """Every field our descriptor declares must be in the JSON with the same value."""
    descriptor: Descriptor = message.DESCRIPTOR
    if descriptor.full_name == TIME:
        raise AssertionError(f"{path}: Time must be compared as a string")
    for field in descriptor.fields:
        where = f"{path}.{field.name}"
        assert field.name in doc, f"{where}: modelled field missing from the JSON twin"
        expected = doc[field.name]
        value = getattr(message, field.name)
        seen.add(f"{descriptor.full_name}.{field.name}")
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            assert set(value) == set(expected), f"{where}: keys differ"
            for key in expected:
                if value_field.message_type is None:
                    scalar_matches(value[key], expected[key], f"{where}[{key}]")
                else:
                    compare_value(value[key], expected[key], value_field, f"{where}[{key}]", seen)
        elif field.is_repeated:
            assert len(value) == len(expected), f"{where}: {len(value)} items, JSON has {len(expected)}"
            for i, (item, item_expected) in enumerate(zip(value, expected, strict=True)):
                if field.type == FieldDescriptor.TYPE_MESSAGE:
                    compare_value(item, item_expected, field, f"{where}[{i}]", seen)
                else:
                    scalar_matches(item, item_expected, f"{where}[{i}]")
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            assert message.HasField(field.name), f"{where}: not decoded"
            compare_value(value, expected, field, where, seen)
        else:
            assert message.HasField(field.name), f"{where}: not decoded"
            scalar_matches(value, expected, where)


def compare_value(value: Message, expected: Any, field: FieldDescriptor, path: str, seen: set[str]) -> None:
    name = field.message_type.full_name
    if name == QUANTITY:
        assert value.string == expected, f"{path}: quantity {value.string!r}, JSON {expected!r}"
        assert canonical(value.string) == expected, f"{path}: Go's string is not canonical by our rules"
    elif name == TIME:
        assert value.seconds == json_time(expected), f"{path}: {value.seconds} vs {expected}"
        assert value.nanos == 0, f"{path}: Go writes whole seconds only"
    else:
        compare(value, expected, path, seen)


def reachable_fields(descriptor: Descriptor, found: set[str] | None = None) -> set[str]:
    found = set() if found is None else found
    for field in descriptor.fields:
        key = f"{descriptor.full_name}.{field.name}"
        if key in found:
            continue
        found.add(key)
        target = field.message_type
        if target is not None and target.GetOptions().map_entry:
            target = target.fields_by_name["value"].message_type
        if target is not None and target.full_name not in (QUANTITY, TIME):
            reachable_fields(target, found)
    return found


@pytest.mark.parametrize("version", VERSIONS)
def test_golden_node_matches_json(version: str) -> None:
    envelope, raw, doc = golden(version, "Node")
    unknown = k8s_pb2.Unknown.FromString(envelope[4:])
    assert (unknown.typeMeta.apiVersion, unknown.typeMeta.kind) == (doc["apiVersion"], doc["kind"])

    node = decode_node(raw)
    seen: set[str] = set()
    compare(node, doc, "Node", seen)
    # The fixture populates everything, so every field of our Node subset was checked.
    assert seen == reachable_fields(k8s_pb2.Node.DESCRIPTOR)
    # Spot checks of what the template path relies on, spelled out.
    assert node.metadata.creationTimestamp.seconds == 1199149261  # 2008-01-01T01:01:01Z
    assert node.spec.providerID == "providerIDValue"
    assert node.status.capacity["capacityKey"].string == "0"
    assert node.status.nodeInfo.operatingSystem == "operatingSystemValue"


@pytest.mark.parametrize("version", VERSIONS)
def test_golden_pod_matches_json(version: str) -> None:
    _, raw, doc = golden(version, "Pod")
    pod = parse_pod(raw)
    seen: set[str] = set()
    compare(pod, doc, "Pod", seen)
    assert seen == reachable_fields(k8s_pb2.Pod.DESCRIPTOR)
    spec = doc["spec"]
    assert [c.name for c in pod.spec.initContainers] == [c["name"] for c in spec["initContainers"]]
    assert dict(pod.spec.nodeSelector) == spec["nodeSelector"]
    assert pod.spec.tolerations[0].tolerationSeconds == spec["tolerations"][0]["tolerationSeconds"]
    term = pod.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]
    assert list(term.matchExpressions[0].values) == ["valuesValue"]


@pytest.mark.parametrize(("version", "kind"), [(v, k) for v in VERSIONS for k in ("Node", "Pod")])
def test_unmodelled_fields_survive_a_round_trip(version: str, kind: str) -> None:
    _, raw, _ = golden(version, kind)
    cls = k8s_pb2.Node if kind == "Node" else k8s_pb2.Pod
    message = cls.FromString(raw)
    again = message.SerializeToString(deterministic=True)
    # Fields we do not declare are kept as unknown fields, so nothing is lost or invented.
    assert len(again) == len(raw)
    assert cls.FromString(again) == message


def _json_quantity(text: str) -> Decimal:
    """Independent reading of the fixture's quantities: they are plain decimals ("0")."""
    return Decimal(text)


def _pod_requests_from_json(spec: dict[str, Any]) -> dict[str, Decimal]:
    """PodRequests written out directly from the KEP-753/KEP-2837 definitions, over the JSON."""

    def requests(container: dict[str, Any]) -> dict[str, Decimal]:
        return {k: _json_quantity(v) for k, v in container.get("resources", {}).get("requests", {}).items()}

    names = set()
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        names |= set(requests(c))
    pod_level = {k: _json_quantity(v) for k, v in spec.get("resources", {}).get("requests", {}).items()}
    overhead = {k: _json_quantity(v) for k, v in spec.get("overhead", {}).items()}
    result = {}
    for name in names:
        steady = sum((requests(c).get(name, Decimal(0)) for c in spec.get("containers", [])), Decimal(0))
        sidecars_so_far = Decimal(0)
        peak = Decimal(0)
        for c in spec.get("initContainers", []):
            own = requests(c).get(name, Decimal(0))
            if c.get("restartPolicy") == "Always":
                sidecars_so_far += own
                steady += own
                peak = max(peak, sidecars_so_far)
            else:
                peak = max(peak, own + sidecars_so_far)
        result[name] = max(steady, peak)
    if any(k in ("cpu", "memory") or k.startswith("hugepages-") for k in pod_level):
        result.update(
            {k: v for k, v in pod_level.items() if k in ("cpu", "memory") or k.startswith("hugepages-")}
        )
    for name, value in overhead.items():
        result[name] = result.get(name, Decimal(0)) + value
    return result


@pytest.mark.parametrize("version", VERSIONS)
def test_golden_pod_requests(version: str) -> None:
    _, raw, doc = golden(version, "Pod")
    expected = _pod_requests_from_json(doc["spec"])
    # The fixture's init container has restartPolicy "restartPolicyValue" (not a sidecar) and its
    # pod-level requests name only "requestsKey", which is not a pod-level resource: ignored.
    assert set(expected) == {"requestsKey", "overheadKey"}
    got = pod_requests(parse_pod(raw))
    assert {k: Decimal(v.numerator) / Decimal(v.denominator) for k, v in got.items()} == expected
