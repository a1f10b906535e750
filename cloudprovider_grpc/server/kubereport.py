"""`serve --kube-status`: the status ConfigMap and Kubernetes Events, written by one background
thread, never inside an RPC.

- **The ConfigMap** `cloudprovider-grpc-status` in the server's namespace (beside CA's
  `cluster-autoscaler-status`): key `status` holds the document of status.py as YAML in CA's
  shape (castatus.py), the annotation CA's Go time format. It is rewritten
  only when the document changed beyond its clock readings (status.VOLATILE), after a Refresh
  or an occurrence woke the thread, and at most every `min_interval` seconds.
- **Events** as cluster-autoscaler records its own (core/v1 Events through client-go's record
  package, so `kubectl describe` and `kubectl get events` show them the same way): about a group
  on the status ConfigMap, about a machine on its Node (core/v1 Events of cluster-scoped objects
  live in the `default` namespace, as client-go puts them). Correlated as client-go does
  (events.py): identical ones bump a count by patch, a flood is cut by a token bucket per object.
- **Leader only**: with leader election, a standby writes nothing (its view is a warm copy).

A failing API server costs a log line per kind of failure and change, never the RPC path: the
queue of occurrences is bounded and the oldest are dropped when it is full.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from cloudprovider_grpc.core.secrets import redact
from cloudprovider_grpc.ha.lease import api_problem
from cloudprovider_grpc.observability import castatus
from cloudprovider_grpc.observability.events import Correlator, Event, ObjectRef, Write
from cloudprovider_grpc.providers.machinery.activity import Occurrence
from cloudprovider_grpc.server import status

log = logging.getLogger(__name__)

CONFIGMAP = "cloudprovider-grpc-status"
COMPONENT = "cloudprovider-grpc"
LAST_UPDATED = "cloudprovider-grpc.io/last-updated"
#: namespace of the Events of cluster-scoped objects (client-go: metav1.NamespaceDefault)
NODE_EVENTS_NAMESPACE = "default"
#: a message longer than this is cut (the events.k8s.io/v1 limit is 1 kB; we keep core/v1 Events short too)
MAX_MESSAGE = 1024
QUEUE_LIMIT = 1000


def _time(wall: float) -> str:
    return datetime.fromtimestamp(wall, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class KubeReporter:
    """Writes the status ConfigMap and the Events; see the module docstring."""

    def __init__(
        self,
        core: Any,
        namespace: str,
        build_status: Callable[[], dict[str, Any]],
        *,
        identity: str,
        may_write: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.time,
        min_interval: float = 1.0,
        timeout: float = 5.0,
    ) -> None:
        self.core, self.namespace, self.identity = core, namespace, identity
        self._build_status = build_status
        self._may_write = may_write
        self._clock = clock
        self._min_interval = min_interval
        self._timeout = timeout
        self.correlator = Correlator(clock)
        self._queue: collections.deque[Occurrence] = collections.deque(maxlen=QUEUE_LIMIT)
        self._cond = threading.Condition()
        self._dirty = True
        self._stopping = False
        self._written: Any = None  # stable() of the document last written
        self._configmap_uid = ""
        self._node_uids: dict[str, str] = {}
        self._problems: dict[str, str] = {}  # what failed last, by kind (logged once per change)
        self._thread: threading.Thread | None = None
        self.configmap_writes = 0  # API writes made, by kind (tests)
        self.event_writes = 0

    # ---- from the provider (any thread, possibly under its lock): queue and return
    def occurred(self, occurrence: Occurrence) -> None:
        with self._cond:
            self._queue.append(occurrence)
            self._cond.notify()

    def refreshed(self) -> None:
        with self._cond:
            self._dirty = True
            self._cond.notify()

    # ---- lifecycle
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kube-status", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        last = 0.0
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._stopping or self._dirty or bool(self._queue), timeout=30.0)
                if self._stopping:
                    return
                wait = self._min_interval - (time.monotonic() - last)
            if wait > 0:  # a burst of occurrences is written in one round
                time.sleep(wait)
            last = time.monotonic()
            self.flush()

    def flush(self) -> None:
        """One round: the ConfigMap if it changed, then every queued occurrence (tests call it)."""
        with self._cond:
            self._dirty = False
            pending = list(self._queue)
            self._queue.clear()
        if not self._may_write():
            return  # a standby: the leader reports
        self._sync_configmap()
        for occurrence in pending:
            self._record(occurrence)

    # ---- the ConfigMap
    def _sync_configmap(self) -> None:
        doc = self._build_status()
        fingerprint = status.stable(doc)
        if fingerprint == self._written and self._configmap_uid:
            return
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        now = self._clock()
        text = castatus.to_yaml(doc, now)
        body = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(
                name=CONFIGMAP, namespace=self.namespace, annotations={LAST_UPDATED: castatus.go_time(now)}
            ),
            data={"status": text},
        )
        try:
            try:
                current = self.core.read_namespaced_config_map(
                    CONFIGMAP, self.namespace, _request_timeout=self._timeout
                )
            except ApiException as exc:
                if exc.status != 404:
                    raise
                written = self.core.create_namespaced_config_map(
                    self.namespace, body, _request_timeout=self._timeout
                )
            else:
                body.metadata.resource_version = current.metadata.resource_version
                written = self.core.replace_namespaced_config_map(
                    CONFIGMAP, self.namespace, body, _request_timeout=self._timeout
                )
        except Exception as exc:
            self._problem(
                "configmap", f"writing ConfigMap {self.namespace}/{CONFIGMAP} failed: {api_problem(exc)}"
            )
            return
        self.configmap_writes += 1
        self._problem("configmap", None)
        self._written = fingerprint
        self._configmap_uid = written.metadata.uid or ""

    # ---- Events
    def _involved(self, occurrence: Occurrence) -> ObjectRef:
        if occurrence.node:
            return ObjectRef("Node", occurrence.node, "", self._node_uid(occurrence.node))
        return ObjectRef("ConfigMap", CONFIGMAP, self.namespace, self._configmap_uid)

    def _node_uid(self, name: str) -> str:
        """The Node's uid (kubectl describe node selects its Events by it); "" when unreadable."""
        if name not in self._node_uids:
            try:
                node = self.core.read_node(name, _request_timeout=self._timeout)
                self._node_uids[name] = node.metadata.uid or ""
            except Exception:
                self._node_uids[name] = ""
            if len(self._node_uids) > 4096:
                self._node_uids.clear()
        return self._node_uids[name]

    def _record(self, occurrence: Occurrence) -> None:
        message = redact(occurrence.message)
        if len(message) > MAX_MESSAGE:
            message = message[: MAX_MESSAGE - 3] + "..."
        event = Event(
            self._involved(occurrence),
            occurrence.reason,
            message,
            "Warning" if occurrence.warning else "Normal",
        )
        write = self.correlator.correlate(event)
        if write is None:
            return
        try:
            self._send(write)
        except Exception as exc:
            self.correlator.forget(write)
            self._problem("event", f"recording Event {event.reason} failed: {api_problem(exc)}")
            return
        self.event_writes += 1
        self._problem("event", None)

    def _send(self, write: Write) -> None:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        event = write.event
        namespace = event.involved.namespace or NODE_EVENTS_NAMESPACE
        if write.patch:
            patch = {"count": write.count, "lastTimestamp": _time(write.last), "message": event.message}
            try:
                self.core.patch_namespaced_event(
                    write.name,
                    namespace,
                    patch,
                    _request_timeout=self._timeout,
                    _content_type="application/strategic-merge-patch+json",
                )
                return
            except ApiException as exc:
                if exc.status != 404:
                    raise
                # gone (expired, or never written because the spam filter held the first one back):
                # create it, with the count it has reached, as client-go does
        ref = event.involved
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(name=write.name, namespace=namespace),
            involved_object=client.V1ObjectReference(
                kind=ref.kind,
                name=ref.name,
                namespace=ref.namespace or None,
                uid=ref.uid or None,
                api_version=ref.api_version,
            ),
            reason=event.reason,
            message=event.message,
            type=event.type,
            count=write.count,
            first_timestamp=datetime.fromtimestamp(write.first, UTC),
            last_timestamp=datetime.fromtimestamp(write.last, UTC),
            source=client.V1EventSource(component=COMPONENT, host=self.identity or None),
            reporting_component=COMPONENT,
            reporting_instance=self.identity or None,
        )
        self.core.create_namespaced_event(namespace, body, _request_timeout=self._timeout)

    def _problem(self, kind: str, problem: str | None) -> None:
        if problem is None:
            if self._problems.pop(kind, None) is not None:
                log.info("kubernetes status: %s writes work again", kind)
            return
        if self._problems.get(kind) != problem:
            log.warning("kubernetes status: %s", problem)
        self._problems[kind] = problem


def start_reporting(
    settings: Any, provider: Any, build_status: Callable[[], dict[str, Any]], elector: Any
) -> KubeReporter:
    """The reporter of `serve --kube-status`, listening to the provider and running."""
    from cloudprovider_grpc.ha.lease import default_identity, default_namespace

    reporter = KubeReporter(
        core_api(settings.leader_elect.kubeconfig),
        default_namespace(settings.kube_status_namespace),
        build_status,
        identity=elector.identity if elector is not None else default_identity(""),
        may_write=(lambda: elector.ready) if elector is not None else (lambda: True),
    )
    activity = getattr(provider, "activity", None)
    if activity is not None:
        activity.listen(reporter.occurred, reporter.refreshed)
    reporter.start()
    return reporter


def core_api(kubeconfig: Any) -> Any:
    """The core/v1 API from `kubeconfig`, else the pod's service account (as the Lease's)."""
    from kubernetes import client

    from cloudprovider_grpc.ha.lease import coordination_api

    return client.CoreV1Api(coordination_api(kubeconfig).api_client)


__all__ = ["CONFIGMAP", "KubeReporter", "core_api", "start_reporting"]
