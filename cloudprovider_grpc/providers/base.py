"""What both shapes of the shared machinery do the same way: the read side.

`GroupProvider` is the base of `MachineProvider` (providers/machines.py, our server owns the size)
and `PoolProvider` (providers/pools.py, the cloud owns it). It holds, once:

- **The group set, possibly dynamic.** `driver.groups()` is re-read after every listing, so groups
  discovered from the cloud (VKE pools with the autoscaler on, SKS nodepools, SPC pools) appear and
  disappear with the cloud; the `NodeGroups` answer object stays the same while the set is unchanged
  (the service reuses its encoded answer).
- **NodeGroupForNode from memory**: by providerID, by name for nodes CA sends without one, then the
  driver's label fallbacks (`machine_of`, `group_of`); control-plane nodes never belong.
- **Templates, prices, options, GPU facts** from the driver, with templates cached per group until the
  catalogue is reloaded (so the service's encoded template is reused), the catalogue reloaded on
  Refresh when older than `catalog_ttl`.
- **Per-group listing errors**: a group the cloud could not list keeps what was known and shows the
  error on its placeholders; Refresh answers UNAVAILABLE only when nothing could be listed.
- **Size gauges** (their one owner), the background `JobRunner`, retry backoff, and the journal
  (`providers/journal.py`) that `--state-file` keeps.
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
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Generic, TypeVar

from cloudprovider_grpc.core.clouderrors import CloudError, InstanceError
from cloudprovider_grpc.core.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    NotImplementedByProvider,
    Unavailable,
)
from cloudprovider_grpc.k8s.template import NodeTemplate
from cloudprovider_grpc.observability import metrics
from cloudprovider_grpc.providers.activity import Activity
from cloudprovider_grpc.providers.contract import (
    AutoscalingOptions,
    CloudProvider,
    GroupSizes,
    InstanceState,
    NodeGroup,
    NodeRef,
)
from cloudprovider_grpc.providers.driver import DriverBase, GroupConfig, Machine
from cloudprovider_grpc.providers.gate import Write, WriteGate
from cloudprovider_grpc.providers.jobs import JobRunner
from cloudprovider_grpc.providers.journal import Journal

log = logging.getLogger(__name__)

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
#: looked up once: an enum member read through its class costs more than the comparison, and the
#: state version recomputes every group's target at each Refresh (15,000 machines: 7 ms -> 1 ms)
_DELETING = InstanceState.DELETING
TEMPLATE_NAME_PREFIX = "template-node-for-"
#: operations listed per group in the status (the rest are counted): its ConfigMap holds 1 MiB at most
STATUS_OPERATIONS = 50


@dataclass
class GroupStateBase:
    """What both shapes track per group."""

    config: GroupConfig
    machines: dict[str, Machine] = field(default_factory=dict)  # as last listed (or created by us)
    deleting: dict[str, float] = field(default_factory=dict)  # id -> clock when we accepted its deletion
    tombstones: dict[str, float] = field(default_factory=dict)  # id -> clock when it left the cloud
    listing_error: InstanceError | None = None  # this group could not be listed on the last Refresh
    listed_once: bool = False  # a listing of this group has been applied since start
    listed_up_to: int = 0  # when the listing last applied here returned, on the listing clock (refresh)

    def live_machines(self) -> list[Machine]:
        """Listed machines that are neither terminating nor being deleted by us."""
        deleting = self.deleting
        return [m for m in self.machines.values() if m.state != _DELETING and m.id not in deleting]

    def live_count(self) -> int:
        """len(live_machines()), without building the list."""
        deleting = self.deleting
        return len(self.machines) - sum(
            1 for m in self.machines.values() if m.state == _DELETING or m.id in deleting
        )


S = TypeVar("S", bound=GroupStateBase)


@dataclass(frozen=True, slots=True)
class ListingSpan:
    """When one listing ran, on the provider's listing clock (a counter that ticks as each listing
    starts and as it returns). The cloud took its snapshot somewhere in between, so a listing surely
    shows a later cloud than another only if it started after the other returned; one that
    overlapped it might hold the older snapshot, and is not applied over it. Concurrent Refresh
    callers cannot starve each other: a listing started after the last applied one returned is
    always applied, and CA's own serial Refreshes are always such listings."""

    started: int
    returned: int

    def follows(self, returned: int) -> bool:
        """Whether this listing started after a listing that returned at `returned`."""
        return self.started > returned


