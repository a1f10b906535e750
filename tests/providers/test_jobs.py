"""JobRunner: bounded concurrency, rescheduled retries, inline determinism."""

from __future__ import annotations

import threading

import pytest

from cloudprovider_grpc.providers.machinery.jobs import JobRunner
from tests.support.servers import ManualClock

pytestmark = pytest.mark.unit


def test_threaded_runner_never_exceeds_its_concurrency() -> None:
    runner = JobRunner(concurrency=3)
    runner.start()
    cond = threading.Condition()
    release = threading.Event()
    running = peak = done = 0

    def job() -> None:
        nonlocal running, peak, done
        with cond:
            running += 1
            peak = max(peak, running)
            cond.notify_all()
        release.wait(10)  # every job holds its worker until the test lets go
        with cond:
            running -= 1
            done += 1

    for _ in range(12):
        runner.submit(job)
    with cond:
        assert cond.wait_for(lambda: running == 3, timeout=10)
    release.set()
    assert runner.wait_idle(10)
    runner.stop()
    assert done == 12 and peak == 3


def test_retries_are_rescheduled_not_slept() -> None:
    clock = ManualClock()
    runner = JobRunner(concurrency=1, clock=clock)
    runner.start()
    attempts: list[float] = []
    attempted = [threading.Event() for _ in range(3)]
    other = threading.Event()

    def flaky() -> float | None:
        attempts.append(clock())
        attempted[len(attempts) - 1].set()
        return 30.0 if len(attempts) < 3 else None

    runner.submit(flaky)
    assert attempted[0].wait(10)
    runner.submit(other.set)
    # the single worker is free while `flaky` waits for its retry (30 s of virtual time that never
    # pass on their own), so the other job runs meanwhile
    assert other.wait(10)
    assert len(attempts) == 1
    clock.advance(30)
    assert attempted[1].wait(10)
    clock.advance(30)
    assert attempted[2].wait(10)
    assert runner.wait_idle(5)
    runner.stop()
    assert attempts == [1000.0, 1030.0, 1060.0]


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
