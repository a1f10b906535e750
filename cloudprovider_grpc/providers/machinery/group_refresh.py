"""The refresh cycle of the shared machinery, and the lifecycle around it.

Refresh is the one RPC that does cloud I/O: it reloads the catalogue when it is older than
`catalog_ttl`, runs the shape's one listing call, and folds it into the group states under the
listing clock (a listing that started before the last applied one returned is not applied over
it: `ListingSpan` in group_state.py). Per-group listing errors are kept here: a group the
cloud could not list keeps what was known and shows the error on its placeholders; Refresh answers
UNAVAILABLE only when nothing could be listed. The size gauges are published after every Refresh
(this is their one owner).

The lifecycle (start, take-over by a new leader, quiesce, stop) lives here too: starting is resuming
the journal and running a first Refresh.
"""

from __future__ import annotations

import contextlib
import logging

from prometheus_client import Gauge

from cloudprovider_grpc.core.clouderrors import CloudError
from cloudprovider_grpc.core.errors import Unavailable
from cloudprovider_grpc.observability import metrics
from cloudprovider_grpc.providers.machinery.group_core import GroupCore
from cloudprovider_grpc.providers.machinery.group_state import ListingSpan, S

#: one logger for the whole shape
log = logging.getLogger(__name__)


class RefreshCycle(GroupCore[S]):
    """Start, stop, hand over, and Refresh: the part of `GroupProvider` that talks to the cloud on
    CA's behalf (the write side's background jobs are the shapes' own)."""

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
        self._unpublish_sizes(set(self._published))
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
        if self._group_options and self._started:  # `check-config` (never started) reports them itself
            self._warn_unmatched_options()
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

    def _publish_sizes(self) -> None:
        """Set each group's gauges. A group renamed on the cloud drops its old info series and a
        group gone drops all of its series: a stale `node_group_info` would make the documented
        `group_left (name)` join match two series and fail. Under the lock: two Refresh callers
        may publish at once, and each group's published name must stay the one its series carries."""
        with self._lock:
            sizes = self.sizes()
            self._unpublish_sizes(set(self._published) - set(sizes))
            for gid, size in sizes.items():
                metrics.GROUP_TARGET_SIZE.labels(self.name, gid).set(size.target)
                metrics.GROUP_MACHINES.labels(self.name, gid).set(size.registered)
                state = self._groups.get(gid)
                name = (state.config.name if state is not None else "") or gid
                old = self._published.get(gid)
                if old is not None and old != name:
                    _forget(metrics.GROUP_INFO, self.name, gid, old)
                metrics.GROUP_INFO.labels(self.name, gid, name).set(1)
                self._published[gid] = name

    def _unpublish_sizes(self, gone: set[str]) -> None:
        """Remove the series of groups this provider no longer serves (or of all, when it stops)."""
        with self._lock:
            for gid in gone:
                _forget(metrics.GROUP_TARGET_SIZE, self.name, gid)
                _forget(metrics.GROUP_MACHINES, self.name, gid)
                name = self._published.pop(gid, None)
                if name is not None:
                    _forget(metrics.GROUP_INFO, self.name, gid, name)

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


def _forget(gauge: Gauge, *labels: str) -> None:
    """Remove one labelled series; one never set is not an error."""
    with contextlib.suppress(KeyError):
        gauge.remove(*labels)
