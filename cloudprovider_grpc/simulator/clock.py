"""The virtual clock: simulated seconds since the scenario start, as epoch time for providers.

The in-process sim backend takes `clock=VirtualClock.now`, so its provisioning and deletion delays
elapse in virtual time and a day runs in seconds, deterministically.
"""

from __future__ import annotations

from datetime import datetime, timedelta


class VirtualClock:
    def __init__(self, start: datetime) -> None:
        self.start = start
        self._epoch = start.timestamp()
        self.t = 0.0

    def now(self) -> float:
        """Epoch seconds (the `clock` callable providers take)."""
        return self._epoch + self.t

    def set(self, t: float) -> None:
        if t < self.t:
            raise ValueError("virtual time never goes backwards")
        self.t = t

    def datetime(self, t: float | None = None) -> datetime:
        return self.start + timedelta(seconds=self.t if t is None else t)
