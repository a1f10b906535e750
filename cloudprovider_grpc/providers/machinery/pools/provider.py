"""The pool shape of the shared machinery: turns a `PoolDriver` into a full `CloudProvider`.

For clouds that own the desired size of a group (Vultr VKE `node_quantity`, Exoscale `size`,
AliCloud ESS `DesiredCapacity`, the sim cloud's pool mode): we set an absolute size and the cloud
creates the instances; removing a named instance lowers the size. The read side is
`../base.py`; this shape adds the write side:

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

The parts: pools/core.py (per-group state, placeholders, failures), pools/listing.py
(folding a listing in, expiry), pools/sync.py (the sync job), pools/operations.py (polling the
cloud's operations), and this module (the RPCs that answer from memory and record, DeleteNodes'
resolution of nodes, the status's operations, and the journal's format).
"""

from __future__ import annotations

import enum
import logging
from typing import Any

from cloudprovider_grpc.providers.contract import Instance, InstanceState, NodeRef
from cloudprovider_grpc.providers.driver import Machine
from cloudprovider_grpc.providers.machinery.pools.core import PoolGroupState
from cloudprovider_grpc.providers.machinery.pools.listing import PoolListingFold
from cloudprovider_grpc.providers.machinery.pools.operations import PoolOperations
from cloudprovider_grpc.providers.machinery.pools.sync import PoolSync

log = logging.getLogger(__name__)


class Resolved(enum.Enum):
    """What a node named in DeleteNodes is to a pool."""

    MACHINE = "machine"
    PLACEHOLDER = "placeholder"
    GONE = "gone"  # ours, and already gone (a removed machine, a deleted placeholder)
    FOREIGN = "foreign"


class PoolProvider(PoolListingFold, PoolSync, PoolOperations):
    """A `CloudProvider` over any `PoolDriver`; see the module docstring."""

    shape = "pools"

    # ------------------------------------------------------------------ read RPCs (memory only)
    def nodes(self, group_id: str) -> list[Instance]:
        with self._lock:
            state = self._group(group_id)
            out = [
                Instance(m.id, InstanceState.DELETING if m.id in state.deleting else m.state, m.error)
                for m in state.machines.values()
            ]
            error = state.placeholder_error()
            out.extend(Instance(pid, InstanceState.CREATING, error) for pid in state.placeholders)
            return out

    # ------------------------------------------------------------------ write RPCs (record and return)
    def increase_size(self, group_id: str, delta: int) -> None:
        with self._changing(group_id):
            state, target = self._check_increase(group_id, delta)
            self._admit("create", group_id, delta)
            state.wanted = target + delta
            state.failed = None  # a new request: try again
            self._fit_placeholders(state)
            self._queue_sync(state)
            self._save_journal()
        log.info("node group %s: target %d -> %d", self._shown(group_id), target, target + delta)

    def decrease_target_size(self, group_id: str, delta: int) -> None:
        with self._changing(group_id):
            # never below the listed machines: the cloud would delete random instances to meet it
            state, target = self._check_decrease(group_id, delta)
            new = target + delta
            self._admit("set_size", group_id, new)
            state.wanted = new
            self._fit_placeholders(state, drop_newest=True)
            self._queue_sync(state)
            self._save_journal()
        log.info("node group %s: target %d -> %d (decrease)", self._shown(group_id), target, new)

    def delete_nodes(self, group_id: str, nodes: list[NodeRef]) -> None:
        with self._changing(group_id):
            state = self._group(group_id)
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
                    raise self._not_in_group(group_id, node)
            leaving = [
                m
                for m in machines.values()
                if m.id not in state.deleting and m.state != InstanceState.DELETING
            ]
            reducing = len(leaving) + len(placeholders)
            target = state.target()
            self._check_min(state, reducing)
            if not reducing:
                return  # everything named is already gone or going: idempotent
            self._admit("delete", group_id, reducing, [*(m.id for m in leaving), *placeholders])
            now = self._clock()
            for m in leaving:
                state.deleting[m.id] = now
                state.removing[m.id] = m
            for pid in placeholders:
                state.placeholders.remove(pid)
                state.tombstones[pid] = now
            state.wanted = target - reducing
            self._fit_placeholders(state)
            if not state.placeholders:
                state.failed = None  # CA has taken the failed instances away: nothing left to show
            self._queue_sync(state)
            self._save_journal()
        log.info(
            "node group %s: deleting %s",
            self._shown(group_id),
            ", ".join([*(m.id for m in leaving), *placeholders]),
        )

    def _operations(self, state: PoolGroupState, now: float) -> list[dict[str, Any]]:
        def age(key: str) -> float:
            return round(max(now - state.started.get(key, now), 0.0), 1)

        out: list[dict[str, Any]] = []
        if state.sync_queued:
            out.append(
                {
                    "kind": "set_size",
                    "size": state.wanted,
                    "removals": len(state.removing),
                    "attempts": state.sync_attempts,
                    "age_seconds": age("sync"),
                }
            )
        out.extend(
            {"kind": op.kind, "operation": op.ref, "age_seconds": age(op.ref)}
            for op in state.operations.values()
        )
        return out

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
            mid = self.driver.machine_of(node)  # the driver's fallback, as NodeGroupForNode uses it
            if mid and mid in state.machines:
                return Resolved.MACHINE, state.machines[mid]
            return Resolved.FOREIGN, None
        for m in state.machines.values():  # no providerID: match the machine by its name
            if node.name and m.name == node.name:
                return Resolved.MACHINE, m
        return Resolved.FOREIGN, None

    # ------------------------------------------------------------------ journal
    def _journal_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        for gid, s in self._groups.items():
            wanted = s.wanted if s.failed is None else None
            removing = [
                {"id": m.id, "name": m.name, "handle": m.handle}
                for mid in s.deleting
                if (m := s.machines.get(mid)) is not None
            ]
            if wanted is not None or removing:
                doc[gid] = {"wanted": wanted, "removing": removing}
        return doc

    def _parse_journal(self, doc: dict[str, Any]) -> dict[str, Any]:
        entries: dict[str, tuple[int | None, list[Machine]]] = {}
        try:
            for gid, entry in dict(doc.get("groups", {})).items():
                wanted = entry.get("wanted")
                removing = [
                    Machine(
                        str(raw["id"]),
                        str(gid),
                        InstanceState.RUNNING,
                        str(raw.get("name", "")),
                        handle=str(raw.get("handle", "")),
                    )
                    for raw in entry.get("removing", [])
                ]
                entries[str(gid)] = (None if wanted is None else max(int(wanted), 0), removing)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise self._journal._error(f"has a malformed entry ({type(exc).__name__}: {exc})") from None
        return entries

    def _restore(self, state: PoolGroupState, entry: Any) -> None:
        wanted, removing = entry
        now = self._clock()
        if wanted is not None:
            state.wanted = min(wanted, state.config.max_size)
        for m in removing:
            state.machines.setdefault(m.id, m)
            state.deleting[m.id] = now
            state.removing[m.id] = m
        self._fit_placeholders(state)
        self._queue_sync(state)


__all__ = ["PoolProvider"]
