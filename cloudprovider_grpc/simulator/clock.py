"""The virtual clock: simulated seconds since the scenario start, as epoch time for providers.

One object for the whole run (see cloudprovider_grpc/core/clock.py): the loop sets it before every CA
loop, and the backend, its HTTP client and its API emulator read it and wait on it, so a node
boots in the cloud's own boot time of simulated seconds and a day runs in seconds,
deterministically. A wait inside a backend (a retry back-off, a rate-limit token) advances
simulated time; the total is reported (`waited`), since it means CA's loop took longer.
"""

from __future__ import annotations

import math
import random
from datetime import datetime, timedelta


class VirtualClock:
    virtual = True

    def __init__(self, start: datetime, seed: int = 0) -> None:
        self.start = start
        self._epoch = start.timestamp()
        self.t = 0.0
        #: simulated seconds backends spent waiting (back-offs, rate limits) over the run
        self.waited = 0.0
        self._seed = seed

    def now(self) -> float:
        """Epoch seconds (the `clock` callable providers take)."""
        return self._epoch + self.t

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        """A wait inside a backend: simulated time moves on by `seconds` (no wall time passes)."""
        if seconds > 0:
            # at least one representable step: a wait shorter than the float spacing at `t` (a
            # token bucket's last fraction of a token) must still move time, or its waiter spins
            after = max(self.t + seconds, math.nextafter(self.t, math.inf))
            self.waited += after - self.t
            self.t = after

    def rng(self) -> random.Random:
        return random.Random(self._seed)

    def set(self, t: float) -> None:
        """Move to loop time `t`. A backend that waited past `t` keeps the clock where it is: the
        loop starts late, as CA's would behind a slow call."""
        self.t = max(self.t, t)

    def datetime(self, t: float | None = None) -> datetime:
        return self.start + timedelta(seconds=self.t if t is None else t)
