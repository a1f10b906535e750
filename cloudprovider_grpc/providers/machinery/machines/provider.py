"""The machine shape of the shared machinery: turns a `MachineDriver` into a full `CloudProvider`.

For clouds where our server owns the size and creates machines one by one (Cherry Servers, SPC, the
sim cloud's machine mode). The shared part is `GroupProvider` (../base.py); this shape adds:

- **Target-size bookkeeping.** A group's target is derived, never stored: the machines the cloud
  lists for it (not being deleted) plus the creations we have accepted and not yet seen appear.
  So it cannot drift, and every Refresh reconciles it with the cloud (machines deleted behind our
  back disappear from the target; machines created elsewhere with the group's tags join it).
- **Background create/delete** through `JobRunner` with bounded concurrency and per-attempt
  exponential backoff with jitter.
- **Idempotency.** Every accepted creation carries a token that the driver stores on the machine.
  When a create fails in a way that leaves its outcome unknown (timeout, 5xx after sending), the
  next attempt first looks the token up in the cloud's listing and only creates if it is absent, so
  throttling, timeouts and restarts never double a machine. For clouds whose create cannot carry a
  token (`create_carries_token = False`), an unknown outcome is never re-sent: the next listings
  adopt one new untokened machine of the group instead, and if none appears within `failed_ttl`
  the creation fails visibly (CA backs off and asks again). Deletes treat "already gone" as done;
  DeleteNodes for a machine deleted earlier succeeds (tombstones); a request naming any node that
  is not in the group deletes nothing.
- **Instance states.** Accepted-but-not-created machines appear as `instanceCreating` with a
  placeholder id `<prefix>pending-<token>`; failed creations keep that placeholder with errorInfo
  (class 1 for stockout/quota) until CA deletes it or `failed_ttl` passes, so the target is never
  inflated forever; machines being deleted appear as `instanceDeleting`.
- **Optional journal.** With `state_file`, accepted creations and deletions survive a restart: they
  resume on start (creations by token lookup first). Without it, a restart recovers the target and
  membership from the cloud alone, and creations not yet sent are dropped (CA asks again).

The parts, held as fields and each handed what it uses: machines/core.py (per-group state,
creations, placeholder ids), `MachineWorkers` in workers.py (background create/delete, handed the
group core, the write rules and the driver), `MachineListingFold` in listing.py (folding a listing
in, expiry), `MachineShape` in shape.py (the hooks the group core calls, the status's operations
and the journal's format), and this module (the RPCs that answer from memory and record, and
DeleteNodes' resolution of nodes).
"""

from __future__ import annotations

import enum
import logging
import secrets
from collections.abc import Callable
from typing import Any

from cloudprovider_grpc.providers.contract import Instance, InstanceState, NodeRef
from cloudprovider_grpc.providers.driver import Machine, MachineDriver
from cloudprovider_grpc.providers.machinery.base import GroupProvider
from cloudprovider_grpc.providers.machinery.group_core import GroupCore
from cloudprovider_grpc.providers.machinery.group_write_rules import WriteRules
from cloudprovider_grpc.providers.machinery.machines.core import (
    Creation,
    CreationStatus,
    MachineGroupState,
    placeholder_id,
)
from cloudprovider_grpc.providers.machinery.machines.listing import MachineListingFold
from cloudprovider_grpc.providers.machinery.machines.shape import MachineShape
from cloudprovider_grpc.providers.machinery.machines.workers import MachineWorkers

log = logging.getLogger(__name__)


class Resolved(enum.Enum):
    """What a node named in DeleteNodes is to a group."""

    MACHINE = "machine"
    CREATION = "creation"
    GONE = "gone"  # it was ours and has left the cloud already: deleting it again is done
    FOREIGN = "foreign"  # not in this group


