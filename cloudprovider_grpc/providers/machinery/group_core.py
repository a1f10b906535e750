"""The core every part of the shared machinery stands on: the group set, the node index, the lock
and the state version.

`GroupCore` holds what the read side (group_reads.py), the status (group_status.py), the
refresh cycle (group_refresh.py) and the write rules (group_write_rules.py) all use, so each of those
is a mixin over it and `GroupProvider` (base.py) is their sum:

- **Construction**: the driver, the write gate, the background `JobRunner`, the journal that
  `--state-file` keeps, and the tunables (TTLs, attempts, back-off).
- **The hooks each shape fills in** (`_new_state`, `_list`, `_apply`, `_target`, the journal's
  three), declared here so that every mixin can call them.
- **The group set, possibly dynamic.** `_sync_groups` adopts the driver's current groups; the
  `NodeGroups` answer object stays the same while the set is unchanged (the service reuses its
  encoded answer). A group discovered later resumes its journal entry when it appears.
- **The node index** (providerID or placeholder -> group, machine name -> group) that
  NodeGroupForNode answers from.
- **The state version** (`state_version`, `watch_state`): every change of group state happens inside
  `_changing(...)`, which holds the lock and, on the way out, compares what the cached read answers
  are made of (targets, the node index, the group set and options, the driver's fallback version)
  with what was last published, and increments the version only if something differs. So a
  steady-state Refresh leaves it alone, and a change cannot forget to bump it as long as it is made
  inside `_changing`.
"""

from __future__ import annotations

import abc
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Generic

from cloudprovider_grpc.core.errors import NotFound
from cloudprovider_grpc.k8s.template import NodeTemplate
from cloudprovider_grpc.providers.contract import CloudProvider, NodeGroup
from cloudprovider_grpc.providers.driver import DriverBase, GroupConfig
from cloudprovider_grpc.providers.group_options import GroupOptions
from cloudprovider_grpc.providers.machinery.activity import Activity
from cloudprovider_grpc.providers.machinery.gate import WriteGate
from cloudprovider_grpc.providers.machinery.group_state import ListingSpan, S
from cloudprovider_grpc.providers.machinery.jobs import JobRunner
from cloudprovider_grpc.providers.machinery.journal import Journal

#: one logger for the whole shape
log = logging.getLogger(__name__)


