"""The state version: one number that moves whenever an answer the service caches may have changed.

Every change of group state happens inside `changing(...)`, which holds the provider lock and, on
the way out, compares what the cached read answers are made of (targets, the node index, the group
set and options, the driver's fallback version) with what was last published, and increments the
version only if something differs. So a steady-state Refresh leaves it alone, and a change cannot
forget to bump it as long as it is made inside `changing`.

Lock rules: `StateVersion` shares the group core's re-entrant lock (group_core.py) rather than
having its own, because the comparison must see the change and nothing after it: `publish` runs
with that lock held, before it is released, and the watchers run inside the same hold (so they
arrive in version order whichever thread made the change). `value()` reads one int and needs no lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager

from cloudprovider_grpc.providers.contract import NodeGroup
from cloudprovider_grpc.providers.machinery.node_index import NodeIndex

log = logging.getLogger(__name__)


class StateVersion:
    """The version and what it was last published for. It reads the group core's state through the
    functions it is handed: the group set as served, each group's options, the targets (of the
    named groups, or of all), and the driver's fallback version."""

    def __init__(
        self,
        lock: threading.RLock,
        index: NodeIndex,
        *,
        node_groups: Callable[[], tuple[NodeGroup, ...]],
        options: Callable[[], dict[str, Mapping[str, object]]],
        targets: Callable[[Iterable[str] | None], dict[str, int]],
        fallbacks: Callable[[], object],
    ) -> None:
        self._lock = lock
        self._index = index
        self._node_groups = node_groups
        self._options = options
        self._targets = targets
        self._fallbacks = fallbacks
        self._version = 0
        self._watchers: list[Callable[[int], None]] = []
        self._seen_groups: tuple[NodeGroup, ...] = ()
        self._seen_options: dict[str, Mapping[str, object]] = {}
        self._seen_targets: dict[str, int] = {}
        self._seen_fallbacks: object = None

    def value(self) -> int:
        return self._version

    def watch(self, callback: Callable[[int], None]) -> None:
        """Callbacks run with the provider lock held, right after the version moved: so they
        arrive in version order whichever thread made the change, and a reader that takes the lock
        already sees the change. They must not block (the lock stalls every RPC meanwhile)."""
        with self._lock:
            self._watchers.append(callback)

    @contextmanager
    def changing(self, *group_ids: str) -> Iterator[None]:
        """Hold the lock for a change of group state and publish it on the way out (also when the
        change raises half-way). With group ids, only those groups' targets are compared (write
        RPCs and background steps touch one group); without, everything (start, Refresh)."""
        with self._lock:
            try:
                yield
            finally:
                self.publish(group_ids or None)

    def publish(self, group_ids: Iterable[str] | None = None) -> None:
        """Increment the version if anything the versioned answers are made of differs from what
        it was last published for; call with the lock held, before releasing it (a change must
        never be visible under the version of the state before it for longer than the lock
        hold). Comparisons are dict/tuple equalities, which run at C speed while nothing changed."""
        changed = self._index.take_moved()
        fallbacks = self._fallbacks()
        if fallbacks != self._seen_fallbacks:
            self._seen_fallbacks, changed = fallbacks, True
        if group_ids is None:
            groups = self._node_groups()
            if groups is not self._seen_groups:  # replaced only when it differs
                self._seen_groups, changed = groups, True
            options = self._options()
            if options != self._seen_options:
                self._seen_options, changed = options, True
            targets = self._targets(None)
            if targets != self._seen_targets:
                self._seen_targets, changed = targets, True
        else:
            # a group forgotten meanwhile has no target: only a listing forgets one (full publish)
            for gid, target in self._targets(group_ids).items():
                if self._seen_targets.get(gid) != target:
                    self._seen_targets[gid], changed = target, True
        if changed:
            self._version += 1
            for callback in self._watchers:
                try:
                    callback(self._version)
                except Exception:  # a watcher's bug must not fail the change that was made
                    log.exception("state version watcher failed")
