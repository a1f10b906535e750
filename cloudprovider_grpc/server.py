"""Server assembly: gRPC (TLS/mTLS, reflection, health), metrics/health HTTP port, shutdown.

Why the synchronous grpcio server with a thread pool rather than grpc.aio: every RPC but Refresh is
a dictionary lookup under a lock, and all cloud I/O happens in Refresh and in background worker
threads through `requests`, which blocks. A thread pool runs that code as it is, with no bridging
between an event loop and threads, and measured p99 stays far under a millisecond (see
benchmarks/rpc_latency.py and the README).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import tempfile
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2
from grpc_reflection.v1alpha import reflection, reflection_pb2
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from cloudprovider_grpc import metrics, rawparse
from cloudprovider_grpc.config import Settings, TLSSettings, is_loopback
from cloudprovider_grpc.errors import ConfigError
from cloudprovider_grpc.front import binary as front_binary
from cloudprovider_grpc.front.counters import FrontCounters
from cloudprovider_grpc.front.process import FrontProcess, FrontStartError, map_field_paths
from cloudprovider_grpc.leader import Elector, build_elector
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.providers.contract import CloudProvider
from cloudprovider_grpc.providers.gate import DryRunGate
from cloudprovider_grpc.providers.registry import build_provider
from cloudprovider_grpc.secrets import redact
from cloudprovider_grpc.service import CACHEABLE, SERVICE_NAME, CloudProviderServicer, Gate, method_handlers
from cloudprovider_grpc.tlsfiles import TLSFileError, TLSFiles, load_tls_files

log = logging.getLogger(__name__)


#: at shutdown, how long no RPC may have arrived before the port closes (see Gate.wait_quiet)
QUIET_BEFORE_CLOSE = 0.2


class ServerStartError(Exception):
    """The server could not start (port in use, unreadable certificates)."""


def _grpc_address(address: str) -> str:
    """':8086' (Go style, all interfaces) -> '[::]:8086'."""
    return f"[::]{address}" if address.startswith(":") else address


def _http_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


class _CertReloader:
    """Serves the current certificate files to gRPC core, which asks on every new handshake.

    Re-reads the files when their modification times change (Kubernetes swaps Secret volumes
    atomically). A changed set that does not load or whose key does not belong to its certificate (a
    rotation half done, a wrong file) is rejected once, with an error naming the file, and the
    previous pair stays in use, so a bad rotation never breaks handshakes."""

    def __init__(self, tls: TLSSettings) -> None:
        self._tls = tls
        self._lock = threading.Lock()
        self._stamp = self._stat()
        self._rejected: tuple[int, ...] | None = None
        try:
            self.files = self._read()
        except TLSFileError as exc:
            raise ServerStartError(f"TLS {exc}") from None
        self.config = self._configuration(self.files)

    @property
    def paths(self) -> list[Path]:
        return self._paths()

    def _paths(self) -> list[Path]:
        return [p for p in (self._tls.cert, self._tls.key, self._tls.ca) if p is not None]

    def _stat(self) -> tuple[int, ...]:
        try:
            return tuple(os.stat(p).st_mtime_ns for p in self._paths())
        except OSError:
            return ()

    def _read(self) -> TLSFiles:
        return load_tls_files(self._tls.cert, self._tls.key, self._tls.ca)  # type: ignore[arg-type]

    @staticmethod
    def _configuration(files: TLSFiles) -> grpc.ServerCertificateConfiguration:
        return grpc.ssl_server_certificate_configuration(
            [(files.key, files.cert)], root_certificates=files.ca
        )

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        files = self.fetch_files()
        return None if files is None else self._configuration(files)

    def fetch_files(self) -> TLSFiles | None:
        """The changed files once loaded and checked, else None (unchanged, or rejected and logged).
        grpcio asks through fetch(); the compiled front asks through its control channel."""
        stamp = self._stat()
        if not stamp or stamp == self._stamp or stamp == self._rejected:
            return None
        with self._lock:
            if stamp in (self._stamp, self._rejected):
                return None
            try:
                files = self._read()
            except TLSFileError as exc:
                self._rejected = stamp
                log.error("changed TLS files rejected, the previous certificate stays in use: %s", exc)
                return None
            self._stamp = stamp
        log.info("TLS certificate files changed and were loaded; new handshakes use them")
        self.files = files
        return files

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.dynamic_ssl_server_credentials(
            self.config, self.fetch, require_client_authentication=self._tls.ca is not None
        )


class _MetricsHandler(BaseHTTPRequestHandler):
    handle_ref: ServerHandle | None = None

    def do_GET(self) -> None:
        if self.path.split("?")[0] == "/metrics":
            # label values are ids and codes, never secrets; redacting the page makes that a guarantee
            body = redact(generate_latest(REGISTRY).decode()).encode()
            ctype, code = CONTENT_TYPE_LATEST, 200
        elif self.path.split("?")[0] in ("/healthz", "/readyz"):
            handle = self.server.handle_ref  # type: ignore[attr-defined]
            ok = handle is not None and handle.serving
            if ok and self.path.split("?")[0] == "/readyz" and handle.leader is not None:
                ok = handle.leader.ready  # a standby is alive but not ready: a Service skips it
            body, ctype, code = (b"ok\n" if ok else b"shutting down\n"), "text/plain", (200 if ok else 503)
        else:
            body, ctype, code = b"not found\n", "text/plain", 404
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # scrapes are not worth a log line
        return


class _Health(health.HealthServicer):
    """The standard health service, plus a way to end open Watch streams at shutdown: they never end
    on their own, and grpcio's graceful stop waits for every open call until the grace runs out."""

    def end_watches(self) -> None:
        with self._lock:
            callbacks = [cb for cbs in self._send_response_callbacks.values() for cb in cbs]
        for callback in callbacks:
            callback(None)  # the blocking watcher's iterator ends: the stream closes with OK


