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

from cloudprovider_grpc.config.settings import Settings
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc
from cloudprovider_grpc.providers.registry import ProviderContext, build_provider
from cloudprovider_grpc.server.assembly import ServerHandle, start_server
from tests.support.certs import Pki


class ManualClock:
    """A clock tests advance by hand; drives sim provisioning delays and worker backoff. A plain
    time function: an emulator given one keeps its rate limit on real time."""

    def __init__(self, start: float = 1000.0) -> None:
        self.t = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.t += seconds


class BackendClock:
    """A `ManualClock` as a backend's `cloudprovider_grpc.core.clock.Clock` (what `ProviderContext.clock`
    takes): a wait advances it, by at least one representable step, as on the simulator's clock."""

    virtual = True

    def __init__(self, manual: ManualClock) -> None:
        self.manual = manual

    def now(self) -> float:
        return self.manual.t

    def monotonic(self) -> float:
        return self.manual.t

    def sleep(self, seconds: float) -> None:
        m = self.manual
        with m._lock:
            m.t = max(m.t + max(seconds, 0.0), math.nextafter(m.t, math.inf))

    def rng(self) -> random.Random:
        return random.Random(0)


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
            clock=BackendClock(clock) if clock is not None else None,
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
