"""What the group nodes of one run cost: PricingNodePrice over each node's registered lifetime.

A node's lifetime is priced when it ends (removed, or its machine gone) while the server still
knows the node, and the rest at the end of the run. The calls go over the simulator's own
connection, so they never count as CA's RPCs. One failed price makes the whole cost unavailable
rather than silently partial.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.simulator.client import CAClient
from cloudprovider_grpc.simulator.clock import VirtualClock


@dataclass
class _Lifetime:
    group: str
    name: str
    labels: dict[str, str]
    start: float


@dataclass
class NodeCosts:
    """Open lifetimes by provider id, and the priced total per group."""

    world_client: CAClient
    clock: VirtualClock
    lifetimes: dict[str, _Lifetime] = field(default_factory=dict)
    per_group: dict[str, float] = field(default_factory=dict)
    unavailable: str = ""  # why the cost cannot be given, once a price failed

    def start(self, provider_id: str, group: str, name: str, labels: dict[str, str], t: float) -> None:
        """A group node registered at `t`."""
        self.lifetimes[provider_id] = _Lifetime(group, name, labels, t)

    def end(self, provider_id: str, t: float) -> None:
        """Price a node's registered lifetime when it ends, while the server still knows it."""
        life = self.lifetimes.pop(provider_id, None)
        if life is None or self.unavailable:
            return
        node = pb.ExternalGrpcNode(providerID=provider_id, name=life.name, labels=life.labels)
        price = self.world_client.node_price(node, self.clock.datetime(life.start), self.clock.datetime(t))
        if price is None:
            self.unavailable = f"PricingNodePrice failed for {life.name}"
            return
        self.per_group[life.group] = self.per_group.get(life.group, 0.0) + price

    def summary(self, end: float, unit: str) -> dict[str, Any] | None:
        """The report's `cost`: every node still registered priced up to `end`; None when a price
        failed."""
        for pid in sorted(self.lifetimes):
            self.end(pid, end)
        if self.unavailable:
            return None
        return {
            "total": round(sum(self.per_group.values()), 6),
            "per_group": {k: round(v, 6) for k, v in sorted(self.per_group.items())},
            "basis": "PricingNodePrice over each node's registered lifetime",
            "unit": unit,
        }
