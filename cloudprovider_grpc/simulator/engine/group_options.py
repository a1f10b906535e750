"""What CA knows of each node group's NodeGroupGetOptions answers.

CA asks GetOptions wherever it needs a per-group option (sigs-CA
`pkg/processors/nodegroupconfig/node_group_config_processor.go`), falling back to its own flags
when the group answers none. The scale-down phase asks every loop a group has nodes; the
scale-up phase reuses the last answer (`zero_or_max`) and asks only for a group it has never
asked about, which is the known simplification the scale-up module names.
"""

from __future__ import annotations

from cloudprovider_grpc.simulator.client import CAClient, GroupOptions, RpcError
from cloudprovider_grpc.simulator.scenario import AutoscalerOptions


class GroupOptionsCache:
    """The last GetOptions answer per group, and the defaults CA sends with each request."""

    def __init__(self, client: CAClient, options: AutoscalerOptions) -> None:
        self.client = client
        self.options = options
        self.seen: dict[str, GroupOptions] = {}

    def defaults(self) -> GroupOptions:
        """CA's flags as the defaults of a GetOptions request."""
        o = self.options
        return GroupOptions(
            o.scale_down_utilization_threshold,
            o.scale_down_gpu_utilization_threshold,
            o.scale_down_unneeded_time,
            o.scale_down_unready_time,
            o.max_node_provision_time,
            False,
            o.ignore_daemonsets_utilization,
        )

    def ask(self, gid: str) -> GroupOptions:
        """A fresh GetOptions answer (the defaults when the group has none or the call fails);
        a successful answer is remembered."""
        d = self.defaults()
        try:
            got = self.client.options(gid, d) or d
        except RpcError:
            return d
        self.seen[gid] = got
        return got

    def zero_or_max(self, gid: str) -> bool:
        """The group's zeroOrMaxNodeScaling option, from its last answer; asked only for a group
        never asked about."""
        seen = self.seen.get(gid)
        if seen is None:
            d = self.defaults()
            try:
                seen = self.client.options(gid, d) or d
            except RpcError:
                return False
            self.seen[gid] = seen
        return seen.zero_or_max_node_scaling

    def atomic(self) -> set[str]:
        """Groups whose last answer asks for zero-or-max scaling."""
        return {gid for gid, o in self.seen.items() if o.zero_or_max_node_scaling}
