"""The clock a backend runs on: one object for every timer a backend and its emulator keep.

A backend reads time and waits in several places: its API emulator's boot, deletion and operation
timers, the emulator's per-client rate limit, the HTTP client's retry back-off and its own
client-side rate limit, the machinery's job scheduler and deletion bookkeeping. Every one of them
takes this object (through `ProviderContext.clock`), so a simulation can run all of them on its
virtual clock at once instead of some on virtual and some on wall time, which gave results that
depended on how fast the machine ran.

`WallClock` is real time. A virtual clock (the simulator's) answers `now()` from simulated time,
and `sleep()` does not wait but advances simulated time by the amount, so a retry back-off or a
rate-limit wait costs simulated seconds, deterministically. `rng()` is the randomness of timer
jitter: seeded on a virtual clock, so back-off delays repeat run after run.
"""

from __future__ import annotations

import random
import time
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """What a backend needs of time."""

    #: True when time is simulated (waits advance it instead of passing)
    virtual: bool

    def now(self) -> float:
        """Epoch seconds."""
        ...

    def monotonic(self) -> float:
        """Seconds for measuring intervals (never goes backwards)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait `seconds` on this clock."""
        ...

    def rng(self) -> random.Random:
        """A source of jitter for timers on this clock."""
        ...


class WallClock:
    """Real time: `time.time`, `time.monotonic`, `time.sleep`, unseeded jitter."""

    virtual = False

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def rng(self) -> random.Random:
        return random.Random()


WALL = WallClock()


def or_wall(clock: Clock | None) -> Clock:
    """`clock`, or real time when none was given."""
    return clock if clock is not None else WALL
