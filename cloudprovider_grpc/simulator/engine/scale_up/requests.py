"""Scale-ups in flight and node-group back-off: what the cluster state checks each loop.

sigs-CA `pkg/clusterstate/clusterstate.go` keeps a ScaleUpRequest per group until its nodes
register or `max-node-provision-time` passes (then the group backs off), and backs a group off
when its new instances fail to be created; the scale-up phase adds the requests and reads the
back-offs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cloudprovider_grpc.simulator.backoff import Backoff
from cloudprovider_grpc.simulator.scenario import AutoscalerOptions


@dataclass
class ScaleUpRequest:
    increase: int
    time: float
    expected_by: float


@dataclass
class ScaleUpRequests:
    """The requests in flight by group, and the back-off of every group."""

    backoff: Backoff
    in_flight: dict[str, ScaleUpRequest] = field(default_factory=dict)

    @classmethod
    def for_options(cls, o: AutoscalerOptions) -> ScaleUpRequests:
        return cls(
            Backoff(
                o.initial_node_group_backoff_duration,
                o.max_node_group_backoff_duration,
                o.node_group_backoff_reset_timeout,
            )
        )
