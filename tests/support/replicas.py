"""Replicas of `serve --leader-elect` on one emulated cloud and one real kube-apiserver, the Lease
they elect their leader on (read with the official client), and a port that follows readiness the
way a Kubernetes Service does.

`ReadinessProxy` listens on a loopback port and sends each new TCP connection to a replica whose
/readyz answers 200, the leader once it has taken over: what the chart's Service selects by the
label the leader puts on its own pod just before (ha/podrole.py; these processes run outside pods and
label nothing) (checked every `PROBE_EVERY` seconds, like a kubelet readiness probe feeding an
EndpointSlice); with no ready replica it refuses the connection at once, as kube-proxy rejects a
Service without endpoints. An open connection stays with its replica until either side closes it,
as with kube-proxy's conntrack: callers move to the new leader when the old one closes (GOAWAY).
"""

from __future__ import annotations

import select
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.support.backends import BackendUnderTest
from tests.support.clouds import ExternalCloud
from tests.support.ports import free_port
from tests.support.probes import ServerProcess, start_server
from tests.support.waits import poll

#: how often the proxy asks each replica whether it is ready (a kubelet's periodSeconds, scaled down)
PROBE_EVERY = 0.05
#: an old leader answers reads this long after its successor does: a few of the proxy's probes
HANDOVER_LINGER = 4 * PROBE_EVERY


def is_ready(server: ServerProcess, path: str = "/readyz") -> bool:
    """/readyz: the leader, taken over; /readyz/replica: a leader or a warm standby (a pod's
    readiness probe, which a rolling update waits on)."""
    if server.proc.poll() is not None:
        return False
    try:
        url = f"http://127.0.0.1:{server.metrics_port}{path}"
        with urllib.request.urlopen(url, timeout=1) as resp:
            return resp.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


@dataclass
class ReadinessProxy:
    """A Service in front of `backends` (a list the test may change while it runs)."""

    backends: list[ServerProcess] = field(default_factory=list)
    port: int = field(default_factory=free_port)
    _ready: ServerProcess | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _listener: socket.socket | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> ReadinessProxy:
        self._listener = socket.create_server(("127.0.0.1", self.port), backlog=128)
        self._listener.settimeout(0.2)
        for target in (self._probe, self._accept):
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def ready(self) -> ServerProcess | None:
        return self._ready

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(5)
        if self._listener is not None:
            self._listener.close()

    def _probe(self) -> None:
        while not self._stop.is_set():
            self._ready = next((b for b in list(self.backends) if is_ready(b)), None)
            self._stop.wait(PROBE_EVERY)

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            target = self._ready
            if target is None:
                client.close()  # no endpoint: refused at once
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", target.port), timeout=2)
            except OSError:
                client.close()
                continue
            threading.Thread(target=_pipe, args=(client, upstream, self._stop), daemon=True).start()


def _pipe(a: socket.socket, b: socket.socket, stop: threading.Event) -> None:
    """Copy bytes both ways until either side closes."""
    peers = {a: b, b: a}
    try:
        while not stop.is_set():
            readable, _, _ = select.select([a, b], [], [], 0.2)
            for sock in readable:
                data = sock.recv(65536)
                if not data:
                    return
                peers[sock].sendall(data)
    except OSError:
        return
    finally:
        a.close()
        b.close()


@dataclass
class Lease:
    """Where the replicas elect their leader."""

    kubeconfig: Path
    namespace: str
    name: str = "cloudprovider-grpc"
    duration: str = "15s"
    renew_deadline: str = "10s"
    retry_period: str = "2s"

    def flags(self) -> list[str]:
        return [
            "--leader-elect",
            "--kubeconfig",
            str(self.kubeconfig),
            "--leader-elect-resource-namespace",
            self.namespace,
            "--leader-elect-resource-name",
            self.name,
            "--leader-elect-lease-duration",
            self.duration,
            "--leader-elect-renew-deadline",
            self.renew_deadline,
            "--leader-elect-retry-period",
            self.retry_period,
        ]


def start_replica(
    backend: BackendUnderTest,
    workdir: Path,
    cloud: ExternalCloud,
    lease: Lease,
    name: str,
    extra: Iterable[str] = (),
    pod_namespace: str = "",
) -> ServerProcess:
    """One replica, identified as `name` (the pod name), alive once /healthz answers. With
    `pod_namespace` it labels the pod `name` there (ha/podrole.py), as in a Deployment."""
    env = {"POD_NAME": name, "CLOUDPROVIDER_GRPC_LEADER_ELECT__HANDOVER_LINGER": str(HANDOVER_LINGER)}
    if pod_namespace:
        env["POD_NAMESPACE"] = pod_namespace
    return start_server(backend, workdir, cloud=cloud, extra=[*lease.flags(), *extra], env=env, name=name)


def wait_leader(replicas: Sequence[ServerProcess], timeout: float = 60) -> ServerProcess:
    """The one replica that is ready (fails if two ever are at once while waiting)."""

    def one() -> ServerProcess | None:
        ready = [r for r in replicas if is_ready(r)]
        assert len(ready) <= 1, f"{len(ready)} replicas ready at once"
        return ready[0] if ready else None

    return poll(one, timeout, "a leader to be ready", 0.05)


def lease_api(lease: Lease) -> Any:
    """The official client's coordination API, as the test's administrator."""
    from kubernetes import client, config

    return client.CoordinationV1Api(config.new_client_from_config(config_file=str(lease.kubeconfig)))


def holder(lease: Lease, api: Any) -> str:
    return api.read_namespaced_lease(lease.name, lease.namespace).spec.holder_identity or ""


def wait_renewals(lease: Lease, since: datetime, count: int, timeout: float = 60) -> None:
    """Until the Lease has been renewed `count` times after `since` (read with the official client)."""
    api = lease_api(lease)
    seen: set[datetime] = set()

    def renewed() -> bool:
        renew = api.read_namespaced_lease(lease.name, lease.namespace).spec.renew_time
        if renew is not None and renew > since:
            seen.add(renew)
        return len(seen) >= count

    poll(renewed, timeout, f"{count} renewals of the Lease", 0.1)
