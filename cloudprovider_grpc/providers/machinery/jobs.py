"""A small scheduler for background cloud operations with bounded concurrency.

A job is a callable that makes one attempt and returns None when it is finished, or the number of
seconds after which it wants another attempt (backoff). Retries are therefore rescheduled rather
than slept in a worker thread, so a throttled cloud never ties up the pool.

Two modes share the same queue:
- threaded (production): `concurrency` worker threads run due jobs as they become due;
- inline (simulation, deterministic tests): nothing runs until `run_due()` is called, which runs
  every due job in submission order on the caller's thread. MachineProvider calls it at the start
  of Refresh, so the order of cloud operations depends only on the order of RPCs.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

from cloudprovider_grpc.http.fence import fenced
from cloudprovider_grpc.observability import tracing

log = logging.getLogger(__name__)

Job = Callable[[], float | None]


class JobRunner:
    def __init__(
        self,
        *,
        concurrency: int = 10,
        clock: Callable[[], float] | None = None,
        inline: bool = False,
        name: str = "jobs",
        fence: Callable[[], bool] | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self._clock = clock or time.monotonic
        self._inline = inline
        self._name = name
        self._fence = fence  # every attempt runs inside it (http/fence.py): None for no fence
        self._concurrency = concurrency
        self._heap: list[tuple[float, int, Job]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._running = 0
        self._stopping = False
        self._threads: list[threading.Thread] = []

    # ---- submission ----
    def submit(self, job: Job, delay: float = 0.0, what: str = "") -> None:
        """Queue `job`; `what` names it in traces (each attempt is a child of the span current now)."""
        self._push(tracing.carry(job, what or self._name, self._name), delay)

    def _push(self, job: Job, delay: float) -> None:
        with self._cond:
            heapq.heappush(self._heap, (self._clock() + max(0.0, delay), next(self._seq), job))
            self._cond.notify()

    def pending(self) -> int:
        """Jobs queued or running."""
        with self._cond:
            return len(self._heap) + self._running

    @property
    def inline(self) -> bool:
        """Whether jobs run only when `run_due()` is called (simulation, deterministic tests)."""
        return self._inline

    # ---- inline mode ----
    def run_due(self) -> int:
        """Run every job that is due now, including retries that become due meanwhile with zero delay.
        Returns the number of attempts made. A no-op in threaded mode, where the workers run them."""
        if not self._inline:
            return 0
        attempts = 0
        while True:
            with self._cond:
                if not self._heap or self._heap[0][0] > self._clock():
                    return attempts
                _, _, job = heapq.heappop(self._heap)
            attempts += 1
            self._attempt(job)

    # ---- threaded mode ----
    def start(self) -> None:
        if self._inline or self._threads:
            return
        for i in range(self._concurrency):
            t = threading.Thread(target=self._worker, name=f"{self._name}-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop taking jobs; wait up to timeout for running attempts. Queued jobs stay queued (a
        state journal, if configured, still has them for the next start)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self._threads.clear()

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Block until no job is queued or running (tests and benchmarks)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._inline:
                self.run_due()
            if self.pending() == 0:
                return True
            time.sleep(0.005)
        return False

    def _worker(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stopping:
                        return
                    now = self._clock()
                    if self._heap and self._heap[0][0] <= now:
                        _, _, job = heapq.heappop(self._heap)
                        self._running += 1
                        break
                    wait = (self._heap[0][0] - now) if self._heap else None
                    # wall-clock wait even with an injected clock: bounded so a virtual clock advances
                    self._cond.wait(timeout=min(wait, 0.5) if wait is not None else 0.5)
            try:
                self._attempt(job)
            finally:
                with self._cond:
                    self._running -= 1

    def _attempt(self, job: Job) -> None:
        try:
            with fenced(self._fence):
                retry_after = job()
        except Exception:  # a job bug must never kill a worker; the job itself records outcomes
            log.exception("background job failed unexpectedly", extra={"runner": self._name})
            return
        if retry_after is not None:
            self._push(job, retry_after)
