"""What the providers did that the RPC answers do not carry: the occurrences worth a Kubernetes Event
and, per group, the last cloud error and the back-off in force.

Why a separate record: CA sees a failed creation only as errorInfo on a placeholder instance; an
operator reading `kubectl get events` or the status ConfigMap wants to know that the cloud refused
(stock-out, quota), that a group is backing off, and when a machine was deleted. The shared
machinery (the machine shape's providers/machine_*.py, the pool shape's providers/pool_*.py)
reports each such moment here, once, and whoever listens (the Kubernetes reporter,
server/kubereport.py) turns it into an Event off the RPC path.

Listeners are called with the provider's lock held, from RPC handlers and background workers: they
must only queue and return.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from cloudprovider_grpc.core.clouderrors import ErrorClass

log = logging.getLogger(__name__)

#: Event reasons, in CamelCase as Kubernetes' own (one word per fact, no spaces)
MACHINE_CREATE_FAILED = "MachineCreateFailed"
STOCK_OUT = "StockOut"
BACKING_OFF = "BackingOff"
MACHINE_CREATED = "MachineCreated"
MACHINE_DELETED = "MachineDeleted"
MACHINE_DELETE_FAILED = "MachineDeleteFailed"
SCALING_FAILED = "ScalingFailed"
SIZE_CHANGED = "SizeChanged"


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One moment worth an Event. `node` names the Node (the machine's host name) when the event is
    about one machine; otherwise it is about the group, recorded on the status ConfigMap."""

    reason: str
    message: str
    group: str
    warning: bool = False
    node: str = ""


@dataclass(frozen=True, slots=True)
class CloudFailure:
    """A group's last cloud error, as shown in the status (wall-clock time, for people)."""

    code: str
    message: str
    at: float


@dataclass(frozen=True, slots=True)
class BackOff:
    """Why a group is held back and until when (wall clock): our retry of a transient failure, or
    the failed creations CA backs the group off for while they are shown (class OUT_OF_RESOURCES)."""

    reason: str
    message: str
    until: float


class Activity:
    """The record one provider keeps; see the module docstring."""

    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        self._wall = wall
        self._lock = threading.Lock()
        self._listeners: list[Callable[[Occurrence], None]] = []
        self._refresh_listeners: list[Callable[[], None]] = []
        self.errors: dict[str, CloudFailure] = {}
        self.backoffs: dict[str, BackOff] = {}
        #: wall-clock time the last Refresh finished listing the cloud (None before the first):
        #: the status page's data is as of then, not as of when the page is drawn
        self.last_refresh: float | None = None

    def listen(
        self, callback: Callable[[Occurrence], None], refreshed: Callable[[], None] | None = None
    ) -> None:
        """`callback(occurrence)` for every occurrence; `refreshed()` after every Refresh."""
        with self._lock:
            self._listeners.append(callback)
            if refreshed is not None:
                self._refresh_listeners.append(refreshed)

    def refreshed(self) -> None:
        self.last_refresh = self._wall()
        for callback in list(self._refresh_listeners):
            try:
                callback()
            except Exception:
                log.exception("activity listener failed")

    def occurred(self, occurrence: Occurrence) -> None:
        for callback in list(self._listeners):
            try:
                callback(occurrence)
            except Exception:  # a listener's bug must not fail the operation that was made
                log.exception("activity listener failed")

    # ---- the facts the shapes report
    def cloud_failed(self, group: str, code: str, message: str) -> None:
        with self._lock:
            self.errors[group] = CloudFailure(code, message, self._wall())

    def _hold(self, group: str, backoff: BackOff) -> None:
        with self._lock:
            self.backoffs[group] = backoff

    def backing_off(self, group: str, what: str, message: str, seconds: float) -> None:
        """A transient failure retried after `seconds`: the group's back-off, and an Event."""
        self.cloud_failed(group, "RETRYING", message)
        self._hold(group, BackOff(BACKING_OFF, f"{what}: {message}", self._wall() + seconds))
        self.occurred(
            Occurrence(
                BACKING_OFF,
                f"node group {group}: {what} failed, retrying in {seconds:.1f}s: {message}",
                group,
                warning=True,
            )
        )

    def create_failed(self, group: str, code: str, message: str, error_class: int, shown_for: float) -> None:
        """A creation given up: `MachineCreateFailed`, and `StockOut` when the cloud had no capacity
        (class OUT_OF_RESOURCES makes CA back the group off while the failure is shown)."""
        self.cloud_failed(group, code, message)
        out_of_resources = error_class == ErrorClass.OUT_OF_RESOURCES
        self.occurred(
            Occurrence(MACHINE_CREATE_FAILED, f"node group {group}: {message}", group, warning=True)
        )
        if out_of_resources:
            self._hold(
                group,
                BackOff(
                    STOCK_OUT,
                    f"the cloud has no capacity ({code}): cluster-autoscaler backs this group off",
                    self._wall() + shown_for,
                ),
            )
            self.occurred(
                Occurrence(
                    STOCK_OUT,
                    f"node group {group}: out of capacity ({code}); cluster-autoscaler backs it off: "
                    f"{message}",
                    group,
                    warning=True,
                )
            )

    def succeeded(self, group: str) -> None:
        """A write of the group went through: a retry back-off is over (a stock-out stays shown
        until its failed creations are dropped, as CA sees them)."""
        with self._lock:
            backoff = self.backoffs.get(group)
            if backoff is not None and backoff.reason == BACKING_OFF:
                del self.backoffs[group]

    def expired(self, group: str) -> None:
        """The group's failed creations were dropped: nothing holds it back any more."""
        with self._lock:
            self.backoffs.pop(group, None)

    def current_backoffs(self) -> dict[str, BackOff]:
        now = self._wall()
        with self._lock:
            return {gid: b for gid, b in self.backoffs.items() if b.until > now}

    def last_errors(self) -> dict[str, CloudFailure]:
        with self._lock:
            return dict(self.errors)


__all__ = ["Activity", "BackOff", "CloudFailure", "Occurrence"]
