"""The leadership term as the write gate of a leader-elected replica (see election.py for the
election and providers/machinery/gate.py for what a write gate is): writes pass only within a valid term,
which lasts until `renew deadline` after the start of the last successful renewal, on this
process's monotonic clock."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from cloudprovider_grpc.core.errors import Unavailable
from cloudprovider_grpc.providers.machinery.gate import Write, WriteGate

log = logging.getLogger(__name__)


class LeaderGate(WriteGate):
    """The write gate of a leader-elected replica: writes pass only within a valid term."""

    name = "leader"

    def __init__(self, renew_deadline: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._deadline = renew_deadline
        self._clock = clock
        self._lock = threading.Lock()
        self._renewed_at: float | None = None  # clock at the start of the last successful renewal
        self._ended = False
        self._answering = False  # taken over: write RPCs may be recorded
        self.term = -1
        self.holder = ""  # the current leader's identity, as last seen (for messages)
        self.handing_over = False
        self._refusals_logged: set[int] = set()

    # ---- the elector's side
    def begin(self, term: int, started: float) -> None:
        with self._lock:
            self.term, self._renewed_at, self._ended = term, started, False

    def answer(self, answering: bool) -> None:
        """Write RPCs are recorded only once the takeover (journal, listing) is done: one recorded
        before would be saved over the journal the previous leader left."""
        with self._lock:
            self._answering = answering

    def renewed(self, started: float) -> None:
        with self._lock:
            if self._renewed_at is not None and not self._ended:
                self._renewed_at = max(self._renewed_at, started)

    def end(self) -> None:
        """The term is over for good: nothing is written on it again."""
        with self._lock:
            self._ended = True
            self._answering = False

    def valid(self) -> bool:
        with self._lock:
            return self._valid()

    def _valid(self) -> bool:
        return (
            self._renewed_at is not None
            and not self._ended
            and self._clock() < self._renewed_at + self._deadline
        )

    def deadline(self) -> float | None:
        with self._lock:
            return None if self._renewed_at is None else self._renewed_at + self._deadline

    def last_renew_age(self) -> float:
        with self._lock:
            return (
                float("nan")
                if not self._valid() or self._renewed_at is None
                else self._clock() - self._renewed_at
            )

    # ---- the machinery's side
    def admit(self, write: Write) -> None:
        with self._lock:
            valid = self._valid()
            answering = self._answering and valid
            handing_over = self.handing_over
        if handing_over:
            raise Unavailable(
                "this replica is handing the leadership over to the next leader (shutting down); "
                "nothing was recorded: call again"
            )
        if not answering:
            if self.term >= 0 and valid:
                raise Unavailable(
                    "this replica is not the leader yet (taking over); nothing was recorded: call again"
                )
            if self.term >= 0:
                raise Unavailable(
                    "this replica is not the leader any more (its term ran out: the Lease was not renewed "
                    "within the renew deadline); nothing was recorded: call the leader's Service"
                )
            leader = f" (the leader is {self.holder})" if self.holder else ""
            raise Unavailable(
                f"this replica is not the leader{leader}; nothing was recorded: call the leader's Service"
            )

    def allows(self, write: Write) -> bool:
        with self._lock:
            if self._valid():
                return True
            term = self.term
            first = term not in self._refusals_logged
            self._refusals_logged.add(term)
        if first:  # once per term: a backlog of dropped jobs is one line, not hundreds
            log.warning(
                "leader election: not writing (%s and everything after it): the leadership term %d is over",
                write.describe(),
                term,
            )
        return False

    def may_persist(self) -> bool:
        return self.valid()

    def fence(self) -> Callable[[], bool] | None:
        return self.valid


__all__ = ["LeaderGate"]
