"""What the pool shape tracks per group, and its placeholders.

A pool's target is the size we asked for while a change of ours is queued, in flight, or not yet
seen by a listing that started after the cloud acknowledged it; otherwise the cloud's own desired
size (`PoolGroupState.target`). Wanted - listed instances appear as placeholders
`<prefix>pending-<group>-<n>`, kept as long as that difference by `PoolPlaceholders.fit`, and carry
the group's failure (ours, the cloud's, or its listing's) as errorInfo; `PoolPlaceholders.fail`
records a failed scaling of ours.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from cloudprovider_grpc.core.clouderrors import InstanceError
from cloudprovider_grpc.providers.driver import Machine, Operation, PoolDriver
from cloudprovider_grpc.providers.machinery.group_core import GroupCore
from cloudprovider_grpc.providers.machinery.group_state import GroupStateBase

log = logging.getLogger(__name__)


@dataclass
class PoolGroupState(GroupStateBase):
    """A pool: what both shapes track, plus the sizes (the cloud's, ours), removals and failures."""

    desired: int = 0  # the cloud's desired size as last listed
    expected: int | None = None  # the desired size our acknowledged changes made it, until a listing confirms
    wanted: int | None = None  # the size we want; None: follow the cloud
    acked_at: float | None = None  # when the cloud last acknowledged a change of ours
    sync_queued: bool = False  # the group's sync job is queued or running
    sync_attempts: int = 0
    removing: dict[str, Machine] = field(default_factory=dict)  # accepted for removal, not yet sent
    placeholders: list[str] = field(default_factory=list)
    placeholder_seq: int = 0
    cloud_failure: InstanceError | None = None  # the cloud's last scaling failure (from the listing)
    failed: InstanceError | None = None  # a push or operation of ours failed: hold, show, don't re-push
    failed_at: float = 0.0
    operations: dict[str, Operation] = field(default_factory=dict)  # ref -> operation being polled
    started: dict[str, float] = field(default_factory=dict)  # "sync" or an operation ref -> when it began

    def base_size(self) -> int:
        return self.expected if self.expected is not None else self.desired

    def target(self) -> int:
        return self.wanted if self.wanted is not None else self.base_size()

    def placeholder_error(self) -> InstanceError | None:
        return self.failed or self.cloud_failure or self.listing_error


class PoolPlaceholders:
    """A pool's placeholders and the failure they show, kept for the parts that change a pool's
    wanted size (the write RPCs, the sync job, the operations, the listing fold). Handed the group
    core (the clock, the node index, the activity record, the journal) and the driver (the id prefix)."""

    def __init__(self, core: GroupCore[PoolGroupState], driver: PoolDriver) -> None:
        self._core = core
        self._driver = driver

    def fit(self, state: PoolGroupState, *, drop_newest: bool = False) -> None:
        """Make the placeholder list as long as target - live machines: new ones get new numbers;
        surplus ones leave oldest first (they most likely became the machines now listed), or newest
        first when CA lowered the target."""
        want = max(0, state.target() - state.live_count())
        now = self._core.clock()
        while len(state.placeholders) < want:
            pid = f"{self._driver.id_prefix}pending-{state.config.id}-{state.placeholder_seq}"
            state.placeholder_seq += 1
            state.placeholders.append(pid)
            self._core.index.add(pid, state.config.id)
        while len(state.placeholders) > want:
            pid = state.placeholders.pop() if drop_newest else state.placeholders.pop(0)
            state.tombstones[pid] = now

    def fail(self, state: PoolGroupState, error: InstanceError) -> None:
        """A push or operation of ours failed: hold, show it on the placeholders, don't re-push."""
        log.error("node group %s: scaling failed: %s", self._core.shown(state.config.id), error.message)
        state.failed, state.failed_at = error, self._core.clock()
        self._core.activity.create_failed(
            state.config.id, error.code, error.message, error.error_class, self._core.tunables.failed_ttl
        )
        self.fit(state)
        self._core.save_journal()
