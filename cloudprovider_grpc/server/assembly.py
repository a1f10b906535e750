"""Server assembly: gRPC (TLS/mTLS, reflection, health), metrics/health HTTP port, shutdown.

Why the synchronous grpcio server with a thread pool rather than grpc.aio: every RPC but Refresh is
a dictionary lookup under a lock, and all cloud I/O happens in Refresh and in background worker
threads through `requests`, which blocks. A thread pool runs that code as it is, with no bridging
between an event loop and threads, and measured p99 stays far under a millisecond (see
benchmarks/rpc_latency.py and the README).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc

from cloudprovider_grpc.config.settings import Settings
from cloudprovider_grpc.core import unixsocket
from cloudprovider_grpc.core.addresses import host_of, is_loopback
from cloudprovider_grpc.core.errors import ServerStartError
from cloudprovider_grpc.core.stopsignals import StopSignals
from cloudprovider_grpc.front.link import unary_calls
from cloudprovider_grpc.front.supervisor import FrontLink, front_binary, start_front
from cloudprovider_grpc.grpcapi.admission import Gate
from cloudprovider_grpc.grpcapi.handlers import register
from cloudprovider_grpc.grpcapi.health import HealthService, add_standard_services, set_serving
from cloudprovider_grpc.grpcapi.servicer import CloudProviderServicer
from cloudprovider_grpc.grpcapi.wire import SERVICE_NAME
from cloudprovider_grpc.ha.election import Elector, build_elector
from cloudprovider_grpc.ha.handover import HandOverRelay, advertised_address
from cloudprovider_grpc.observability import tracing
from cloudprovider_grpc.providers.contract import CloudProvider
from cloudprovider_grpc.providers.machinery.gate import DryRunGate
from cloudprovider_grpc.providers.registry import build_provider
from cloudprovider_grpc.server import status
from cloudprovider_grpc.server.metrics_port import start_metrics_http
from cloudprovider_grpc.tls.reload import CertReloader

__all__ = ["ServerHandle", "ServerStartError", "serve_forever", "start_server"]

log = logging.getLogger(__name__)


#: at shutdown, how long no RPC may have arrived before the port closes (see Gate.wait_quiet)
QUIET_BEFORE_CLOSE = 0.2


def _grpc_address(address: str) -> str:
    """':8086' (Go style, all interfaces) -> '[::]:8086'; a unix socket as grpcio binds it."""
    if unixsocket.is_unix(address):
        return f"unix:{unixsocket.socket_path(address)}"
    return f"[::]{address}" if address.startswith(":") else address


@dataclass
class ServerHandle:
    """A running server. `stop()` is idempotent and may be called from any thread."""

    server: grpc.Server
    provider: CloudProvider
    health: HealthService
    port: int
    host: str
    gate: Gate = field(default_factory=Gate)
    metrics_server: ThreadingHTTPServer | None = None
    metrics_port: int = 0
    #: /healthz and /readyz answer 200 only between the start of gRPC serving and shutdown
    serving: bool = False
    #: the compiled front owning the public port, or None when Python serves it directly
    front: FrontLink | None = None
    #: set by stop() when the grace period ran out with RPCs still running (they were cancelled):
    #: the process then exits with status 1
    cut_off: bool = False
    #: the leader election (`--leader-elect`), or None
    leader: Elector | None = None
    #: with leader election: what forwards the calls reaching a leader handing over (handover.py)
    relay: HandOverRelay | None = None
    #: `--kube-status`: what writes the status ConfigMap and the Events, or None
    reporter: Any = None
    #: the public port as a unix socket: its path and the inode bound (removed at shutdown), or None
    unix_socket: Path | None = None
    socket_inode: int | None = None
    #: set when a part failed for good (see fail): the process then exits with status 1
    failed: threading.Event = field(default_factory=threading.Event)
    _stopping: bool = False
    _stopped: threading.Event = field(default_factory=threading.Event)
    _stop_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def address(self) -> str:
        """Where a client dials the public port: HOST:PORT, or `unix:PATH` for a socket."""
        if self.unix_socket is not None:
            return f"unix:{self.unix_socket}"
        host = self.host if self.host not in ("", "[::]", "0.0.0.0") else "127.0.0.1"
        return f"{host}:{self.port}"

    def stop(self, grace: float = 10.0) -> None:
        """Stop within `grace` seconds, which bound the whole shutdown.

        Order: health NOT_SERVING; new RPCs answer UNAVAILABLE ("not executed") while the port stays
        open, so a call in transit is never cut off mid-way; the admitted RPCs finish (until the
        deadline); health Watch streams end; the port closes, cancelling only what still runs at the
        deadline; background workers get what is left of the grace."""
        with self._stop_lock:
            if self._stopped.is_set():
                return
            deadline = time.monotonic() + grace
            self._stopping = True
            self._stop_taking_calls(deadline)
            self.health.end_watches()
            self._close_ports(deadline)
            self._stop_background(deadline)
            self._stopped.set()
            log.info("server stopped")

    def _stop_taking_calls(self, deadline: float) -> None:
        """Health NOT_SERVING, and the calls in flight finished or handed over, while the port
        stays open."""
        if self.leader is not None:
            # replicas: the Lease to a successor first, while calls are still answered; then the
            # port's GOAWAY sends callers to the new leader (there is no quiet moment to wait for)
            self.leader.hand_over(deadline)
            self.serving = False
            self.health.enter_graceful_shutdown()
            return
        self.serving = False
        self.health.enter_graceful_shutdown()
        if self.front is not None:
            self.front.closing()  # from now on every call reaches the gate below
        self.gate.close()
        # the port closes once callers have stopped arriving (a quiet moment), bounded by the grace
        if not self.gate.wait_quiet(QUIET_BEFORE_CLOSE, deadline) and self.gate.active:
            self.cut_off = True
            log.warning("grace period over with %d RPCs still running; cancelling them", self.gate.active)

    def _close_ports(self, deadline: float) -> None:
        """The public port (the front's, then Python's), cancelling only what still runs at the
        deadline; then the relay and the front's link, whose calls ended with the port's."""
        remaining = max(deadline - time.monotonic(), 0.0)
        if self.front is not None:
            # the public port closes first; Python's socket serves the relayed calls meanwhile
            self.front.stop(remaining)
            remaining = max(deadline - time.monotonic(), 0.0)
        self.server.stop(remaining).wait(remaining)
        if self.unix_socket is not None:
            unixsocket.remove(self.unix_socket, self.socket_inode)
        if self.relay is not None:
            self.relay.close()  # the forwarded calls finished with the port's last calls
        if self.front is not None:
            self.front.close()

    def _stop_background(self, deadline: float) -> None:
        """The provider's workers, the status reporter, the metrics port and tracing, with what is
        left of the grace."""
        self.provider.stop(timeout=max(deadline - time.monotonic(), 0.0))
        if self.reporter is not None:
            self.reporter.stop(max(deadline - time.monotonic(), 0.0))
        if self.metrics_server is not None:
            self.metrics_server.shutdown()
            self.metrics_server.server_close()
        tracing.shutdown(max(deadline - time.monotonic(), 0.5))

    def wait(self, timeout: float | None = None) -> bool:
        return self._stopped.wait(timeout)

    @property
    def replica_ready(self) -> bool:
        """Serving, and (with leader election) labelled for its role, leader or standby: what
        /readyz/replica reports, the readiness probe of a leader-elected pod."""
        return self.serving and (self.leader is None or self.leader.replica_ready)

    @property
    def ready(self) -> bool:
        """Serving, and (with leader election) leading: what /readyz reports."""
        return self.serving and (self.leader is None or self.leader.ready)

    def front_serving(self, up: bool) -> None:
        """The front died or lost Python's socket (False), or serves again (True): /healthz reports
        it, rather than a healthy server nobody can reach."""
        if not self._stopping:
            self.serving = up

    def fail(self, why: str) -> None:
        """A part of the server failed for good (the front kept dying): `serve_forever` stops the
        server and the process exits with status 1."""
        self.failed.set()
        self.serving = False


def start_server(settings: Settings | None = None, *, provider: CloudProvider | None = None) -> ServerHandle:
    """Build the provider (unless given), bind the ports, start serving; raise ServerStartError.

    The parts, in the order they start: the provider, the gRPC server with our handlers and the
    health and reflection services, the public port (the compiled front's or Python's own), the
    metrics/health HTTP port, the Kubernetes status reporter, then serving, then the leader election.
    """
    settings = settings or Settings()
    tracing.configure()  # OTEL_* variables: spans of RPCs, background jobs and cloud calls (tracing.py)
    binary = front_binary(settings)
    elector = build_elector(settings.leader_elect) if settings.leader_elect.enabled else None
    if provider is None:
        provider = _build_provider(settings, elector)
    relay = HandOverRelay(SERVICE_NAME, elector.identity, settings.tls) if elector is not None else None
    servicer = CloudProviderServicer(provider, behind_front=binary is not None, relay=relay)
    server = _grpc_server(settings)
    handlers = register(server, servicer)
    health_servicer, standard = add_standard_services(server)
    address = _grpc_address(settings.address)
    link, port = _open_public_port(binary, settings, server, handlers, standard, address)
    handle = ServerHandle(server, provider, health_servicer, port, host_of(address), servicer.gate)
    if settings.unix_socket is not None:
        handle.unix_socket = settings.unix_socket
        handle.socket_inode = unixsocket.inode(settings.unix_socket)
    _attach_front(handle, link, relay)

    def status_now() -> dict[str, Any]:
        return status.snapshot(provider, elector.view if elector is not None else None)

    if settings.metrics_address:
        _start_metrics_port(handle, settings, status_now)
    if settings.kube_status:
        from cloudprovider_grpc.server.kubereport import start_reporting

        handle.reporter = start_reporting(settings, provider, status_now, elector)
    _start_serving(handle)
    if elector is None:
        set_serving(health_servicer, True)
    else:
        _start_election(handle, elector, advertised_address(host_of(address), port))
    _log_started(handle, settings, address)
    return handle


def _build_provider(settings: Settings, elector: Elector | None) -> CloudProvider:
    """The configured cloud's provider; its writes pass the Lease gate of a leader-elected replica,
    or the dry-run gate that refuses them all."""
    gate = elector.gate if elector is not None else DryRunGate() if settings.dry_run else None
    return build_provider(settings.provider, settings.provider_context(gate=gate))


def _grpc_server(settings: Settings) -> grpc.Server:
    """The grpcio server, its thread pool sized by `grpc_workers`; nothing registered, nothing bound."""
    return grpc.server(
        futures.ThreadPoolExecutor(max_workers=settings.grpc_workers, thread_name_prefix="grpc"),
        # a second server on the same port must fail loudly, not silently share it (grpc default is 1)
        options=[("grpc.so_reuseport", 0)],
    )


def _open_public_port(
    binary: Path | None,
    settings: Settings,
    server: grpc.Server,
    handlers: dict[str, grpc.RpcMethodHandler],
    standard: dict[str, grpc.RpcMethodHandler],
    address: str,
) -> tuple[FrontLink | None, int]:
    """The compiled front on the public port when there is one, else Python's own gRPC port; returns
    the front's link (or None) and the bound port. `handlers` are ours by method name, `standard`
    the health and reflection services' by full name."""
    if settings.unix_socket is not None:
        unixsocket.claim(settings.unix_socket)
    if binary is None:
        return None, _listen(server, settings, address)
    # every unary method goes over the front's link, the streaming ones over gRPC
    registered = {f"/{SERVICE_NAME}/{name}": handler for name, handler in handlers.items()} | standard
    return start_front(binary, settings, server, unary_calls(registered))


