"""The compiled front as a part of the server: where its binary comes from, how it is started next to
Python's private unix socket, and what the two processes share (a private directory).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path

import grpc

from cloudprovider_grpc import metrics
from cloudprovider_grpc.config import Settings
from cloudprovider_grpc.errors import ConfigError, ServerStartError
from cloudprovider_grpc.front import binary as front_binary_mod
from cloudprovider_grpc.front.counters import FrontCounters
from cloudprovider_grpc.front.process import FrontProcess, FrontStartError, map_field_paths
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.service import CACHEABLE, SERVICE_NAME
from cloudprovider_grpc.tlsreload import CertReloader

log = logging.getLogger("cloudprovider_grpc.server")


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


def front_binary(settings: Settings) -> Path | None:
    """The front to run for `settings.front` (auto, on, off), or None to serve from Python.

    auto falls back to Python with one info line; on refuses to start (a ConfigError: exit 2)."""
    if settings.front == "off":
        return None
    binary, why = front_binary_mod.locate(settings.front_binary)
    if binary is None:
        if settings.front == "on":
            raise ConfigError("front", f"on, but {why}")
        log.info("compiled front not used (%s); Python serves the gRPC port", why)
    return binary


def start_front(binary: Path, settings: Settings, server: grpc.Server) -> tuple[FrontLink, int]:
    """Python's gRPC server on a private unix socket, the front on the public address."""
    service = pb.DESCRIPTOR.services_by_name["CloudProvider"]
    directory = Path(tempfile.mkdtemp(prefix="cloudprovider-grpc-"))  # mode 0700
    try:
        socket_path = directory / "grpc.sock"
        if not server.add_insecure_port(f"unix:{socket_path}"):
            raise ServerStartError(f"cannot listen on the private socket {socket_path}")
        reloader = CertReloader(settings.tls) if settings.tls.enabled else None
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
