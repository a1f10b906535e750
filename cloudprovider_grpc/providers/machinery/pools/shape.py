"""The pool shape's hooks for the group core (the `Shape` protocol of ../shape.py).

A pool's state and target (pools/core.py), its placeholders, the listing (delegated to the fold in
listing.py), the sync and operations the status shows, and the journal's format: each pool's wanted
size and the machines being removed, resumed on start by queueing the pool's sync job.
`PoolShape` is handed the group core, the driver, the listing fold, the placeholders and the sync job.
"""

from __future__ import annotations

from typing import Any

from cloudprovider_grpc.providers.contract import InstanceState
from cloudprovider_grpc.providers.driver import GroupConfig, Machine, Pool, PoolDriver
from cloudprovider_grpc.providers.machinery.group_core import GroupCore
from cloudprovider_grpc.providers.machinery.group_state import ListingSpan
from cloudprovider_grpc.providers.machinery.pools.core import PoolGroupState, PoolPlaceholders
from cloudprovider_grpc.providers.machinery.pools.listing import PoolListingFold
from cloudprovider_grpc.providers.machinery.pools.sync import PoolSync


class PoolShape:
    """The pool shape's `Shape[PoolGroupState]`."""

    def __init__(
        self,
        core: GroupCore[PoolGroupState],
        driver: PoolDriver,
        fold: PoolListingFold,
        placeholders: PoolPlaceholders,
        sync: PoolSync,
    ) -> None:
        self._core = core
        self._driver = driver
        self._fold = fold
        self._placeholders = placeholders
        self._sync = sync

    def new_state(self, config: GroupConfig) -> PoolGroupState:
        return PoolGroupState(config)

    def target(self, state: PoolGroupState) -> int:
        return state.target()

    def placeholder_ids(self, state: PoolGroupState) -> list[str]:
        return list(state.placeholders)

    def listing(self) -> list[Pool]:
        return self._fold.listing()

    def configs(self, listing: list[Pool]) -> list[GroupConfig]:
        return self._fold.configs(listing)

    def apply(self, listing: list[Pool], started: float, span: ListingSpan) -> None:
        self._fold.apply(listing, started, span)

    def expire(self, now: float) -> None:
        self._fold.expire(now)

    def operations(self, state: PoolGroupState, now: float) -> list[dict[str, Any]]:
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

    def journal_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        for gid, s in self._core.groups.items():
            wanted = s.wanted if s.failed is None else None
            removing = [
                {"id": m.id, "name": m.name, "handle": m.handle}
                for mid in s.deleting
                if (m := s.machines.get(mid)) is not None
            ]
            if wanted is not None or removing:
                doc[gid] = {"wanted": wanted, "removing": removing}
        return doc

    def parse_journal(self, doc: dict[str, Any]) -> dict[str, Any]:
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
            raise self._core.journal.error(f"has a malformed entry ({type(exc).__name__}: {exc})") from None
        return entries

    def restore(self, state: PoolGroupState, entry: Any) -> None:
        wanted, removing = entry
        now = self._core.clock()
        if wanted is not None:
            state.wanted = min(wanted, state.config.max_size)
        for m in removing:
            state.machines.setdefault(m.id, m)
            state.deleting[m.id] = now
            state.removing[m.id] = m
        self._placeholders.fit(state)
        self._sync.queue(state)