class GroupCore(CloudProvider, Generic[S]):
    """The state and bookkeeping every part of `GroupProvider` shares; see the module docstring."""

    def __init__(
        self,
        driver: DriverBase,
        *,
        concurrency: int = 10,
        clock: Callable[[], float] | None = None,
        inline_workers: bool = False,
        state_file: Path | None = None,
        catalog_ttl: float = 300.0,
        failed_ttl: float = 600.0,
        tombstone_ttl: float = 3600.0,
        max_attempts: int = 8,
        max_backoff: float = 60.0,
        seed: int | None = None,
        on_stop: Callable[[], None] | None = None,
        gate: WriteGate | None = None,
        group_options: GroupOptions | None = None,
    ) -> None:
        self.driver = driver
        #: the configuration's per-group options, applied to every group the driver offers
        self._group_options = group_options or GroupOptions()
        #: the configured group names no listing offered, as last warned about
        self._unmatched_options: list[str] = []
        #: every cloud write passes it (gate.py): open, dry run, or leader-only
        self._gate = gate or WriteGate()
        self.name = driver.name
        self._clock = clock or time.monotonic
        self._lock = threading.RLock()
        #: failures, back-offs and occurrences for the status page and Kubernetes Events (activity.py)
        self.activity = Activity()
        self._jobs = JobRunner(
            concurrency=concurrency,
            clock=self._clock,
            inline=inline_workers,
            name=driver.name,
            fence=self._gate.fence(),
        )
        self._journal = Journal(state_file, backend=driver.name, shape=self.shape)
        self._catalog_ttl = catalog_ttl
        self._failed_ttl = failed_ttl
        self._tombstone_ttl = tombstone_ttl
        self._max_attempts = max_attempts
        self._max_backoff = max_backoff
        self._rng = random.Random(seed) if seed is not None or inline_workers else random.Random()
        self._on_stop = on_stop
        self._catalog_loaded_at: float | None = None
        self._groups: dict[str, S] = {}
        self._node_groups: tuple[NodeGroup, ...] = ()
        self._group_objs: dict[str, NodeGroup] = {}
        self._templates: dict[str, NodeTemplate | None] = {}
        self._by_id: dict[str, str] = {}  # providerID or placeholder -> group
        self._by_name: dict[str, str] = {}  # machine name -> group
        self._started = False
        # the listing clock ticks when a listing starts and when it returns; a listing applies to a
        # group only if it started after the one last applied there had returned (ListingSpan)
        self._listing_clock = 0
        self._groups_listed_up_to = 0
        # the state version and what it was last published for (see _publish)
        self._version = 0
        self._watchers: list[Callable[[int], None]] = []
        self._index_changed = False
        self._seen_groups: tuple[NodeGroup, ...] = ()
        self._seen_options: dict[str, Mapping[str, object]] = {}
        self._seen_targets: dict[str, int] = {}
        self._seen_fallbacks: object = None
        self._published: dict[str, str] = {}  # group -> the name its info series carries (metrics)
        self._sync_groups(driver.groups())
        # journal entries per group, applied when the group exists: at start, or when a group the
        # cloud offers only later is discovered (kept in the journal meanwhile)
        self._unrestored: dict[str, Any] = self._parse_journal(self._journal.load())
        with self._lock:
            self._publish()

    #: "machines" or "pools": recorded in the journal so a file from the other shape is refused
    shape: str = "base"

    # ------------------------------------------------------------------ hooks for the shapes
    @abc.abstractmethod
    def _new_state(self, config: GroupConfig) -> S:
        """A fresh per-group state of the shape's kind."""

    def _placeholder_ids(self, state: S) -> Iterable[str]:
        """Ids of instances CA sees that the cloud does not list (yet)."""
        return ()

    @abc.abstractmethod
    def _list(self) -> Any:
        """The shape's one listing call (raise Unavailable when nothing could be listed)."""

    def _configs(self, listing: Any) -> Sequence[GroupConfig]:
        """The group set after a listing (drivers that discover groups update it while listing)."""
        return self.driver.groups()

    @abc.abstractmethod
    def _apply(self, listing: Any, started: float, span: ListingSpan) -> None:
        """Fold a listing into the group states (under the lock), skipping every group for which
        `_takes_listing(state, span)` is false."""

    @staticmethod
    def _takes_listing(state: S, span: ListingSpan) -> bool:
        """Whether this listing surely shows the cloud later than the one last applied to the group
        (if so, it becomes the last one applied). Any other listing leaves the group as it is."""
        if not span.follows(state.listed_up_to):
            return False
        state.listed_up_to = span.returned
        return True

    def _expire(self, now: float) -> None:
        for state in self._groups.values():
            state.tombstones = {k: v for k, v in state.tombstones.items() if now - v < self._tombstone_ttl}

    def _journal_doc(self) -> dict[str, Any]:
        """Per group id, what must survive a restart (only groups that have something)."""
        return {}

    def _parse_journal(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Validate a loaded journal into per-group entries (raise the journal's ConfigError)."""
        return {}

    def _restore(self, state: S, entry: Any) -> None:
        """Resume what a group's journal entry holds (its operations are queued again)."""

    def _operations(self, state: S, now: float) -> list[dict[str, Any]]:
        """The shape's own operations in flight (creations, size pushes), each with its age."""
        return []

    @abc.abstractmethod
    def _target(self, state: S) -> int:
        """The group's target size as CA sees it."""

    # ------------------------------------------------------------------ the group set
    def _sync_groups(self, configs: Sequence[GroupConfig]) -> None:
        """Adopt the driver's current group set, with the configuration's per-group options applied;
        keep the NodeGroups object while it is unchanged."""
        seen: set[str] = set()
        for cfg in map(self._group_options.applied, configs):
            if cfg.id in seen:
                raise ValueError(f"node group {cfg.id!r} is configured twice")
            seen.add(cfg.id)
            state = self._groups.get(cfg.id)
            if state is None:
                state = self._groups[cfg.id] = self._new_state(cfg)
                if self._node_groups:  # not the initial set
                    log.info(
                        "node group %s discovered (min %d, max %d)",
                        self._shown(cfg.id),
                        cfg.min_size,
                        cfg.max_size,
                    )
                if self._started and cfg.id in self._unrestored and self._gate.may_persist():
                    self._restore(state, self._unrestored.pop(cfg.id))
            elif state.config != cfg:
                state.config = cfg
                self._templates.pop(cfg.id, None)
        for gone in set(self._groups) - seen:
            log.info("node group %s is no longer offered by the cloud; forgetting it", self._shown(gone))
            del self._groups[gone]
            self._templates.pop(gone, None)
        groups = tuple(
            NodeGroup(c.id, c.min_size, c.max_size, c.debug or c.name)
            for c in (s.config for s in self._groups.values())
        )
        if groups != self._node_groups:
            self._node_groups = groups
            self._group_objs = {g.id: g for g in groups}

    def group_configs(self) -> list[GroupConfig]:
        """The current group set as served: bounds, names and options, the configuration's applied
        (`check-config` matches `group_options` against it)."""
        with self._lock:
            return [s.config for s in self._groups.values()]

    def _warn_unmatched_options(self) -> None:
        """After a listing: one warning each time the set of configured groups that match none
        changes (a group may be discovered later, so it is no error to `serve`)."""
        with self._lock:
            unmatched = self._group_options.unmatched(s.config for s in self._groups.values())
            changed, self._unmatched_options = unmatched != self._unmatched_options, unmatched
        if changed and unmatched:
            log.warning(
                "group_options names %s, but the cloud offers no node group with that id or name; "
                "its options apply to none",
                ", ".join(repr(ref) for ref in unmatched),
            )

    def _shown(self, gid: str) -> str:
        """A group as log lines show it: its id, and the cloud's name for it when that differs (a
        Vultr or Exoscale pool's id is a UUID; its label is what the user recognises)."""
        state = self._groups.get(gid)
        name = state.config.name if state is not None else ""
        return f"{gid} ({name})" if name and name != gid else gid

    def resolve_group(self, ref: str) -> str:
        with self._lock:
            if ref in self._groups:
                return ref
            named = sorted(gid for gid, s in self._groups.items() if s.config.name == ref)
        if len(named) > 1:
            raise NotFound(f"node group name {ref!r} is shared by {', '.join(named)}; use the id")
        return named[0] if named else ref

    def _group(self, group_id: str) -> S:
        state = self._groups.get(group_id)
        if state is None:
            raise NotFound(f"node group {group_id!r} not found")
        return state

    # ------------------------------------------------------------------ the node index
    def _reindex(self) -> None:
        by_id: dict[str, str] = {}
        by_name: dict[str, str] = {}
        for gid, state in self._groups.items():
            for m in state.machines.values():
                by_id[m.id] = gid
                if m.name:
                    by_name[m.name] = gid
            for pid in self._placeholder_ids(state):
                by_id.setdefault(pid, gid)
        if by_id != self._by_id or by_name != self._by_name:
            self._index_changed = True
        self._by_id, self._by_name = by_id, by_name

    def _index_node(self, node_id: str, group_id: str, name: str = "") -> None:
        """Point NodeGroupForNode at `group_id` for this id (and name) between two reindexes."""
        if self._by_id.get(node_id) != group_id:
            self._by_id[node_id] = group_id
            self._index_changed = True
        if name and self._by_name.get(name) != group_id:
            self._by_name[name] = group_id
            self._index_changed = True

    def _unindex_node(self, node_id: str) -> None:
        if self._by_id.pop(node_id, None) is not None:
            self._index_changed = True

    # ------------------------------------------------------------------ state version
    def state_version(self) -> int:
        return self._version

    def watch_state(self, callback: Callable[[int], None]) -> None:
        """Callbacks run with the provider lock held, right after the version moved: so they
        arrive in version order whichever thread made the change, and a reader that takes the lock
        already sees the change. They must not block (the lock stalls every RPC meanwhile)."""
        with self._lock:
            self._watchers.append(callback)

    @contextmanager
    def _changing(self, *group_ids: str) -> Iterator[None]:
        """Hold the lock for a change of group state and publish it on the way out (also when the
        change raises half-way). With group ids, only those groups' targets are compared (write
        RPCs and background steps touch one group); without, everything (start, Refresh)."""
        with self._lock:
            try:
                yield
            finally:
                self._publish(group_ids or None)

    def _publish(self, group_ids: Iterable[str] | None = None) -> None:
        """Increment the version if anything the versioned answers are made of differs from what
        it was last published for; call with the lock held, before releasing it (a change must
        never be visible under the version of the state before it for longer than the lock
        hold). Comparisons are dict/tuple equalities, which run at C speed while nothing changed."""
        changed = self._index_changed
        self._index_changed = False
        fallbacks = self.driver.fallback_version()
        if fallbacks != self._seen_fallbacks:
            self._seen_fallbacks, changed = fallbacks, True
        if group_ids is None:
            if self._node_groups is not self._seen_groups:  # replaced only when it differs
                self._seen_groups, changed = self._node_groups, True
            options = {gid: s.config.options for gid, s in self._groups.items()}
            if options != self._seen_options:
                self._seen_options, changed = options, True
            targets = {gid: self._target(s) for gid, s in self._groups.items()}
            if targets != self._seen_targets:
                self._seen_targets, changed = targets, True
        else:
            for gid in group_ids:
                state = self._groups.get(gid)
                if state is None:
                    continue  # a group forgotten meanwhile: only a listing forgets one (full publish)
                target = self._target(state)
                if self._seen_targets.get(gid) != target:
                    self._seen_targets[gid], changed = target, True
        if changed:
            self._version += 1
            for callback in self._watchers:
                try:
                    callback(self._version)
                except Exception:  # a watcher's bug must not fail the change that was made
                    log.exception("state version watcher failed")

    # ------------------------------------------------------------------ the journal
    def _save_journal(self) -> None:
        if self._journal.enabled and self._gate.may_persist():
            groups = {**self._unrestored, **self._journal_doc()}
            # asked again right before the file is replaced: the term may end while it is written
            self._journal.save({"groups": groups}, still=self._gate.may_persist)
