"""The pool shape of the shared machinery: turns a `PoolDriver` into a full `CloudProvider`.

For clouds that own the desired size of a group (Vultr VKE `node_quantity`, Exoscale `size`,
AliCloud ESS `DesiredCapacity`, the sim cloud's pool mode): we set an absolute size and the cloud
creates the instances; removing a named instance lowers the size. The read side is
`providers/base.py`; this module adds the write side:

- **Target.** The size we asked for while a change of ours is queued, in flight, or not yet seen by
  a listing that started after the cloud acknowledged it; otherwise the cloud's own desired size.
  So CA sees its own request at once, and the cloud's view wins as soon as it can be trusted (a size
  changed in the cloud's console shows on the next Refresh).
- **One coalescing sync per group.** IncreaseSize, DecreaseTargetSize and DeleteNodes only record the
  wanted size (and the machines to remove) and queue the group's sync job if it is not queued
  already; the job sends one batched `remove_machines`, then one absolute `set_size` with the latest
  wanted size, and runs again if more arrived meanwhile. 50 concurrent IncreaseSize(1) calls end in a
  handful of pushes, never above max; sizes are absolute, so a retry after a timeout cannot double.
- **Never below the listed machines.** A pushed size is never lower than the machines the cloud
  lists for the group (minus the ones we are removing): clouds delete *random* instances when the size
  drops below their count (VKE), so lowering the size is only ever done by naming machines
  (DeleteNodes). DecreaseTargetSize below the listed count is FAILED_PRECONDITION with no cloud call.
- **Placeholders.** Wanted - listed instances appear as `instanceCreating` with ids
  `<prefix>pending-<group>-<n>`, stable while their count is stable (new ones get new numbers; ones
  that became machines leave oldest first). They carry the cloud's last scaling failure, a failed
  operation or push, or the group's listing error as errorInfo (class 1 for capacity/quota), so CA
  backs off and deletes them, which lowers the wanted size.
- **Asynchronous operations** (`Operation` from set_size/remove_machines) are polled by a background
  job; a FAILED one becomes errorInfo on the placeholders and a log line. No RPC ever waits.
- **Restart.** The desired size lives in the cloud, so a restart loses nothing but a change accepted
  and not yet sent (CA asks again). With `state_file`, wanted sizes and removals are journaled and
  resumed.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cloudprovider_grpc.core.clouderrors import CloudError, InstanceError
from cloudprovider_grpc.core.errors import Unavailable
from cloudprovider_grpc.observability import metrics
from cloudprovider_grpc.providers import activity
from cloudprovider_grpc.providers.base import GroupProvider, GroupStateBase, ListingSpan
from cloudprovider_grpc.providers.contract import Instance, InstanceState, NodeRef
from cloudprovider_grpc.providers.driver import (
    GroupConfig,
    Machine,
    Operation,
    OperationState,
    Pool,
    PoolDriver,
)

log = logging.getLogger(__name__)

#: how often an operation is polled: first after POLL_FIRST seconds, then backing off to POLL_MAX
POLL_FIRST, POLL_MAX = 1.0, 15.0
#: an operation still pending after this long is no longer polled (logged; the listing decides)
OPERATION_GIVE_UP = 1800.0


class Resolved(enum.Enum):
    """What a node named in DeleteNodes is to a pool."""

    MACHINE = "machine"
    PLACEHOLDER = "placeholder"
    GONE = "gone"  # ours, and already gone (a removed machine, a deleted placeholder)
    FOREIGN = "foreign"


@dataclass
class _PoolState(GroupStateBase):
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


class PoolProvider(GroupProvider[_PoolState]):
    """A `CloudProvider` over any `PoolDriver`; see the module docstring."""

    shape = "pools"
    driver: PoolDriver

    def __init__(self, driver: PoolDriver, *, coalesce_window: float = 0.1, **kwargs: Any) -> None:
        super().__init__(driver, **kwargs)
        # write RPCs that arrive within this window share one push: CA's loop may send several
        # requests for a group back to back, and a push costs an API call under a rate limit.
        # Inline (simulated) runs have no concurrency to coalesce and act at once.
        self._coalesce = 0.0 if kwargs.get("inline_workers") else coalesce_window

    # ------------------------------------------------------------------ base hooks
    def _new_state(self, config: GroupConfig) -> _PoolState:
        return _PoolState(config)

    def _target(self, state: _PoolState) -> int:
        return state.target()

    def _placeholder_ids(self, state: _PoolState) -> list[str]:
        return list(state.placeholders)

    # ------------------------------------------------------------------ read RPCs (memory only)
    def nodes(self, group_id: str) -> list[Instance]:
        with self._lock:
            state = self._group(group_id)
            out = [
                Instance(m.id, InstanceState.DELETING if m.id in state.deleting else m.state, m.error)
                for m in state.machines.values()
            ]
            error = state.placeholder_error()
            out.extend(Instance(pid, InstanceState.CREATING, error) for pid in state.placeholders)
            return out

    # ------------------------------------------------------------------ write RPCs (record and return)
    def increase_size(self, group_id: str, delta: int) -> None:
        with self._changing(group_id):
            state, target = self._check_increase(group_id, delta)
            self._admit("create", group_id, delta)
            state.wanted = target + delta
            state.failed = None  # a new request: try again
            self._fit_placeholders(state)
            self._queue_sync(state)
            self._save_journal()
        log.info("node group %s: target %d -> %d", self._shown(group_id), target, target + delta)

    def decrease_target_size(self, group_id: str, delta: int) -> None:
        with self._changing(group_id):
            # never below the listed machines: the cloud would delete random instances to meet it
            state, target = self._check_decrease(group_id, delta)
            new = target + delta
            self._admit("set_size", group_id, new)
            state.wanted = new
            self._fit_placeholders(state, drop_newest=True)
            self._queue_sync(state)
            self._save_journal()
        log.info("node group %s: target %d -> %d (decrease)", self._shown(group_id), target, new)

    def delete_nodes(self, group_id: str, nodes: list[NodeRef]) -> None:
        with self._changing(group_id):
            state = self._group(group_id)
            machines: dict[str, Machine] = {}
            placeholders: list[str] = []
            for node in nodes:
                kind, obj = self._resolve(state, node)
                if kind is Resolved.MACHINE and isinstance(obj, Machine):
                    machines[obj.id] = obj
                elif kind is Resolved.PLACEHOLDER and isinstance(obj, str):
                    if obj not in placeholders:
                        placeholders.append(obj)
                elif kind is Resolved.FOREIGN:
                    raise self._not_in_group(group_id, node)
            leaving = [
                m
                for m in machines.values()
                if m.id not in state.deleting and m.state != InstanceState.DELETING
            ]
            reducing = len(leaving) + len(placeholders)
            target = state.target()
            self._check_min(state, reducing)
            if not reducing:
                return  # everything named is already gone or going: idempotent
            self._admit("delete", group_id, reducing, [*(m.id for m in leaving), *placeholders])
            now = self._clock()
            for m in leaving:
                state.deleting[m.id] = now
                state.removing[m.id] = m
            for pid in placeholders:
                state.placeholders.remove(pid)
                state.tombstones[pid] = now
            state.wanted = target - reducing
            self._fit_placeholders(state)
            if not state.placeholders:
                state.failed = None  # CA has taken the failed instances away: nothing left to show
            self._queue_sync(state)
            self._save_journal()
        log.info(
            "node group %s: deleting %s",
            self._shown(group_id),
            ", ".join([*(m.id for m in leaving), *placeholders]),
        )

    # ------------------------------------------------------------------ refresh (cloud I/O)
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

    def _settle(self, state: _PoolState) -> None:
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

    def _fit_placeholders(self, state: _PoolState, *, drop_newest: bool = False) -> None:
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

    # ------------------------------------------------------------------ background: the sync job
    def _queue_sync(self, state: _PoolState) -> None:
        if state.sync_queued:
            return
        state.sync_queued = True
        state.started["sync"] = self._clock()
        gid = state.config.id
        self._jobs.submit(lambda: self._sync(gid), self._coalesce, what="sync group size")

    def _sync(self, gid: str) -> float | None:
        """One round for a group: the pending removals in one call, then one absolute size push.
        Returns the delay before the next round (0: more arrived meanwhile), or None when done."""
        with self._changing(gid):
            state = self._groups.get(gid)
            if state is None:
                return None  # the group left the cloud
            batch = list(state.removing.values())
            state.removing.clear()
        if batch:
            if not self._allowed("remove", gid, len(batch), [m.id for m in batch]):
                self._sync_refused(state)
                return None
            retry = self._remove(state, batch)
            if retry is not None:
                return retry
        with self._changing(gid):
            if state.removing:
                return self._coalesce
            size = self._size_to_push(state)
            if size is None:
                state.sync_queued = False
                state.sync_attempts = 0
                self._save_journal()
                return None
        if not self._allowed("set_size", gid, size):
            self._sync_refused(state)
            return None
        try:
            operation = self.driver.set_size(gid, size)
        except CloudError as exc:
            return self._push_failed(state, size, exc)
        metrics.SIZE_PUSHES.labels(self.name, gid, "ok").inc()
        self.activity.succeeded(gid)
        log.info("node group %s: cloud desired size set to %d", self._shown(gid), size)
        with self._changing(gid):
            state.expected = size
            state.acked_at = self._clock()
            state.sync_attempts = 0
            if operation is not None:
                self._track(state, operation)
            if state.removing or (state.wanted is not None and self._size_to_push(state) is not None):
                return self._coalesce  # more arrived while we pushed: one more round
            state.sync_queued = False
            self._save_journal()
        return None

    def _sync_refused(self, state: _PoolState) -> None:
        """The write gate refused the sync's next write: the round ends here; a later write RPC
        queues a new one (and meets the gate again)."""
        with self._changing(state.config.id):
            state.sync_queued = False
            state.sync_attempts = 0

    def _size_to_push(self, state: _PoolState) -> int | None:
        """The absolute size to send, or None when the cloud already has what we want. Never below
        the machines the cloud lists that we are not removing: the cloud would pick random ones."""
        if state.wanted is None:
            return None
        size = max(state.wanted, len(state.live_machines()))
        if size == state.base_size() or (state.failed is not None and size > state.base_size()):
            return None  # nothing to change, or a failed scale-up on show: only lowering is sent
        return size

    def _remove(self, state: _PoolState, batch: Sequence[Machine]) -> float | None:
        gid = state.config.id
        try:
            outcome = self.driver.remove_machines(gid, batch)
        except CloudError as exc:
            with self._changing(gid):
                state.sync_attempts += 1
                if exc.transient and state.sync_attempts < self._max_attempts:
                    for m in batch:  # all of them again, unless a listing showed them gone meanwhile
                        if m.id in state.deleting:
                            state.removing.setdefault(m.id, m)
                    metrics.OPERATIONS.labels(self.name, "remove", "retry").inc()
                    delay = self._backoff(state.sync_attempts)
                    self.activity.backing_off(gid, f"removing {len(batch)} machine(s)", exc.message, delay)
                    log.warning(
                        "node group %s: removing %d machine(s) failed (%s); retrying in %.1fs",
                        self._shown(gid),
                        len(batch),
                        exc.message,
                        delay,
                    )
                    return delay
                failed = {m.id: exc for m in batch}
                self._removal_failed(state, failed)
                return None
        with self._changing(gid):
            removed = [m for m in batch if m.id not in outcome.failed]
            # a machine the cloud cannot remove yet (an ESS instance still Pending) is sent again
            # after a backoff, like a batch that failed as a whole; the others' refusals are final
            retry = {k for k, v in outcome.failed.items() if v.transient}
            if retry and state.sync_attempts + 1 >= self._max_attempts:
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
                metrics.OPERATIONS.labels(self.name, "remove", "retry").inc(len(retry))
                retry_in = self._backoff(state.sync_attempts)
                log.warning(
                    "node group %s: the cloud cannot remove %s yet (%s); retrying in %.1fs",
                    self._shown(gid),
                    ", ".join(sorted(retry)),
                    outcome.failed[min(retry)].message,
                    retry_in,
                )
            if removed:
                metrics.OPERATIONS.labels(self.name, "remove", "ok").inc(len(removed))
                if self.driver.remove_lowers_size:
                    state.expected = state.base_size() - len(removed)
                state.acked_at = self._clock()
                log.info("node group %s: removed %s", self._shown(gid), ", ".join(m.id for m in removed))
                for m in removed:
                    self.activity.occurred(
                        activity.Occurrence(
                            activity.MACHINE_DELETED,
                            f"node group {gid}: removed machine {m.id}",
                            gid,
                            node=m.name,
                        )
                    )
            if outcome.operation is not None:
                self._track(state, outcome.operation)
            if retry_in is None:
                state.sync_attempts = 0
        return retry_in

    def _removal_failed(self, state: _PoolState, failed: dict[str, CloudError]) -> None:
        """Machines the cloud refused to remove stay: they count again, and so does the size."""
        for mid, exc in failed.items():
            metrics.OPERATIONS.labels(self.name, "remove", "failed").inc()
            log.error("node group %s: removing %s failed: %s", self._shown(state.config.id), mid, exc.message)
            machine = state.machines.get(mid)
            self.activity.cloud_failed(state.config.id, exc.code, exc.message)
            self.activity.occurred(
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
        self._fit_placeholders(state)
        self._save_journal()

    def _push_failed(self, state: _PoolState, size: int, exc: CloudError) -> float | None:
        gid = state.config.id
        with self._changing(gid):
            state.sync_attempts += 1
            if exc.transient and state.sync_attempts < self._max_attempts:
                metrics.SIZE_PUSHES.labels(self.name, gid, "retry").inc()
                delay = self._backoff(state.sync_attempts)
                log.warning(
                    "node group %s: setting size %d failed (%s); retrying in %.1fs",
                    self._shown(gid),
                    size,
                    exc.message,
                    delay,
                )
                self.activity.backing_off(gid, f"setting size {size}", exc.message, delay)
                return delay
            metrics.SIZE_PUSHES.labels(self.name, gid, "failed").inc()
            self._fail(
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

    def _operations(self, state: _PoolState, now: float) -> list[dict[str, Any]]:
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

    def _fail(self, state: _PoolState, error: InstanceError) -> None:
        log.error("node group %s: scaling failed: %s", self._shown(state.config.id), error.message)
        state.failed, state.failed_at = error, self._clock()
        self.activity.create_failed(
            state.config.id, error.code, error.message, error.error_class, self._failed_ttl
        )
        self._fit_placeholders(state)
        self._save_journal()

    # ------------------------------------------------------------------ background: operations
    def _track(self, state: _PoolState, operation: Operation) -> None:
        state.operations[operation.ref] = operation
        started = self._clock()
        state.started[operation.ref] = started
        delay = [POLL_FIRST]

        def poll() -> float | None:
            with self._lock:
                current = self._groups.get(operation.group)
                if current is None or operation.ref not in current.operations:
                    return None
            try:
                status = self.driver.poll(operation)
            except CloudError as exc:
                if not exc.transient:
                    log.warning(
                        "node group %s: polling operation %s failed: %s",
                        self._shown(operation.group),
                        operation.ref,
                        exc.message,
                    )
                    with self._changing(operation.group):
                        current.operations.pop(operation.ref, None)
                        current.started.pop(operation.ref, None)
                    return None
                status = None
            if status is None or status.state is OperationState.PENDING:
                if self._clock() - started >= OPERATION_GIVE_UP:
                    log.warning(
                        "node group %s: operation %s still pending after %.0fs; no longer polled",
                        self._shown(operation.group),
                        operation.ref,
                        OPERATION_GIVE_UP,
                    )
                    with self._changing(operation.group):
                        current.operations.pop(operation.ref, None)
                        current.started.pop(operation.ref, None)
                    return None
                delay[0] = min(POLL_MAX, delay[0] * 1.5)
                return delay[0]
            with self._changing(operation.group):
                current.operations.pop(operation.ref, None)
                current.started.pop(operation.ref, None)
                if status.state is OperationState.FAILED:
                    metrics.OPERATIONS.labels(self.name, operation.kind, "failed").inc()
                    self._fail(
                        current,
                        status.error or InstanceError("OPERATION_FAILED", "the cloud's operation failed"),
                    )
                else:
                    metrics.OPERATIONS.labels(self.name, operation.kind, "ok").inc()
            return None

        self._jobs.submit(poll, POLL_FIRST, what="poll cloud operation")

    # ------------------------------------------------------------------ helpers
    def _resolve(self, state: _PoolState, node: NodeRef) -> tuple[Resolved, Machine | str | None]:
        pid = node.provider_id
        if pid:
            if pid in state.machines:
                return Resolved.MACHINE, state.machines[pid]
            if pid in state.placeholders:
                return Resolved.PLACEHOLDER, pid
            if pid in state.tombstones:
                return Resolved.GONE, None
            mid = self.driver.machine_of(node)  # the driver's fallback, as NodeGroupForNode uses it
            if mid and mid in state.machines:
                return Resolved.MACHINE, state.machines[mid]
            return Resolved.FOREIGN, None
        for m in state.machines.values():  # no providerID: match the machine by its name
            if node.name and m.name == node.name:
                return Resolved.MACHINE, m
        return Resolved.FOREIGN, None

    # ------------------------------------------------------------------ journal
    def _journal_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        for gid, s in self._groups.items():
            wanted = s.wanted if s.failed is None else None
            removing = [
                {"id": m.id, "name": m.name, "handle": m.handle}
                for mid in s.deleting
                if (m := s.machines.get(mid)) is not None
            ]
            if wanted is not None or removing:
                doc[gid] = {"wanted": wanted, "removing": removing}
        return doc

    def _parse_journal(self, doc: dict[str, Any]) -> dict[str, Any]:
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
            raise self._journal._error(f"has a malformed entry ({type(exc).__name__}: {exc})") from None
        return entries

    def _restore(self, state: _PoolState, entry: Any) -> None:
        wanted, removing = entry
        now = self._clock()
        if wanted is not None:
            state.wanted = min(wanted, state.config.max_size)
        for m in removing:
            state.machines.setdefault(m.id, m)
            state.deleting[m.id] = now
            state.removing[m.id] = m
        self._fit_placeholders(state)
        self._queue_sync(state)


__all__ = ["PoolProvider"]
