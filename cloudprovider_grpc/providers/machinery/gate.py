"""The write gate: the one place every cloud write of the shared machinery passes through.

Both shapes consult the gate at two points:

- `admit(write)` in a write RPC (IncreaseSize, DecreaseTargetSize, DeleteNodes), after the request
  was found valid and before anything is recorded: a policy that refuses raises a `ProviderError`,
  so CA sees a precise status and the machinery's state stays what the cloud says;
- `allows(write)` in a background job, right before the driver call that changes the cloud
  (create, delete, set size, remove): a policy that refuses returns False and the job is dropped.
  This second check catches what no RPC asked for (a duplicate deleted after a listing, a journal
  resumed) and, for the leader policy, a term that ran out while the job was queued.

`may_persist()` says whether the `--state-file` journal may be written (and, at start, resumed):
only a process that may write the cloud may write the journal that describes its writes.

Policies: `OpenGate` (the default: everything passes), `DryRunGate` (`serve --dry-run`: each write
logged as one line and counted, none made) and, for `serve --leader-elect`, the leader gate in
cloudprovider_grpc/ha/term_gate.py (only the holder of a valid Lease term writes).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import Counter

from cloudprovider_grpc.core.errors import FailedPrecondition

log = logging.getLogger(__name__)

DRY_RUN_WRITES = Counter(
    "cloudprovider_grpc_dry_run_writes",
    "Cloud writes a --dry-run server would have made and did not, by backend and kind.",
    ["backend", "kind"],
)


@dataclass(frozen=True)
class Write:
    """One change to the cloud, described for a log line: `kind` is create, delete, set_size or
    remove; `count` is how many machines (or, for set_size, the size); `machines` names them where
    known; `group` is the group as log lines show it (its id, and the cloud's name when it differs)."""

    backend: str
    kind: str
    group: str
    count: int
    machines: tuple[str, ...] = ()

    def describe(self) -> str:
        plural = "machine" if self.count == 1 else "machines"
        named = f" ({', '.join(self.machines)})" if self.machines else ""
        if self.kind == "create":
            return f"create {self.count} {plural} in {self.group}"
        if self.kind == "set_size":
            return f"set the size of {self.group} to {self.count}"
        if self.kind == "cancel":
            return f"cancel {self.count} requested {plural} in {self.group}"
        return f"{self.kind} {self.count} {plural}{named} in {self.group}"


class WriteGate:
    """The open gate, and the interface every policy implements."""

    name = "open"

    def admit(self, write: Write) -> None:
        """Raise a ProviderError to refuse a write RPC; return to let it be recorded."""
        return None

    def allows(self, write: Write) -> bool:
        """True to let the background job send `write` to the cloud now."""
        return True

    def may_persist(self) -> bool:
        """True when the journal may be written (and resumed at start)."""
        return True

    def fence(self) -> Callable[[], bool] | None:
        """The check every background request is made under (http/fence.py), or None: a policy
        whose answer can change while a job runs (a leader's term) returns it."""
        return None


OpenGate = WriteGate


class DryRunGate(WriteGate):
    """`serve --dry-run`: the cloud is listed as usual, never written.

    A write RPC is answered FAILED_PRECONDITION with the would-be write in its message, after one
    log line and one count. Refusing (rather than accepting and pretending) keeps the server's
    state equal to what the cloud lists, so every answer CA gets stays true; CA writes our message
    into its own log next to the decision it made, and backs the group off as after any failed
    scale-up, so the same decision is not repeated every loop."""

    name = "dry-run"

    def admit(self, write: Write) -> None:
        self._record(write)
        raise FailedPrecondition(
            f"dry run: would {write.describe()}; nothing was written to the cloud (--dry-run)"
        )

    def allows(self, write: Write) -> bool:
        self._record(write)
        return False

    def may_persist(self) -> bool:
        return False

    @staticmethod
    def _record(write: Write) -> None:
        DRY_RUN_WRITES.labels(write.backend, write.kind).inc()
        log.info("dry run: would %s", write.describe())


__all__ = ["DRY_RUN_WRITES", "DryRunGate", "OpenGate", "Write", "WriteGate"]
