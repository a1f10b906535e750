"""What the machine shape tracks per group, and the core its parts share.

A machine group's target is derived, never stored: the machines the cloud lists for it (not being
deleted) plus the creations we have accepted and not yet seen appear (`MachineGroupState.target`).
Each accepted creation is a `Creation` with a token the driver stores on the machine, and a
placeholder id `<prefix>pending-<token>` CA sees while it is on its way.

`MachineCore` fills in the shared machinery's hooks for this shape and declares the two background
submissions (machines/workers.py) that the listing fold (machines/listing.py) and the
write RPCs (provider.py) both start.
"""

from __future__ import annotations

import abc
import enum
from dataclasses import dataclass, field
from typing import Any

from cloudprovider_grpc.core.clouderrors import InstanceError
from cloudprovider_grpc.providers.driver import GroupConfig, Machine, MachineDriver
from cloudprovider_grpc.providers.machinery.base import GroupProvider
from cloudprovider_grpc.providers.machinery.group_state import GroupStateBase


class CreationStatus(enum.Enum):
    """Where an accepted creation stands. Listed in the order DecreaseTargetSize cancels them: the
    least likely to deliver a machine first."""

    FAILED = 0  # gave up; shown with errorInfo until CA deletes it or failed_ttl passes
    QUEUED = 1  # not sent yet
    UNKNOWN = 2  # an attempt may have reached the cloud: look the token up (or adopt) before more
    INFLIGHT = 3  # an attempt is running


@dataclass
class Creation:
    """A machine CA asked for that the cloud does not list yet."""

    token: str
    group: str
    status: CreationStatus = CreationStatus.QUEUED
    attempts: int = 0
    error: InstanceError | None = None
    failed_at: float = 0.0
    unknown_since: float | None = None  # untokened clouds: when the outcome became unknown
    sent: bool = False  # a create request may have left (journaled before it goes out)
    cancelled: bool = False  # CA no longer wants it; delete the machine if the inflight create lands
    accepted_at: float = 0.0  # provider clock when IncreaseSize accepted it (the status shows its age)
    # tokened clouds: provider clock before which a listing may not show a machine whose create is
    # still on its way (see MachineCore's `create_settle`), so a look-up would create it twice
    look_up_from: float = 0.0


@dataclass
class MachineGroupState(GroupStateBase):
    """A machine group: what both shapes track, plus the creations on their way."""

    created_locally: dict[str, float] = field(default_factory=dict)  # id -> clock when our create returned
    creations: dict[str, Creation] = field(default_factory=dict)  # token -> creation, in order accepted
    resolved: dict[str, str] = field(default_factory=dict)  # creation token -> id of the machine it became

    def target(self) -> int:
        wanted = sum(1 for c in self.creations.values() if not c.cancelled) if self.creations else 0
        return self.live_count() + wanted


class MachineCore(GroupProvider[MachineGroupState]):
    """The machine shape's state hooks and placeholders; see the module docstring."""

    driver: MachineDriver

    def __init__(self, driver: MachineDriver, *, create_settle: float = 0.0, **kwargs: Any) -> None:
        super().__init__(driver, **kwargs)
        #: how long a create request that may have reached the cloud is given to show in its
        #: listings before its token is looked up: a request the cloud received can still be carried
        #: out after our client stopped waiting (a timeout, or a leader killed mid-request), and a
        #: look-up that comes too early creates the machine a second time. The backends set it to
        #: their client's connect plus read timeout: at least as long as we let a request take.
        self._create_settle = create_settle

    # ------------------------------------------------------------------ base hooks
    def _new_state(self, config: GroupConfig) -> MachineGroupState:
        return MachineGroupState(config)

    def _target(self, state: MachineGroupState) -> int:
        return state.target()

    def _placeholder_ids(self, state: MachineGroupState) -> list[str]:
        ids = [self._placeholder(c.token) for c in state.creations.values() if not c.cancelled]
        # CA may still hold the placeholder of a machine that now exists
        ids.extend(self._placeholder(token) for token in state.resolved)
        return ids

    def _placeholder(self, token: str) -> str:
        return f"{self.driver.id_prefix}pending-{token}"

    @abc.abstractmethod
    def _submit_create(self, creation: Creation) -> None:
        """Queue the creation's next attempt in the background."""

    @abc.abstractmethod
    def _submit_delete(self, machine: Machine) -> None:
        """Queue the machine's deletion in the background."""
