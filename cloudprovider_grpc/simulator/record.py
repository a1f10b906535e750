"""`simulate --record DIR --from-cluster`: watch a live cluster and write its workload changes.

One thread per kind lists it once (the objects go into the starting snapshot) and then watches
from the list's resourceVersion with the official client's `Watch`, asking for bookmarks so the
version it resumes from stays fresh. When the apiserver answers `410 Gone` (the version fell out
of its watch window, e.g. after an etcd compaction or a long disconnect), the thread lists again
and writes the difference between what it knew and what the list holds as ordinary changes, after
a `relist` marker: no change is lost, and none is written twice. Other errors (a dropped
connection, an apiserver restart) resume the watch from the last version seen after a short pause.

Only what a replay uses is written (see `eventlog`): replica counts and templates of
controllers, Jobs starting and finishing, bare pods, DaemonSets, PDBs, nodes coming and going, and
cluster-autoscaler's own account: its Events and its status ConfigMap (listed with field
selectors, so only CA's; a recorder refused them records without, with a warning).
Each object's last written state is kept, so an update that changes nothing replayed (a status
heartbeat, a pod of a Deployment turning Ready) writes nothing.

The recording stops after `--for` or on SIGINT/SIGTERM; either way the log gets its `end` line
and is closed, the watches' sockets are shut and their threads joined (for a few seconds at most:
they are daemons).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cloudprovider_grpc.core.stopsignals import StopSignals
from cloudprovider_grpc.simulator.cluster_objects import SnapshotError, meta_of
from cloudprovider_grpc.simulator.eventlog import SNAPSHOT, Header, Writer
from cloudprovider_grpc.simulator.record_objects import (
    KINDS,
    Kind,
    Known,
    compact,
    head_of,
    stripped,
)

log = logging.getLogger(__name__)

#: server-side timeout of one watch request; the thread then watches again from where it was
WATCH_SECONDS = 60
#: pause before watching again after an error other than 410 Gone
RETRY_SECONDS = 2.0
#: how long `stop()` waits for the watch threads (one still connecting finishes its request)
STOP_SECONDS = 10.0


class Recorder:
    """Lists, then watches, every kind; writes the snapshot and the event log under `directory`.

    `api_client`: a `kubernetes.client.ApiClient`. `clock`: monotonic seconds (tests pass their
    own). Use `start()`, then `stop(reason)` from any thread, or `run(duration)`."""

    def __init__(
        self,
        api_client: Any,
        directory: Path,
        *,
        watch_seconds: int = WATCH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api_client = api_client
        self.directory = directory
        self.watch_seconds = watch_seconds
        self.clock = clock
        self.t0 = 0.0
        self.writer: Writer | None = None
        self.stopped = threading.Event()
        self.known: dict[str, dict[str, Known]] = {}
        self.versions: dict[str, str | None] = {}
        self.relists: dict[str, int] = {}
        self._threads: list[threading.Thread] = []
        self._streams: dict[str, Any] = {}  # kind -> the watch response streaming now
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ listing
    def _call(self, kind: Kind) -> Callable[..., Any]:
        from kubernetes import client

        return getattr(getattr(client, kind.api)(self.api_client), kind.method)

    def list(self, kind: Kind) -> tuple[list[dict[str, Any]], str]:
        """Every object of `kind` (as the API serializes it) and the list's resourceVersion."""
        resp = self._call(kind)(_preload_content=False, **self._selector(kind))
        data = json.loads(resp.data)
        items = [stripped(i, kind) for i in data.get("items") or []]
        return items, str((data.get("metadata") or {}).get("resourceVersion") or "")

    @staticmethod
    def _selector(kind: Kind) -> dict[str, Any]:
        return {"field_selector": kind.selector} if kind.selector else {}

    # ------------------------------------------------------------------ start/stop
    def start(self, threads: bool = True) -> None:
        """List everything (the snapshot), open the log, start one watch thread per kind (unless
        not `threads`: then the caller runs `watch_once`)."""
        from kubernetes.client.exceptions import ApiException

        self.t0 = self.clock()
        started = datetime.now(UTC)
        objects: list[dict[str, Any]] = []
        kinds = []
        for kind in KINDS:
            try:
                items, rv = self.list(kind)
            except ApiException as exc:
                if kind.optional and exc.status in (401, 403, 404):
                    log.warning(
                        "cannot list %s (%s %s): recording without cluster-autoscaler's %s",
                        kind.name,
                        exc.status,
                        exc.reason,
                        "Events" if kind.name == "Event" else "status ConfigMap",
                    )
                    continue
                raise SnapshotError(f"cannot list {kind.name}: {exc.status} {exc.reason}") from None
            except Exception as exc:  # urllib3 errors: one line, no traceback
                raise SnapshotError(f"cannot list {kind.name}: {exc}") from None
            kinds.append(kind)
            if kind.in_snapshot:
                objects.extend(items)
            if kind.watched:
                self.versions[kind.name] = rv
                self.known[kind.name] = {}
                for obj in items:
                    fields = compact(kind.name, obj)
                    if fields is not None:
                        self.known[kind.name][str(meta_of(obj).get("uid"))] = Known(
                            fields, head_of(kind, obj)
                        )
        self.directory.mkdir(parents=True, exist_ok=True)
        snapshot = {"apiVersion": "v1", "kind": "List", "items": objects}
        (self.directory / SNAPSHOT).write_text(json.dumps(snapshot, separators=(",", ":")), encoding="utf-8")
        watched = [k.name for k in kinds if k.watched]
        self.writer = Writer(self.directory, Header(started, watched))
        for kind in kinds if threads else ():
            if kind.watched:
                t = threading.Thread(target=self._watch, args=(kind,), name=f"watch-{kind.name}", daemon=True)
                self._threads.append(t)
                t.start()

    def now(self) -> float:
        return round(self.clock() - self.t0, 3)

    def stop(self, reason: str) -> None:
        """End the log (idempotent): its `end` line, then close; then end the watches (their
        sockets shut) and wait a little for their threads."""
        self.stopped.set()
        if self.writer is not None:
            self.writer.close(self.now(), reason)
        with self._lock:
            streams = list(self._streams.values())
        for resp in streams:
            with contextlib.suppress(Exception):  # already closed by its thread
                resp.shutdown()
        deadline = time.monotonic() + STOP_SECONDS
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def run(self, duration: float | None, on_signal: bool = True) -> str:
        """Record until `duration` seconds pass or SIGINT/SIGTERM (`on_signal`, main thread only);
        returns why it stopped. The log is flushed every second meanwhile."""
        reason = "duration"
        # the signals are read from a socket, never by a handler that sets `stopped` (core/stopsignals.py)
        in_main = threading.current_thread() is threading.main_thread()
        signals = StopSignals() if on_signal and in_main else None
        with signals if signals is not None else contextlib.nullcontext():
            try:
                self.start()
                deadline = None if duration is None else self.clock() + duration
                while not self.stopped.is_set():
                    left = 1.0 if deadline is None else min(1.0, deadline - self.clock())
                    if left <= 0:
                        break
                    if signals is not None:
                        if signals.wait(left) is not None:
                            reason = "signal"
                            break
                    else:
                        self.stopped.wait(left)
                    assert self.writer is not None
                    self.writer.flush()
            finally:
                self.stop(reason)
        return reason

    # ------------------------------------------------------------------ watching
    def _watch(self, kind: Kind) -> None:
        while not self.stopped.is_set():
            self.watch_once(kind)

    def watch_once(self, kind: Kind) -> None:
        """One round of a kind's watch thread: list again if the version is gone, then one watch
        request, until the server ends it (`watch_seconds`), `410 Gone`, an error, or stop.

        The request's response is kept while it streams, so that `stop()` can shut its socket and
        the thread ends at once instead of being abandoned mid-request (a process exiting under
        a thread inside a TLS connection can abort)."""
        from kubernetes.client.exceptions import ApiException
        from kubernetes.watch.watch import iter_resp_lines

        if self.versions.get(kind.name) is None:
            try:
                self.relist(kind)
            except Exception as exc:  # the apiserver may be away: retry
                if not self.stopped.is_set():
                    log.warning("listing %s failed, retrying: %s", kind.name, getattr(exc, "reason", exc))
                    self.stopped.wait(RETRY_SECONDS)
                return
        resp = None
        try:
            resp = self._call(kind)(
                watch=True,
                _preload_content=False,
                resource_version=self.versions[kind.name],
                allow_watch_bookmarks=True,
                timeout_seconds=self.watch_seconds,
                _request_timeout=self.watch_seconds + 10,
                **self._selector(kind),
            )
            with self._lock:
                self._streams[kind.name] = resp
            if self.stopped.is_set():  # stopped while connecting: stop() did not see this one
                return
            for line in iter_resp_lines(resp):
                if self.stopped.is_set():
                    break
                if line:
                    event = json.loads(line)
                    self.on_event(kind, str(event.get("type")), event.get("object") or {})
        except ApiException as exc:
            if exc.status == 410:
                # the version is older than the apiserver's watch window: list again
                self.versions[kind.name] = None
                return
            if not self.stopped.is_set():
                log.warning("watching %s failed, retrying: %s %s", kind.name, exc.status, exc.reason)
                self.stopped.wait(RETRY_SECONDS)
        except Exception as exc:  # dropped connections, timeouts: resume
            if not self.stopped.is_set():
                log.warning("watching %s interrupted, resuming: %s", kind.name, exc)
                self.stopped.wait(RETRY_SECONDS)
        finally:
            if resp is not None:
                with self._lock:
                    self._streams.pop(kind.name, None)
                resp.close()

    def on_event(self, kind: Kind, type_: str, obj: Mapping[str, Any]) -> None:
        """One watch event: remember its resourceVersion, write the change it makes, if any."""
        meta = meta_of(obj)
        if type_ == "ERROR":
            if obj.get("code") == 410:
                self.versions[kind.name] = None
            return
        if meta.get("resourceVersion"):
            self.versions[kind.name] = str(meta["resourceVersion"])
        if type_ == "BOOKMARK":
            return
        if type_ == "DELETED" or (kind.name == "Pod" and meta.get("deletionTimestamp")):
            # a pod being deleted is gone for the replay: nothing waits on its grace period
            self._delete(kind, meta)
        else:
            self._change(kind, obj)

    def relist(self, kind: Kind) -> None:
        """List `kind` again and write what changed since the log last spoke of it."""
        items, rv = self.list(kind)
        self.relists[kind.name] = self.relists.get(kind.name, 0) + 1
        self._write({"op": "relist", "kind": kind.name, "reason": "410 Gone"})
        seen = set()
        for obj in items:
            seen.add(str(meta_of(obj).get("uid")))
            self._change(kind, obj)
        for uid in [u for u in self.known[kind.name] if u not in seen]:
            self._write({"op": "delete", **self.known[kind.name].pop(uid).head})
        self.versions[kind.name] = rv

    def _change(self, kind: Kind, obj: Mapping[str, Any]) -> None:
        fields = compact(kind.name, obj)
        if fields is None:
            return
        head = head_of(kind, obj)
        uid = head["uid"]
        known = self.known[kind.name].get(uid)
        new = Known(fields, head)
        if known is None:
            self._write({"op": "add", **head, **fields})
        else:
            changed = {k: v for k, v in new.fields.items() if known.fields.get(k) != v}
            if new.template != known.template:
                changed["template"] = fields["template"]
            if not changed:
                return
            if kind.whole:
                changed = dict(fields)
            self._write({"op": "update", **head, **changed})
        self.known[kind.name][uid] = new

    def _delete(self, kind: Kind, meta: Mapping[str, Any]) -> None:
        known = self.known[kind.name].pop(str(meta.get("uid")), None)
        if known is not None:
            self._write({"op": "delete", **known.head})

    def _write(self, record: dict[str, Any]) -> None:
        if self.writer is not None:
            self.writer.write({"t": self.now(), **record})


