"""The machine shape's hooks for the group core (the `Shape` protocol of ../shape.py).

A group's state and target (machines/core.py), its placeholders, the listing (delegated to the
fold in listing.py), the creations the status shows, and the journal's format: accepted creations
(with whether their request may have left) and machines being deleted, resumed on start through
the workers (creations by token look-up first). `MachineShape` is handed the group core, the
driver, the listing fold and the workers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cloudprovider_grpc.providers.contract import InstanceState
from cloudprovider_grpc.providers.driver import GroupConfig, Machine, MachineDriver, MachineListing
from cloudprovider_grpc.providers.machinery.group_core import GroupCore
from cloudprovider_grpc.providers.machinery.group_state import ListingSpan
from cloudprovider_grpc.providers.machinery.machines.core import (
    Creation,
    CreationStatus,
    MachineGroupState,
    placeholder_id,
)
from cloudprovider_grpc.providers.machinery.machines.listing import MachineListingFold, known_machines
from cloudprovider_grpc.providers.machinery.machines.workers import MachineWorkers


class MachineShape:
    """The machine shape's `Shape[MachineGroupState]`."""

    def __init__(
        self,
        core: GroupCore[MachineGroupState],
        driver: MachineDriver,
        fold: MachineListingFold,
        workers: MachineWorkers,
    ) -> None:
        self._core = core
        self._driver = driver
        self._fold = fold
        self._workers = workers

    def new_state(self, config: GroupConfig) -> MachineGroupState:
        return MachineGroupState(config)

    def target(self, state: MachineGroupState) -> int:
        return state.target()

    def placeholder_ids(self, state: MachineGroupState) -> list[str]:
        ids = [self._placeholder(c.token) for c in state.creations.values() if not c.cancelled]
        # CA may still hold the placeholder of a machine that now exists
        ids.extend(self._placeholder(token) for token in state.resolved)
        return ids

    def _placeholder(self, token: str) -> str:
        return placeholder_id(self._driver.id_prefix, token)

    def listing(self) -> MachineListing:
        return self._fold.listing()

    def configs(self, listing: MachineListing) -> Sequence[GroupConfig]:
        return self._driver.groups()

    def apply(self, listing: MachineListing, started: float, span: ListingSpan) -> None:
        self._fold.apply(listing, started, span)

    def expire(self, now: float) -> None:
        self._fold.expire(now)

    def operations(self, state: MachineGroupState, now: float) -> list[dict[str, Any]]:
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

    def journal_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        for gid, s in self._core.groups.items():
            creations = [
                {"token": c.token, "sent": c.sent}
                for c in s.creations.values()
                if c.status != CreationStatus.FAILED and not c.cancelled
            ]
            deleting = [_machine_doc(m) for mid in s.deleting if (m := s.machines.get(mid)) is not None]
            if creations or deleting:
                doc[gid] = {"creations": creations, "deleting": deleting}
                if self._untokened_baseline_needed(s):
                    # what a create sent now may add to: after a restart, a machine outside it that
                    # the first listing shows can be the one that create made (see restore)
                    doc[gid]["known"] = sorted(known_machines(s))
        return doc

    def _untokened_baseline_needed(self, s: MachineGroupState) -> bool:
        """An untokened cloud's group with a creation whose request may have left, whose machines
        this process knows (listed since it started, or restored from the journal)."""
        if self._driver.create_carries_token or (not s.listed_once and s.baseline is None):
            return False
        return any(c.sent for c in s.creations.values() if c.status != CreationStatus.FAILED)

    def parse_journal(self, doc: dict[str, Any]) -> dict[str, Any]:
        entries: dict[str, dict[str, Any]] = {}
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
                    "known": _known_from(entry.get("known")),
                }
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise self._core.journal.error(f"has a malformed entry ({type(exc).__name__}: {exc})") from None
        return entries

    def restore(self, state: MachineGroupState, entry: Any) -> None:
        now = self._core.clock()
        if entry.get("known") is not None and not self._driver.create_carries_token:
            state.baseline = set(entry["known"])
        for token, sent in entry["creations"]:
            if sent:  # it may have left before the restart: look the token up (or adopt) first
                creation = Creation(
                    token,
                    state.config.id,
                    CreationStatus.UNKNOWN,
                    sent=True,
                    accepted_at=now,
                    look_up_from=now + self._workers.create_settle,
                )
                if not self._driver.create_carries_token:
                    creation.unknown_since = now
            else:  # never sent: send it
                creation = Creation(token, state.config.id, accepted_at=now)
            state.creations[token] = creation
            self._workers.submit_create(creation)
        for machine in entry["deleting"]:
            state.machines.setdefault(machine.id, machine)
            state.deleting[machine.id] = now
            self._workers.submit_delete(machine)


def _creation_from(item: Any) -> tuple[str, bool]:
    """A journaled creation: (token, whether its request may have left); bare tokens are older
    journals, where every creation counts as possibly sent."""
    if isinstance(item, str):
        return item, True
    return str(item["token"]), bool(item["sent"])


def _known_from(item: Any) -> list[str] | None:
    """A group's journaled machine ids and handles (absent in journals written before they were
    kept, or where no create had left: then the first listing after the restart is the baseline)."""
    if item is None:
        return None
    if not isinstance(item, list) or not all(isinstance(k, str) for k in item):
        raise ValueError("'known' is not a list of machine ids")
    return list(item)


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
