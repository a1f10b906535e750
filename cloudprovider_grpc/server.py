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
import signal
import threading
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from cloudprovider_grpc.config import Settings, TLSSettings
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc
from cloudprovider_grpc.providers.contract import CloudProvider
from cloudprovider_grpc.providers.registry import build_provider
from cloudprovider_grpc.service import SERVICE_NAME, CloudProviderServicer

log = logging.getLogger(__name__)


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
    atomically); a half-written or unreadable pair keeps the previous one (returns None), so a
    rotation in progress never breaks handshakes."""

    def __init__(self, tls: TLSSettings) -> None:
        self._tls = tls
        self._lock = threading.Lock()
        self._stamp: tuple[float, ...] = ()
        self.config = self._load()
        if self.config is None:
            raise ServerStartError("TLS certificate, key or CA file could not be read")

    def _paths(self) -> list[Path]:
        return [p for p in (self._tls.cert, self._tls.key, self._tls.ca) if p is not None]

    def _load(self) -> grpc.ServerCertificateConfiguration | None:
        try:
            stamp = tuple(os.stat(p).st_mtime_ns for p in self._paths())
            key = Path(self._tls.key).read_bytes()  # type: ignore[arg-type]
            cert = Path(self._tls.cert).read_bytes()  # type: ignore[arg-type]
            ca = Path(self._tls.ca).read_bytes() if self._tls.ca else None
        except OSError as exc:
            log.error("reading TLS files failed: %s", exc.strerror)
            return None
        if (
            b"PRIVATE KEY" not in key
            or b"CERTIFICATE" not in cert
            or (ca is not None and b"CERTIFICATE" not in ca)
        ):
            log.error("TLS files are not PEM certificate/key files")
            return None
        self._stamp = stamp
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        try:
            stamp = tuple(os.stat(p).st_mtime_ns for p in self._paths())
        except OSError:
            return None
        with self._lock:
            if stamp == self._stamp:
                return None
            new = self._load()
        if new is not None:
            log.info("TLS certificate files changed; new handshakes use them")
        return new

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.dynamic_ssl_server_credentials(
            self.config, self.fetch, require_client_authentication=self._tls.ca is not None
        )


class _MetricsHandler(BaseHTTPRequestHandler):
    handle_ref: ServerHandle | None = None

    def do_GET(self) -> None:
        if self.path.split("?")[0] == "/metrics":
            body, ctype, code = generate_latest(REGISTRY), CONTENT_TYPE_LATEST, 200
        elif self.path.split("?")[0] in ("/healthz", "/readyz"):
            ok = self.server.handle_ref is not None and self.server.handle_ref.serving  # type: ignore[attr-defined]
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


@dataclass
class ServerHandle:
    """A running server. `stop()` is idempotent and safe from a signal handler thread."""

    server: grpc.Server
    provider: CloudProvider
    health: health.HealthServicer
    port: int
    host: str
    metrics_server: ThreadingHTTPServer | None = None
    metrics_port: int = 0
    serving: bool = True
    _stopped: threading.Event = field(default_factory=threading.Event)
    _stop_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def address(self) -> str:
        host = self.host if self.host not in ("", "[::]", "0.0.0.0") else "127.0.0.1"
        return f"{host}:{self.port}"

    def stop(self, grace: float = 10.0) -> None:
        """Health NOT_SERVING, refuse new RPCs, let in-flight ones finish within grace, stop workers."""
        with self._stop_lock:
            if self._stopped.is_set():
                return
            self.serving = False
            self.health.enter_graceful_shutdown()
            self.server.stop(grace).wait(grace + 1)
            self.provider.stop(timeout=grace)
            if self.metrics_server is not None:
                self.metrics_server.shutdown()
                self.metrics_server.server_close()
            self._stopped.set()
            log.info("server stopped")

    def wait(self, timeout: float | None = None) -> bool:
        return self._stopped.wait(timeout)


def start_server(settings: Settings | None = None, *, provider: CloudProvider | None = None) -> ServerHandle:
    """Build the provider (unless given), bind the ports, start serving; raise ServerStartError."""
    settings = settings or Settings()
    if provider is None:
        provider = build_provider(settings.provider, settings.provider_context())
    servicer = CloudProviderServicer(provider)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=settings.grpc_workers, thread_name_prefix="grpc"),
        # a second server on the same port must fail loudly, not silently share it (grpc default is 1)
        options=[("grpc.so_reuseport", 0)],
    )
    pb_grpc.add_CloudProviderServicer_to_server(servicer, server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
        server,
    )
    address = _grpc_address(settings.address)
    try:
        if settings.tls.enabled:
            port = server.add_secure_port(address, _CertReloader(settings.tls).credentials())
        else:
            port = server.add_insecure_port(address)
    except RuntimeError as exc:
        raise ServerStartError(f"cannot listen on {settings.address}: {exc}") from None
    if not port:
        raise ServerStartError(f"cannot listen on {settings.address}: address in use or not available")

    handle = ServerHandle(server, provider, health_servicer, port, address.rpartition(":")[0])
    if settings.metrics_address:
        try:
            httpd = ThreadingHTTPServer(_http_address(settings.metrics_address), _MetricsHandler)
        except OSError as exc:
            server.stop(0)
            raise ServerStartError(
                f"cannot listen on metrics address {settings.metrics_address}: {exc.strerror}"
            ) from None
        httpd.daemon_threads = True
        httpd.handle_ref = handle  # type: ignore[attr-defined]
        threading.Thread(target=httpd.serve_forever, name="metrics-http", daemon=True).start()
        handle.metrics_server, handle.metrics_port = httpd, httpd.server_address[1]

    provider.start()
    server.start()
    for svc in ("", SERVICE_NAME):
        health_servicer.set(svc, health_pb2.HealthCheckResponse.SERVING)
    log.info(
        "serving externalgrpc on %s (%s), metrics on %s, provider %s with %d node groups",
        settings.address if port == 0 else f"{address.rpartition(':')[0]}:{port}",
        "mTLS" if settings.tls.ca else "TLS" if settings.tls.enabled else "plaintext",
        settings.metrics_address,
        provider.name,
        len(provider.node_groups()),
    )
    return handle


def serve_forever(settings: Settings) -> int:
    """Run until SIGTERM/SIGINT, then shut down gracefully within settings.grace_period."""
    handle = start_server(settings)

    def on_signal(signum: int, _frame: object) -> None:
        log.info(
            "received %s, shutting down (grace %.0fs)", signal.Signals(signum).name, settings.grace_period
        )
        threading.Thread(target=handle.stop, args=(settings.grace_period,), name="shutdown").start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not handle.wait(1.0):
        pass
    return 0