@dataclass
class ServerHandle:
    """A running server. `stop()` is idempotent and safe from a signal handler thread."""

    server: grpc.Server
    provider: CloudProvider
    health: _Health
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
    _stopped: threading.Event = field(default_factory=threading.Event)
    _stop_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def address(self) -> str:
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
            if self.leader is not None:  # the Lease to a successor first, while calls are still answered
                self.leader.hand_over(deadline)
            self.serving = False
            self.health.enter_graceful_shutdown()
            if self.front is not None:
                self.front.process.closing()  # from now on every call reaches the gate below
            self.gate.close()
            # the port closes only once callers have stopped arriving (a quiet moment), bounded by the grace
            # replicas: no quiet moment to wait for, the port's GOAWAY sends callers to the new leader
            quiet = QUIET_BEFORE_CLOSE if self.leader is None else 0.0
            if not self.gate.wait_quiet(quiet, deadline) and self.gate.active:
                self.cut_off = True
                log.warning("grace period over with %d RPCs still running; cancelling them", self.gate.active)
            self.health.end_watches()
            remaining = max(deadline - time.monotonic(), 0.0)
            if self.front is not None:
                # the public port closes first; Python's socket serves the relayed calls meanwhile
                self.front.process.stop(remaining)
                remaining = max(deadline - time.monotonic(), 0.0)
            self.server.stop(remaining).wait(remaining)
            if self.front is not None:
                self.front.close()
            self.provider.stop(timeout=max(deadline - time.monotonic(), 0.0))
            if self.metrics_server is not None:
                self.metrics_server.shutdown()
                self.metrics_server.server_close()
            self._stopped.set()
            log.info("server stopped")

    def wait(self, timeout: float | None = None) -> bool:
        return self._stopped.wait(timeout)

    def front_died(self) -> None:
        """The front exited on its own: the public port is gone, so /healthz reports it (a liveness
        probe then restarts the pod) rather than a healthy server nobody can reach."""
        self.serving = False


class FrontLink:
    """The compiled front serving the public port for this server, and what it shares with Python:
    a private directory (0700) holding Python's unix socket and the counters file."""

    def __init__(self, process: FrontProcess, directory: Path, counters: FrontCounters) -> None:
        self.process = process
        self.directory = directory
        self.counters = counters
        metrics.RPC.add_source(counters)

    def close(self) -> None:
        metrics.RPC.retire_source(self.counters)  # the front's counts stay in the totals
        shutil.rmtree(self.directory, ignore_errors=True)


