"""What both shapes of the shared machinery do the same way, composed into `GroupProvider`.

`GroupProvider` is the one class here that implements the `CloudProvider` contract; it is the base
of `MachineProvider` (machines/provider.py, our server owns the size) and `PoolProvider`
(pools/provider.py, the cloud owns it), which add the write RPCs and `nodes`. It holds its parts as
fields and delegates the contract's methods to them:

- `core` (group_core.py): the group set, the lock, the node index (node_index.py), the state
  version (state_version.py), the journal, the jobs, the activity record; each shape passes it its
  hooks (shape.py) and hands it to every other part.
- `reads` (group_reads.py): the read RPCs, from memory (groups, NodeGroupForNode, templates,
  options, GPU facts, prices).
- `cycle` (group_refresh.py): start, take-over, stop, and Refresh (catalogue reload, listing,
  size gauges).
- `report` (group_status.py): the status page's view and the listing errors check-config reports.
- `rules` (group_write_rules.py): CA's rules for the write RPCs, the write gate's questions, and
  the retry back-off; the shapes' write RPCs and background jobs are handed it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Generic

from cloudprovider_grpc.k8s.template import NodeTemplate
from cloudprovider_grpc.providers.contract import (
    AutoscalingOptions,
    CloudProvider,
    GroupSizes,
    NodeGroup,
    NodeRef,
)
from cloudprovider_grpc.providers.driver import GroupConfig
from cloudprovider_grpc.providers.machinery.group_core import GroupCore
from cloudprovider_grpc.providers.machinery.group_reads import ReadSide
from cloudprovider_grpc.providers.machinery.group_refresh import RefreshCycle
from cloudprovider_grpc.providers.machinery.group_state import S
from cloudprovider_grpc.providers.machinery.group_status import StatusReport
from cloudprovider_grpc.providers.machinery.group_write_rules import WriteRules
from cloudprovider_grpc.providers.machinery.shape import Shape


class GroupProvider(CloudProvider, Generic[S]):
    """The read side, status, refresh cycle and write rules shared by both shapes, as fields;
    subclasses add the write RPCs and `nodes`."""

    #: "machines" or "pools": the shape's name, as the journal records it
    shape: str = "base"

    def __init__(
        self,
        core: GroupCore[S],
        hooks: Shape[S],
        rules: WriteRules[S],
        *,
        on_stop: Callable[[], None] | None = None,
    ) -> None:
        core.open(hooks)
        self.core = core
        self.rules = rules
        self.driver = core.driver
        self.name = core.name
        self.activity = core.activity
        self.reads = ReadSide(core)
        self.report = StatusReport(core, self.nodes)
        self.cycle = RefreshCycle(core, self.reads.sizes, on_stop)

    # ------------------------------------------------------------------ reads (memory only)
    def node_groups(self) -> Sequence[NodeGroup]:
        return self.reads.node_groups()

    def node_group_for_node(self, node: NodeRef) -> NodeGroup | None:
        return self.reads.node_group_for_node(node)

    def target_size(self, group_id: str) -> int:
        return self.reads.target_size(group_id)

    def template(self, group_id: str) -> NodeTemplate:
        return self.reads.template(group_id)

    def options(self, group_id: str, defaults: AutoscalingOptions) -> AutoscalingOptions | None:
        return self.reads.options(group_id, defaults)

    def gpu_label(self) -> str:
        return self.reads.gpu_label()

    def gpu_types(self) -> list[str]:
        return self.reads.gpu_types()

    def node_price(self, node: NodeRef, start: datetime, end: datetime) -> float:
        return self.reads.node_price(node, start, end)

    def pod_price(self, requests: Mapping[str, float], start: datetime, end: datetime) -> float:
        return self.reads.pod_price(requests, start, end)

    def sizes(self) -> dict[str, GroupSizes]:
        return self.reads.sizes()

    def resolve_group(self, ref: str) -> str:
        return self.core.resolve_group(ref)

    def group_configs(self) -> list[GroupConfig]:
        """The current group set as served (`check-config` matches `group_options` against it)."""
        return self.core.group_configs()

    # ------------------------------------------------------------------ the state version
    def state_version(self) -> int:
        return self.core.version.value()

    def watch_state(self, callback: Callable[[int], None]) -> None:
        self.core.version.watch(callback)

    # ------------------------------------------------------------------ status
    def status(self) -> dict[str, Any]:
        return self.report.status()

    def listing_errors(self) -> dict[str, str]:
        return self.report.listing_errors()

    # ------------------------------------------------------------------ lifecycle and Refresh
    def start(self) -> None:
        self.cycle.start()

    def take_over(self) -> None:
        self.cycle.take_over()

    def stop(self, timeout: float = 10.0) -> None:
        self.cycle.stop(timeout)

    def quiesce(self, timeout: float = 10.0) -> None:
        self.cycle.quiesce(timeout)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        return self.cycle.wait_idle(timeout)

    def refresh(self) -> None:
        self.cycle.refresh()
