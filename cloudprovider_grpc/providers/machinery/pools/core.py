"""What the pool shape tracks per group, and the core its parts share.

A pool's target is the size we asked for while a change of ours is queued, in flight, or not yet
seen by a listing that started after the cloud acknowledged it; otherwise the cloud's own desired
size (`PoolGroupState.target`). Wanted - listed instances appear as placeholders
`<prefix>pending-<group>-<n>`, kept as long as that difference by `_fit_placeholders`, and carry
the group's failure (ours, the cloud's, or its listing's) as errorInfo.

`PoolCore` fills in the shared machinery's hooks for this shape, keeps the placeholders, records a
failed scaling, and declares the operation tracking (pools/operations.py) that the sync
job (pool_sync.py) starts.
"""

from __future__ import annotations

import abc
import logging
from dataclasses import dataclass, field
from typing import Any

from cloudprovider_grpc.core.clouderrors import InstanceError
from cloudprovider_grpc.providers.driver import GroupConfig, Machine, Operation, PoolDriver
from cloudprovider_grpc.providers.machinery.base import GroupProvider
from cloudprovider_grpc.providers.machinery.group_state import GroupStateBase

#: one logger for the whole shape
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


class PoolCore(GroupProvider[PoolGroupState]):
    """The pool shape's state hooks, placeholders and failures; see the module docstring."""

    driver: PoolDriver

    def __init__(self, driver: PoolDriver, *, coalesce_window: float = 0.1, **kwargs: Any) -> None:
        super().__init__(driver, **kwargs)
        # write RPCs that arrive within this window share one push: CA's loop may send several
        # requests for a group back to back, and a push costs an API call under a rate limit.
        # Inline (simulated) runs have no concurrency to coalesce and act at once.
        self._coalesce = 0.0 if kwargs.get("inline_workers") else coalesce_window

    # ------------------------------------------------------------------ base hooks
    def _new_state(self, config: GroupConfig) -> PoolGroupState:
        return PoolGroupState(config)

    def _target(self, state: PoolGroupState) -> int:
        return state.target()

    def _placeholder_ids(self, state: PoolGroupState) -> list[str]:
        return list(state.placeholders)

    def _fit_placeholders(self, state: PoolGroupState, *, drop_newest: bool = False) -> None:
        """Make the placeholder list as long as target - live machines: new ones get new numbers;
        surplus ones leave oldest first (they most likely became the machines now listed), or newest
        first when CA lowered the target."""
        want = max(0, state.target() - state.live_count())
        now = self._clock()
        while len(state.placeholders) < want:
            pid = f"{self.driver.id_prefix}pending-{state.config.id}-{state.placeholder_seq}"
            state.placeholder_seq += 1
            state.placeholders.append(pid)
            self._index_node(pid, state.config.id)
        while len(state.placeholders) > want:
            pid = state.placeholders.pop() if drop_newest else state.placeholders.pop(0)
            state.tombstones[pid] = now

    def _fail(self, state: PoolGroupState, error: InstanceError) -> None:
        log.error("node group %s: scaling failed: %s", self._shown(state.config.id), error.message)
        state.failed, state.failed_at = error, self._clock()
        self.activity.create_failed(
            state.config.id, error.code, error.message, error.error_class, self._failed_ttl
        )
        self._fit_placeholders(state)
        self._save_journal()

    @abc.abstractmethod
    def _track(self, state: PoolGroupState, operation: Operation) -> None:
        """Poll a cloud operation in the background until it ends."""
