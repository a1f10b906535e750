"""Node-group backoff after failed scale-ups.

Port of sigs-CA `pkg/utils/backoff/exponential_backoff.go` (keyed by node group id): the first
failure backs the group off for `initial-node-group-backoff-duration` (5m); a failure while the
previous one is younger than `node-group-backoff-reset-timeout` (3h) doubles the duration, up to
`max-node-group-backoff-duration` (30m). A backed-off group is skipped by scale-up
(`NodeGroupScaleUpSafety` in `pkg/clusterstate/clusterstate.go`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class _Entry:
    duration: float
    until: float
    last_failure: float
    reason: str


class Backoff:
    def __init__(self, initial: float, maximum: float, reset_timeout: float) -> None:
        self.initial = initial
        self.maximum = maximum
        self.reset_timeout = reset_timeout
        self._entries: dict[str, _Entry] = {}

    def fail(self, group: str, now: float, reason: str) -> float:
        """Record a failed scale-up; returns the time until which the group is backed off."""
        prev = self._entries.get(group)
        if prev is not None and now - prev.last_failure < self.reset_timeout:
            duration = min(prev.duration * 2, self.maximum)
        else:
            duration = self.initial
        entry = _Entry(duration, now + duration, now, reason)
        self._entries[group] = entry
        return entry.until

    def backed_off(self, group: str, now: float) -> _Entry | None:
        entry = self._entries.get(group)
        return entry if entry is not None and now < entry.until else None
