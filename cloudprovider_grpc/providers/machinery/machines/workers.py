"""The machine shape's background operations: creating and deleting machines.

Each runs as a `JobRunner` job with bounded concurrency and per-attempt exponential back-off with
jitter (the back-off is group_write_rules.py's). Every create carries its creation's
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
from cloudprovider_grpc.providers.driver import Machine, MachineListing
from cloudprovider_grpc.providers.machinery import activity
from cloudprovider_grpc.providers.machinery.machines.core import Creation, CreationStatus, MachineCore

#: one logger for the whole shape
log = logging.getLogger(__name__)


class MachineWorkers(MachineCore):
    """Create and delete attempts, with their retries and outcomes."""

    def _submit_create(self, creation: Creation) -> None:
        self._jobs.submit(lambda: self._attempt_create(creation), what="create machine")

    def _attempt_create(self, c: Creation) -> float | None:
        with self._changing(c.group):
            state = self._groups.get(c.group)
            if state is None or state.creations.get(c.token) is not c or c.cancelled:
                return None  # resolved by a listing, cancelled before it was sent, or the group is gone
            look_up_first = c.status == CreationStatus.UNKNOWN
            if look_up_first and not self.driver.create_carries_token:
                return None  # never re-sent: a listing adopts its machine (_adopt_untokened)
            if look_up_first and (wait := c.look_up_from - self._clock()) > 0:
                return wait  # a request that may be on its way is given time to land first
            c.status = CreationStatus.INFLIGHT
            c.attempts += 1
            if not c.sent and not look_up_first:
                # journaled before the request leaves: after a crash, a creation never sent is sent
                # again at once, and only one that may have left is looked up (or, untokened, adopted)
                c.sent = True
                self._save_journal()
        sending = False  # whether this attempt sent a create (a failed look-up sends nothing)
        try:
            machine = None
            if look_up_first:
                listing = self.driver.list_machines()
                failed = listing.failed if isinstance(listing, MachineListing) else {}
                if c.group in failed:
                    raise failed[c.group]
                machine = next((m for m in listing if m.token == c.token), None)
            if machine is None:
                if not self._allowed("create", c.group, 1):
                    with self._lock:
                        c.status = CreationStatus.UNKNOWN if c.sent else CreationStatus.QUEUED
                    return None
                sending = True
                machine = self.driver.create_machine(c.group, c.token)
        except CloudError as exc:
            return self._create_failed(c, exc, sending)
        metrics.OPERATIONS.labels(self.name, "create", "ok").inc()
        with self._changing(c.group):
            state = self._groups.get(c.group)
            if state is None:
                return None
            state.creations.pop(c.token, None)
            state.resolved[c.token] = machine.id  # its placeholder keeps pointing at the group
            state.machines[machine.id] = machine
            if c.cancelled:
                state.deleting[machine.id] = self._clock()
                self._submit_delete(machine)
            else:
                state.created_locally[machine.id] = self._clock()
                self._index_node(machine.id, c.group, machine.name)
            self._save_journal()
        log.info("node group %s: created %s", self._shown(c.group), machine.id)
        self.activity.succeeded(c.group)
        self.activity.occurred(
            activity.Occurrence(
                activity.MACHINE_CREATED, f"node group {c.group}: created {machine.id}", c.group
            )
        )
        return None

    def _create_failed(self, c: Creation, exc: CloudError, sending: bool) -> float | None:
        with self._changing(c.group):
            if exc.transient and not self.driver.create_carries_token:
                # the request may have reached the cloud and nothing identifies its machine: never
                # send it again; the next listings adopt the machine if it appears (_adopt_untokened)
                c.status, c.unknown_since, c.error = CreationStatus.UNKNOWN, self._clock(), None
                metrics.OPERATIONS.labels(self.name, "create", "unknown").inc()
                log.warning(
                    "node group %s: create outcome unknown (%s); waiting for the machine to be listed",
                    self._shown(c.group),
                    exc.message,
                )
                self._save_journal()
                return None
            if exc.transient and c.attempts < self._max_attempts:
                c.status = CreationStatus.UNKNOWN  # the request may have reached the cloud
                c.error = None
                if sending:
                    c.look_up_from = self._clock() + self._create_settle
                metrics.OPERATIONS.labels(self.name, "create", "retry").inc()
                delay = self._backoff(c.attempts)
                log.warning(
                    "node group %s: create attempt %d failed (%s); retrying in %.1fs",
                    self._shown(c.group),
                    c.attempts,
                    exc.message,
                    delay,
                )
                self.activity.backing_off(c.group, "creating a machine", exc.message, delay)
                return delay
            c.status = CreationStatus.FAILED
            c.failed_at = self._clock()
            error = exc.as_instance_error()
            if exc.transient:
                error = replace(error, message=f"gave up after {c.attempts} attempts: {exc.message}")
            c.error = error
            metrics.OPERATIONS.labels(self.name, "create", "failed").inc()
            self._save_journal()
            self.activity.create_failed(
                c.group, error.code, error.message, error.error_class, self._failed_ttl
            )
        log.error("node group %s: creating a machine failed: %s", self._shown(c.group), exc.message)
        return None

    def _submit_delete(self, machine: Machine) -> None:
        attempts = [0]

        def attempt() -> float | None:
            with self._lock:
                state = self._groups.get(machine.group)
                if state is None or machine.id not in state.deleting:
                    return None  # gone from the cloud meanwhile
            attempts[0] += 1
            if not self._allowed("delete", machine.group, 1, (machine.id,)):
                return None
            try:
                self.driver.delete_machine(machine)
            except MachineGone:
                pass
            except CloudError as exc:
                if exc.transient and attempts[0] < self._max_attempts:
                    metrics.OPERATIONS.labels(self.name, "delete", "retry").inc()
                    delay = self._backoff(attempts[0])
                    self.activity.backing_off(machine.group, f"deleting {machine.id}", exc.message, delay)
                    return delay
                metrics.OPERATIONS.labels(self.name, "delete", "failed").inc()
                self.activity.cloud_failed(machine.group, exc.code, exc.message)
                self.activity.occurred(
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
                    self._shown(machine.group),
                    machine.id,
                    exc.message,
                )
                with self._changing(machine.group):
                    state = self._groups.get(machine.group)
                    if state is not None:
                        state.deleting.pop(machine.id, None)
                    self._save_journal()
                return None
            metrics.OPERATIONS.labels(self.name, "delete", "ok").inc()
            log.info("node group %s: deleted %s", self._shown(machine.group), machine.id)
            self.activity.succeeded(machine.group)
            self.activity.occurred(
                activity.Occurrence(
                    activity.MACHINE_DELETED,
                    f"node group {machine.group}: deleted machine {machine.id}",
                    machine.group,
                    node=machine.name,
                )
            )
            return None

        self._jobs.submit(attempt, what="delete machine")