_NOT_LISTENING = (
    "cannot listen on {}: the port is in use or the host is not an address of this machine"
    " (choose another with --address)"
)


def _listen(server: grpc.Server, settings: Settings, address: str) -> int:
    """Python serving the public port itself (no compiled front): bind it, with TLS (reloaded
    certificates) when configured; returns the bound port."""
    mode = settings.socket_mode if settings.unix_socket is not None else None
    try:
        with unixsocket.created_with(mode) if mode is not None else contextlib.nullcontext():
            if settings.tls.enabled:
                port = server.add_secure_port(address, CertReloader(settings.tls).credentials())
            else:
                port = server.add_insecure_port(address)
    except RuntimeError as exc:
        if settings.unix_socket is not None:
            raise ServerStartError(f"cannot listen on {settings.address}: {exc}") from None
        # grpc's own text points at GRPC_VERBOSITY; the cause is nearly always one of these
        raise ServerStartError(_NOT_LISTENING.format(settings.address)) from None
    if not port:
        raise ServerStartError(_NOT_LISTENING.format(settings.address))
    if settings.unix_socket is not None and mode is not None:
        settings.unix_socket.chmod(mode)  # exactly the mode asked, whatever umask the process had
    return port


def _attach_front(handle: ServerHandle, link: FrontLink | None, relay: HandOverRelay | None) -> None:
    """Wire the compiled front (if any) and the hand-over relay (if any) to the handle: the front
    reports its health and failures there and learns the provider's state version."""
    handle.front = link
    handle.relay = relay
    if relay is not None and link is not None:
        relay.on_forwarding = link.closing  # the front's cache would answer for this replica's memory
    if link is not None:
        link.on_serving = handle.front_serving
        link.on_fatal = handle.fail
        link.version = handle.provider.state_version
        handle.provider.watch_state(link.push_version)


