"""JobRunner: bounded concurrency, rescheduled retries, inline determinism."""

from __future__ import annotations

import threading
import time

from cloudprovider_grpc.providers.jobs import JobRunner
from tests.support.servers import ManualClock


def test_threaded_runner_never_exceeds_its_concurrency() -> None:
    runner = JobRunner(concurrency=3)
    runner.start()
    lock = threading.Lock()
    running = peak = done = 0

    def job() -> None:
        nonlocal running, peak, done
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.02)
        with lock:
            running -= 1
            done += 1

    for _ in range(12):
        runner.submit(job)
    assert runner.wait_idle(10)
    runner.stop()
    assert done == 12 and peak == 3


def test_retries_are_rescheduled_not_slept() -> None:
    runner = JobRunner(concurrency=1)
    runner.start()
    attempts: list[float] = []
    other = threading.Event()

    def flaky() -> float | None:
        attempts.append(time.monotonic())
        return 0.2 if len(attempts) < 3 else None

    runner.submit(flaky)
    runner.submit(other.set)
    # the single worker is free while `flaky` waits for its retry, so the other job runs meanwhile
    assert other.wait(0.15)
    assert runner.wait_idle(5)
    runner.stop()
    assert len(attempts) == 3
    assert attempts[2] - attempts[0] >= 0.4


def test_inline_runner_runs_due_jobs_in_submission_order() -> None:
    clock = ManualClock()
    runner = JobRunner(inline=True, clock=clock)
    order: list[str] = []
    runner.submit(lambda: order.append("a"))
    runner.submit(lambda: order.append("late"), delay=30)
    runner.submit(lambda: order.append("b"))
    assert order == []  # nothing runs until asked
    assert runner.run_due() == 2 and order == ["a", "b"]
    clock.advance(30)
    runner.run_due()
    assert order == ["a", "b", "late"]
    assert runner.pending() == 0
