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
from cloudprovider_grpc.providers.driver import GroupConfig, Pool
from cloudprovider_grpc.providers.machinery.group_state import ListingSpan
from cloudprovider_grpc.providers.machinery.pools.core import PoolCore, PoolGroupState

#: one logger for the whole shape
log = logging.getLogger(__name__)


class PoolListingFold(PoolCore):
    """The pool shape's listing call and what each listing changes."""

    def _list(self) -> list[Pool]:
        try:
            return self.driver.list_pools()
        except CloudError as exc:
            raise Unavailable(f"{self.name}: listing node pools failed: {exc.message}") from exc

    def _configs(self, listing: list[Pool]) -> list[GroupConfig]:
        return [pool.config for pool in listing]

    def _apply(self, listing: list[Pool], started: float, span: ListingSpan) -> None:
        now = self._clock()
        for pool in listing:
            state = self._groups.get(pool.config.id)
            if state is None or not self._takes_listing(state, span):
                continue
            self._note_listing_error(state, pool.listing_error)
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
                    self.activity.create_failed(gid, f.code, f.message, f.error_class, self._failed_ttl)
                else:
                    self.activity.expired(gid)
            state.cloud_failure = pool.failure
            state.listed_once = True
            settled = (
                not state.sync_queued
                and not state.operations
                and (state.acked_at is None or started >= state.acked_at)
            )
            if settled:
                self._settle(state)
            self._fit_placeholders(state)

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
                self._shown(state.config.id),
                state.desired,
                state.wanted,
            )
            state.wanted = None

    def _expire(self, now: float) -> None:
        for state in self._groups.values():
            if state.failed is not None and now - state.failed_at >= self._failed_ttl:
                log.info(
                    "node group %s: dropping the failed scale-up shown since %.0fs",
                    self._shown(state.config.id),
                    now - state.failed_at,
                )
                state.failed = None
                self.activity.expired(state.config.id)
                if not state.sync_queued and not state.operations:
                    state.wanted = None
                self._fit_placeholders(state)
        super()._expire(now)
