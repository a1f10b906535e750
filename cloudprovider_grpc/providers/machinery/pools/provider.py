"""The pool shape of the shared machinery: turns a `PoolDriver` into a full `CloudProvider`.

For clouds that own the desired size of a group (Vultr VKE `node_quantity`, Exoscale `size`,
AliCloud ESS `DesiredCapacity`, the sim cloud's pool mode): we set an absolute size and the cloud
creates the instances; removing a named instance lowers the size. The shared part is
`GroupProvider` (../base.py); this shape adds the write side:

- **Target.** The size we asked for while a change of ours is queued, in flight, or not yet seen by
  a listing that started after the cloud acknowledged it; otherwise the cloud's own desired size.
  So CA sees its own request at once, and the cloud's view wins as soon as it can be trusted (a size
  changed in the cloud's console shows on the next Refresh).
- **One coalescing sync per group.** IncreaseSize, DecreaseTargetSize and DeleteNodes only record the
  wanted size (and the machines to remove) and queue the group's sync job if it is not queued
  already; the job sends one batched `remove_machines`, then one absolute `set_size` with the latest
  wanted size, and runs again if more arrived meanwhile. 50 concurrent IncreaseSize(1) calls end in a
  handful of pushes, never above max; sizes are absolute, so a retry after a timeout cannot double.
- **Never below the listed machines.** A pushed size is never lower than the machines the cloud
  lists for the group (minus the ones we are removing): clouds delete *random* instances when the size
  drops below their count (VKE), so lowering the size is only ever done by naming machines
  (DeleteNodes). DecreaseTargetSize below the listed count is FAILED_PRECONDITION with no cloud call.
- **Placeholders.** Wanted - listed instances appear as `instanceCreating` with ids
  `<prefix>pending-<group>-<n>`, stable while their count is stable (new ones get new numbers; ones
  that became machines leave oldest first). They carry the cloud's last scaling failure, a failed
  operation or push, or the group's listing error as errorInfo (class 1 for capacity/quota), so CA
  backs off and deletes them, which lowers the wanted size.
- **Asynchronous operations** (`Operation` from set_size/remove_machines) are polled by a background
  job; a FAILED one becomes errorInfo on the placeholders and a log line. No RPC ever waits.
- **Restart.** The desired size lives in the cloud, so a restart loses nothing but a change accepted
  and not yet sent (CA asks again). With `state_file`, wanted sizes and removals are journaled and
  resumed.

The parts, held as fields and each handed what it uses: pools/core.py (per-group state, and
`PoolPlaceholders`: placeholders and failures), `PoolSync` in sync.py (the sync job), which is handed
`PoolOperations` in operations.py (polling the cloud's operations), `PoolListingFold` in listing.py
(folding a listing in, expiry), `PoolShape` in shape.py (the hooks the group core calls, the
status's operations and the journal's format), and this module (the RPCs that answer from memory and
record, and DeleteNodes' resolution of nodes).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from typing import Any

from cloudprovider_grpc.providers.contract import Instance, InstanceState, NodeRef
from cloudprovider_grpc.providers.driver import Machine, PoolDriver
from cloudprovider_grpc.providers.machinery.base import GroupProvider
from cloudprovider_grpc.providers.machinery.group_core import GroupCore
from cloudprovider_grpc.providers.machinery.group_write_rules import WriteRules
from cloudprovider_grpc.providers.machinery.pools.core import PoolGroupState, PoolPlaceholders
from cloudprovider_grpc.providers.machinery.pools.listing import PoolListingFold
from cloudprovider_grpc.providers.machinery.pools.operations import PoolOperations
from cloudprovider_grpc.providers.machinery.pools.shape import PoolShape
from cloudprovider_grpc.providers.machinery.pools.sync import PoolSync

log = logging.getLogger(__name__)


class Resolved(enum.Enum):
    """What a node named in DeleteNodes is to a pool."""

    MACHINE = "machine"
    PLACEHOLDER = "placeholder"
    GONE = "gone"  # ours, and already gone (a removed machine, a deleted placeholder)
    FOREIGN = "foreign"


class PoolProvider(GroupProvider[PoolGroupState]):
    """A `CloudProvider` over any `PoolDriver`; see the module docstring."""

    shape = "pools"
    driver: PoolDriver

    def __init__(
        self,
        driver: PoolDriver,
        *,
        coalesce_window: float = 0.1,
        seed: int | None = None,
        on_stop: Callable[[], None] | None = None,
        **settings: Any,
    ) -> None:
        core: GroupCore[PoolGroupState] = GroupCore(driver, self.shape, **settings)
        rules = WriteRules(core, seed)
        #: the placeholders and the failure they show
        self.placeholders = PoolPlaceholders(core, driver)
        operations = PoolOperations(core, driver, self.placeholders)
        #: the one coalescing sync job per group
        self.sync = PoolSync(
            core, rules, driver, self.placeholders, operations, coalesce_window=coalesce_window
        )
        fold = PoolListingFold(core, driver, self.placeholders)
        hooks = PoolShape(core, driver, fold, self.placeholders, self.sync)
        super().__init__(core, hooks, rules, on_stop=on_stop)

    # ------------------------------------------------------------------ read RPCs (memory only)
    def nodes(self, group_id: str) -> list[Instance]:
        with self.core.lock:
            state = self.core.group(group_id)
            out = [
                Instance(m.id, InstanceState.DELETING if m.id in state.deleting else m.state, m.error)
                for m in state.machines.values()
            ]
            error = state.placeholder_error()
            out.extend(Instance(pid, InstanceState.CREATING, error) for pid in state.placeholders)
            return out

    # ------------------------------------------------------------------ write RPCs (record and return)
    def increase_size(self, group_id: str, delta: int) -> None:
        with self.core.changing(group_id):
            state, target = self.rules.check_increase(group_id, delta)
            self.rules.admit("create", group_id, delta)
            state.wanted = target + delta
            state.failed = None  # a new request: try again
            self.placeholders.fit(state)
            self.sync.queue(state)
            self.core.save_journal()
        log.info("node group %s: target %d -> %d", self.core.shown(group_id), target, target + delta)

    def decrease_target_size(self, group_id: str, delta: int) -> None:
        with self.core.changing(group_id):
            # never below the listed machines: the cloud would delete random instances to meet it
            state, target = self.rules.check_decrease(group_id, delta)
            new = target + delta
            self.rules.admit("set_size", group_id, new)
            state.wanted = new
            self.placeholders.fit(state, drop_newest=True)
            self.sync.queue(state)
            self.core.save_journal()
        log.info("node group %s: target %d -> %d (decrease)", self.core.shown(group_id), target, new)

    def delete_nodes(self, group_id: str, nodes: list[NodeRef]) -> None:
        with self.core.changing(group_id):
            state = self.core.group(group_id)
            machines: dict[str, Machine] = {}
            placeholders: list[str] = []
            for node in nodes:
                kind, obj = self._resolve(state, node)
                if kind is Resolved.MACHINE and isinstance(obj, Machine):
                    machines[obj.id] = obj
                elif kind is Resolved.PLACEHOLDER and isinstance(obj, str):
                    if obj not in placeholders:
                        placeholders.append(obj)
                elif kind is Resolved.FOREIGN:
                    raise self.rules.not_in_group(group_id, node)
            leaving = [
                m
                for m in machines.values()
                if m.id not in state.deleting and m.state != InstanceState.DELETING
            ]
            reducing = len(leaving) + len(placeholders)
            target = state.target()
            self.rules.check_min(state, reducing)
            if not reducing:
                return  # everything named is already gone or going: idempotent
            self.rules.admit("delete", group_id, reducing, [*(m.id for m in leaving), *placeholders])
            now = self.core.clock()
            for m in leaving:
                state.deleting[m.id] = now
                state.removing[m.id] = m
            for pid in placeholders:
                state.placeholders.remove(pid)
                state.tombstones[pid] = now
            state.wanted = target - reducing
            self.placeholders.fit(state)
            if not state.placeholders:
                state.failed = None  # CA has taken the failed instances away: nothing left to show
            self.sync.queue(state)
            self.core.save_journal()
        log.info(
            "node group %s: deleting %s",
            self.core.shown(group_id),
            ", ".join([*(m.id for m in leaving), *placeholders]),
        )

    # ------------------------------------------------------------------ helpers
    def _resolve(self, state: PoolGroupState, node: NodeRef) -> tuple[Resolved, Machine | str | None]:
        pid = node.provider_id
        if pid:
            if pid in state.machines:
                return Resolved.MACHINE, state.machines[pid]
            if pid in state.placeholders:
                return Resolved.PLACEHOLDER, pid
            if pid in state.tombstones:
                return Resolved.GONE, None
            mid = self.core.driver.machine_of(node)  # the driver's fallback, as NodeGroupForNode uses it
            if mid and mid in state.machines:
                return Resolved.MACHINE, state.machines[mid]
            return Resolved.FOREIGN, None
        for m in state.machines.values():  # no providerID: match the machine by its name
            if node.name and m.name == node.name:
                return Resolved.MACHINE, m
        return Resolved.FOREIGN, None


__all__ = ["PoolProvider"]
