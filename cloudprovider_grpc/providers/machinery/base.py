"""What both shapes of the shared machinery do the same way, assembled into `GroupProvider`.

`GroupProvider` is the base of `MachineProvider` (machines/provider.py, our server owns the size)
and `PoolProvider` (pools/provider.py, the cloud owns it). It is the sum of parts that each hold
one concern, all over `GroupCore`:

- group_core.py: the group set (possibly dynamic: groups discovered from the cloud appear
  and disappear with it), the node index, the lock and the state version (`_changing`), the hooks
  each shape fills in, and the journal that `--state-file` keeps.
- group_state.py: what is tracked per group, and the listing clock (`ListingSpan`).
- group_reads.py: the read RPCs, from memory (groups, NodeGroupForNode, templates,
  options, GPU facts, prices).
- group_refresh.py: start, take-over, stop, and Refresh (catalogue reload, listing,
  per-group listing errors, size gauges).
- group_status.py: the status page's view and the listing errors check-config reports.
- group_write_rules.py: CA's rules for the write RPCs, the write gate's questions, and
  the retry back-off.
"""

from __future__ import annotations

from cloudprovider_grpc.providers.machinery.group_reads import ReadSide
from cloudprovider_grpc.providers.machinery.group_refresh import RefreshCycle
from cloudprovider_grpc.providers.machinery.group_state import S
from cloudprovider_grpc.providers.machinery.group_status import StatusReport
from cloudprovider_grpc.providers.machinery.group_write_rules import WriteRules


class GroupProvider(ReadSide[S], StatusReport[S], RefreshCycle[S], WriteRules[S]):
    """The read side, status, refresh cycle and write rules shared by both shapes; subclasses add
    the write side and the listing."""
