"""Encode the template `v1.Node` CA simulates scale-ups with; decode Nodes and the apiserver envelope.

The bytes go into `NodeGroupTemplateNodeInfoResponse.nodeBytes` (and the legacy `nodeInfo`), where
CA decodes them with Go's `v1.Node.Unmarshal`. That decoder rejects the whole Node on one invalid
Quantity string, so every quantity is parsed and re-written in canonical form before anything is
serialized, and a bad one raises ValueError here instead of making CA silently drop the template.

What CA needs from a template (kubernetes/autoscaler at release-1.35:
cluster-autoscaler/cloudprovider/utils.go BuildReadyConditions, simulator/node_info_utils.go; the
scheduler's kubernetes/kubernetes pkg/scheduler/framework/plugins/noderesources/fit.go):
labels for os/arch/instance type/zone, taints, capacity and allocatable with `pods` in both (the
scheduler's NodeResourcesFit rejects every pod when allocatable pods is 0), and a Ready condition.
Time fields stay unset: Go reads an absent Time as the zero time, but `seconds = 0` as 1970-01-01.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

from cloudprovider_grpc.k8s.quantity import Format, Quantity, parse_quantity
from cloudprovider_grpc.k8s.template import NodeTemplate
from cloudprovider_grpc.protos import k8s_pb2

__all__ = [
    "ENVELOPE_MAGIC",
    "TAINT_EFFECTS",
    "decode_node",
    "encode_template_node",
    "strip_envelope",
    "template_node",
    "template_node_name",
]

# The apiserver's protobuf content type starts with these four bytes, then runtime.Unknown
# (kubernetes/apimachinery pkg/runtime/serializer/protobuf/protobuf.go).
ENVELOPE_MAGIC = b"k8s\x00"

TAINT_EFFECTS = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})

# Node conditions of a healthy node, with the reasons kubelet and the route controller report
# (kubernetes/kubernetes pkg/kubelet/nodestatus/setters.go, pkg/controller/route).
_CONDITIONS = (
    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ("NetworkUnavailable", "False", "RouteCreated", "RouteController created a route"),
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
)


def template_node_name(group_id: str) -> str:
    return f"template-node-for-{group_id}"


def _quantities(what: str, values: dict[str, str]) -> dict[str, Quantity]:
    parsed: dict[str, Quantity] = {}
    for name, text in values.items():
        if not name:
            raise ValueError(f"{what}: empty resource name")
        try:
            parsed[name] = parse_quantity(text)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{what}[{name!r}]: {exc}") from None
        if parsed[name].sign() < 0:
            raise ValueError(f"{what}[{name!r}]: negative quantity {text!r}")
    return parsed


def _standard_labels(template: NodeTemplate, name: str) -> dict[str, str]:
    labels = {
        "kubernetes.io/os": template.os,
        "kubernetes.io/arch": template.arch,
        "beta.kubernetes.io/os": template.os,
        "beta.kubernetes.io/arch": template.arch,
        "kubernetes.io/hostname": name,
    }
    if template.instance_type:
        labels["node.kubernetes.io/instance-type"] = template.instance_type
        labels["beta.kubernetes.io/instance-type"] = template.instance_type
    if template.region:
        labels["topology.kubernetes.io/region"] = template.region
    if template.zone:
        labels["topology.kubernetes.io/zone"] = template.zone
    return labels


def _resource_lists(template: NodeTemplate) -> tuple[dict[str, str], dict[str, str]]:
    """Canonical capacity and allocatable (= capacity - reserved, never negative), pods in both."""
    if isinstance(template.pods, bool) or not isinstance(template.pods, int) or template.pods < 1:
        raise ValueError(f"pods must be a positive integer, not {template.pods!r}")
    capacity = _quantities("capacity", template.capacity)
    reserved = _quantities("reserved", template.reserved)
    if "pods" in capacity:
        raise ValueError("capacity must not contain 'pods': set NodeTemplate.pods instead")
    unknown = sorted(set(reserved) - set(capacity))
    if unknown:
        raise ValueError(f"reserved names resources the capacity lacks: {', '.join(unknown)}")
    pods = Quantity(template.pods, 0, Format.DECIMAL_SI)
    allocatable = {
        name: (amount - reserved[name]).clamp_at_zero() if name in reserved else amount
        for name, amount in capacity.items()
    }
    capacity["pods"] = allocatable["pods"] = pods
    return (
        {name: q.canonical() for name, q in capacity.items()},
        {name: q.canonical() for name, q in allocatable.items()},
    )


def template_node(template: NodeTemplate, group_id: str) -> k8s_pb2.Node:
    """The template Node message; raises ValueError on anything Go would reject."""
    if not group_id:
        raise ValueError("group_id must not be empty")
    if not template.os or not template.arch:
        raise ValueError(f"os and arch must not be empty (got os={template.os!r}, arch={template.arch!r})")
    name = template_node_name(group_id)
    capacity, allocatable = _resource_lists(template)

    node = k8s_pb2.Node()
    node.metadata.name = name
    node.metadata.labels.update(_standard_labels(template, name))
    node.metadata.labels.update(template.labels)
    node.metadata.annotations.update(template.annotations)

    for taint in template.taints:
        if not taint.key:
            raise ValueError("taint with an empty key")
        if taint.effect not in TAINT_EFFECTS:
            raise ValueError(
                f"taint {taint.key!r}: effect {taint.effect!r} is not one of {sorted(TAINT_EFFECTS)}"
            )
        node.spec.taints.add(key=taint.key, value=taint.value, effect=taint.effect)

    # Message-valued map entries cannot be assigned; set the field of the entry the access creates.
    for key, text in capacity.items():
        node.status.capacity[key].string = text
    for key, text in allocatable.items():
        node.status.allocatable[key].string = text
    for kind, status, reason, message in _CONDITIONS:
        node.status.conditions.add(type=kind, status=status, reason=reason, message=message)
    node.status.nodeInfo.operatingSystem = template.os
    node.status.nodeInfo.architecture = template.arch
    return node


def encode_template_node(template: NodeTemplate, group_id: str) -> bytes:
    """`v1.Node.Marshal()`-compatible bytes of the template Node (sorted map keys, stable bytes)."""
    return template_node(template, group_id).SerializeToString(deterministic=True)


def decode_node(raw: bytes) -> k8s_pb2.Node:
    """Parse `v1.Node` bytes; like Go's Unmarshal, an invalid capacity/allocatable quantity fails it."""
    node = k8s_pb2.Node()
    try:
        node.ParseFromString(raw)
    except DecodeError as exc:
        raise ValueError(f"not a serialized v1.Node: {exc}") from None
    for field in ("capacity", "allocatable"):
        for key, quantity in getattr(node.status, field).items():
            try:
                parse_quantity(quantity.string)
            except ValueError as exc:
                raise ValueError(f"status.{field}[{key!r}]: {exc}") from None
    return node


def strip_envelope(data: bytes) -> bytes:
    """The `raw` object bytes inside the apiserver's `k8s\\0` + runtime.Unknown envelope."""
    if not data.startswith(ENVELOPE_MAGIC):
        raise ValueError("not a Kubernetes protobuf envelope: missing the 'k8s\\x00' prefix")
    unknown = k8s_pb2.Unknown()
    try:
        unknown.ParseFromString(data[len(ENVELOPE_MAGIC) :])
    except DecodeError as exc:
        raise ValueError(f"malformed runtime.Unknown envelope: {exc}") from None
    if not unknown.HasField("raw"):
        raise ValueError("runtime.Unknown envelope carries no raw object")
    return unknown.raw
