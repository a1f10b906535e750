"""Small builders for simulator unit tests (plain objects, no server)."""

from __future__ import annotations

from cloudprovider_grpc.simulator.model import Node, NodeShape, Pod, PodShape, Taint, effective_requests

GI = 1024**3


def shape(
    group: str = "g",
    cpu: str = "4",
    memory: str = "16Gi",
    pods: int = 110,
    extra: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    taints: tuple[Taint, ...] = (),
) -> NodeShape:
    res = effective_requests([{"cpu": cpu, "memory": memory, **(extra or {})}], [])
    res["pods"] = pods
    return NodeShape(group, dict(res), dict(res), labels or {}, taints)


def pod_shape(
    owner: str = "w", cpu: str = "1", memory: str = "1Gi", kind: str = "Deployment", **kw
) -> PodShape:
    extra = kw.pop("extra", {})
    req = effective_requests([{"cpu": cpu, "memory": memory, **extra}], [])
    return PodShape(owner=owner, kind=kind, namespace=kw.pop("namespace", "default"), requests=req, **kw)


def node_with(name: str, node_shape: NodeShape, *pods: PodShape) -> Node:
    n = Node(name, f"test://{name}", node_shape, 0.0)
    for i, ps in enumerate(pods):
        n.bind(Pod(f"{name}-p{i}", ps, 0.0))
    return n
