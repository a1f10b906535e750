"""The machine shape of the shared machinery: turns a `MachineDriver` into a full `CloudProvider`.

For clouds where our server owns the size and creates machines one by one (Cherry Servers, SPC, the
sim cloud's machine mode). The read side is `../base.py`; this shape adds:

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

The parts: machines/core.py (per-group state, creations, placeholders),
machines/workers.py (background create/delete), machines/listing.py (folding a listing in, expiry),
and this module (the RPCs that answer from memory and record, DeleteNodes' resolution of nodes,
the status's operations, and the journal's format).
"""

from __future__ import annotations

import enum
import logging
import secrets
from typing import Any

from cloudprovider_grpc.providers.contract import Instance, InstanceState, NodeRef
from cloudprovider_grpc.providers.driver import Machine
from cloudprovider_grpc.providers.machinery.machines.core import Creation, CreationStatus, MachineGroupState
from cloudprovider_grpc.providers.machinery.machines.listing import MachineListingFold
from cloudprovider_grpc.providers.machinery.machines.workers import MachineWorkers

log = logging.getLogger(__name__)


class Resolved(enum.Enum):
    """What a node named in DeleteNodes is to a group."""

    MACHINE = "machine"
    CREATION = "creation"
    GONE = "gone"  # it was ours and has left the cloud already: deleting it again is done
    FOREIGN = "foreign"  # not in this group