class MachineProvider(GroupProvider[MachineGroupState]):
    """A `CloudProvider` over any `MachineDriver`; see the module docstring."""

    shape = "machines"
    driver: MachineDriver

    def __init__(
        self,
        driver: MachineDriver,
        *,
        create_settle: float = 0.0,
        seed: int | None = None,
        on_stop: Callable[[], None] | None = None,
        **settings: Any,
    ) -> None:
        core: GroupCore[MachineGroupState] = GroupCore(driver, self.shape, **settings)
        rules = WriteRules(core, seed)
        #: the background creates and deletes
        self.workers = MachineWorkers(core, rules, driver, create_settle)
        fold = MachineListingFold(core, driver, self.workers)
        super().__init__(core, MachineShape(core, driver, fold, self.workers), rules, on_stop=on_stop)

    def _placeholder(self, token: str) -> str:
        return placeholder_id(self.driver.id_prefix, token)

    # ------------------------------------------------------------------ read RPCs (memory only)
    def nodes(self, group_id: str) -> list[Instance]:
        with self.core.lock:
            state = self.core.group(group_id)
            out: list[Instance] = []
            for m in state.machines.values():
                st = InstanceState.DELETING if m.id in state.deleting else m.state
                out.append(Instance(m.id, st, m.error))
            for c in state.creations.values():
                if not c.cancelled:
                    error = c.error or (state.listing_error if c.status != CreationStatus.INFLIGHT else None)
                    out.append(Instance(self._placeholder(c.token), InstanceState.CREATING, error))
            return out

    # ------------------------------------------------------------------ write RPCs (record and return)
    def increase_size(self, group_id: str, delta: int) -> None:
        with self.core.changing(group_id):
            state, target = self.rules.check_increase(group_id, delta)
            self.rules.admit("create", group_id, delta)
            for _ in range(delta):
                creation = Creation(token=secrets.token_hex(8), group=group_id, accepted_at=self.core.clock())
                state.creations[creation.token] = creation
                self.core.index.add(self._placeholder(creation.token), group_id)
                self.workers.submit_create(creation)
            self.core.save_journal()
        log.info("node group %s: target %d -> %d", self.core.shown(group_id), target, target + delta)

    def decrease_target_size(self, group_id: str, delta: int) -> None:
        with self.core.changing(group_id):
            state, target = self.rules.check_decrease(group_id, delta)
            self.rules.admit("cancel", group_id, -delta)
            new = target + delta
            # cancel the requests least likely to deliver first: failed, then not yet sent, then newest
            wanted = [c for c in state.creations.values() if not c.cancelled]
            wanted.sort(key=lambda c: c.status.value)
            for creation in wanted[:-delta]:
                self._cancel_creation(state, creation)
            self.core.save_journal()
        log.info("node group %s: target %d -> %d (decrease)", self.core.shown(group_id), target, new)

    def delete_nodes(self, group_id: str, nodes: list[NodeRef]) -> None:
        with self.core.changing(group_id):
            state = self.core.group(group_id)
            machines: dict[str, Machine] = {}
            creations: dict[str, Creation] = {}
            for node in nodes:
                kind, obj = self._resolve(state, node)
                if kind is Resolved.MACHINE and isinstance(obj, Machine):
                    machines[obj.id] = obj
                elif kind is Resolved.CREATION and isinstance(obj, Creation):
                    creations[obj.token] = obj
                elif kind is Resolved.FOREIGN:
                    raise self.rules.not_in_group(group_id, node)
            reducing = sum(
                1
                for m in machines.values()
                if m.id not in state.deleting and m.state != InstanceState.DELETING
            ) + sum(1 for c in creations.values() if c.status != CreationStatus.FAILED and not c.cancelled)
            self.rules.check_min(state, reducing)
            leaving = [
                m.id
                for m in machines.values()
                if m.id not in state.deleting and m.state != InstanceState.DELETING
            ]
            leaving += [self._placeholder(c.token) for c in creations.values() if not c.cancelled]
            if leaving:
                self.rules.admit("delete", group_id, len(leaving), leaving)
            for creation in creations.values():
                self._cancel_creation(state, creation)
            for machine in machines.values():
                if machine.id in state.deleting or machine.state == InstanceState.DELETING:
                    continue  # already on its way out: idempotent
                state.deleting[machine.id] = self.core.clock()
                self.workers.submit_delete(machine)
            self.core.save_journal()
        if machines or creations:
            log.info(
                "node group %s: deleting %s",
                self.core.shown(group_id),
                ", ".join([*machines, *map(self._placeholder, creations)]),
            )

    # ------------------------------------------------------------------ helpers
    def _cancel_creation(self, state: MachineGroupState, c: Creation) -> None:
        if c.status in (CreationStatus.INFLIGHT, CreationStatus.UNKNOWN):
            c.cancelled = True  # the attempt (or a later listing) deletes the machine if it appears
        else:
            state.creations.pop(c.token, None)
            state.tombstones[self._placeholder(c.token)] = self.core.clock()
        self.core.index.remove(self._placeholder(c.token))

    def _resolve(self, state: MachineGroupState, node: NodeRef) -> tuple[Resolved, Machine | Creation | None]:
        pid = node.provider_id
        if pid:
            if pid in state.machines:
                return Resolved.MACHINE, state.machines[pid]
            prefix = self._placeholder("")
            if pid.startswith(prefix):
                token = pid[len(prefix) :]
                if token in state.creations:
                    return Resolved.CREATION, state.creations[token]
                mid = state.resolved.get(token)
                if mid is not None:  # CA still knows the placeholder of a machine that has since appeared
                    if mid in state.machines:
                        return Resolved.MACHINE, state.machines[mid]
                    return Resolved.GONE, None
            if pid in state.tombstones:
                return Resolved.GONE, None
        else:  # no providerID: match the machine by its name (hostname)
            for m in state.machines.values():
                if node.name and m.name == node.name:
                    return Resolved.MACHINE, m
        # the driver's label fallback (SPC's stackpoint.io/instance_id when the id cannot be derived)
        mid = self.driver.machine_of(node)
        if mid is not None and mid in state.machines:
            return Resolved.MACHINE, state.machines[mid]
        return Resolved.FOREIGN, None


__all__ = ["MachineProvider"]
