"""Event correlation as client-go's EventCorrelator (cloudprovider_grpc/observability/events.py): counting,
aggregation and the per-object token bucket, on an injected clock."""

from __future__ import annotations

import pytest

from cloudprovider_grpc.observability.events import (
    AGGREGATE_PREFIX,
    SPAM_BURST,
    Correlator,
    Event,
    ObjectRef,
)
from tests.support.servers import ManualClock

pytestmark = pytest.mark.unit

STATUS = ObjectRef("ConfigMap", "cloudprovider-grpc-status", "kube-system", "uid-1")


def event(message: str = "pool1: out of stock", reason: str = "StockOut", obj: ObjectRef = STATUS) -> Event:
    return Event(obj, reason, message, "Warning")


def test_an_identical_event_bumps_the_count_of_the_first_instead_of_a_new_one() -> None:
    correlator = Correlator(ManualClock())
    first = correlator.correlate(event())
    second = correlator.correlate(event())
    assert first is not None and second is not None
    assert (first.patch, first.count) == (False, 1)
    assert (second.patch, second.count, second.name) == (True, 2, first.name)
    other = correlator.correlate(event(reason="MachineCreateFailed"))
    assert other is not None and not other.patch and other.name != first.name


def test_ten_messages_of_one_reason_within_ten_minutes_are_combined_into_one_event() -> None:
    clock = ManualClock()
    correlator = Correlator(clock)
    writes = [correlator.correlate(event(f"machine {i} failed")) for i in range(12)]
    assert all(w is not None for w in writes)
    plain = [w for w in writes if w is not None and not w.event.message.startswith(AGGREGATE_PREFIX)]
    combined = [w for w in writes if w is not None and w.event.message.startswith(AGGREGATE_PREFIX)]
    assert len(plain) == 9  # client-go: aggregation from the 10th distinct message on
    assert [w.count for w in combined] == [1, 2, 3]
    assert len({w.name for w in combined}) == 1
    # a similar event after the 600 s interval starts afresh
    clock.advance(601)
    later = correlator.correlate(event("machine 99 failed"))
    assert later is not None and not later.event.message.startswith(AGGREGATE_PREFIX)


def test_the_token_bucket_allows_a_burst_of_25_then_one_event_per_five_minutes_per_object() -> None:
    clock = ManualClock()
    correlator = Correlator(clock)
    allowed = 0
    for _ in range(10 * 60 + 1):  # one failure a second for ten minutes (both ends included)
        if correlator.correlate(event()) is not None:
            allowed += 1
        clock.advance(1.0)
    assert allowed == SPAM_BURST + 2  # 600 s at 1/300 per second refills two tokens
    assert correlator.skipped == 601 - allowed
    # the count kept growing while writes were held back: the next write carries the true count
    clock.advance(300)
    write = correlator.correlate(event())
    assert write is not None and write.patch and write.count == 602


def test_each_object_has_its_own_bucket() -> None:
    correlator = Correlator(ManualClock())
    node = ObjectRef("Node", "worker-1")
    for _ in range(SPAM_BURST):
        assert correlator.correlate(event()) is not None
    assert correlator.correlate(event()) is None
    assert correlator.correlate(event(reason="MachineDeleted", obj=node)) is not None


def test_a_forgotten_write_is_created_anew_next_time() -> None:
    correlator = Correlator(ManualClock())
    first = correlator.correlate(event())
    assert first is not None
    correlator.forget(first)
    again = correlator.correlate(event())
    assert again is not None and not again.patch and again.count == 1
