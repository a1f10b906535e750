"""The machine shape a backend describes, from which the template Node for CA is encoded.

Backends fill a NodeTemplate from their catalogue (plan, instance type, pool spec); the service turns
it into `v1.Node` bytes with `cloudprovider_grpc.k8s.node.encode_template_node`. Keeping the shape as
plain data keeps every cloud package free of protobuf and Quantity details.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"  # NoSchedule | PreferNoSchedule | NoExecute


@dataclass(frozen=True)
class NodeTemplate:
    """What one new machine of a node group will look like once it joins the cluster.

    `capacity` maps resource names to Quantity strings as the machine reports them ("cpu": "4",
    "memory": "16Gi", "nvidia.com/gpu": "1", "ephemeral-storage": "100Gi"). `pods` defaults to 110
    (kubelet's default max-pods) and is added to both capacity and allocatable. `reserved` holds
    what kubelet/system reservations take away (same keys), so allocatable = capacity - reserved.
    Labels given here are merged over the standard ones (os, arch, instance-type, region, zone).
    """

    capacity: dict[str, str]
    pods: int = 110
    reserved: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    instance_type: str = ""
    region: str = ""
    zone: str = ""
    os: str = "linux"
    arch: str = "amd64"
    annotations: dict[str, str] = field(default_factory=dict)