class MachineProvider(MachineListingFold, MachineWorkers):
    """A `CloudProvider` over any `MachineDriver`; see the module docstring."""

    shape = "machines"

    # ------------------------------------------------------------------ read RPCs (memory only)
    def nodes(self, group_id: str) -> list[Instance]:
        with self._lock:
            state = self._group(group_id)
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
        with self._changing(group_id):
            state, target = self._check_increase(group_id, delta)
            self._admit("create", group_id, delta)
            for _ in range(delta):
                creation = Creation(token=secrets.token_hex(8), group=group_id, accepted_at=self._clock())
                state.creations[creation.token] = creation
                self._index_node(self._placeholder(creation.token), group_id)
                self._submit_create(creation)
            self._save_journal()
        log.info("node group %s: target %d -> %d", self._shown(group_id), target, target + delta)

    def decrease_target_size(self, group_id: str, delta: int) -> None:
        with self._changing(group_id):
            state, target = self._check_decrease(group_id, delta)
            self._admit("cancel", group_id, -delta)
            new = target + delta
            # cancel the requests least likely to deliver first: failed, then not yet sent, then newest
            wanted = [c for c in state.creations.values() if not c.cancelled]
            wanted.sort(key=lambda c: c.status.value)
            for creation in wanted[:-delta]:
                self._cancel_creation(state, creation)
            self._save_journal()
        log.info("node group %s: target %d -> %d (decrease)", self._shown(group_id), target, new)

    def delete_nodes(self, group_id: str, nodes: list[NodeRef]) -> None:
        with self._changing(group_id):
            state = self._group(group_id)
            machines: dict[str, Machine] = {}
            creations: dict[str, Creation] = {}
            for node in nodes:
                kind, obj = self._resolve(state, node)
                if kind is Resolved.MACHINE and isinstance(obj, Machine):
                    machines[obj.id] = obj
                elif kind is Resolved.CREATION and isinstance(obj, Creation):
                    creations[obj.token] = obj
                elif kind is Resolved.FOREIGN:
                    raise self._not_in_group(group_id, node)
            reducing = sum(
                1
                for m in machines.values()
                if m.id not in state.deleting and m.state != InstanceState.DELETING
            ) + sum(1 for c in creations.values() if c.status != CreationStatus.FAILED and not c.cancelled)
            self._check_min(state, reducing)
            leaving = [
                m.id
                for m in machines.values()
                if m.id not in state.deleting and m.state != InstanceState.DELETING
            ]
            leaving += [self._placeholder(c.token) for c in creations.values() if not c.cancelled]
            if leaving:
                self._admit("delete", group_id, len(leaving), leaving)
            for creation in creations.values():
                self._cancel_creation(state, creation)
            for machine in machines.values():
                if machine.id in state.deleting or machine.state == InstanceState.DELETING:
                    continue  # already on its way out: idempotent
                state.deleting[machine.id] = self._clock()
                self._submit_delete(machine)
            self._save_journal()
        if machines or creations:
            log.info(
                "node group %s: deleting %s",
                self._shown(group_id),
                ", ".join([*machines, *map(self._placeholder, creations)]),
            )

    # ------------------------------------------------------------------ helpers
    def _cancel_creation(self, state: MachineGroupState, c: Creation) -> None:
        if c.status in (CreationStatus.INFLIGHT, CreationStatus.UNKNOWN):
            c.cancelled = True  # the attempt (or a later listing) deletes the machine if it appears
        else:
            state.creations.pop(c.token, None)
            state.tombstones[self._placeholder(c.token)] = self._clock()
        self._unindex_node(self._placeholder(c.token))

    def _operations(self, state: MachineGroupState, now: float) -> list[dict[str, Any]]:
        return [
            {
                "kind": "create",
                "instance": self._placeholder(c.token),
                "state": c.status.name.lower(),
                "attempts": c.attempts,
                "age_seconds": round(max(now - c.accepted_at, 0.0), 1),
            }
            for c in state.creations.values()
            if not c.cancelled
        ]

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

    # ------------------------------------------------------------------ journal
    def _journal_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        for gid, s in self._groups.items():
            creations = [
                {"token": c.token, "sent": c.sent}
                for c in s.creations.values()
                if c.status != CreationStatus.FAILED and not c.cancelled
            ]
            deleting = [_machine_doc(m) for mid in s.deleting if (m := s.machines.get(mid)) is not None]
            if creations or deleting:
                doc[gid] = {"creations": creations, "deleting": deleting}
        return doc

    def _parse_journal(self, doc: dict[str, Any]) -> dict[str, Any]:
        entries: dict[str, dict[str, list[Any]]] = {}
        try:
            if doc.get("version") == 1:  # flat lists of {"group": ...} items
                for item in doc.get("creations", []):
                    entries.setdefault(str(item["group"]), {"creations": [], "deleting": []})
                    entries[str(item["group"])]["creations"].append((str(item["token"]), True))
                for item in doc.get("deleting", []):
                    entries.setdefault(str(item["group"]), {"creations": [], "deleting": []})
                    entries[str(item["group"])]["deleting"].append(_machine_from(item, str(item["group"])))
                return entries
            for gid, entry in dict(doc.get("groups", {})).items():
                entries[str(gid)] = {
                    "creations": [_creation_from(t) for t in entry.get("creations", [])],
                    "deleting": [_machine_from(m, str(gid)) for m in entry.get("deleting", [])],
                }
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise self._journal._error(f"has a malformed entry ({type(exc).__name__}: {exc})") from None
        return entries

    def _restore(self, state: MachineGroupState, entry: Any) -> None:
        now = self._clock()
        for token, sent in entry["creations"]:
            if sent:  # it may have left before the restart: look the token up (or adopt) first
                creation = Creation(
                    token,
                    state.config.id,
                    CreationStatus.UNKNOWN,
                    sent=True,
                    accepted_at=now,
                    look_up_from=now + self._create_settle,
                )
                if not self.driver.create_carries_token:
                    creation.unknown_since = now
            else:  # never sent: send it
                creation = Creation(token, state.config.id, accepted_at=now)
            state.creations[token] = creation
            self._submit_create(creation)
        for machine in entry["deleting"]:
            state.machines.setdefault(machine.id, machine)
            state.deleting[machine.id] = now
            self._submit_delete(machine)


def _creation_from(item: Any) -> tuple[str, bool]:
    """A journaled creation: (token, whether its request may have left); bare tokens are older
    journals, where every creation counts as possibly sent."""
    if isinstance(item, str):
        return item, True
    return str(item["token"]), bool(item["sent"])


def _machine_doc(m: Machine) -> dict[str, str]:
    return {"id": m.id, "name": m.name, "token": m.token, "handle": m.handle}


def _machine_from(item: Any, group: str) -> Machine:
    return Machine(
        str(item["id"]),
        group,
        InstanceState.DELETING,
        str(item.get("name", "")),
        str(item.get("token", "")),
        handle=str(item.get("handle", "")),
    )


__all__ = ["MachineProvider"]