def _start_metrics_port(
    handle: ServerHandle, settings: Settings, status_now: Callable[[], dict[str, Any]]
) -> None:
    """The metrics/health HTTP port; when it cannot bind, what started so far is stopped again."""
    try:
        httpd = start_metrics_http(settings.metrics_address, handle, status_now)
    except OSError as exc:
        handle.server.stop(0)
        if handle.front is not None:
            handle.front.kill()
            handle.front.close()
        if handle.unix_socket is not None:
            unixsocket.remove(handle.unix_socket, handle.socket_inode)
        raise ServerStartError(
            f"cannot listen on metrics address {settings.metrics_address}: {exc.strerror}"
        ) from None
    handle.metrics_server, handle.metrics_port = httpd, httpd.server_address[1]


def _start_serving(handle: ServerHandle) -> None:
    """The provider's background work, then the gRPC server, then the front on the public port."""
    handle.provider.start()
    handle.server.start()
    if handle.front is not None:
        handle.front.serve()
        handle.front.push_version(handle.provider.state_version())
    handle.serving = True


def _start_election(handle: ServerHandle, elector: Elector, address: str) -> None:
    """A leader-elected replica starts as a standby (health NOT_SERVING) until the Lease says
    otherwise; losing the leadership stops the server."""
    health = handle.health
    set_serving(health, False)  # a standby until the Lease says otherwise
    handle.leader = elector
    elector.start(
        handle.provider,
        on_leading=lambda ready: set_serving(health, ready),
        on_lost=lambda: threading.Thread(target=handle.stop, name="shutdown", daemon=True).start(),
        address=address,
        relay=handle.relay,
    )


