"""The rules every write RPC of both shapes obeys, before it records anything.

CA's NodeGroup rules (an increase is positive and stays within max, a decrease is negative and
deletes no existing machine, DeleteNodes never goes below min and names only the group's own nodes),
the write gate's two questions (may this write RPC be recorded; may this cloud call be made now:
gate.py) and the retry back-off the shapes' background jobs wait between attempts.

`WriteRules` is handed the group core (for the groups, their targets, the node index and the gate)
and owns the back-off's random source; the shapes' write RPCs and background jobs are handed it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Generic

from cloudprovider_grpc.core.errors import FailedPrecondition, InvalidArgument
from cloudprovider_grpc.providers.contract import NodeRef
from cloudprovider_grpc.providers.machinery.gate import Write
from cloudprovider_grpc.providers.machinery.group_core import GroupCore
from cloudprovider_grpc.providers.machinery.group_state import S


class WriteRules(Generic[S]):
    """Checks and gate questions for the write side (the checks are called under the lock)."""

    def __init__(self, core: GroupCore[S], seed: int | None = None) -> None:
        self._core = core
        self._rng = random.Random(seed)

    def check_increase(self, group_id: str, delta: int) -> tuple[S, int]:
        """The group and its target, if raising it by `delta` is allowed (CA's NodeGroup rules)."""
        if delta <= 0:
            raise InvalidArgument(f"size increase must be positive, got delta={delta}")
        state = self._core.group(group_id)
        target, cap = self._core.target(state), state.config.max_size
        if target + delta > cap:
            raise FailedPrecondition(
                f"increasing node group {group_id!r} by {delta} would make its size {target + delta}, "
                f"above its max size {cap} (current target {target})"
            )
        return state, target

    def check_decrease(self, group_id: str, delta: int) -> tuple[S, int]:
        """The group and its target, if lowering it by `-delta` deletes no existing machine."""
        if delta >= 0:
            raise InvalidArgument(f"size decrease must be negative, got delta={delta}")
        state = self._core.group(group_id)
        target = self._core.target(state)
        existing = len(state.live_machines())
        if target + delta < existing:
            raise FailedPrecondition(
                f"decreasing node group {group_id!r} by {-delta} would make its target {target + delta}, "
                f"below the {existing} machines it already has (current target {target}); "
                "use DeleteNodes to remove machines"
            )
        return state, target

    def check_min(self, state: S, reducing: int) -> None:
        target = self._core.target(state)
        if reducing and target - reducing < state.config.min_size:
            raise FailedPrecondition(
                f"deleting {reducing} node(s) from node group {state.config.id!r} would make its size "
                f"{target - reducing}, below its min size {state.config.min_size}; nothing was deleted"
            )

    def not_in_group(self, group_id: str, node: NodeRef) -> InvalidArgument:
        label = node.name or node.provider_id
        other = self._core.index.by_id.get(node.provider_id) if node.provider_id else None
        where = f"; it belongs to node group {other!r}" if other and other != group_id else ""
        return InvalidArgument(
            f"node {label!r} (providerID {node.provider_id!r}) does not belong to node group "
            f"{group_id!r}{where}; nothing was deleted"
        )

    def backoff(self, attempt: int) -> float:
        """Exponential backoff with full jitter (AWS architecture blog, 'Exponential Backoff And Jitter')."""
        return self._rng.uniform(0, min(self._core.tunables.max_backoff, 0.5 * 2**attempt))

    def admit(self, kind: str, group: str, count: int, machines: Sequence[str] = ()) -> None:
        """Ask the write gate whether a write RPC may be recorded (it raises if not)."""
        core = self._core
        core.gate.admit(Write(core.name, kind, core.shown(group), count, tuple(machines)))

    def allowed(self, kind: str, group: str, count: int, machines: Sequence[str] = ()) -> bool:
        """Ask the write gate, right before a driver call that changes the cloud, whether it may
        be made now; a refused job is dropped (the gate has logged why)."""
        core = self._core
        return core.gate.allows(Write(core.name, kind, core.shown(group), count, tuple(machines)))