class GroupProvider(CloudProvider, Generic[S]):
    """The read side shared by both shapes; subclasses add the write side and the listing."""

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
    ) -> None:
        self.driver = driver
        #: every cloud write passes it (providers/gate.py): open, dry run, or leader-only
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

    @abc.abstractmethod
    def _target(self, state: S) -> int:
        """The group's target size as CA sees it."""

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        with self._changing():
            self._started = True
            if self._gate.may_persist():  # a standby or a dry run resumes nothing it may not write
                self._resume_journal()
            self._reindex()
        self._jobs.start()
        try:
            self.refresh()
        except Unavailable as exc:  # the server still starts; CA's Refresh will try again
            log.warning("initial refresh failed: %s", exc.message)

    def take_over(self) -> None:
        """Become the writer after a standby period (a new leader): read the journal as the
        previous writer left it, resume what it holds, and list the cloud afresh, so what this
        process acts on is what the cloud and the journal say now, not what it saw while waiting.
        Raises Unavailable when the cloud cannot be listed (the caller retries)."""
        with self._changing():
            self._unrestored = self._parse_journal(self._journal.load())
            self._resume_journal()
            self._reindex()
        self.refresh()

    def _resume_journal(self) -> None:
        for gid, state in self._groups.items():
            if gid in self._unrestored:
                self._restore(state, self._unrestored.pop(gid))

    def stop(self, timeout: float = 10.0) -> None:
        self._jobs.stop(timeout)
        self.driver.close()
        if self._on_stop is not None:
            self._on_stop()

    def quiesce(self, timeout: float = 10.0) -> None:
        """Stop starting background operations and wait up to `timeout` for the running ones: a
        leader handing over calls it so that no write of its own is still on its way when the next
        leader starts (queued operations stay in the journal for it)."""
        self._jobs.stop(timeout)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Block until no background operation is queued or running: a leader handing over sends
        what it accepted before releasing the Lease (ha/election.py); tests and benchmarks wait on it."""
        return self._jobs.wait_idle(timeout)

    # ------------------------------------------------------------------ refresh (cloud I/O)
    def refresh(self) -> None:
        self._jobs.run_due()  # inline mode only (simulation): queued operations run here, in order
        # a catalogue reload changes templates only (not versioned); if it moved the driver's
        # fallback version, the publish below sees it
        self._refresh_catalog()
        with self._lock:
            self._listing_clock += 1
            first = self._listing_clock
        started = self._clock()
        try:
            listing = self._list()
        except BaseException:
            with self._changing():  # a failed listing may have changed the driver's fallbacks
                raise
        with self._changing():
            self._listing_clock += 1
            span = ListingSpan(first, self._listing_clock)
            # with concurrent Refresh callers, a listing that started earlier may come back later:
            # applied after a newer one it would drop machines it never saw (CA would scale up again)
            if span.follows(self._groups_listed_up_to):
                self._groups_listed_up_to = span.returned
                self._sync_groups(self._configs(listing))
            self._apply(listing, started, span)
            self._expire(self._clock())
            self._reindex()
            self._save_journal()
        self._publish_sizes()
        self.activity.refreshed()

    def _refresh_catalog(self) -> None:
        now = self._clock()
        if self._catalog_loaded_at is not None and now - self._catalog_loaded_at < self._catalog_ttl:
            return
        try:
            self.driver.refresh_catalog()
        except CloudError as exc:
            if self._catalog_loaded_at is None:
                raise Unavailable(f"{self.name}: loading the catalogue failed: {exc.message}") from exc
            log.warning("catalogue refresh failed, keeping the cached one: %s", exc.message)
            return
        self._catalog_loaded_at = now
        with self._lock:
            self._templates.clear()

    def _sync_groups(self, configs: Sequence[GroupConfig]) -> None:
        """Adopt the driver's current group set; keep the NodeGroups object while it is unchanged."""
        seen: set[str] = set()
        for cfg in configs:
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

    def _shown(self, gid: str) -> str:
        """A group as log lines show it: its id, and the cloud's name for it when that differs (a
        Vultr or Exoscale pool's id is a UUID; its label is what the user recognises)."""
        state = self._groups.get(gid)
        name = state.config.name if state is not None else ""
        return f"{gid} ({name})" if name and name != gid else gid

    def _publish_sizes(self) -> None:
        for gid, sizes in self.sizes().items():
            metrics.GROUP_TARGET_SIZE.labels(self.name, gid).set(sizes.target)
            metrics.GROUP_MACHINES.labels(self.name, gid).set(sizes.registered)
            state = self._groups.get(gid)
            name = (state.config.name if state is not None else "") or gid
            metrics.GROUP_INFO.labels(self.name, gid, name).set(1)

    def _note_listing_error(self, state: S, error: CloudError | None) -> None:
        """Record (or clear) a group's listing failure: logged once per change, counted, and shown
        on the group's placeholders."""
        gid = state.config.id
        if error is None:
            if state.listing_error is not None:
                log.info("node group %s: listing works again", self._shown(gid))
            state.listing_error = None
            return
        if state.listing_error is None or state.listing_error.message != error.message:
            log.error(
                "node group %s: listing failed, keeping what was known: %s", self._shown(gid), error.message
            )
        metrics.GROUP_LISTING_FAILURES.labels(self.name, gid).inc()
        state.listing_error = error.as_instance_error()

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

    # ------------------------------------------------------------------ read RPCs (memory only)
    def node_groups(self) -> Sequence[NodeGroup]:
        return self._node_groups  # the same object while unchanged: the service caches its answer

    def node_group_for_node(self, node: NodeRef) -> NodeGroup | None:
        if self.driver.is_control_plane(node):
            return None
        with self._lock:
            gid = self._by_id.get(node.provider_id) if node.provider_id else None
            if gid is None and not node.provider_id and node.name:
                gid = self._by_name.get(node.name)
            if gid is None:
                mid = self.driver.machine_of(node)
                gid = self._by_id.get(mid) if mid else None
            if gid is None:
                gid = self.driver.group_of(node)
            return self._group_objs.get(gid) if gid is not None else None

    def target_size(self, group_id: str) -> int:
        with self._lock:
            return self._target(self._group(group_id))

    def template(self, group_id: str) -> NodeTemplate:
        with self._lock:
            self._group(group_id)
            if group_id in self._templates:
                tpl = self._templates[group_id]
            else:
                tpl = self._templates[group_id] = self.driver.template(group_id)
        if tpl is None:
            raise NotImplementedByProvider(f"{self.name}: no template is known for node group {group_id!r}")
        return tpl

    def options(self, group_id: str, defaults: AutoscalingOptions) -> AutoscalingOptions | None:
        with self._lock:
            cfg = self._group(group_id).config
        return defaults.merged(cfg.options) if cfg.options else None

    def gpu_label(self) -> str:
        return self.driver.gpu_label

    def gpu_types(self) -> list[str]:
        return list(self.driver.gpu_types())

    def node_price(self, node: NodeRef, start: datetime, end: datetime) -> float:
        gid = self._group_for_pricing(node)
        price = self.driver.hourly_price(gid) if gid else None
        if price is None:
            raise NotImplementedByProvider(
                f"{self.name}: no price is known for node {node.name or node.provider_id!r}"
            )
        return price * _hours(start, end)

    def pod_price(self, requests: Mapping[str, float], start: datetime, end: datetime) -> float:
        """The cheapest share of a node the pod would occupy: for each priced group whose template
        fits the pod, hourly price x the pod's dominant share (max of its cpu, memory and GPU
        fractions of the node's allocatable); the minimum over groups, or over all priced groups
        when it fits none. This mirrors how CA's price expander compares node cost with the value of
        the pods it schedules (cluster-autoscaler expander/price/price.go)."""
        best_fit: float | None = None
        best_any: float | None = None
        for gid in list(self._groups):
            price = self.driver.hourly_price(gid)
            tpl = self.driver.template(gid)
            if price is None or tpl is None:
                continue
            share, fits = _dominant_share(requests, tpl)
            cost = price * share
            best_any = cost if best_any is None else min(best_any, cost)
            if fits:
                best_fit = cost if best_fit is None else min(best_fit, cost)
        best = best_fit if best_fit is not None else best_any
        if best is None:
            raise NotImplementedByProvider(f"{self.name}: no node group has a price")
        return best * _hours(start, end)

    def sizes(self) -> dict[str, GroupSizes]:
        with self._lock:
            return {
                gid: GroupSizes(self._target(s), len(s.live_machines())) for gid, s in self._groups.items()
            }

    def status(self) -> dict[str, Any]:
        """The server's view of every group, from memory: bounds, target, instances by state, the
        operations in flight with their age, the back-off in force and the last cloud error. The
        lock is taken per group, never across all of them: RPCs wait at most one group's worth."""
        backoffs = self.activity.current_backoffs()
        errors = self.activity.last_errors()
        groups = []
        with self._lock:
            ids = list(self._groups)
        for gid in ids:
            with self._lock:
                state = self._groups.get(gid)
                if state is None:
                    continue  # forgotten meanwhile (the cloud no longer offers it)
                entry = self._group_status(state, self._clock())
            backoff = backoffs.get(gid)
            if backoff is not None:
                entry["backoff"] = {
                    "reason": backoff.reason,
                    "message": backoff.message,
                    "until": _rfc3339(backoff.until),
                }
            error = errors.get(gid)
            if error is not None:
                entry["last_error"] = {"code": error.code, "message": error.message, "at": _rfc3339(error.at)}
            groups.append(entry)
        return {"provider": self.name, "groups": groups}

    def _group_status(self, state: S, now: float) -> dict[str, Any]:
        """One group's part of the status (under the lock)."""
        gid = state.config.id
        counts = {"running": 0, "creating": 0, "deleting": 0, "failed": 0}
        for instance in self.nodes(gid):
            if instance.error is not None and instance.state == InstanceState.CREATING:
                counts["failed"] += 1
            else:
                key = instance.state.name.lower()
                counts[key] = counts.get(key, 0) + 1
        operations = [
            {"kind": "delete", "instance": mid, "age_seconds": round(max(now - at, 0.0), 1)}
            for mid, at in state.deleting.items()
        ]
        operations.extend(self._operations(state, now))
        if len(operations) > STATUS_OPERATIONS:
            omitted = len(operations) - STATUS_OPERATIONS
            operations = [*operations[:STATUS_OPERATIONS], {"kind": "omitted", "count": omitted}]
        entry: dict[str, Any] = {
            "id": gid,
            "name": state.config.name or gid,
            "min": state.config.min_size,
            "max": state.config.max_size,
            "target": self._target(state),
            "instances": counts,
            "operations": operations,
        }
        if state.listing_error is not None:
            entry["listing_error"] = state.listing_error.message
        return entry

    def _operations(self, state: S, now: float) -> list[dict[str, Any]]:
        """The shape's own operations in flight (creations, size pushes), each with its age."""
        return []

    def listing_errors(self) -> dict[str, str]:
        """Groups the last Refresh could not list, with the cloud's answer (`check-config` reports
        them: a token refused for one project fails there, not at CA's first scale-up)."""
        with self._lock:
            return {gid: s.listing_error.message for gid, s in self._groups.items() if s.listing_error}

    # ------------------------------------------------------------------ write-RPC rules (under the lock)
    def _check_increase(self, group_id: str, delta: int) -> tuple[S, int]:
        """The group and its target, if raising it by `delta` is allowed (CA's NodeGroup rules)."""
        if delta <= 0:
            raise InvalidArgument(f"size increase must be positive, got delta={delta}")
        state = self._group(group_id)
        target, cap = self._target(state), state.config.max_size
        if target + delta > cap:
            raise FailedPrecondition(
                f"increasing node group {group_id!r} by {delta} would make its size {target + delta}, "
                f"above its max size {cap} (current target {target})"
            )
        return state, target

    def _check_decrease(self, group_id: str, delta: int) -> tuple[S, int]:
        """The group and its target, if lowering it by `-delta` deletes no existing machine."""
        if delta >= 0:
            raise InvalidArgument(f"size decrease must be negative, got delta={delta}")
        state = self._group(group_id)
        target = self._target(state)
        existing = len(state.live_machines())
        if target + delta < existing:
            raise FailedPrecondition(
                f"decreasing node group {group_id!r} by {-delta} would make its target {target + delta}, "
                f"below the {existing} machines it already has (current target {target}); "
                "use DeleteNodes to remove machines"
            )
        return state, target

    def _check_min(self, state: S, reducing: int) -> None:
        target = self._target(state)
        if reducing and target - reducing < state.config.min_size:
            raise FailedPrecondition(
                f"deleting {reducing} node(s) from node group {state.config.id!r} would make its size "
                f"{target - reducing}, below its min size {state.config.min_size}; nothing was deleted"
            )

    def _not_in_group(self, group_id: str, node: NodeRef) -> InvalidArgument:
        label = node.name or node.provider_id
        other = self._by_id.get(node.provider_id) if node.provider_id else None
        where = f"; it belongs to node group {other!r}" if other and other != group_id else ""
        return InvalidArgument(
            f"node {label!r} (providerID {node.provider_id!r}) does not belong to node group "
            f"{group_id!r}{where}; nothing was deleted"
        )

    # ------------------------------------------------------------------ helpers
    def _group(self, group_id: str) -> S:
        state = self._groups.get(group_id)
        if state is None:
            raise NotFound(f"node group {group_id!r} not found")
        return state

    def _backoff(self, attempt: int) -> float:
        """Exponential backoff with full jitter (AWS architecture blog, 'Exponential Backoff And Jitter')."""
        return self._rng.uniform(0, min(self._max_backoff, 0.5 * 2**attempt))

    def _group_for_pricing(self, node: NodeRef) -> str | None:
        if node.provider_id:
            with self._lock:
                gid = self._by_id.get(node.provider_id)
            if gid:
                return gid
        itype = node.labels.get(INSTANCE_TYPE_LABEL)
        if itype:
            for gid in list(self._groups):
                tpl = self.driver.template(gid)
                if tpl is not None and tpl.instance_type == itype:
                    return gid
        if node.name.startswith(TEMPLATE_NAME_PREFIX):
            rest = node.name[len(TEMPLATE_NAME_PREFIX) :]
            # CA names sanitized templates template-node-for-<group>-<random suffix>
            for gid in sorted(self._groups, key=len, reverse=True):
                if rest == gid or rest.startswith(gid + "-"):
                    return gid
        return None

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

    def _admit(self, kind: str, group: str, count: int, machines: Sequence[str] = ()) -> None:
        """Ask the write gate whether a write RPC may be recorded (it raises if not)."""
        self._gate.admit(Write(self.name, kind, group, count, tuple(machines)))

    def _allowed(self, kind: str, group: str, count: int, machines: Sequence[str] = ()) -> bool:
        """Ask the write gate, right before a driver call that changes the cloud, whether it may
        be made now; a refused job is dropped (the gate has logged why)."""
        return self._gate.allows(Write(self.name, kind, group, count, tuple(machines)))

    def _save_journal(self) -> None:
        if self._journal.enabled and self._gate.may_persist():
            groups = {**self._unrestored, **self._journal_doc()}
            # asked again right before the file is replaced: the term may end while it is written
            self._journal.save({"groups": groups}, still=self._gate.may_persist)


def _rfc3339(wall: float) -> str:
    return datetime.fromtimestamp(wall, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _hours(start: datetime, end: datetime) -> float:
    return max(0.0, (end - start).total_seconds() / 3600.0)


def _dominant_share(requests: Mapping[str, float], tpl: NodeTemplate) -> tuple[float, bool]:
    """(largest fraction of the template's allocatable the requests take, whether they fit)."""
    from cloudprovider_grpc.k8s.quantity import parse_quantity

    share, fits = 0.0, True
    for resource, amount in requests.items():
        if amount <= 0:
            continue
        cap = tpl.capacity.get(resource)
        if cap is None:
            if resource in ("cpu", "memory"):
                fits = False
            continue
        total = float(parse_quantity(cap))
        reserved = tpl.reserved.get(resource)
        if reserved:
            total -= float(parse_quantity(reserved))
        if total <= 0:
            fits = False
            continue
        frac = amount / total
        fits = fits and frac <= 1.0
        share = max(share, frac)
    return share, fits
