"""Admission of RPCs: the gate every call over the network passes, and what shutdown closes.

Why a gate of our own rather than grpcio's graceful stop: grpcio stops accepting calls by closing
the port, which cuts a call already in transit off as CANCELLED, and the caller cannot tell whether
it ran. Behind this gate the port stays open while shutdown waits: a call arriving late is answered
UNAVAILABLE and never executed, so the caller knows nothing happened (server.ServerHandle.stop).
"""

from __future__ import annotations

import threading
import time

from cloudprovider_grpc.core.errors import Unavailable


class ShuttingDown(Unavailable):
    """An RPC that arrived after shutdown began: answered at once and not executed, so the caller
    knows nothing happened (a CANCELLED call leaves it guessing)."""


class Gate:
    """Admission of RPCs. Open while serving; `close()` at shutdown makes new RPCs answer UNAVAILABLE
    without running, and `wait_idle()` lets shutdown wait for the admitted ones to finish."""

    def __init__(self) -> None:
        # over a plain Lock (the default is an RLock): every RPC enters and leaves, and it is cheaper
        self._cond = threading.Condition(threading.Lock())
        self._open = True
        self._active = 0
        self._last_arrival = 0.0

    def enter(self) -> bool:
        with self._cond:
            self._last_arrival = time.monotonic()
            if self._open:
                self._active += 1
            return self._open

    def leave(self) -> None:
        with self._cond:
            self._active -= 1
            if self._active == 0:
                self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._open = False

    @property
    def active(self) -> int:
        return self._active

    def wait_idle(self, timeout: float) -> bool:
        """True when no admitted RPC is running any more; False when `timeout` ran out first."""
        with self._cond:
            return self._cond.wait_for(lambda: self._active == 0, timeout=max(timeout, 0.0))

    def wait_quiet(self, quiet: float, deadline: float) -> bool:
        """Wait until no admitted RPC runs and none arrived for `quiet` seconds (clients told
        UNAVAILABLE have gone away), or until the monotonic `deadline`. Closing the port while calls
        still arrive would cut those off as CANCELLED, which leaves the caller guessing."""
        while True:
            now = time.monotonic()
            if now >= deadline:
                return False
            if not self.wait_idle(deadline - now):
                return False
            since = time.monotonic() - self._last_arrival
            if since >= quiet:
                return True
            time.sleep(min(quiet - since, max(deadline - time.monotonic(), 0.0)))
