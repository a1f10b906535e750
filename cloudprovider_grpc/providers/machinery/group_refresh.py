"""The refresh cycle of the shared machinery, and the lifecycle around it.

Refresh is the one RPC that does cloud I/O: it reloads the catalogue when it is older than
`catalog_ttl`, runs the shape's one listing call, and folds it into the group states under the
listing clock (a listing that started before the last applied one returned is not applied over
it: `ListingSpan` in group_state.py). A group the cloud could not list keeps what was known and
shows the error on its placeholders (the shape's fold records it through the core's
`note_listing_error`); Refresh answers UNAVAILABLE only when nothing could be listed. The size
gauges are published after every Refresh (this is their one owner).

The lifecycle (start, take-over by a new leader, quiesce, stop) lives here too: starting is resuming
the journal and running a first Refresh. `RefreshCycle` reaches the cloud only through the shape's
hooks and the driver the group core holds.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Generic

from prometheus_client import Gauge

from cloudprovider_grpc.core.clouderrors import CloudError
from cloudprovider_grpc.core.errors import Unavailable
from cloudprovider_grpc.observability import metrics
from cloudprovider_grpc.providers.contract import GroupSizes
from cloudprovider_grpc.providers.machinery.group_core import GroupCore
from cloudprovider_grpc.providers.machinery.group_state import ListingSpan, S

log = logging.getLogger(__name__)


class RefreshCycle(Generic[S]):
    """Start, stop, hand over, and Refresh: the part of `GroupProvider` that talks to the cloud on
    CA's behalf (the write side's background jobs are the shapes' own). It is handed the group core,
    the read side's `sizes` (the gauges it publishes) and what to run once stopped; it owns the
    listing clock, the catalogue's age and the gauges' published names."""

    def __init__(
        self,
        core: GroupCore[S],
        sizes: Callable[[], dict[str, GroupSizes]],
        on_stop: Callable[[], None] | None = None,
    ) -> None:
        self._core = core
        self._sizes = sizes
        self._on_stop = on_stop
        self._catalog_loaded_at: float | None = None
        # the listing clock ticks when a listing starts and when it returns; a listing applies to a
        # group only if it started after the one last applied there had returned (ListingSpan)
        self._listing_clock = 0
        self._groups_listed_up_to = 0
        self._published: dict[str, str] = {}  # group -> the name its info series carries (metrics)
        #: the configured group names no listing offered, as last warned about
        self._unmatched_options: list[str] = []

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        with self._core.changing():
            self._core.started = True
            if self._core.gate.may_persist():  # a standby or a dry run resumes nothing it may not write
                self._core.resume_journal()
            self._core.reindex()
        self._core.jobs.start()
        try:
            self.refresh()
        except Unavailable as exc:  # the server still starts; CA's Refresh will try again
            log.warning("initial refresh failed: %s", exc.message)

    def take_over(self) -> None:
        """Become the writer after a standby period (a new leader): read the journal as the
        previous writer left it, resume what it holds, and list the cloud afresh, so what this
        process acts on is what the cloud and the journal say now, not what it saw while waiting.
        Raises Unavailable when the cloud cannot be listed (the caller retries)."""
        with self._core.changing():
            self._core.unrestored = self._core.shape.parse_journal(self._core.journal.load())
            self._core.resume_journal()
            self._core.reindex()
        self.refresh()

    def stop(self, timeout: float = 10.0) -> None:
        self._core.jobs.stop(timeout)
        self._unpublish_sizes(set(self._published))
        self._core.driver.close()
        if self._on_stop is not None:
            self._on_stop()

    def quiesce(self, timeout: float = 10.0) -> None:
        """Stop starting background operations and wait up to `timeout` for the running ones: a
        leader handing over calls it so that no write of its own is still on its way when the next
        leader starts (queued operations stay in the journal for it)."""
        self._core.jobs.stop(timeout)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Block until no background operation is queued or running: a leader handing over sends
        what it accepted before releasing the Lease (ha/election.py); tests and benchmarks wait on it."""
        return self._core.jobs.wait_idle(timeout)

    # ------------------------------------------------------------------ refresh (cloud I/O)
    def refresh(self) -> None:
        self._core.jobs.run_due()  # inline mode only (simulation): queued operations run here, in order
        # a catalogue reload changes templates only (not versioned); if it moved the driver's
        # fallback version, the publish below sees it
        self._refresh_catalog()
        with self._core.lock:
            self._listing_clock += 1
            first = self._listing_clock
        started = self._core.clock()
        try:
            listing = self._core.shape.listing()
        except BaseException:
            with self._core.changing():  # a failed listing may have changed the driver's fallbacks
                raise
        with self._core.changing():
            self._listing_clock += 1
            span = ListingSpan(first, self._listing_clock)
            # with concurrent Refresh callers, a listing that started earlier may come back later:
            # applied after a newer one it would drop machines it never saw (CA would scale up again)
            if span.follows(self._groups_listed_up_to):
                self._groups_listed_up_to = span.returned
                self._core.sync_groups(self._core.shape.configs(listing))
            self._core.shape.apply(listing, started, span)
            now = self._core.clock()
            self._core.shape.expire(now)
            self._core.expire_tombstones(now)
            self._core.reindex()
            self._core.save_journal()
        if (
            self._core.group_options and self._core.started
        ):  # `check-config` (never started) reports them itself
            self._warn_unmatched_options()
        self._publish_sizes()
        self._core.activity.refreshed()

    def _refresh_catalog(self) -> None:
        now = self._core.clock()
        if (
            self._catalog_loaded_at is not None
            and now - self._catalog_loaded_at < self._core.tunables.catalog_ttl
        ):
            return
        try:
            self._core.driver.refresh_catalog()
        except CloudError as exc:
            if self._catalog_loaded_at is None:
                raise Unavailable(f"{self._core.name}: loading the catalogue failed: {exc.message}") from exc
            log.warning("catalogue refresh failed, keeping the cached one: %s", exc.message)
            return
        self._catalog_loaded_at = now
        with self._core.lock:
            self._core.templates.clear()

    def _publish_sizes(self) -> None:
        """Set each group's gauges. A group renamed on the cloud drops its old info series and a
        group gone drops all of its series: a stale `node_group_info` would make the documented
        `group_left (name)` join match two series and fail. Under the lock: two Refresh callers
        may publish at once, and each group's published name must stay the one its series carries."""
        with self._core.lock:
            sizes = self._sizes()
            self._unpublish_sizes(set(self._published) - set(sizes))
            for gid, size in sizes.items():
                metrics.GROUP_TARGET_SIZE.labels(self._core.name, gid).set(size.target)
                metrics.GROUP_MACHINES.labels(self._core.name, gid).set(size.registered)
                state = self._core.groups.get(gid)
                name = (state.config.name if state is not None else "") or gid
                old = self._published.get(gid)
                if old is not None and old != name:
                    _forget(metrics.GROUP_INFO, self._core.name, gid, old)
                metrics.GROUP_INFO.labels(self._core.name, gid, name).set(1)
                self._published[gid] = name

    def _unpublish_sizes(self, gone: set[str]) -> None:
        """Remove the series of groups this provider no longer serves (or of all, when it stops)."""
        with self._core.lock:
            for gid in gone:
                _forget(metrics.GROUP_TARGET_SIZE, self._core.name, gid)
                _forget(metrics.GROUP_MACHINES, self._core.name, gid)
                name = self._published.pop(gid, None)
                if name is not None:
                    _forget(metrics.GROUP_INFO, self._core.name, gid, name)

    def _warn_unmatched_options(self) -> None:
        """After a listing: one warning each time the set of configured groups that match none
        changes (a group may be discovered later, so it is no error to `serve`)."""
        core = self._core
        with core.lock:
            unmatched = core.group_options.unmatched(s.config for s in core.groups.values())
            changed, self._unmatched_options = unmatched != self._unmatched_options, unmatched
        if changed and unmatched:
            log.warning(
                "group_options names %s, but the cloud offers no node group with that id or name; "
                "its options apply to none",
                ", ".join(repr(ref) for ref in unmatched),
            )


def _forget(gauge: Gauge, *labels: str) -> None:
    """Remove one labelled series; one never set is not an error."""
    with contextlib.suppress(KeyError):
        gauge.remove(*labels)
