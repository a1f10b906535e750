"""The machine shape's background operations: creating and deleting machines.

Each runs as a `JobRunner` job with bounded concurrency and per-attempt exponential back-off with
jitter (the back-off is group_write_rules.py's). `MachineWorkers` is handed the group core, the
write rules and the driver. Every create carries its creation's
token; when an attempt leaves its outcome unknown (timeout, 5xx after sending), the next one first
looks the token up in the cloud's listing and only creates if it is absent, so throttling, timeouts
and restarts never double a machine. That look-up waits `create_settle` seconds after the outcome
became unknown (or after a restart found the creation in the journal), so a request the cloud is
still carrying out is listed before anything is sent again. For clouds whose create cannot carry
a token, an unknown outcome is never re-sent: the next listings adopt the machine (machines/listing.py).
Deletes treat "already gone" as done. Each cloud call asks the write gate first.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from cloudprovider_grpc.core.clouderrors import CloudError, MachineGone
from cloudprovider_grpc.observability import metrics
from cloudprovider_grpc.providers.driver import Machine, MachineDriver, MachineListing
from cloudprovider_grpc.providers.machinery import activity
from cloudprovider_grpc.providers.machinery.group_core import GroupCore
from cloudprovider_grpc.providers.machinery.group_write_rules import WriteRules
from cloudprovider_grpc.providers.machinery.machines.core import Creation, CreationStatus, MachineGroupState

log = logging.getLogger(__name__)


class MachineWorkers:
    """Create and delete attempts, with their retries and outcomes. Handed the group core (the
    groups, the lock, the jobs, the journal), the write rules (the gate, the back-off) and the
    driver; the listing fold, the journal's restore and the write RPCs submit to it."""

    def __init__(
        self,
        core: GroupCore[MachineGroupState],
        rules: WriteRules[MachineGroupState],
        driver: MachineDriver,
        create_settle: float = 0.0,
    ) -> None:
        self._core = core
        self._rules = rules
        self._driver = driver
        #: how long a create request that may have reached the cloud is given to show in its
        #: listings before its token is looked up: a request the cloud received can still be carried
        #: out after our client stopped waiting (a timeout, or a leader killed mid-request), and a
        #: look-up that comes too early creates the machine a second time. The backends set it to
        #: their client's connect plus read timeout: at least as long as we let a request take.
        self.create_settle = create_settle

    def submit_create(self, creation: Creation) -> None:
        """Queue the creation's next attempt in the background."""
        self._core.jobs.submit(lambda: self._attempt_create(creation), what="create machine")

    def _attempt_create(self, c: Creation) -> float | None:
        with self._core.changing(c.group):
            state = self._core.groups.get(c.group)
            if state is None or state.creations.get(c.token) is not c or c.cancelled:
                return None  # resolved by a listing, cancelled before it was sent, or the group is gone
            look_up_first = c.status == CreationStatus.UNKNOWN
            if look_up_first and not self._driver.create_carries_token:
                return None  # never re-sent: a listing adopts its machine (_adopt_untokened)
            if look_up_first and (wait := c.look_up_from - self._core.clock()) > 0:
                return wait  # a request that may be on its way is given time to land first
            c.status = CreationStatus.INFLIGHT
            c.attempts += 1
            if not c.sent and not look_up_first:
                # journaled before the request leaves: after a crash, a creation never sent is sent
                # again at once, and only one that may have left is looked up (or, untokened, adopted)
                c.sent = True
                self._core.save_journal()
        sending = False  # whether this attempt sent a create (a failed look-up sends nothing)
        try:
            machine = None
            if look_up_first:
                listing = self._driver.list_machines()
                failed = listing.failed if isinstance(listing, MachineListing) else {}
                if c.group in failed:
                    raise failed[c.group]
                machine = next((m for m in listing if m.token == c.token), None)
            if machine is None:
                if not self._rules.allowed("create", c.group, 1):
                    with self._core.lock:
                        c.status = CreationStatus.UNKNOWN if c.sent else CreationStatus.QUEUED
                    return None
                sending = True
                machine = self._driver.create_machine(c.group, c.token)
        except CloudError as exc:
            return self._create_failed(c, exc, sending)
        metrics.OPERATIONS.labels(self._core.name, "create", "ok").inc()
        with self._core.changing(c.group):
            state = self._core.groups.get(c.group)
            if state is None:
                return None
            state.creations.pop(c.token, None)
            state.resolved[c.token] = machine.id  # its placeholder keeps pointing at the group
            state.machines[machine.id] = machine
            if c.cancelled:
                state.deleting[machine.id] = self._core.clock()
                self.submit_delete(machine)
            else:
                state.created_locally[machine.id] = self._core.clock()
                self._core.index.add(machine.id, c.group, machine.name)
            self._core.save_journal()
        log.info("node group %s: created %s", self._core.shown(c.group), machine.id)
        self._core.activity.succeeded(c.group)
        self._core.activity.occurred(
            activity.Occurrence(
                activity.MACHINE_CREATED, f"node group {c.group}: created {machine.id}", c.group
            )
        )
        return None

    def _create_failed(self, c: Creation, exc: CloudError, sending: bool) -> float | None:
        with self._core.changing(c.group):
            if exc.transient and not self._driver.create_carries_token:
                # the request may have reached the cloud and nothing identifies its machine: never
                # send it again; the next listings adopt the machine if it appears (_adopt_untokened)
                c.status, c.unknown_since, c.error = CreationStatus.UNKNOWN, self._core.clock(), None
                metrics.OPERATIONS.labels(self._core.name, "create", "unknown").inc()
                log.warning(
                    "node group %s: create outcome unknown (%s); waiting for the machine to be listed",
                    self._core.shown(c.group),
                    exc.message,
                )
                self._core.save_journal()
                return None
            if exc.transient and c.attempts < self._core.tunables.max_attempts:
                c.status = CreationStatus.UNKNOWN  # the request may have reached the cloud
                c.error = None
                if sending:
                    c.look_up_from = self._core.clock() + self.create_settle
                metrics.OPERATIONS.labels(self._core.name, "create", "retry").inc()
                delay = self._rules.backoff(c.attempts)
                log.warning(
                    "node group %s: create attempt %d failed (%s); retrying in %.1fs",
                    self._core.shown(c.group),
                    c.attempts,
                    exc.message,
                    delay,
                )
                self._core.activity.backing_off(c.group, "creating a machine", exc.message, delay)
                return delay
            c.status = CreationStatus.FAILED
            c.failed_at = self._core.clock()
            error = exc.as_instance_error()
            if exc.transient:
                error = replace(error, message=f"gave up after {c.attempts} attempts: {exc.message}")
            c.error = error
            metrics.OPERATIONS.labels(self._core.name, "create", "failed").inc()
            self._core.save_journal()
            self._core.activity.create_failed(
                c.group, error.code, error.message, error.error_class, self._core.tunables.failed_ttl
            )
        log.error("node group %s: creating a machine failed: %s", self._core.shown(c.group), exc.message)
        return None

    def submit_delete(self, machine: Machine) -> None:
        """Queue the machine's deletion in the background."""
        attempts = [0]

        def attempt() -> float | None:
            with self._core.lock:
                state = self._core.groups.get(machine.group)
                if state is None or machine.id not in state.deleting:
                    return None  # gone from the cloud meanwhile
            attempts[0] += 1
            if not self._rules.allowed("delete", machine.group, 1, (machine.id,)):
                return None
            try:
                self._driver.delete_machine(machine)
            except MachineGone:
                pass
            except CloudError as exc:
                if exc.transient and attempts[0] < self._core.tunables.max_attempts:
                    metrics.OPERATIONS.labels(self._core.name, "delete", "retry").inc()
                    delay = self._rules.backoff(attempts[0])
                    self._core.activity.backing_off(
                        machine.group, f"deleting {machine.id}", exc.message, delay
                    )
                    return delay
                metrics.OPERATIONS.labels(self._core.name, "delete", "failed").inc()
                self._core.activity.cloud_failed(machine.group, exc.code, exc.message)
                self._core.activity.occurred(
                    activity.Occurrence(
                        activity.MACHINE_DELETE_FAILED,
                        f"node group {machine.group}: deleting {machine.id} failed: {exc.message}",
                        machine.group,
                        warning=True,
                        node=machine.name,
                    )
                )
                log.error(
                    "node group %s: deleting %s failed: %s",
                    self._core.shown(machine.group),
                    machine.id,
                    exc.message,
                )
                with self._core.changing(machine.group):
                    state = self._core.groups.get(machine.group)
                    if state is not None:
                        state.deleting.pop(machine.id, None)
                    self._core.save_journal()
                return None
            metrics.OPERATIONS.labels(self._core.name, "delete", "ok").inc()
            log.info("node group %s: deleted %s", self._core.shown(machine.group), machine.id)
            self._core.activity.succeeded(machine.group)
            self._core.activity.occurred(
                activity.Occurrence(
                    activity.MACHINE_DELETED,
                    f"node group {machine.group}: deleted machine {machine.id}",
                    machine.group,
                    node=machine.name,
                )
            )
            return None

        self._core.jobs.submit(attempt, what="delete machine")
