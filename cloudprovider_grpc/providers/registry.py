"""Backends by name, imported lazily so one cloud's dependencies never load for another.

Each backend package exposes `build_driver(ctx: ProviderContext) -> BuiltDriver`: a validated driver
and what its machinery needs. The registry, and only the registry, picks the machinery from the
driver's shape: a `PoolDriver` gets `PoolProvider`, a `MachineDriver` gets `MachineProvider`. A
backend that ships an API emulator also exposes
`build_emulator(ctx: ProviderContext, address: str, state_file: Path | None)` returning an object
with `.address` ("127.0.0.1:PORT"), `.base_url` and `.stop()`.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from cloudprovider_grpc.core.clock import Clock
from cloudprovider_grpc.core.errors import ConfigError
from cloudprovider_grpc.providers.contract import CloudProvider
from cloudprovider_grpc.providers.driver import DriverBase
from cloudprovider_grpc.providers.group_options import GroupOptions
from cloudprovider_grpc.providers.machinery.gate import WriteGate
from cloudprovider_grpc.providers.options import ClientTuning

#: name -> module holding build()/build_emulator()
BACKENDS: dict[str, str] = {
    "sim": "cloudprovider_grpc.providers.sim",
    "cherry": "cloudprovider_grpc.providers.cherry",
    "vultr": "cloudprovider_grpc.providers.vultr",
    "exoscale": "cloudprovider_grpc.providers.exoscale",
    "alicloud": "cloudprovider_grpc.providers.alicloud",
    "spc": "cloudprovider_grpc.providers.spc",
}

#: NAME may hold ":" for SPC gen 1's `<min>:<max>:<size>[:<id>]`; each backend validates its names
_NODES_RE = re.compile(r"^(\d+):(\d+):([A-Za-z0-9][A-Za-z0-9._\-/:]*)$")


@dataclass(frozen=True)
class NodesSpec:
    """One `--nodes=MIN:MAX:NAME` value, as CA's in-tree providers take it."""

    min_size: int
    max_size: int
    name: str

    @classmethod
    def parse(cls, value: str, key: str = "nodes") -> NodesSpec:
        m = _NODES_RE.match(value.strip())
        if not m:
            raise ConfigError(key, f"{value!r} is not MIN:MAX:NAME")
        lo, hi = int(m.group(1)), int(m.group(2))
        if lo > hi:
            raise ConfigError(key, f"{value!r}: min size {lo} is above max size {hi}")
        return cls(lo, hi, m.group(3))


