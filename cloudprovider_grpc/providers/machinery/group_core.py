"""The core every part of the shared machinery is handed: the group set, the lock, and the parts
that hold the node index and the state version.

`GroupCore` is no provider itself. `GroupProvider` (base.py) and the shapes' collaborators (the
read side, the status view, the refresh cycle, the write rules, the machine workers, the pool sync
job, the listing folds) each receive it and read what they need from it:

- **Construction**: the driver, the write gate, the background `JobRunner`, the journal that
  `--state-file` keeps, the activity record and the tunables (TTLs, attempts, back-off).
- **The shape** (shape.py): the hooks each shape passes in `open`, the only way the core reaches
  shape-specific behaviour.
- **The group set, possibly dynamic.** `sync_groups` adopts the driver's current groups; the
  `NodeGroups` answer object stays the same while the set is unchanged (the service reuses its
  encoded answer). A group discovered later resumes its journal entry when it appears.
- **The node index** (node_index.py) that NodeGroupForNode answers from.
- **The state version** (state_version.py): every change of group state happens inside
  `changing(...)`, which publishes it on the way out.

Lock rules: one re-entrant lock (`lock`) guards the group states, the group set, the templates,
the node index and the state version; the parts take it around every read or change of them and
never hold it across cloud I/O.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic

from cloudprovider_grpc.core.clouderrors import CloudError
from cloudprovider_grpc.core.errors import NotFound
from cloudprovider_grpc.k8s.template import NodeTemplate
from cloudprovider_grpc.observability import metrics
from cloudprovider_grpc.providers.contract import NodeGroup
from cloudprovider_grpc.providers.driver import DriverBase, GroupConfig
from cloudprovider_grpc.providers.group_options import GroupOptions
from cloudprovider_grpc.providers.machinery.activity import Activity
from cloudprovider_grpc.providers.machinery.gate import WriteGate
from cloudprovider_grpc.providers.machinery.group_state import S
from cloudprovider_grpc.providers.machinery.jobs import JobRunner
from cloudprovider_grpc.providers.machinery.journal import Journal
from cloudprovider_grpc.providers.machinery.node_index import NodeIndex
from cloudprovider_grpc.providers.machinery.shape import Shape
from cloudprovider_grpc.providers.machinery.state_version import StateVersion

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Tunables:
    """How long things are kept and how often they are tried (the provider's keyword arguments)."""

    catalog_ttl: float = 300.0
    failed_ttl: float = 600.0
    tombstone_ttl: float = 3600.0
    max_attempts: int = 8
    max_backoff: float = 60.0


class GroupCore(Generic[S]):
    """The state and bookkeeping every part of a provider shares; see the module docstring."""

    #: the hooks of the shape, passed in `open` (the shape's parts need the core before it exists)
    shape: Shape[S]

    def __init__(
        self,
        driver: DriverBase,
        kind: str,
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
        gate: WriteGate | None = None,
        group_options: GroupOptions | None = None,
    ) -> None:
        self.driver = driver
        self.name = driver.name
        self.tunables = Tunables(catalog_ttl, failed_ttl, tombstone_ttl, max_attempts, max_backoff)
        #: the configuration's per-group options, applied to every group the driver offers
        self.group_options = group_options or GroupOptions()
        #: every cloud write passes it (gate.py): open, dry run, or leader-only
        self.gate = gate or WriteGate()
        self.clock = clock or time.monotonic
        self.lock = threading.RLock()
        #: failures, back-offs and occurrences for the status page and Kubernetes Events (activity.py)
        self.activity = Activity()
        self.jobs = JobRunner(
            concurrency=concurrency,
            clock=self.clock,
            inline=inline_workers,
            name=driver.name,
            fence=self.gate.fence(),
        )
        #: "machines" or "pools" is recorded in the journal, so a file from the other shape is refused
        self.journal = Journal(state_file, backend=driver.name, shape=kind)
        self.groups: dict[str, S] = {}
        self.node_groups: tuple[NodeGroup, ...] = ()
        self.group_objs: dict[str, NodeGroup] = {}
        self.templates: dict[str, NodeTemplate | None] = {}
        self.index = NodeIndex()
        self.version = StateVersion(
            self.lock,
            self.index,
            node_groups=lambda: self.node_groups,
            options=lambda: {gid: s.config.options for gid, s in self.groups.items()},
            targets=self._targets,
            fallbacks=driver.fallback_version,
        )
        self.started = False
        #: journal entries per group, applied when the group exists: at start, or when a group the
        #: cloud offers only later is discovered (kept in the journal meanwhile)
        self.unrestored: dict[str, Any] = {}

    def open(self, shape: Shape[S]) -> None:
        """Take the shape's hooks, adopt the driver's groups and read the journal (resumed at start)."""
        self.shape = shape
        self.sync_groups(self.driver.groups())
        self.unrestored = shape.parse_journal(self.journal.load())
        with self.lock:
            self.version.publish()

    def target(self, state: S) -> int:
        return self.shape.target(state)

    def _targets(self, group_ids: Iterable[str] | None) -> dict[str, int]:
        target, groups = self.shape.target, self.groups
        if group_ids is None:
            return {gid: target(s) for gid, s in groups.items()}
        return {gid: target(groups[gid]) for gid in group_ids if gid in groups}

    def changing(self, *group_ids: str) -> AbstractContextManager[None]:
        """The state version's `changing`: hold the lock for a change and publish it on the way out."""
        return self.version.changing(*group_ids)

    # ------------------------------------------------------------------ the group set
    def sync_groups(self, configs: Sequence[GroupConfig]) -> None:
        """Adopt the driver's current group set, with the configuration's per-group options applied;
        keep the NodeGroups object while it is unchanged."""
        seen: set[str] = set()
        for cfg in map(self.group_options.applied, configs):
            if cfg.id in seen:
                raise ValueError(f"node group {cfg.id!r} is configured twice")
            seen.add(cfg.id)
            state = self.groups.get(cfg.id)
            if state is None:
                state = self.groups[cfg.id] = self.shape.new_state(cfg)
                if self.node_groups:  # not the initial set
                    log.info(
                        "node group %s discovered (min %d, max %d)",
                        self.shown(cfg.id),
                        cfg.min_size,
                        cfg.max_size,
                    )
                if self.started and cfg.id in self.unrestored and self.gate.may_persist():
                    self.shape.restore(state, self.unrestored.pop(cfg.id))
            elif state.config != cfg:
                state.config = cfg
                self.templates.pop(cfg.id, None)
        for gone in set(self.groups) - seen:
            log.info("node group %s is no longer offered by the cloud; forgetting it", self.shown(gone))
            del self.groups[gone]
            self.templates.pop(gone, None)
        groups = tuple(
            NodeGroup(c.id, c.min_size, c.max_size, c.debug or c.name)
            for c in (s.config for s in self.groups.values())
        )
        if groups != self.node_groups:
            self.node_groups = groups
            self.group_objs = {g.id: g for g in groups}

    def group_configs(self) -> list[GroupConfig]:
        """The current group set as served: bounds, names and options, the configuration's applied
        (`check-config` matches `group_options` against it)."""
        with self.lock:
            return [s.config for s in self.groups.values()]

    def shown(self, gid: str) -> str:
        """A group as log lines show it: its id, and the cloud's name for it when that differs (a
        Vultr or Exoscale pool's id is a UUID; its label is what the user recognises)."""
        state = self.groups.get(gid)
        name = state.config.name if state is not None else ""
        return f"{gid} ({name})" if name and name != gid else gid

    def resolve_group(self, ref: str) -> str:
        with self.lock:
            if ref in self.groups:
                return ref
            named = sorted(gid for gid, s in self.groups.items() if s.config.name == ref)
        if len(named) > 1:
            raise NotFound(f"node group name {ref!r} is shared by {', '.join(named)}; use the id")
        return named[0] if named else ref

    def group(self, group_id: str) -> S:
        state = self.groups.get(group_id)
        if state is None:
            raise NotFound(f"node group {group_id!r} not found")
        return state

    def reindex(self) -> None:
        """Rebuild the node index from the group states (under the lock)."""
        self.index.rebuild(self.groups, self.shape.placeholder_ids)

    def expire_tombstones(self, now: float) -> None:
        ttl = self.tunables.tombstone_ttl
        for state in self.groups.values():
            state.tombstones = {k: v for k, v in state.tombstones.items() if now - v < ttl}

    def note_listing_error(self, state: S, error: CloudError | None) -> None:
        """Record (or clear) a group's listing failure: logged once per change, counted, and shown
        on the group's placeholders (the listing folds call it for each group they take)."""
        gid = state.config.id
        if error is None:
            if state.listing_error is not None:
                log.info("node group %s: listing works again", self.shown(gid))
            state.listing_error = None
            return
        if state.listing_error is None or state.listing_error.message != error.message:
            log.error(
                "node group %s: listing failed, keeping what was known: %s", self.shown(gid), error.message
            )
        metrics.GROUP_LISTING_FAILURES.labels(self.name, gid).inc()
        state.listing_error = error.as_instance_error()

    # ------------------------------------------------------------------ the journal
    def save_journal(self) -> None:
        if self.journal.enabled and self.gate.may_persist():
            groups = {**self.unrestored, **self.shape.journal_doc()}
            # asked again right before the file is replaced: the term may end while it is written
            self.journal.save({"groups": groups}, still=self.gate.may_persist)

    def resume_journal(self) -> None:
        """Resume every current group's journal entry (start, take-over)."""
        for gid, state in self.groups.items():
            if gid in self.unrestored:
                self.shape.restore(state, self.unrestored.pop(gid))


__all__ = ["GroupCore", "Tunables"]
