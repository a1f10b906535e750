"""What one replica reads and writes of the election's Lease: the record as last seen and when it
last changed on this process's clock (client-go's rule: expiry is measured from the observer's own
sighting, so no two clocks are compared), the watch that notes each renewal the moment it happens,
one acquire-or-renew attempt carrying the resourceVersion it read, and a log line only when calls on
the Lease start or stop failing. The loop deciding when to call these, the term and the hand-over
are in election.py."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cloudprovider_grpc.ha.handover import ADDRESS_ANNOTATION
from cloudprovider_grpc.ha.lease import LeaseLock, api_problem
from cloudprovider_grpc.ha.settings import LeaderElection
from cloudprovider_grpc.ha.term_gate import LeaderGate

log = logging.getLogger(__name__)


@dataclass
class ObservedLease:
    """The Lease record as last seen, and when (this process's clock) it last changed."""

    holder: str
    renew_time: object
    transitions: int
    duration: float
    at: float


class LeaseCandidate:
    """The Lease side of `Elector` (election.py), which sets these attributes up."""

    settings: LeaderElection
    lock: LeaseLock
    identity: str
    gate: LeaderGate
    #: this replica's gRPC address, published on the Lease while it holds it (handover.py)
    address: str
    _clock: Callable[[], float]
    _observed: ObservedLease | None
    _observed_lock: threading.Lock
    _stop: threading.Event
    _wake: threading.Event  # the Lease changed (seen by the watch), or stopping
    _handing_over: threading.Event
    _problem: str | None  # the last failure of a call on the Lease, as logged

    def _note_problem(self, exc: BaseException | None) -> None:
        """One log line when calls on the Lease start failing or fail differently, one when they
        work again: a refused or unreachable API server is not a line every retry period. A 409
        (another candidate wrote first) is the protocol working, not a problem."""
        problem = None if exc is None or getattr(exc, "status", None) == 409 else api_problem(exc)
        if problem == self._problem:
            return
        if problem is None:
            log.info("leader election: Lease %s/%s can be reached again", self.lock.namespace, self.lock.name)
        else:
            log.warning("leader election: Lease %s/%s: %s", self.lock.namespace, self.lock.name, problem)
        self._problem = problem

    def _watch(self) -> None:
        """Watch the Lease, so that a candidate notes each renewal the moment it happens (its
        expiry then counts from the true renewal, not from the next poll) and takes a released
        Lease at once. Without the right to watch, polling every retry period alone works too."""
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        while not self._stop.is_set():
            stream = watch.Watch()
            try:
                for event in stream.stream(
                    self.lock.api.list_namespaced_lease,
                    self.lock.namespace,
                    field_selector=f"metadata.name={self.lock.name}",
                    timeout_seconds=60,
                    _request_timeout=75,
                ):
                    if self._stop.is_set():
                        stream.stop()
                        return
                    spec = getattr(event.get("object"), "spec", None)
                    if spec is not None:
                        self._remember(spec, self._clock())
                    self._wake.set()
            except ApiException as exc:
                if exc.status in (401, 403, 404, 405):
                    log.info(
                        "leader election: cannot watch Lease %s/%s (%s); polling every retry period",
                        self.lock.namespace,
                        self.lock.name,
                        api_problem(exc),
                    )
                    return
                self._stop.wait(self.settings.retry_period)
            except Exception:  # the connection dropped: watch again after a pause
                self._stop.wait(self.settings.retry_period)

    def _try_acquire_or_renew(self, started: float) -> bool:
        from kubernetes import client

        now = datetime.now(UTC)
        lease = self.lock.get()
        duration = max(1, round(self.settings.lease_duration))
        if lease is None:
            spec = client.V1LeaseSpec(
                holder_identity=self.identity,
                lease_duration_seconds=duration,
                acquire_time=now,
                renew_time=now,
                lease_transitions=0,
            )
            self._remember(self.lock.create(spec, self._annotations({})).spec, started)
            return True
        spec = lease.spec or client.V1LeaseSpec()
        self._remember(spec, self._clock())
        holder = spec.holder_identity or ""
        observed = self._observed
        assert observed is not None
        self.gate.holder = holder
        if holder and holder != self.identity and self._clock() < observed.at + observed.duration:
            return False  # held by another, and not expired by our clock
        if self._handing_over.is_set() or (self.gate.term >= 0 and not self.gate.valid()):
            return False  # handing over, or a term that is over: never write the Lease again
        if holder == self.identity and self.gate.valid():
            spec.renew_time = now
        else:  # take it: free, released, or expired
            spec.holder_identity = self.identity
            spec.acquire_time = now
            spec.renew_time = now
            spec.lease_duration_seconds = duration
            spec.lease_transitions = (spec.lease_transitions or 0) + (1 if holder != self.identity else 0)
        lease.spec = spec
        if lease.metadata is None:
            lease.metadata = client.V1ObjectMeta()
        lease.metadata.annotations = self._annotations(lease.metadata.annotations or {})
        self._remember(self.lock.replace(lease).spec, started)  # a 409 (someone was faster) raises
        return True

    def _annotations(self, current: dict[str, str]) -> dict[str, str]:
        """The Lease's annotations with this holder's address (none when it has none to give)."""
        annotations = {k: v for k, v in current.items() if k != ADDRESS_ANNOTATION}
        if self.address:
            annotations[ADDRESS_ANNOTATION] = self.address
        return annotations

    def _remember(self, spec: Any, at: float) -> None:
        record = (spec.holder_identity or "", spec.renew_time, spec.lease_transitions or 0)
        with self._observed_lock:
            old = self._observed
            if old is None or (old.holder, old.renew_time, old.transitions) != record:
                self._observed = ObservedLease(*record, float(spec.lease_duration_seconds or 0), at)