def _front_binary(settings: Settings) -> Path | None:
    """The front to run for `settings.front` (auto, on, off), or None to serve from Python.

    auto falls back to Python with one info line; on refuses to start (a ConfigError: exit 2)."""
    if settings.front == "off":
        return None
    binary, why = front_binary.locate(settings.front_binary)
    if binary is None:
        if settings.front == "on":
            raise ConfigError("front", f"on, but {why}")
        log.info("compiled front not used (%s); Python serves the gRPC port", why)
    return binary


def _start_front(binary: Path, settings: Settings, server: grpc.Server) -> tuple[FrontLink, int]:
    """Python's gRPC server on a private unix socket, the front on the public address."""
    service = pb.DESCRIPTOR.services_by_name["CloudProvider"]
    directory = Path(tempfile.mkdtemp(prefix="cloudprovider-grpc-"))  # mode 0700
    try:
        socket_path = directory / "grpc.sock"
        if not server.add_insecure_port(f"unix:{socket_path}"):
            raise ServerStartError(f"cannot listen on the private socket {socket_path}")
        reloader = _CertReloader(settings.tls) if settings.tls.enabled else None
        counters = FrontCounters(directory / "counters", CACHEABLE, metrics._LATENCY_BUCKETS)
        process = FrontProcess(
            binary,
            listen=settings.address,
            backend=socket_path,
            counters=counters,
            cacheable=[f"/{SERVICE_NAME}/{name}" for name in CACHEABLE],
            maps={
                f"/{SERVICE_NAME}/{name}": map_field_paths(service.methods_by_name[name].input_type)
                for name in CACHEABLE
            },
            unary_prefix=f"/{SERVICE_NAME}/",  # every CloudProvider RPC is unary
            tls=reloader.files if reloader is not None else None,
            tls_paths=reloader.paths if reloader is not None else None,
            reload_tls=reloader.fetch_files if reloader is not None else None,
        )
    except OSError as exc:
        shutil.rmtree(directory, ignore_errors=True)
        raise ServerStartError(f"compiled front: cannot run {binary}: {exc.strerror or exc}") from None
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    link = FrontLink(process, directory, counters)
    try:
        port = process.wait_ready()
    except FrontStartError as exc:
        link.close()
        if exc.kind == "listen":
            raise ServerStartError(
                f"cannot listen on {settings.address}: address in use or not available"
            ) from None
        raise ServerStartError(f"compiled front: {exc.message}") from None
    return link, port


