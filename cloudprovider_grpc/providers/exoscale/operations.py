"""The Exoscale driver's follow-up of the operations its changes start: each accepted `:scale` or
`:evict` is tracked by its Exoscale operation id until `poll` sees it end; one that failed because the
pool was busy (`conflict`/`busy`) is sent again a few times rather than waited out, and any other
failure becomes the error CA sees, classed OUT_OF_RESOURCES when the cloud refused for quota or
capacity. Kept apart from the driver (driver.py) because it is the one stateful, clocked piece of
the write side."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cloudprovider_grpc.core.clock import Clock
from cloudprovider_grpc.core.clouderrors import CloudError, ErrorClass, InstanceError
from cloudprovider_grpc.providers.driver import Operation, OperationState, OperationStatus
from cloudprovider_grpc.providers.exoscale.client import QUOTA_RE, ExoscaleClient

log = logging.getLogger(__name__)

_CAPACITY_RE = re.compile(r"capacity|insufficient|sold.?out|no (?:more )?(?:hosts|resources)", re.I)
#: operations still tracked after this long are dropped (the pool machinery stops polling after 30
#: minutes: providers/machinery/pools/operations.py)
FORGET_OPERATIONS_AFTER = 3600.0
#: operation failure reasons that mean "the pool was busy": the same request is sent again
RETRY_REASONS = frozenset({"conflict", "busy"})


@dataclass
class _Tracked:
    """An operation we follow: the request to send again if the pool was busy."""

    group: str
    kind: str
    exo_id: str
    resend: Callable[[], dict[str, Any]]
    attempts: int = 0
    created: float = 0.0


def failure_error(group: str, kind: str, op: Mapping[str, Any]) -> CloudError:
    """The error a failed (or timed out) operation becomes."""
    state, reason = op.get("state"), op.get("reason") or "unknown"
    detail = f": {op['message']}" if op.get("message") else ""
    message = f"exoscale {kind} of group {group}: operation {op.get('id')} {state} ({reason}){detail}"
    text = str(op.get("message") or "")
    # out of resources, which CA backs off from as such (class 1): an account quota answers
    # `forbidden` with a quota message, a zone short of an instance type `unavailable` with a
    # capacity message (Exoscale calls such offerings "capacity-constrained")
    quota = reason == "forbidden" and QUOTA_RE.search(text)
    capacity = reason == "unavailable" and _CAPACITY_RE.search(text)
    return CloudError(
        message,
        error_class=ErrorClass.OUT_OF_RESOURCES if quota or capacity else ErrorClass.OTHER,
        code="QUOTA_EXCEEDED"
        if quota
        else "OUT_OF_CAPACITY"
        if capacity
        else f"exoscale-operation-{state}-{reason}",
    )


class OperationTracker:
    """The operations in flight, by reference; `retries` is how often a busy pool's request is sent
    again."""

    def __init__(self, client: ExoscaleClient, clock: Clock, retries: int) -> None:
        self.client = client
        self._clock = clock  # operations are tracked on the backend's clock
        self._retries = retries
        self._lock = threading.Lock()
        self._ops: dict[str, _Tracked] = {}

    def track(
        self, group: str, kind: str, op: dict[str, Any], resend: Callable[[], dict[str, Any]]
    ) -> Operation | None:
        """The operation to poll for an accepted change (None when it already succeeded)."""
        state = op.get("state")
        if state == "success":
            return None
        if state in ("failure", "timeout"):
            err = failure_error(group, kind, op)
            err.transient = op.get("reason") in RETRY_REASONS  # a busy pool: the machinery retries later
            raise err
        ref = str(op["id"])
        with self._lock:
            now = self._clock.monotonic()
            # operations nobody polls any more (the machinery gives up on very old ones) are forgotten
            for old in [r for r, t in self._ops.items() if now - t.created > FORGET_OPERATIONS_AFTER]:
                del self._ops[old]
            self._ops[ref] = _Tracked(group, kind, ref, resend, created=now)
        return Operation(group=group, kind=kind, ref=ref)

    def poll(self, operation: Operation) -> OperationStatus:
        with self._lock:
            tracked = self._ops.get(operation.ref)
        if tracked is None:
            return OperationStatus(OperationState.SUCCEEDED)
        try:
            op = self.client.get_operation(tracked.exo_id)
        except CloudError as err:
            if err.status == 404:
                self._forget(operation.ref)
                return OperationStatus(
                    OperationState.FAILED,
                    InstanceError(
                        "exoscale-operation-unknown", f"exoscale operation {tracked.exo_id} not found"
                    ),
                )
            raise
        state = op.get("state")
        if state == "pending":
            return OperationStatus(OperationState.PENDING)
        if state == "success":
            self._forget(operation.ref)
            return OperationStatus(OperationState.SUCCEEDED)
        if op.get("reason") in RETRY_REASONS and tracked.attempts < self._retries:
            tracked.attempts += 1
            log.info(
                "exoscale: %s of %s found the pool busy (%s); sending it again (%d of %d)",
                tracked.kind, tracked.group, op.get("reason"),
                tracked.attempts, self._retries,
            )  # fmt: skip
            again = tracked.resend()
            if again.get("state") == "success":
                self._forget(operation.ref)
                return OperationStatus(OperationState.SUCCEEDED)
            tracked.exo_id = str(again["id"])
            return OperationStatus(OperationState.PENDING)
        self._forget(operation.ref)
        failure = failure_error(tracked.group, tracked.kind, op)
        log.warning("%s", failure.message)
        return OperationStatus(OperationState.FAILED, failure.as_instance_error())

    def _forget(self, ref: str) -> None:
        with self._lock:
            self._ops.pop(ref, None)
