"""The price expander's pricing model, answered by the server's pricing RPCs."""

from __future__ import annotations

from datetime import datetime

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.simulator.client import CAClient
from cloudprovider_grpc.simulator.model import CPU, MEMORY, NodeShape, PodShape, pod_proto

STABILIZATION_POD = {CPU: "500m", MEMORY: "500Mi"}  # price.go priceStabilizationPod


class RpcPricing:
    """The price expander's pricing model over PricingNodePrice / PricingPodPrice."""

    def __init__(self, client: CAClient) -> None:
        self.client = client

    def node_price(self, template: NodeShape, start: datetime, end: datetime) -> float | None:
        node = pb.ExternalGrpcNode(
            name=f"template-node-for-{template.group}-sim", labels=dict(template.labels)
        )
        return self.client.node_price(node, start, end)

    def pod_price(self, shape: PodShape, start: datetime, end: datetime) -> float | None:
        return self.client.pod_price(
            pod_proto(f"{shape.owner}-x", shape.namespace, shape.containers), start, end
        )

    def stabilization_price(self, start: datetime, end: datetime) -> float | None:
        return self.client.pod_price(pod_proto("stabilize", "default", [STABILIZATION_POD]), start, end)
