"""The compiled front as a supervised part of the server: where its binary comes from, how it is
started next to Python's private unix socket, what the two processes share (a private directory),
and what happens when it fails.

- The front dies (a crash, kill -9, the OOM killer): Python starts a new one on the same address at
  once; the public port is back within a fraction of a second. Restarts are bounded: after
  MAX_RESTARTS within RESTART_WINDOW seconds, the server gives up and exits with status 1, so that
  Kubernetes restarts the pod rather than the server limping on without a port.
- The front loses its connection to one of Python's sockets (the link that carries the unary calls,
  see link.py, or the gRPC socket that carries the streams): it tells Python, which logs it and turns
  /healthz 503, while the front answers the gRPC health service NOT_SERVING itself; both recover
  when the connection does.
- Python dies: the front sees EOF on its control pipe, removes the private directory and exits.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from cloudprovider_grpc.config.settings import Settings
from cloudprovider_grpc.core import unixsocket
from cloudprovider_grpc.core.addresses import host_of
from cloudprovider_grpc.core.errors import ConfigError, ServerStartError
from cloudprovider_grpc.front import binary as front_binary_mod
from cloudprovider_grpc.front.counters import FrontCounters
from cloudprovider_grpc.front.link import Call, LinkServer
from cloudprovider_grpc.front.process import FrontProcess, FrontStartError, map_field_paths
from cloudprovider_grpc.grpcapi.handlers import CACHEABLE
from cloudprovider_grpc.grpcapi.wire import SERVICE_NAME
from cloudprovider_grpc.observability import metrics
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.tls.reload import CertReloader

log = logging.getLogger(__name__)

#: restarts of a dead front allowed within RESTART_WINDOW seconds; one more and the server exits 1
MAX_RESTARTS = 5
RESTART_WINDOW = 60.0
#: the longest unix socket path Linux accepts
MAX_SOCKET_PATH = unixsocket.MAX_SOCKET_PATH
#: pause before a restart after the first (doubling): a front that dies at once is not spun
RESTART_BACKOFF = 0.1


class FrontLink:
    """The compiled front serving the public port for this server, supervised (see the module
    docstring), and what it shares with Python: a private directory (0700) holding Python's unix
    sockets (the link and the gRPC socket) and the counters file.

    `spawn(listen)` starts a front process on `listen`; the server sets the callbacks: `on_serving`
    (whether the public port serves, for /healthz), `on_fatal` (restarts exhausted) and
    `version` (the provider's current state version, sent to each new front)."""

    def __init__(
        self,
        spawn: Callable[[str], FrontProcess],
        listen: str,
        directory: Path,
        counters: FrontCounters,
        link: LinkServer,
    ) -> None:
        self._spawn = spawn
        self.directory = directory
        self.counters = counters
        self.link = link
        self.on_serving: Callable[[bool], None] = lambda up: None
        self.on_fatal: Callable[[str], None] = lambda why: None
        self.version: Callable[[], int | None] = lambda: None
        self._lock = threading.Lock()
        self._stopping = False
        self._closing = False
        self._restarts: list[float] = []
        self.process = self._start(listen)
        self.listen = listen
        metrics.RPC.add_source(counters)

    def _start(self, listen: str) -> FrontProcess:
        process = self._spawn(listen)
        process.on_exit = self._died
        process.on_backend = self._backend
        return process

    def wait_ready(self, host: str) -> int:
        """The bound port (0 for a unix socket); later restarts bind the same one."""
        port = self.process.wait_ready()
        if port:
            self.listen = f"{host}:{port}"
        return port

    # ------------------------------------------------------------- what the server sends
    def serve(self) -> None:
        """Python's handlers are ready: the link answers the calls queued meanwhile, and later ones."""
        self.link.serve()

    def push_version(self, version: int | None) -> None:
        self.process.push_version(version)

    def closing(self) -> None:
        with self._lock:
            self._closing = True
            process = self.process
        process.closing()

    def stop(self, grace: float) -> None:
        with self._lock:
            self._stopping = True
            process = self.process
        process.stop(grace)

    def kill(self) -> None:
        with self._lock:
            self._stopping = True
            process = self.process
        process.kill()

    def close(self) -> None:
        self.link.close()
        metrics.RPC.retire_source(self.counters)  # the front's counts stay in the totals
        shutil.rmtree(self.directory, ignore_errors=True)

    # ------------------------------------------------------------- what the front reports
    def _backend(self, up: bool, message: str) -> None:
        if up:
            log.info("the compiled front reaches the Python server again; serving")
        else:
            log.error(
                "the compiled front lost its connection to the Python server (%s); not serving", message
            )
        self.on_serving(up)

    def _died(self) -> None:
        self.on_serving(False)
        threading.Thread(target=self._restart, name="front-restart", daemon=True).start()

    def _restart(self) -> None:
        """Start a new front on the same address, retrying with a short backoff; give up (on_fatal)
        once MAX_RESTARTS restarts happened within RESTART_WINDOW seconds."""
        delay = 0.0
        while True:
            with self._lock:
                if self._stopping:
                    return
                now = time.monotonic()
                self._restarts = [t for t in self._restarts if now - t < RESTART_WINDOW]
                if len(self._restarts) >= MAX_RESTARTS:
                    break
                self._restarts.append(now)
                attempt = len(self._restarts)
            time.sleep(delay)
            try:
                process = self._start(self.listen)
                process.wait_ready()
            except (FrontStartError, OSError, ConfigError, ServerStartError) as exc:
                log.error("restarting the compiled front failed (attempt %d): %s", attempt, exc)
                delay = max(delay * 2, RESTART_BACKOFF)
                continue
            with self._lock:
                self.process = process
                stopping, closing = self._stopping, self._closing
            if stopping:  # the server began stopping meanwhile: this front goes too
                process.stop(0.0)
                return
            process.push_version(self.version())
            if closing:
                process.closing()
            log.warning(
                "the compiled front was restarted (attempt %d); serving on %s again", attempt, self.listen
            )
            self.on_serving(True)
            return
        why = f"the compiled front died {MAX_RESTARTS + 1} times within {RESTART_WINDOW:g}s"
        log.error("%s; giving up so the server can be restarted", why)
        self.on_fatal(why)


def front_binary(settings: Settings) -> Path | None:
    """The front to run for `settings.front` (auto, on, off), or None to serve from Python.

    auto falls back to Python (logged at debug: without a build, the case of most installs, this is
    not news on every start; a configured but unusable binary is a warning); on refuses to start (a
    ConfigError: exit 2)."""
    if settings.front == "off":
        return None
    binary, why = front_binary_mod.locate(settings.front_binary)
    if binary is None:
        if settings.front == "on":
            raise ConfigError("front", f"on, but {why}")
        level = logging.DEBUG if settings.front_binary is None else logging.WARNING
        log.log(level, "compiled front not used (%s); Python serves the gRPC port", why)
    return binary


def _private_grpc_socket(server: grpc.Server, directory: Path) -> Path:
    """Python's gRPC server listening on a private unix socket in `directory`, for the streaming
    calls the front passes through."""
    socket_path = directory / "grpc.sock"
    if len(str(socket_path)) > MAX_SOCKET_PATH:
        raise ServerStartError(
            f"the private socket path {socket_path} is longer than {MAX_SOCKET_PATH} characters, "
            "the limit for unix sockets; set TMPDIR to a shorter directory"
        )
    try:
        bound = server.add_insecure_port(f"unix:{socket_path}")
    except RuntimeError:
        bound = 0
    if not bound:
        raise ServerStartError(f"cannot listen on the private socket {socket_path}")
    return socket_path


def _link_server(directory: Path, calls: dict[str, Call], settings: Settings) -> LinkServer:
    """The link serving `calls` on a private unix socket, room for every worker's connection."""
    try:
        return LinkServer(directory / "link.sock", calls, max_connections=2 * settings.grpc_workers + 2)
    except OSError as exc:
        raise ServerStartError(
            f"cannot listen on the private socket {directory / 'link.sock'}: {exc.strerror or exc}"
        ) from None


def _spawner(
    binary: Path,
    settings: Settings,
    socket_path: Path,
    counters: FrontCounters,
    link_server: LinkServer,
    directory: Path,
    tls_paths: list[Path] | None,
) -> Callable[[str], FrontProcess]:
    """How a front process is started on `listen` (again after it died): its backend, its link and
    what it caches; with TLS, the files Python checked once here (the front loads and re-reads them
    itself)."""
    service = pb.DESCRIPTOR.services_by_name["CloudProvider"]
    unix = settings.unix_socket

    def spawn(listen: str) -> FrontProcess:
        if unix is not None:
            unixsocket.clear_stale(unix)  # the socket of a front that died
        return FrontProcess(
            binary,
            listen=listen,
            socket_mode=settings.socket_mode if unix is not None else None,
            backend=socket_path,
            counters=counters,
            cacheable=[f"/{SERVICE_NAME}/{name}" for name in CACHEABLE],
            maps={
                f"/{SERVICE_NAME}/{name}": map_field_paths(service.methods_by_name[name].input_type)
                for name in CACHEABLE
            },
            link=link_server.path,
            link_methods=link_server.methods,
            link_calls=settings.grpc_workers,
            directory=directory,
            tls_paths=tls_paths,
        )

    return spawn


def _wait_ready(link: FrontLink, settings: Settings) -> int:
    """The port the front listens on once it is ready; closes the link when it did not start."""
    try:
        return link.wait_ready(host_of(settings.address))
    except FrontStartError as exc:
        link.close()
        if exc.kind == "listen":
            raise ServerStartError(
                f"cannot listen on {settings.address}: address in use or not available"
            ) from None
        raise ServerStartError(f"compiled front: {exc.message}") from None


def start_front(
    binary: Path, settings: Settings, server: grpc.Server, calls: dict[str, Call]
) -> tuple[FrontLink, int]:
    """The link (serving `calls`, the unary methods by full name) and Python's gRPC server (the
    streaming calls) on private unix sockets, the front on the public address.

    With TLS, Python checks the files once here (a clear error before anything listens); the front
    then loads them, and re-reads them when they change, itself."""
    tls_paths = CertReloader(settings.tls).paths if settings.tls.enabled else None
    directory = Path(tempfile.mkdtemp(prefix="cloudprovider-grpc-"))  # mode 0700
    link_server: LinkServer | None = None
    try:
        socket_path = _private_grpc_socket(server, directory)
        link_server = _link_server(directory, calls, settings)
        counters = FrontCounters(directory / "counters", CACHEABLE, metrics.LATENCY_BUCKETS)
        spawn = _spawner(binary, settings, socket_path, counters, link_server, directory, tls_paths)
        unix = settings.unix_socket
        link = FrontLink(
            spawn, str(unix) if unix is not None else settings.address, directory, counters, link_server
        )
    except OSError as exc:
        if link_server is not None:
            link_server.close()
        shutil.rmtree(directory, ignore_errors=True)
        raise ServerStartError(f"compiled front: cannot run {binary}: {exc.strerror or exc}") from None
    except BaseException:
        if link_server is not None:
            link_server.close()
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return link, _wait_ready(link, settings)
