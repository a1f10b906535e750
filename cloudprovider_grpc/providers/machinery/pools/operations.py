"""The pool shape's tracking of the cloud's asynchronous operations.

`set_size` and `remove_machines` may answer with an `Operation` the cloud carries out later; a
background job polls it (backing off from POLL_FIRST to POLL_MAX, giving up after
OPERATION_GIVE_UP). A FAILED one becomes errorInfo on the placeholders and a log line. No RPC ever
waits on one.
"""

from __future__ import annotations

import logging

from cloudprovider_grpc.core.clouderrors import CloudError, InstanceError
from cloudprovider_grpc.observability import metrics
from cloudprovider_grpc.providers.driver import Operation, OperationState, PoolDriver
from cloudprovider_grpc.providers.machinery.group_core import GroupCore
from cloudprovider_grpc.providers.machinery.pools.core import PoolGroupState, PoolPlaceholders

log = logging.getLogger(__name__)

#: how often an operation is polled: first after POLL_FIRST seconds, then backing off to POLL_MAX
POLL_FIRST, POLL_MAX = 1.0, 15.0
#: an operation still pending after this long is no longer polled (logged; the listing decides)
OPERATION_GIVE_UP = 1800.0


class PoolOperations:
    """Polling the cloud's operations until they end. Handed the group core (the groups, the lock,
    the jobs), the driver that polls, and the placeholders a failed operation shows on."""

    def __init__(
        self, core: GroupCore[PoolGroupState], driver: PoolDriver, placeholders: PoolPlaceholders
    ) -> None:
        self._core = core
        self._driver = driver
        self._placeholders = placeholders

    def track(self, state: PoolGroupState, operation: Operation) -> None:
        """Poll a cloud operation in the background until it ends."""
        state.operations[operation.ref] = operation
        started = self._core.clock()
        state.started[operation.ref] = started
        delay = [POLL_FIRST]

        def poll() -> float | None:
            with self._core.lock:
                current = self._core.groups.get(operation.group)
                if current is None or operation.ref not in current.operations:
                    return None
            try:
                status = self._driver.poll(operation)
            except CloudError as exc:
                if not exc.transient:
                    log.warning(
                        "node group %s: polling operation %s failed: %s",
                        self._core.shown(operation.group),
                        operation.ref,
                        exc.message,
                    )
                    with self._core.changing(operation.group):
                        current.operations.pop(operation.ref, None)
                        current.started.pop(operation.ref, None)
                    return None
                status = None
            if status is None or status.state is OperationState.PENDING:
                if self._core.clock() - started >= OPERATION_GIVE_UP:
                    log.warning(
                        "node group %s: operation %s still pending after %.0fs; no longer polled",
                        self._core.shown(operation.group),
                        operation.ref,
                        OPERATION_GIVE_UP,
                    )
                    with self._core.changing(operation.group):
                        current.operations.pop(operation.ref, None)
                        current.started.pop(operation.ref, None)
                    return None
                delay[0] = min(POLL_MAX, delay[0] * 1.5)
                return delay[0]
            with self._core.changing(operation.group):
                current.operations.pop(operation.ref, None)
                current.started.pop(operation.ref, None)
                if status.state is OperationState.FAILED:
                    metrics.OPERATIONS.labels(self._core.name, operation.kind, "failed").inc()
                    self._placeholders.fail(
                        current,
                        status.error or InstanceError("OPERATION_FAILED", "the cloud's operation failed"),
                    )
                else:
                    metrics.OPERATIONS.labels(self._core.name, operation.kind, "ok").inc()
            return None

        self._core.jobs.submit(poll, POLL_FIRST, what="poll cloud operation")
