"""What the status page and check-config show of the shared machinery, from memory.

`status()` is every group's bounds, target, instances by state, the operations in flight with
their age (the shapes add theirs through `Shape.operations`), the back-off in force and the last cloud
error (both from activity.py); `listing_errors()` is what the last Refresh could not list.
`StatusReport` is handed the group core (whose shape adds its operations) and the provider's
`nodes`, whose instances it counts by state.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Generic

from cloudprovider_grpc.providers.contract import Instance, InstanceState
from cloudprovider_grpc.providers.machinery.group_core import GroupCore
from cloudprovider_grpc.providers.machinery.group_state import S

#: operations listed per group in the status (the rest are counted): its ConfigMap holds 1 MiB at most
STATUS_OPERATIONS = 50


class StatusReport(Generic[S]):
    """The status and listing errors of `GroupProvider`, from the group core and the provider's
    NodeGroupNodes answer (`nodes`) it is handed."""

    def __init__(self, core: GroupCore[S], nodes: Callable[[str], list[Instance]]) -> None:
        self._core = core
        self._nodes = nodes

    def status(self) -> dict[str, Any]:
        """The server's view of every group, from memory: bounds, target, instances by state, the
        operations in flight with their age, the back-off in force and the last cloud error. The
        lock is taken per group, never across all of them: RPCs wait at most one group's worth."""
        backoffs = self._core.activity.current_backoffs()
        errors = self._core.activity.last_errors()
        groups = []
        with self._core.lock:
            ids = list(self._core.groups)
        for gid in ids:
            with self._core.lock:
                state = self._core.groups.get(gid)
                if state is None:
                    continue  # forgotten meanwhile (the cloud no longer offers it)
                entry = self._group_status(state, self._core.clock())
            backoff = backoffs.get(gid)
            if backoff is not None:
                entry["backoff"] = {
                    "reason": backoff.reason,
                    "message": backoff.message,
                    "until": _rfc3339(backoff.until),
                }
            error = errors.get(gid)
            if error is not None:
                entry["last_error"] = {"code": error.code, "message": error.message, "at": _rfc3339(error.at)}
            groups.append(entry)
        last = self._core.activity.last_refresh
        return {
            "provider": self._core.name,
            "last_refresh": _rfc3339(last) if last is not None else None,
            "groups": groups,
        }

    def _group_status(self, state: S, now: float) -> dict[str, Any]:
        """One group's part of the status (under the lock)."""
        gid = state.config.id
        counts = {"running": 0, "creating": 0, "deleting": 0, "failed": 0}
        for instance in self._nodes(gid):
            if instance.error is not None and instance.state == InstanceState.CREATING:
                counts["failed"] += 1
            else:
                key = instance.state.name.lower()
                counts[key] = counts.get(key, 0) + 1
        operations = [
            {"kind": "delete", "instance": mid, "age_seconds": round(max(now - at, 0.0), 1)}
            for mid, at in state.deleting.items()
        ]
        operations.extend(self._core.shape.operations(state, now))
        if len(operations) > STATUS_OPERATIONS:
            omitted = len(operations) - STATUS_OPERATIONS
            operations = [*operations[:STATUS_OPERATIONS], {"kind": "omitted", "count": omitted}]
        entry: dict[str, Any] = {
            "id": gid,
            "name": state.config.name or gid,
            "min": state.config.min_size,
            "max": state.config.max_size,
            "target": self._core.target(state),
            "instances": counts,
            "operations": operations,
        }
        if state.listing_error is not None:
            entry["listing_error"] = state.listing_error.message
        return entry

    def listing_errors(self) -> dict[str, str]:
        """Groups the last Refresh could not list, with the cloud's answer (`check-config` reports
        them: a token refused for one project fails there, not at CA's first scale-up)."""
        with self._core.lock:
            return {gid: s.listing_error.message for gid, s in self._core.groups.items() if s.listing_error}


def _rfc3339(wall: float) -> str:
    return datetime.fromtimestamp(wall, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
