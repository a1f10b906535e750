"""Client-side rate limiting: a token bucket shared by every thread using one API client.

Clouds publish per-client request rates (Cherry Servers: about 4 requests/s per IP, see
api.cherryservers.com/doc); staying under them is cheaper than being throttled and retrying. The
bucket refills continuously and `acquire()` blocks until a token is available.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBucket:
    """`rate` tokens per second, at most `burst` saved up. `acquire()` waits for one token."""

    def __init__(
        self,
        rate: float,
        burst: float = 1.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        starve_after: float = 2.0,
    ) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        if burst < 1:
            raise ValueError("burst must be at least 1")
        self.rate = float(rate)
        self.burst = float(burst)
        self._clock = clock
        self._sleep = sleep
        self._tokens = self.burst
        self._stamp = clock()
        self._lock = threading.Lock()
        self._urgent_waiting = 0
        #: a non-urgent caller that has waited this long may take one token even while urgent
        #: callers wait, at most one such token per this interval
        self.starve_after = starve_after
        self._last_aged_grant = -float("inf")

    def _take_or_wait_time(self, urgent: bool = True, aged: bool = False) -> float:
        """Take a token and return 0, or return how long to wait before one is available.

        A non-urgent caller leaves tokens to urgent callers that are waiting, except that one that
        has waited `starve_after` seconds (`aged`) gets one token per `starve_after`: urgent
        demand at the full rate (Refreshes in a tight loop) would otherwise starve background
        operations for good (seen: Exoscale operation polls behind Refresh listings), while a
        Refresh loses at most one token per interval."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
            self._stamp = now
            if self._tokens >= 1.0 and (urgent or self._urgent_waiting == 0):
                self._tokens -= 1.0
                return 0.0
            if self._tokens >= 1.0 and aged and now - self._last_aged_grant >= self.starve_after:
                self._tokens -= 1.0
                self._last_aged_grant = now
                return 0.0
            return max((1.0 - self._tokens) / self.rate, 1.0 / self.rate if self._tokens >= 1.0 else 0.0)

    def try_acquire(self) -> bool:
        """Take a token if one is available now; never blocks (servers use this to throttle)."""
        return self._take_or_wait_time() <= 0

    def acquire(self, urgent: bool = False) -> float:
        """Block until a token is taken; return the time spent waiting (seconds).

        `urgent` callers go first: Refresh's listing must not queue behind a burst of background
        creates, or it would overrun CA's gRPC deadline."""
        waited = 0.0
        registered = False
        try:
            while True:
                wait = self._take_or_wait_time(urgent, aged=waited >= self.starve_after)
                if wait <= 0:
                    return waited
                if urgent and not registered:
                    with self._lock:
                        self._urgent_waiting += 1
                    registered = True
                self._sleep(wait)
                waited += wait
        finally:
            if registered:
                with self._lock:
                    self._urgent_waiting -= 1
