"""Kubernetes Event correlation as client-go's EventCorrelator does it, so a failing cloud cannot
flood the API server with Events.

cluster-autoscaler records its Events through client-go's `tools/record` broadcaster (core/v1
Events, source component "cluster-autoscaler": cluster-autoscaler utils/kubernetes/factory.go),
whose correlator (client-go tools/record/events_cache.go) does three things in this order, and so
do we, with the same numbers:

1. **Aggregation**: events that differ only in their message (same object, type and reason) seen
   10 times within 600 s become one Event whose message starts "(combined from similar events): ".
2. **Counting**: an Event identical to one already written (object, type, reason, message) bumps
   the written Event's `count` and `lastTimestamp` with a patch instead of creating another.
3. **Spam filter**: a token bucket per source and object, burst 25, refilled at 1 per 300 s
   (defaultSpamBurst, defaultSpamQPS); an Event without a token is not written (its count still
   grows, so the next write that gets through carries the true count). Over any 10 minutes one
   object therefore gets at most 25 + 2 writes.

The caches are LRU-bounded at 4,096 entries (maxLruCacheEntries). The clock is injectable so a
ten-minute failure loop is tested in a moment.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

#: client-go tools/record/events_cache.go
LRU_ENTRIES = 4096
AGGREGATE_MAX_EVENTS = 10
AGGREGATE_INTERVAL = 600.0
SPAM_BURST = 25
SPAM_QPS = 1.0 / 300.0
AGGREGATE_PREFIX = "(combined from similar events): "

K = TypeVar("K")
V = TypeVar("V")


class _Lru(Generic[K, V]):
    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def pop(self, key: K) -> None:
        self._items.pop(key, None)

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self._size:
            self._items.popitem(last=False)


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The involved object: what `kubectl describe` shows the Event under."""

    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = "v1"


@dataclass(frozen=True, slots=True)
class Event:
    """One Event to record, as the correlator sees it."""

    involved: ObjectRef
    reason: str
    message: str
    type: str = "Normal"  # or "Warning"


@dataclass(frozen=True, slots=True)
class Write:
    """What to send: create a new Event named `name`, or (`patch`) bump the existing one."""

    event: Event
    name: str
    count: int
    first: float  # wall clock of the first occurrence
    last: float
    patch: bool
    key: tuple[object, ...] = ()


@dataclass
class _Bucket:
    tokens: float
    at: float


@dataclass
class _Aggregate:
    messages: set[str]
    last: float


@dataclass
class _Logged:
    name: str
    count: int
    first: float


class Correlator:
    """client-go's EventCorrelator over our `Event`; not thread-safe (one reporter thread uses it)."""

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        *,
        burst: int = SPAM_BURST,
        qps: float = SPAM_QPS,
        aggregate_max: int = AGGREGATE_MAX_EVENTS,
        aggregate_interval: float = AGGREGATE_INTERVAL,
    ) -> None:
        self._clock = clock
        self._burst, self._qps = burst, qps
        self._aggregate_max, self._aggregate_interval = aggregate_max, aggregate_interval
        self._buckets: _Lru[ObjectRef, _Bucket] = _Lru(LRU_ENTRIES)
        self._aggregates: _Lru[tuple[ObjectRef, str, str], _Aggregate] = _Lru(LRU_ENTRIES)
        self._logged: _Lru[tuple[object, ...], _Logged] = _Lru(LRU_ENTRIES)
        self.skipped = 0  # occurrences the spam filter held back
        self._seq = 0

    def correlate(self, event: Event) -> Write | None:
        """The write this occurrence calls for, or None when the spam filter holds it back."""
        now = self._clock()
        event, key = self._aggregate(event, now)
        logged = self._logged.get(key)
        if logged is not None:
            logged.count += 1
            write = Write(event, logged.name, logged.count, logged.first, now, True, key)
        else:
            # unique as client-go's "<object>.<nanoseconds in hex>", also when two share a nanosecond
            self._seq += 1
            name = f"{event.involved.name}.{time.time_ns() + self._seq:x}"
            self._logged.put(key, _Logged(name, 1, now))
            write = Write(event, name, 1, now, now, False, key)
        if not self._take_token(event.involved, now):
            self.skipped += 1
            return None
        return write

    def forget(self, write: Write) -> None:
        """The Event was not written (the API refused it): the next occurrence creates it anew."""
        logged = self._logged.get(write.key)
        if logged is not None and logged.name == write.name:
            self._logged.pop(write.key)

    def _aggregate(self, event: Event, now: float) -> tuple[Event, tuple[object, ...]]:
        group = (event.involved, event.type, event.reason)
        record = self._aggregates.get(group)
        if record is None or now - record.last > self._aggregate_interval:
            record = _Aggregate(set(), now)
        record.messages.add(event.message)
        record.last = now
        self._aggregates.put(group, record)
        if len(record.messages) < self._aggregate_max:
            return event, (event.involved, event.type, event.reason, event.message)
        record.messages.pop()  # the set stays at the threshold, as client-go's PopAny
        combined = replace(event, message=AGGREGATE_PREFIX + event.message)
        return combined, group

    def _take_token(self, involved: ObjectRef, now: float) -> bool:
        bucket = self._buckets.get(involved)
        if bucket is None:
            bucket = _Bucket(float(self._burst), now)
        bucket.tokens = min(float(self._burst), bucket.tokens + max(now - bucket.at, 0.0) * self._qps)
        bucket.at = now
        self._buckets.put(involved, bucket)
        if bucket.tokens < 1.0 - 1e-9:  # refills are summed: allow their rounding
            return False
        bucket.tokens -= 1.0
        return True


__all__ = ["Correlator", "Event", "ObjectRef", "Write"]
