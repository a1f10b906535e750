"""Which node group a node belongs to, as NodeGroupForNode answers it: by providerID (or a
placeholder id CA holds for an instance on its way) and by machine name.

Lock rule: `NodeIndex` has no lock of its own; every call is made with the group core's lock held
(group_core.py), the same hold that changes the group states the index is built from. It records
whether it moved since the state version last looked (`take_moved`), so a change of membership
cannot be published under the old version.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from cloudprovider_grpc.providers.machinery.group_state import S


class NodeIndex:
    """providerID or placeholder -> group, machine name -> group."""

    def __init__(self) -> None:
        self.by_id: dict[str, str] = {}
        self.by_name: dict[str, str] = {}
        self._moved = False

    def rebuild(self, groups: Mapping[str, S], placeholder_ids: Callable[[S], Iterable[str]]) -> None:
        """Index every listed machine and every placeholder afresh (start, Refresh)."""
        by_id: dict[str, str] = {}
        by_name: dict[str, str] = {}
        for gid, state in groups.items():
            for m in state.machines.values():
                by_id[m.id] = gid
                if m.name:
                    by_name[m.name] = gid
            for pid in placeholder_ids(state):
                by_id.setdefault(pid, gid)
        if by_id != self.by_id or by_name != self.by_name:
            self._moved = True
        self.by_id, self.by_name = by_id, by_name

    def add(self, node_id: str, group_id: str, name: str = "") -> None:
        """Point NodeGroupForNode at `group_id` for this id (and name) between two rebuilds."""
        if self.by_id.get(node_id) != group_id:
            self.by_id[node_id] = group_id
            self._moved = True
        if name and self.by_name.get(name) != group_id:
            self.by_name[name] = group_id
            self._moved = True

    def remove(self, node_id: str) -> None:
        if self.by_id.pop(node_id, None) is not None:
            self._moved = True

    def take_moved(self) -> bool:
        """Whether the index changed since the last call (the state version asks on each publish)."""
        moved, self._moved = self._moved, False
        return moved
