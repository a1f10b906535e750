"""How a pool listing is folded into the pool shape's groups, and what expires.

Every Refresh takes each pool's machines, the cloud's desired size and its last scaling failure.
Once a listing is newer than every change of ours, the cloud's desired size is the truth again
(`_settle`): a size changed in the cloud's console shows on the next Refresh. A failed scale-up of
ours stays on the placeholders until CA deletes them or `failed_ttl` passes.
"""

from __future__ import annotations

import logging

from cloudprovider_grpc.core.clouderrors import CloudError
from cloudprovider_grpc.core.errors import Unavailable
from cloudprovider_grpc.providers.driver import GroupConfig, Pool, PoolDriver
from cloudprovider_grpc.providers.machinery.group_core import GroupCore
from cloudprovider_grpc.providers.machinery.group_state import ListingSpan, takes_listing
from cloudprovider_grpc.providers.machinery.pools.core import PoolGroupState, PoolPlaceholders

log = logging.getLogger(__name__)


class PoolListingFold:
    """The pool shape's listing call and what each listing changes. Handed the group core whose
    groups it folds listings into, the driver that lists, and the placeholders it refits."""

    def __init__(
        self, core: GroupCore[PoolGroupState], driver: PoolDriver, placeholders: PoolPlaceholders
    ) -> None:
        self._core = core
        self._driver = driver
        self._placeholders = placeholders

    def listing(self) -> list[Pool]:
        try:
            return self._driver.list_pools()
        except CloudError as exc:
            raise Unavailable(f"{self._core.name}: listing node pools failed: {exc.message}") from exc

    def configs(self, listing: list[Pool]) -> list[GroupConfig]:
        return [pool.config for pool in listing]

    def apply(self, listing: list[Pool], started: float, span: ListingSpan) -> None:
        now = self._core.clock()
        for pool in listing:
            state = self._core.groups.get(pool.config.id)
            if state is None or not takes_listing(state, span):
                continue
            self._core.note_listing_error(state, pool.listing_error)
            if pool.listing_error is not None:
                continue  # keep what we knew; queued changes go on in the background
            gid = state.config.id
            fresh = {m.id: m for m in pool.machines}
            for mid in set(state.machines) - set(fresh):
                state.tombstones[mid] = now
                state.deleting.pop(mid, None)
                state.removing.pop(mid, None)
            state.machines = fresh
            state.desired = pool.desired
            if pool.failure != state.cloud_failure:  # the cloud reports a new scaling failure, or none
                if pool.failure is not None:
                    f = pool.failure
                    self._core.activity.create_failed(
                        gid, f.code, f.message, f.error_class, self._core.tunables.failed_ttl
                    )
                else:
                    self._core.activity.expired(gid)
            state.cloud_failure = pool.failure
            state.listed_once = True
            settled = (
                not state.sync_queued
                and not state.operations
                and (state.acked_at is None or started >= state.acked_at)
            )
            if settled:
                self._settle(state)
            self._placeholders.fit(state)

    def _settle(self, state: PoolGroupState) -> None:
        """A listing newer than every change of ours: the cloud's desired size is the truth now,
        except while a failure of ours is being shown on the placeholders (until CA deletes them
        or `failed_ttl` passes)."""
        state.expected = None
        if state.wanted is None:
            return
        if state.wanted == state.desired:
            state.wanted = None
        elif state.failed is None:
            log.info(
                "node group %s: the cloud's desired size is %d, not the %d we set; following the cloud",
                self._core.shown(state.config.id),
                state.desired,
                state.wanted,
            )
            state.wanted = None

    def expire(self, now: float) -> None:
        for state in self._core.groups.values():
            if state.failed is not None and now - state.failed_at >= self._core.tunables.failed_ttl:
                log.info(
                    "node group %s: dropping the failed scale-up shown since %.0fs",
                    self._core.shown(state.config.id),
                    now - state.failed_at,
                )
                state.failed = None
                self._core.activity.expired(state.config.id)
                if not state.sync_queued and not state.operations:
                    state.wanted = None
                self._placeholders.fit(state)