def _log_started(handle: ServerHandle, settings: Settings, address: str) -> None:
    """The line that says what serves where, and the warnings about a risky configuration."""
    metrics_at = (
        f"metrics on {settings.metrics_address.rpartition(':')[0]}:{handle.metrics_port}"
        if handle.metrics_server is not None
        else "metrics disabled"
    )
    where = (
        handle.address if handle.unix_socket is not None else f"{address.rpartition(':')[0]}:{handle.port}"
    )
    security = "mTLS" if settings.tls.ca else "TLS" if settings.tls.enabled else "plaintext"
    if handle.unix_socket is not None:
        security += f", socket mode {settings.socket_mode:04o}"
    log.info(
        "serving externalgrpc on %s (%s), %s, provider %s%s with %d node groups, front: %s",
        where,
        security,
        metrics_at,
        handle.provider.name,
        " (emulated cloud)" if settings.emulate else "",
        len(handle.provider.node_groups()),
        "compiled" if handle.front is not None else "python",
    )
    if settings.dry_run:
        log.warning(
            "dry run: the cloud is listed and never written; each write CA asks for is logged, "
            "counted in cloudprovider_grpc_dry_run_writes_total, and refused"
        )
    if not settings.tls.enabled and settings.unix_socket is None and not is_loopback(settings.address):
        log.warning(
            "gRPC on %s is plaintext and reachable beyond this host (--allow-plaintext): anyone who can "
            "reach it can create and delete machines; use TLS or a loopback address",
            settings.address,
        )


def serve_forever(settings: Settings) -> int:
    """Run until SIGTERM/SIGINT, then shut down within settings.grace_period.

    Returns 0 after a clean stop, 1 when work was still running at the end of the grace period. The
    caller must then end the process without waiting for threads (`os._exit`): a handler thread
    blocked on the cloud would otherwise hold the process past the grace period. The signals are
    taken before starting, so one during startup (a slow first listing) stops the server as soon
    as it is up; they are read without a lock (core/stopsignals.py)."""
    with StopSignals() as stop:
        handle = start_server(settings)
        while (signum := stop.wait(0.2)) is None:
            if handle.failed.is_set():
                # restarting the front did not help: stop, and exit 1 so that Kubernetes restarts the pod
                handle.stop(settings.grace_period)
                return 1
            if handle.wait(0):  # stopped on its own: the leadership was lost
                return 1
        log.info("received %s, shutting down (grace %gs)", signum.name, settings.grace_period)
        # the stop runs in a thread so that the grace period bounds it even if it blocks
        shutdown = threading.Thread(target=handle.stop, args=(settings.grace_period,), name="shutdown")
        shutdown.daemon = True
        shutdown.start()
        # the stop itself honours the grace; the margin covers the last bookkeeping after its deadline
        if handle.wait(settings.grace_period + 0.25) and not handle.cut_off:
            return 0
    log.error("grace period of %gs over with work unfinished; exiting anyway", settings.grace_period)
    return 1
