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
from cloudprovider_grpc.providers.driver import Operation, OperationState
from cloudprovider_grpc.providers.machinery.pools.core import PoolCore, PoolGroupState

#: one logger for the whole shape
log = logging.getLogger(__name__)

#: how often an operation is polled: first after POLL_FIRST seconds, then backing off to POLL_MAX
POLL_FIRST, POLL_MAX = 1.0, 15.0
#: an operation still pending after this long is no longer polled (logged; the listing decides)
OPERATION_GIVE_UP = 1800.0


class PoolOperations(PoolCore):
    """Polling the cloud's operations until they end."""

    def _track(self, state: PoolGroupState, operation: Operation) -> None:
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
