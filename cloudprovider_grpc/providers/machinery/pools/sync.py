"""The pool shape's one coalescing sync job per group: removals, then one absolute size.

IncreaseSize, DecreaseTargetSize and DeleteNodes only record the wanted size (and the machines to
remove) and queue the group's sync job if it is not queued already; the job sends one batched
`remove_machines`, then one absolute `set_size` with the latest wanted size, and runs again if more
arrived meanwhile. Sizes are absolute, so a retry after a timeout cannot double; a pushed size is
never lower than the machines the cloud lists that we are not removing (clouds delete random
instances to meet a lower size). Failures back off and retry, then show on the placeholders.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from cloudprovider_grpc.core.clouderrors import CloudError, InstanceError
from cloudprovider_grpc.observability import metrics
from cloudprovider_grpc.providers.driver import Machine, PoolDriver
from cloudprovider_grpc.providers.machinery import activity
from cloudprovider_grpc.providers.machinery.group_core import GroupCore
from cloudprovider_grpc.providers.machinery.group_write_rules import WriteRules
from cloudprovider_grpc.providers.machinery.pools.core import PoolGroupState, PoolPlaceholders
from cloudprovider_grpc.providers.machinery.pools.operations import PoolOperations

log = logging.getLogger(__name__)


class PoolSync:
    """The sync job and its outcomes. Handed the group core (the groups, the lock, the jobs, the
    journal), the write rules (the gate, the back-off), the driver, the placeholders a failure
    shows on, and the operation tracking a push may start."""

    def __init__(
        self,
        core: GroupCore[PoolGroupState],
        rules: WriteRules[PoolGroupState],
        driver: PoolDriver,
        placeholders: PoolPlaceholders,
        operations: PoolOperations,
        *,
        coalesce_window: float = 0.1,
    ) -> None:
        self._core = core
        self._rules = rules
        self._driver = driver
        self._placeholders = placeholders
        self._operations = operations
        # write RPCs that arrive within this window share one push: CA's loop may send several
        # requests for a group back to back, and a push costs an API call under a rate limit.
        # Inline (simulated) runs have no concurrency to coalesce and act at once.
        self._coalesce = 0.0 if core.jobs.inline else coalesce_window

    def queue(self, state: PoolGroupState) -> None:
        """Queue the group's sync job unless it is queued already."""
        if state.sync_queued:
            return
        state.sync_queued = True
        state.started["sync"] = self._core.clock()
        gid = state.config.id
        self._core.jobs.submit(lambda: self._sync(gid), self._coalesce, what="sync group size")

    def _sync(self, gid: str) -> float | None:
        """One round for a group: the pending removals in one call, then one absolute size push.
        Returns the delay before the next round (0: more arrived meanwhile), or None when done."""
        with self._core.changing(gid):
            state = self._core.groups.get(gid)
            if state is None:
                return None  # the group left the cloud
            batch = list(state.removing.values())
            state.removing.clear()
        if batch:
            if not self._rules.allowed("remove", gid, len(batch), [m.id for m in batch]):
                self._sync_refused(state)
                return None
            retry = self._remove(state, batch)
            if retry is not None:
                return retry
        with self._core.changing(gid):
            if state.removing:
                return self._coalesce
            size = self._size_to_push(state)
            if size is None:
                state.sync_queued = False
                state.sync_attempts = 0
                self._core.save_journal()
                return None
        if not self._rules.allowed("set_size", gid, size):
            self._sync_refused(state)
            return None
        try:
            operation = self._driver.set_size(gid, size)
        except CloudError as exc:
            return self._push_failed(state, size, exc)
        metrics.SIZE_PUSHES.labels(self._core.name, gid, "ok").inc()
        self._core.activity.succeeded(gid)
        log.info("node group %s: cloud desired size set to %d", self._core.shown(gid), size)
        with self._core.changing(gid):
            state.expected = size
            state.acked_at = self._core.clock()
            state.sync_attempts = 0
            if operation is not None:
                self._operations.track(state, operation)
            if state.removing or (state.wanted is not None and self._size_to_push(state) is not None):
                return self._coalesce  # more arrived while we pushed: one more round
            state.sync_queued = False
            self._core.save_journal()
        return None

    def _sync_refused(self, state: PoolGroupState) -> None:
        """The write gate refused the sync's next write: the round ends here; a later write RPC
        queues a new one (and meets the gate again)."""
        with self._core.changing(state.config.id):
            state.sync_queued = False
            state.sync_attempts = 0

    def _size_to_push(self, state: PoolGroupState) -> int | None:
        """The absolute size to send, or None when the cloud already has what we want. Never below
        the machines the cloud lists that we are not removing: the cloud would pick random ones."""
        if state.wanted is None:
            return None
        size = max(state.wanted, len(state.live_machines()))
        if size == state.base_size() or (state.failed is not None and size > state.base_size()):
            return None  # nothing to change, or a failed scale-up on show: only lowering is sent
        return size

    def _remove(self, state: PoolGroupState, batch: Sequence[Machine]) -> float | None:
        gid = state.config.id
        try:
            outcome = self._driver.remove_machines(gid, batch)
        except CloudError as exc:
            with self._core.changing(gid):
                state.sync_attempts += 1
                if exc.transient and state.sync_attempts < self._core.tunables.max_attempts:
                    for m in batch:  # all of them again, unless a listing showed them gone meanwhile
                        if m.id in state.deleting:
                            state.removing.setdefault(m.id, m)
                    metrics.OPERATIONS.labels(self._core.name, "remove", "retry").inc()
                    delay = self._rules.backoff(state.sync_attempts)
                    self._core.activity.backing_off(
                        gid, f"removing {len(batch)} machine(s)", exc.message, delay
                    )
                    log.warning(
                        "node group %s: removing %d machine(s) failed (%s); retrying in %.1fs",
                        self._core.shown(gid),
                        len(batch),
                        exc.message,
                        delay,
                    )
                    return delay
                failed = {m.id: exc for m in batch}
                self._removal_failed(state, failed)
                return None
        with self._core.changing(gid):
            removed = [m for m in batch if m.id not in outcome.failed]
            # a machine the cloud cannot remove yet (an ESS instance still Pending) is sent again
            # after a backoff, like a batch that failed as a whole; the others' refusals are final
            retry = {k for k, v in outcome.failed.items() if v.transient}
            if retry and state.sync_attempts + 1 >= self._core.tunables.max_attempts:
                retry = set()
            final = {k: v for k, v in outcome.failed.items() if k not in retry}
            if final:
                self._removal_failed(state, final)
            retry_in: float | None = None
            if retry:
                state.sync_attempts += 1
                for m in batch:
                    if m.id in retry and m.id in state.deleting:
                        state.removing.setdefault(m.id, m)
                metrics.OPERATIONS.labels(self._core.name, "remove", "retry").inc(len(retry))
                retry_in = self._rules.backoff(state.sync_attempts)
                log.warning(
                    "node group %s: the cloud cannot remove %s yet (%s); retrying in %.1fs",
                    self._core.shown(gid),
                    ", ".join(sorted(retry)),
                    outcome.failed[min(retry)].message,
                    retry_in,
                )
            if removed:
                metrics.OPERATIONS.labels(self._core.name, "remove", "ok").inc(len(removed))
                if self._driver.remove_lowers_size:
                    state.expected = state.base_size() - len(removed)
                state.acked_at = self._core.clock()
                log.info("node group %s: removed %s", self._core.shown(gid), ", ".join(m.id for m in removed))
                for m in removed:
                    self._core.activity.occurred(
                        activity.Occurrence(
                            activity.MACHINE_DELETED,
                            f"node group {gid}: removed machine {m.id}",
                            gid,
                            node=m.name,
                        )
                    )
            if outcome.operation is not None:
                self._operations.track(state, outcome.operation)
            if retry_in is None:
                state.sync_attempts = 0
        return retry_in

    def _removal_failed(self, state: PoolGroupState, failed: dict[str, CloudError]) -> None:
        """Machines the cloud refused to remove stay: they count again, and so does the size."""
        for mid, exc in failed.items():
            metrics.OPERATIONS.labels(self._core.name, "remove", "failed").inc()
            log.error(
                "node group %s: removing %s failed: %s", self._core.shown(state.config.id), mid, exc.message
            )
            machine = state.machines.get(mid)
            self._core.activity.cloud_failed(state.config.id, exc.code, exc.message)
            self._core.activity.occurred(
                activity.Occurrence(
                    activity.MACHINE_DELETE_FAILED,
                    f"node group {state.config.id}: removing {mid} failed: {exc.message}",
                    state.config.id,
                    warning=True,
                    node=machine.name if machine else "",
                )
            )
            if state.deleting.pop(mid, None) is not None and state.wanted is not None:
                state.wanted += 1
        self._placeholders.fit(state)
        self._core.save_journal()

    def _push_failed(self, state: PoolGroupState, size: int, exc: CloudError) -> float | None:
        gid = state.config.id
        with self._core.changing(gid):
            state.sync_attempts += 1
            if exc.transient and state.sync_attempts < self._core.tunables.max_attempts:
                metrics.SIZE_PUSHES.labels(self._core.name, gid, "retry").inc()
                delay = self._rules.backoff(state.sync_attempts)
                log.warning(
                    "node group %s: setting size %d failed (%s); retrying in %.1fs",
                    self._core.shown(gid),
                    size,
                    exc.message,
                    delay,
                )
                self._core.activity.backing_off(gid, f"setting size {size}", exc.message, delay)
                return delay
            metrics.SIZE_PUSHES.labels(self._core.name, gid, "failed").inc()
            self._placeholders.fail(
                state,
                exc.as_instance_error()
                if not exc.transient
                else InstanceError(
                    exc.code, f"gave up after {state.sync_attempts} attempts: {exc.message}", exc.error_class
                ),
            )
            state.sync_queued = False
            state.sync_attempts = 0
        return None