def _warn_once_if_unverified(api_client: Any) -> None:
    """With `insecure-skip-tls-verify` in the kubeconfig, say so once, and silence urllib3's
    `InsecureRequestWarning`, which would otherwise repeat for the requests of every watch thread."""
    import warnings

    import urllib3

    if api_client.configuration.verify_ssl:
        return
    warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
    log.warning(
        "the kubeconfig turns TLS verification off (insecure-skip-tls-verify): the apiserver %s "
        "is not authenticated",
        api_client.configuration.host,
    )


def record_cluster(
    directory: Path, kubeconfig: str | None, context: str | None, duration: float | None
) -> tuple[Recorder, str]:
    """The command: record the cluster into `directory` until `duration` or a signal."""
    try:
        from kubernetes import config
    except ImportError as exc:  # pragma: no cover - a dependency
        raise SnapshotError(f"--record needs the 'kubernetes' package: {exc}") from None
    try:
        api_client = config.new_client_from_config(config_file=kubeconfig, context=context)
    except Exception as exc:  # the client raises ConfigException, FileNotFoundError, ...
        raise SnapshotError(f"cannot load the kubeconfig: {exc}") from None
    _warn_once_if_unverified(api_client)
    recorder = Recorder(api_client, directory)
    try:
        reason = recorder.run(duration)
    finally:
        api_client.close()
    return recorder, reason