def start_server(settings: Settings | None = None, *, provider: CloudProvider | None = None) -> ServerHandle:
    """Build the provider (unless given), bind the ports, start serving; raise ServerStartError."""
    settings = settings or Settings()
    binary = _front_binary(settings)
    elector = build_elector(settings.leader_elect) if settings.leader_elect.enabled else None
    if provider is None:
        gate = elector.gate if elector is not None else DryRunGate() if settings.dry_run else None
        provider = build_provider(settings.provider, settings.provider_context(gate=gate))
    servicer = CloudProviderServicer(provider, behind_front=binary is not None)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=settings.grpc_workers, thread_name_prefix="grpc"),
        # a second server on the same port must fail loudly, not silently share it (grpc default is 1)
        options=[("grpc.so_reuseport", 0)],
    )
    # raw-bytes handlers: the service parses requests itself (see service._raw_handler)
    handlers = method_handlers(servicer)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)
    health_servicer = _Health()
    # the standard services parse their requests through our raw-bytes handlers too (see rawparse)
    health_service = health_pb2.DESCRIPTOR.services_by_name["Health"]
    rawparse.add_raw_service(server, health_service, health_servicer)
    reflection_service = reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"]
    rawparse.add_raw_service(
        server,
        reflection_service,
        reflection.ReflectionServicer((SERVICE_NAME, health_service.full_name, reflection.SERVICE_NAME)),
    )
    address = _grpc_address(settings.address)
    link: FrontLink | None = None
    if binary is not None:
        link, port = _start_front(binary, settings, server)
    else:
        try:
            if settings.tls.enabled:
                port = server.add_secure_port(address, _CertReloader(settings.tls).credentials())
            else:
                port = server.add_insecure_port(address)
        except RuntimeError as exc:
            raise ServerStartError(f"cannot listen on {settings.address}: {exc}") from None
        if not port:
            raise ServerStartError(f"cannot listen on {settings.address}: address in use or not available")

    handle = ServerHandle(server, provider, health_servicer, port, address.rpartition(":")[0], servicer.gate)
    handle.front = link
    if link is not None:
        link.process.on_exit = handle.front_died
        provider.watch_state(link.process.push_version)
    if settings.metrics_address:
        try:
            httpd = ThreadingHTTPServer(_http_address(settings.metrics_address), _MetricsHandler)
        except OSError as exc:
            server.stop(0)
            if link is not None:
                link.process.kill()
                link.close()
            raise ServerStartError(
                f"cannot listen on metrics address {settings.metrics_address}: {exc.strerror}"
            ) from None
        httpd.daemon_threads = True
        httpd.handle_ref = handle  # type: ignore[attr-defined]
        threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="metrics-http", daemon=True
        ).start()
        handle.metrics_server, handle.metrics_port = httpd, httpd.server_address[1]

    provider.start()
    server.start()
    if link is not None:
        link.process.push_version(provider.state_version())
    handle.serving = True
    if elector is None:
        _set_health(health_servicer, True)
    else:
        _set_health(health_servicer, False)  # a standby until the Lease says otherwise
        handle.leader = elector
        elector.start(
            provider,
            on_leading=lambda ready: _set_health(health_servicer, ready),
            on_lost=lambda: threading.Thread(target=handle.stop, name="shutdown", daemon=True).start(),
        )
    metrics_at = (
        f"metrics on {settings.metrics_address.rpartition(':')[0]}:{handle.metrics_port}"
        if handle.metrics_server is not None
        else "metrics disabled"
    )
    log.info(
        "serving externalgrpc on %s (%s), %s, provider %s%s with %d node groups, front: %s",
        f"{address.rpartition(':')[0]}:{port}",
        "mTLS" if settings.tls.ca else "TLS" if settings.tls.enabled else "plaintext",
        metrics_at,
        provider.name,
        " (emulated cloud)" if settings.emulate else "",
        len(provider.node_groups()),
        "compiled" if link is not None else "python",
    )
    if settings.dry_run:
        log.warning(
            "dry run: the cloud is listed and never written; each write CA asks for is logged, "
            "counted in cloudprovider_grpc_dry_run_writes_total, and refused"
        )
    if not settings.tls.enabled and not is_loopback(settings.address):
        log.warning(
            "gRPC on %s is plaintext and reachable beyond this host (--allow-plaintext): anyone who can "
            "reach it can create and delete machines; use TLS or a loopback address",
            settings.address,
        )
    return handle


def _set_health(servicer: _Health, serving: bool) -> None:
    status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
    for svc in ("", SERVICE_NAME):
        servicer.set(svc, status)


def serve_forever(settings: Settings) -> int:
    """Run until SIGTERM/SIGINT, then shut down within settings.grace_period.

    Returns 0 after a clean stop, 1 when work was still running at the end of the grace period. The
    caller must then end the process without waiting for threads (`os._exit`): a handler thread
    blocked on the cloud would otherwise hold the process past the grace period."""
    signalled = threading.Event()
    started: list[ServerHandle] = []

    def on_signal(signum: int, _frame: object) -> None:
        if signalled.is_set():
            return
        signalled.set()
        log.info("received %s, shutting down (grace %gs)", signal.Signals(signum).name, settings.grace_period)
        if started:
            threading.Thread(
                target=started[0].stop, args=(settings.grace_period,), name="shutdown", daemon=True
            ).start()

    # installed before starting, so a signal during startup (a slow first listing) is not fatal
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    handle = start_server(settings)
    started.append(handle)
    if signalled.is_set():  # the signal came while starting
        threading.Thread(target=handle.stop, args=(settings.grace_period,), daemon=True).start()
    while not signalled.wait(1.0):
        if handle.wait(0):  # stopped on its own: the leadership was lost
            return 1
    # the stop itself honours the grace; the margin covers the last bookkeeping after its deadline
    if handle.wait(settings.grace_period + 0.25) and not handle.cut_off:
        return 0
    log.error("grace period of %gs over with work unfinished; exiting anyway", settings.grace_period)
    return 1
