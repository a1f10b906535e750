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

    def _take_or_wait_time(self, urgent: bool = True) -> float:
        """Take a token and return 0, or return how long to wait before one is available.

        A non-urgent caller leaves tokens to urgent callers that are waiting."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
            self._stamp = now
            if self._tokens >= 1.0 and (urgent or self._urgent_waiting == 0):
                self._tokens -= 1.0
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
                wait = self._take_or_wait_time(urgent)
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
