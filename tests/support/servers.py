"""Start real servers on loopback for tests, and talk to them with the generated stubs."""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc

from cloudprovider_grpc.config import Settings
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc
from cloudprovider_grpc.providers.registry import ProviderContext, build_provider
from cloudprovider_grpc.server import ServerHandle, start_server
from tests.support.certs import Pki


class ManualClock:
    """A clock tests advance by hand; drives sim provisioning delays and worker backoff. It is a
    `cloudprovider_grpc.clock.Clock` (a wait advances it, as on the simulator's virtual clock) and,
    called, reads the time, for the parts that take a plain time function."""

    virtual = True

    def __init__(self, start: float = 1000.0) -> None:
        self.t = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self.t

    def now(self) -> float:
        return self.t

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        """Advance by `seconds`, and by at least one representable step: at epoch-sized readings a
        tiny wait would otherwise leave the reading unchanged and a rate-limit waiter spinning."""
        with self._lock:
            self.t = max(self.t + max(seconds, 0.0), math.nextafter(self.t, math.inf))

    def rng(self) -> random.Random:
        return random.Random(0)

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.t += seconds


@contextmanager
def sim_server(
    options: Mapping[str, Any] | None = None,
    *,
    clock: ManualClock | None = None,
    inline: bool = True,
    pki: Pki | None = None,
    state_file: Path | None = None,
    nodes: tuple = (),
    front: str = "auto",
) -> Iterator[ServerHandle]:
    """A real gRPC server on 127.0.0.1:<free port> serving the sim backend (through the compiled
    front when it is built, unless `front="off"`)."""
    tls: dict[str, Any] = {}
    if pki is not None:
        tls = {"cert": pki.server_cert, "key": pki.server_key, "ca": pki.ca}
    settings = Settings(address="127.0.0.1:0", metrics_address="127.0.0.1:0", tls=tls, front=front)
    provider = build_provider(
        "sim",
        ProviderContext(
            options=dict(options or {}),
            clock=clock,
            inline_workers=inline,
            state_file=state_file,
            nodes=nodes,
        ),
    )
    handle = start_server(settings, provider=provider)
    try:
        yield handle
    finally:
        handle.stop(grace=1)


def channel(handle: ServerHandle, pki: Pki | None = None, *, cert: str = "client") -> grpc.Channel:
    target = f"localhost:{handle.port}"
    if pki is None:
        return grpc.insecure_channel(target)
    creds = grpc.ssl_channel_credentials(
        root_certificates=pki.read("ca"),
        private_key=pki.read(f"{cert}_key") if cert else None,
        certificate_chain=pki.read(f"{cert}_cert") if cert else None,
    )
    return grpc.secure_channel(target, creds)


def stub(ch: grpc.Channel) -> pb_grpc.CloudProviderStub:
    return pb_grpc.CloudProviderStub(ch)
