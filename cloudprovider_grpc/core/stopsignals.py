"""SIGTERM and SIGINT received by the main thread without a lock: the signal's number arrives as a
byte on a socket the main thread waits on.

Why not a handler that sets a `threading.Event`: CPython runs a Python signal handler in the main
thread between two bytecodes, which can be inside `Event.wait` right after it re-took the event's
(non-reentrant) lock. `Event.set()` in the handler then waits for that lock forever and the process
never shuts down (seen under load: a SIGTERM left the server running until it was killed; a loop
sending one SIGUSR1 at a time to `while not ev.wait(...)` deadlocks within a few thousand signals).
`signal.set_wakeup_fd` is written by the interpreter's C-level handler, which takes no lock, and
the Python handler installed beside it does nothing.
"""

from __future__ import annotations

import select
import signal
import socket
import threading
from types import FrameType, TracebackType

#: the signals that ask a command to stop
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _ignore(_signum: int, _frame: FrameType | None) -> None:
    """Installed so that the signal no longer kills the process; the wakeup socket carries it."""


class StopSignals:
    """A context (main thread only) in which SIGTERM and SIGINT are received by `wait` and
    `received`; on exit the previous handlers and wakeup fd are restored."""

    def __init__(self, signals: tuple[signal.Signals, ...] = STOP_SIGNALS) -> None:
        self.signals = signals
        #: the stop signals received so far, in order
        self.seen: list[signal.Signals] = []
        self._previous: dict[signal.Signals, object] = {}
        self._old_fd = -1
        self._reader, self._writer = socket.socketpair()
        for end in (self._reader, self._writer):
            end.setblocking(False)

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("StopSignals works in the main thread only")
        self._old_fd = signal.set_wakeup_fd(self._writer.fileno(), warn_on_full_buffer=False)
        for sig in self.signals:
            self._previous[sig] = signal.signal(sig, _ignore)
        return self

    def __exit__(
        self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None
    ) -> None:
        for sig, old in self._previous.items():
            signal.signal(sig, old)  # type: ignore[arg-type]  # what signal.signal returned
        signal.set_wakeup_fd(self._old_fd)
        self._reader.close()
        self._writer.close()

    def wait(self, timeout: float | None) -> signal.Signals | None:
        """The first stop signal received, waiting at most `timeout` seconds for one (None:
        forever); None when none came. Once one came, every call returns it at once."""
        while not self.seen:
            ready, _, _ = select.select([self._reader], [], [], timeout)
            if not ready:
                return None
            try:
                data = self._reader.recv(64)
            except BlockingIOError:
                continue
            self.seen.extend(signal.Signals(b) for b in data if b in self.signals)
        return self.seen[0]
