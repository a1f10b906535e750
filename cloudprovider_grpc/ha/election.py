"""`serve --leader-elect`: several replicas, one leader, on a coordination.k8s.io/v1 Lease.

The same protocol as client-go's leader election, which cluster-autoscaler itself runs
(k8s.io/client-go/tools/leaderelection: the Lease's holderIdentity, leaseDurationSeconds,
acquireTime, renewTime and leaseTransitions; a record is expired when it has not *changed* for
leaseDurationSeconds as measured on the observer's own clock, so no two clocks are compared;
updates carry the resourceVersion they were read at, so two candidates can never both win).

- **Only the leader writes.** `LeaderGate` (term_gate.py) is the write gate (providers/machinery/gate.py)
  of this process: a write RPC on a standby answers UNAVAILABLE; a background write is checked
  right before its driver call; the journal is written only by the leader. The Lease itself is
  read and written in lease.py, and what this replica reads and writes of it in candidate.py.
- **Fencing.** The term is valid until `renew deadline` after the start of the last successful
  renewal, on this process's monotonic clock. Others may take over only `lease duration` after
  they saw that renewal, which is later still; the difference (5 s by default) is the margin for a
  write that passed the check just before the deadline. A frozen process (SIGSTOP, a stalled VM)
  that resumes finds the deadline passed at its next write and writes nothing; losing the term
  ends the process (as cluster-autoscaler does), and a restart rejoins as a standby.
- **Standby.** gRPC health NOT_SERVING, /readyz 503, /readyz/replica 200 (the pod is Ready, so a
  rolling update can progress) and its pod labelled a standby (podrole.py: the Service selects the
  leader's label, so CA reaches the leader only), and a read-only listing of the cloud every
  `standby_refresh` seconds so that the answers are warm.
- **Takeover** re-reads the journal and lists the cloud (`GroupProvider.take_over`) and labels
  its pod the leader before the new leader turns ready, then renews once at once: that renewal
  tells a leader handing over (below) that its successor answers.
- **Hand-over on SIGTERM.** The leader holds the write RPCs that still reach it, lets the running
  ones finish and sends its queued background writes on its term, releases the Lease (empty
  holder, as client-go's ReleaseOnCancel does), waits until a successor has taken over (bounded by
  the grace period), forwards every call that still reaches it to the address the successor
  published on the Lease (handover.py), and only then closes its port (GOAWAY), so CA's next
  connection reaches the new leader and no call of CA fails on the way.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from prometheus_client import Counter, Gauge

from cloudprovider_grpc.core.errors import Unavailable
from cloudprovider_grpc.ha.candidate import LeaseCandidate, ObservedLease
from cloudprovider_grpc.ha.handover import ADDRESS_ANNOTATION, HandOverRelay
from cloudprovider_grpc.ha.lease import (
    LeaseLock,
    api_problem,
    coordination_api,
    default_identity,
    default_namespace,
)
from cloudprovider_grpc.ha.podrole import PodRole, build_pod_role
from cloudprovider_grpc.ha.settings import LeaderElection
from cloudprovider_grpc.ha.term_gate import LeaderGate

log = logging.getLogger(__name__)

LEADER = Gauge("cloudprovider_grpc_leader", "1 while this replica holds the Lease and may write, else 0.")
TRANSITIONS = Counter(
    "cloudprovider_grpc_leader_transitions", "Times this replica became the leader or stopped being it."
)
SINCE_RENEW = Gauge(
    "cloudprovider_grpc_leader_last_renew_age_seconds",
    "Seconds since this replica last renewed the Lease (NaN while it is not the leader).",
)
SINCE_RENEW.set(float("nan"))  # a server that never leads (no --leader-elect) shows NaN, as documented

#: client-go's JitterFactor for a candidate's retries (wait.JitterUntil): retry_period x [1, 1.2)
JITTER = 0.2


class Elector(LeaseCandidate):
    """Runs the election for one replica; see the module docstring.

    `on_leading(ready)` is told when this replica starts (True) or stops (False) answering as the
    leader; `on_lost()` when a term ended without a hand-over (the process should end)."""

    def __init__(
        self,
        settings: LeaderElection,
        lock: LeaseLock,
        identity: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        role: PodRole | None = None,
    ) -> None:
        self.settings = settings
        self.lock = lock
        self.identity = identity
        self.gate = LeaderGate(settings.renew_deadline, clock)
        self._clock = clock
        self._observed: ObservedLease | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()  # the Lease changed (seen by the watch), or stopping
        self._observed_lock = threading.Lock()
        self._handing_over = threading.Event()
        self._thread: threading.Thread | None = None
        self._provider: Any = None
        self._on_leading: Callable[[bool], None] = lambda ready: None
        self._on_lost: Callable[[], None] = lambda: None
        self._relay: HandOverRelay | None = None
        #: this replica's gRPC address, published on the Lease while it holds it (handover.py)
        self.address = ""
        self._ready = False
        self.role = role
        #: the pod is labelled a standby (or there is no pod to label): it may report ready
        self._labelled = role is None
        self._last_warm = clock()
        self._rng = random.Random()
        self.lost = False
        self._problem: str | None = None  # the last failure of a call on the Lease, as logged
        SINCE_RENEW.set_function(self.gate.last_renew_age)
        LEADER.set(0)

    @property
    def ready(self) -> bool:
        """Ready for a Service: the leader, taken over, within its term."""
        return self._ready and self.gate.valid()

    @property
    def replica_ready(self) -> bool:
        """Ready as a replica, leader or warm standby (what a readiness probe asks, /readyz/replica):
        its pod carries the label of what it is, and its term did not end for good."""
        return self._labelled and not self.lost and not self._handing_over.is_set()

    def view(self) -> dict[str, Any]:
        """The election as the status page shows it: who this replica is, who leads, which term."""
        with self._observed_lock:
            observed = self._observed
        return {
            "identity": self.identity,
            "leading": self.ready,
            "holder": observed.holder if observed is not None else "",
            "term": observed.transitions if observed is not None else None,
            "lease": f"{self.lock.namespace}/{self.lock.name}",
        }

    def start(
        self,
        provider: Any,
        on_leading: Callable[[bool], None],
        on_lost: Callable[[], None],
        *,
        address: str = "",
        relay: HandOverRelay | None = None,
    ) -> None:
        """Run the election. `address` is published on the Lease while this replica holds it; a
        replica handing over forwards the calls that still reach it (`relay`) to the address its
        successor published."""
        self._provider, self._on_leading, self._on_lost = provider, on_leading, on_lost
        self.address, self._relay = address, relay
        log.info(
            "leader election: %s is a candidate for Lease %s/%s (lease %gs, renew deadline %gs, retry %gs)",
            self.identity,
            self.lock.namespace,
            self.lock.name,
            self.settings.lease_duration,
            self.settings.renew_deadline,
            self.settings.retry_period,
        )
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)
        self._thread.start()
        threading.Thread(target=self._watch, name="lease-watch", daemon=True).start()

    # ------------------------------------------------------------------ the loop
    def _run(self) -> None:
        while not self._stop.is_set():
            started = self._clock()
            if not self._labelled and self.role is not None:
                # a standby's label before readiness: a restart in the old leader's pod drops its label
                self._labelled = self.role.mark(False)
            try:
                won = self._try_acquire_or_renew(started)
                self._note_problem(None)
            except Exception as exc:  # the API server unreachable, a timeout, a 409: next period
                self._note_problem(exc)
                won = False
            if self._stop.is_set():
                return
            if self.gate.term >= 0:  # leader, now or before: renew, or end for good
                if not self.gate.valid():
                    self._lose("the Lease was not renewed within the renew deadline")
                    return
                if won:
                    self.gate.renewed(started)
            elif won:
                self._became_leader(started)
            else:
                self._stay_warm()
            self._pause()

    def _pause(self) -> None:
        """The leader renews every retry period. A candidate tries again after a jittered retry
        period, at the moment the Lease it watches expires if that comes first, or at once when the
        watch sees the Lease change (a release)."""
        period = self.settings.retry_period
        if self.gate.term >= 0:
            self._stop.wait(period)
            return
        timeout = period * (1 + JITTER * self._rng.random())
        with self._observed_lock:
            observed = self._observed
        if observed is not None and observed.holder:
            timeout = min(timeout, max(0.0, observed.at + observed.duration - self._clock()) + 0.01)
        self._wake.wait(timeout)
        self._wake.clear()

    def _became_leader(self, started: float) -> None:
        term = self._observed.transitions if self._observed is not None else 0
        self.gate.begin(term, started)
        self.gate.holder = self.identity
        LEADER.set(1)
        TRANSITIONS.inc()
        log.info(
            "leader election: %s became the leader (term %d of Lease %s/%s); taking over",
            self.identity,
            term,
            self.lock.namespace,
            self.lock.name,
        )
        threading.Thread(target=self._take_over, args=(term,), name="take-over", daemon=True).start()

    def _take_over(self, term: int) -> None:
        """Journal and a fresh listing before answering; retried while the term lasts."""
        while self.gate.valid() and self.gate.term == term and not self._stop.is_set():
            try:
                self._provider.take_over()
            except Unavailable as exc:
                log.warning("leader election: taking over failed, retrying: %s", exc.message)
                self._stop.wait(self.settings.retry_period)
                continue
            if not self.gate.valid():
                return
            if self.role is not None and not self.role.mark(True):  # the Service selects this label
                self._stop.wait(self.settings.retry_period)
                continue
            self.gate.answer(True)
            self._ready = True
            self._on_leading(True)
            log.info("leader election: %s answers as the leader (term %d)", self.identity, term)
            self._confirm(term)
            return

    def _confirm(self, term: int) -> None:
        """Renew once now: a leader handing over watches for this renewal of its successor."""
        started = self._clock()
        try:
            if self._try_acquire_or_renew(started) and self.gate.term == term:
                self.gate.renewed(started)
        except Exception as exc:
            log.warning("leader election: renewing after the takeover: %s", api_problem(exc))

    def _lose(self, why: str) -> None:
        term = self.gate.term
        self.gate.end()
        self._ready = False
        self.lost = True
        LEADER.set(0)
        TRANSITIONS.inc()
        self._on_leading(False)
        if self.role is not None:
            self.role.mark(False)  # at once, rather than when the process has ended
        log.error(
            "leader election: %s lost the leadership (term %d): %s; no cloud write is made on this term "
            "again, and the process ends so that a restart rejoins as a standby",
            self.identity,
            term,
            why,
        )
        self._on_lost()

    def _stay_warm(self) -> None:
        """A standby lists the cloud now and then (read only), so a takeover answers from memory."""
        if self._clock() - self._last_warm < self.settings.standby_refresh or self._provider is None:
            return
        self._last_warm = self._clock()
        try:
            self._provider.refresh()
        except Unavailable as exc:
            log.warning("standby listing failed: %s", exc.message)

    # ------------------------------------------------------------------ hand-over
    def hand_over(self, deadline: float) -> None:
        """At shutdown: stop writing, let the writes in flight finish, release the Lease, and wait
        (until the monotonic `deadline`) for a successor to answer. A standby just stops."""
        was_leader = self.gate.valid()
        if was_leader:
            if self._relay is not None:
                self._relay.hold(deadline)  # no write RPC starts here any more; the running ones finish
            # the background writes already accepted go out on this term (it is still renewed):
            # without a shared journal, the successor could not know of those still queued
            wait_idle = getattr(self._provider, "wait_idle", None)
            if wait_idle is not None:
                wait_idle(max(0.0, (deadline - self._clock()) / 3))
        self._handing_over.set()
        self.gate.handing_over = True
        term = self.gate.term
        self.gate.end()
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(max(0.0, min(deadline - self._clock(), self.lock.timeout * 2)))
        if not was_leader:
            return
        quiesce = getattr(self._provider, "quiesce", None)
        if quiesce is not None:
            quiesce(max(0.0, (deadline - self._clock()) / 2))
        released = self._release()
        LEADER.set(0)
        TRANSITIONS.inc()
        if released:
            log.info(
                "leader election: %s released the Lease (term %d) and waits for the next leader",
                self.identity,
                term,
            )
            self._wait_for_successor(deadline)
        if self._relay is not None:
            self._relay.refuse("no successor answered within the grace period")  # unless forwarding
        self._ready = False
        self._on_leading(False)

    def _release(self) -> bool:
        from kubernetes import client

        try:
            lease = self.lock.get()
            if lease is None or (lease.spec.holder_identity or "") != self.identity:
                return False
            now = datetime.now(UTC)
            lease.spec = client.V1LeaseSpec(
                holder_identity=None,
                lease_duration_seconds=1,
                acquire_time=now,
                renew_time=now,
                lease_transitions=lease.spec.lease_transitions,
            )
            annotations = dict(lease.metadata.annotations or {})
            annotations.pop(ADDRESS_ANNOTATION, None)
            lease.metadata.annotations = annotations
            self.lock.replace(lease)
            return True
        except Exception as exc:
            log.warning(
                "leader election: releasing the Lease failed (%s); it expires instead", api_problem(exc)
            )
            return False

    def _wait_for_successor(self, deadline: float) -> None:
        """Until another holder has renewed after acquiring (it has taken over and answers)."""
        while self._clock() < deadline:
            try:
                lease = self.lock.get()
            except Exception:
                lease = None
            spec = lease.spec if lease is not None else None
            if (
                spec is not None
                and spec.holder_identity
                and spec.holder_identity != self.identity
                and spec.renew_time != spec.acquire_time
            ):
                log.info("leader election: %s answers as the leader now", spec.holder_identity)
                self._forward_to(lease)
                # reads are still answered here while a Service moves its endpoint to the successor
                linger = min(self.settings.handover_linger, max(0.0, deadline - self._clock()))
                time.sleep(linger)
                return
            time.sleep(0.05)
        log.warning("leader election: no successor answered within the grace period")

    def _forward_to(self, lease: Any) -> None:
        """The calls still reaching this replica go to the successor from now on (handover.py)."""
        if self._relay is None:
            return
        address = (lease.metadata.annotations or {}).get(ADDRESS_ANNOTATION, "")
        if address:
            self._relay.forward_to(address)
        else:
            self._relay.refuse("the next leader published no address")


def build_elector(settings: LeaderElection) -> Elector:
    namespace = default_namespace(settings.resource_namespace)
    api = coordination_api(settings.kubeconfig)
    timeout = max(1.0, settings.retry_period)
    return Elector(
        settings,
        LeaseLock(api, namespace, settings.resource_name, timeout),
        default_identity(settings.identity),
        role=build_pod_role(settings.kubeconfig),
    )


__all__ = ["LEADER", "SINCE_RENEW", "TRANSITIONS", "Elector", "LeaderGate", "LeaseLock", "build_elector"]