@dataclass(frozen=True)
class ProviderContext:
    """Everything a backend's build() may use; assembled from Settings by the CLI/server.

    `options` is the backend's own section of the YAML config file (validated by the backend,
    which raises ConfigError naming the key). `env` is the process environment, passed explicitly
    so tests need not patch os.environ. `clock` (cloudprovider_grpc/core/clock.py) is the one clock
    every timer of the backend runs on: the machinery's, the HTTP client's back-offs and rate
    limit, and its API emulator's boot and deletion times; the simulator passes its virtual clock.
    """

    nodes: tuple[NodesSpec, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    cloud_config: Path | None = None
    cluster_name: str | None = None
    emulate: bool = False
    state_file: Path | None = None
    concurrency: int = 10
    env: Mapping[str, str] = field(default_factory=dict)
    clock: Clock | None = None
    inline_workers: bool = False
    #: the write gate every cloud write passes (providers/machinery/gate.py); None: writes are open
    gate: WriteGate | None = None
    #: the configuration's per-group autoscaling options (providers/group_options.py), which the
    #: machinery applies to every group the backend offers
    group_options: GroupOptions = field(default_factory=GroupOptions)

    def secret(self, name: str, *, required: bool = False, default: str = "") -> str:
        """The secret environment variable `name`: stripped, checked for header safety, and masked in
        every log line from now on (see cloudprovider_grpc/core/secrets.py). Backends read every secret
        through this."""
        from cloudprovider_grpc.core.secrets import read_secret

        return read_secret(self.env, name, required=required, default=default)


def backend_module(name: str) -> Any:
    if name not in BACKENDS:
        raise ConfigError("provider", f"unknown provider {name!r} (known: {', '.join(sorted(BACKENDS))})")
    return importlib.import_module(BACKENDS[name])


@dataclass(frozen=True)
class BuiltDriver:
    """A backend's validated driver plus what the shared machinery needs to run it.

    `on_stop` runs when the provider stops (an emulator started for `--emulate`). `catalog_ttl` is
    how long templates/prices are reused before `refresh_catalog`. `seed` makes the machinery's
    jitter reproducible (the simulator). `create_settle` is how long a create whose answer was lost
    is given to show in the cloud's listings before its token is looked up (machines/core.py): the
    client's connect plus read timeout, as long as we let one request take."""

    driver: DriverBase
    catalog_ttl: float = 300.0
    create_settle: float = 0.0
    on_stop: Callable[[], None] | None = None
    seed: int | None = None


#: requests an emulator started for `--emulate` remembers (its request log, AliCloud's nonces): it
#: serves the server's own client and nobody reads its history (emulators/server.py `keep_history`)
EMBEDDED_EMULATOR_HISTORY = 500


class Emulator(Protocol):
    """What the machinery needs of a started API emulator."""

    @property
    def base_url(self) -> str: ...

    def keep_history(self, requests: int) -> None: ...

    def stop(self) -> None: ...


def assemble(
    ctx: ProviderContext,
    make_driver: Callable[[str | None], DriverBase],
    *,
    start_emulator: Callable[[], Emulator],
    tuning: ClientTuning,
) -> BuiltDriver:
    """A backend's driver for `ctx`: `make_driver(api_url)` with api_url None (the configured cloud)
    or, with `ctx.emulate`, the base URL of the emulator `start_emulator()` started on loopback. The
    emulator lives as long as the server (stopped with it, not on CA's Cleanup RPC), or is stopped
    at once if the driver cannot be built."""
    emulator = start_emulator() if ctx.emulate else None
    if emulator is not None:
        emulator.keep_history(EMBEDDED_EMULATOR_HISTORY)
    try:
        driver = make_driver(emulator.base_url if emulator is not None else None)
    except BaseException:
        if emulator is not None:
            emulator.stop()
        raise
    return BuiltDriver(
        driver,
        catalog_ttl=tuning.catalog_ttl,
        create_settle=tuning.connect_timeout + tuning.read_timeout,
        on_stop=emulator.stop if emulator is not None else None,
    )


def make_provider(built: BuiltDriver, ctx: ProviderContext) -> CloudProvider:
    """The machinery for the driver's shape; the one place that chooses it."""
    from cloudprovider_grpc.providers.driver import MachineDriver, PoolDriver

    kwargs: dict[str, Any] = {
        "concurrency": ctx.concurrency,
        "clock": ctx.clock.now if ctx.clock is not None else None,
        "inline_workers": ctx.inline_workers,
        "state_file": ctx.state_file,
        "catalog_ttl": built.catalog_ttl,
        "seed": built.seed,
        "on_stop": built.on_stop,
        "gate": ctx.gate,
        "group_options": ctx.group_options,
    }
    try:
        if isinstance(built.driver, PoolDriver):
            from cloudprovider_grpc.providers.machinery.pools.provider import PoolProvider

            return PoolProvider(built.driver, **kwargs)
        if isinstance(built.driver, MachineDriver):
            from cloudprovider_grpc.providers.machinery.machines.provider import MachineProvider

            return MachineProvider(built.driver, create_settle=built.create_settle, **kwargs)
        raise TypeError(f"{type(built.driver).__name__} is neither a MachineDriver nor a PoolDriver")
    except BaseException:
        if built.on_stop is not None:
            built.on_stop()
        raise


def simulated_timings(name: str) -> dict[str, float]:
    """The emulator timers (boot, deletion) backend `name` runs with in a simulation: each backend's
    `config.SIMULATED_TIMINGS`, its cloud's figures where they are published (cited there). The
    simulator puts them under the scenario's `emulator:` options unless the scenario sets them."""
    backend_module(name)  # an unknown name fails here, as everywhere
    if name == "sim":
        return {}
    config = importlib.import_module(BACKENDS[name] + ".config")
    return dict(getattr(config, "SIMULATED_TIMINGS", {}))


def build_provider(name: str, ctx: ProviderContext) -> CloudProvider:
    return make_provider(backend_module(name).build_driver(ctx), ctx)
