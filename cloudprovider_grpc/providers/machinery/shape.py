"""What a shape of the shared machinery hands the group core: the few things the two shapes do
differently (machines/shape.py, pools/shape.py).

The core (group_core.py) and the parts that stand on it call these and nothing else of a shape: a
fresh per-group state, a group's target and placeholders, the one listing call and how a listing
is folded in and what then expires, the operations the status shows, and the journal's three
(what survives a restart, how a loaded file is read, how one group's entry resumes).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from cloudprovider_grpc.providers.driver import GroupConfig
from cloudprovider_grpc.providers.machinery.group_state import ListingSpan, S


class Shape(Protocol[S]):
    """The shape-specific hooks the group core calls."""

    def new_state(self, config: GroupConfig) -> S:
        """A fresh per-group state of the shape's kind."""

    def target(self, state: S) -> int:
        """The group's target size as CA sees it."""

    def placeholder_ids(self, state: S) -> Iterable[str]:
        """Ids of instances CA sees that the cloud does not list (yet)."""

    def listing(self) -> Any:
        """The shape's one listing call (raise Unavailable when nothing could be listed)."""

    def configs(self, listing: Any) -> Sequence[GroupConfig]:
        """The group set after a listing (drivers that discover groups update it while listing)."""

    def apply(self, listing: Any, started: float, span: ListingSpan) -> None:
        """Fold a listing into the group states (under the lock), skipping every group for which
        `takes_listing(state, span)` is false."""

    def expire(self, now: float) -> None:
        """Drop what the shape keeps only for a while (failures shown, outcomes awaited)."""

    def operations(self, state: S, now: float) -> list[dict[str, Any]]:
        """The shape's own operations in flight (creations, size pushes), each with its age."""

    def journal_doc(self) -> dict[str, Any]:
        """Per group id, what must survive a restart (only groups that have something)."""

    def parse_journal(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Validate a loaded journal into per-group entries (raise the journal's ConfigError)."""

    def restore(self, state: S, entry: Any) -> None:
        """Resume what a group's journal entry holds (its operations are queued again)."""
