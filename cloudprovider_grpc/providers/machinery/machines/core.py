"""What the machine shape tracks per group.

A machine group's target is derived, never stored: the machines the cloud lists for it (not being
deleted) plus the creations we have accepted and not yet seen appear (`MachineGroupState.target`).
Each accepted creation is a `Creation` with a token the driver stores on the machine, and a
placeholder id `<prefix>pending-<token>` CA sees while it is on its way.

The state is plain data; the parts that change it (the workers in workers.py, the listing fold in
listing.py, the shape's hooks in shape.py and the write RPCs in provider.py) are each handed the
group core that holds it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from cloudprovider_grpc.core.clouderrors import InstanceError
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
    # still on its way (see MachineWorkers' `create_settle`), so a look-up would create it twice
    look_up_from: float = 0.0


@dataclass
class MachineGroupState(GroupStateBase):
    """A machine group: what both shapes track, plus the creations on their way."""

    created_locally: dict[str, float] = field(default_factory=dict)  # id -> clock when our create returned
    creations: dict[str, Creation] = field(default_factory=dict)  # token -> creation, in order accepted
    resolved: dict[str, str] = field(default_factory=dict)  # creation token -> id of the machine it became
    #: untokened clouds, after a restart: the machines (ids and handles) the journal says were known
    #: when it was last written, so that the first listing can tell a machine a create sent before
    #: the restart made from one that was there before (machines/listing.py); None once listed
    baseline: set[str] | None = None
    #: untokened clouds: ids of machines no listing could adopt yet because a create of ours was in
    #: flight (the machine may be that create's); they stay newcomers until claimed or adopted
    unadopted: set[str] = field(default_factory=set)

    def target(self) -> int:
        wanted = sum(1 for c in self.creations.values() if not c.cancelled) if self.creations else 0
        return self.live_count() + wanted


def placeholder_id(id_prefix: str, token: str) -> str:
    """The id CA sees for a creation on its way: `<prefix>pending-<token>`."""
    return f"{id_prefix}pending-{token}"
