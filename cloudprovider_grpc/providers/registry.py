"""Backends by name, imported lazily so one cloud's dependencies never load for another.

Each backend package exposes `build(ctx: ProviderContext) -> CloudProvider`. A backend that ships
an API emulator also exposes `build_emulator(ctx: ProviderContext, address: str, state_file: Path | None)`
returning an object with `.address` ("127.0.0.1:PORT"), `.base_url` and `.stop()`.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cloudprovider_grpc.errors import ConfigError
from cloudprovider_grpc.providers.contract import CloudProvider

#: name -> module holding build()/build_emulator()
BACKENDS: dict[str, str] = {
    "sim": "cloudprovider_grpc.providers.sim",
    "cherry": "cloudprovider_grpc.providers.cherry",
}

_NODES_RE = re.compile(r"^(\d+):(\d+):([A-Za-z0-9][A-Za-z0-9._\-/]*)$")


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
    so tests need not patch os.environ. `clock` is injectable so the simulator can drive
    provisioning delays on virtual time.
    """

    nodes: tuple[NodesSpec, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    cloud_config: Path | None = None
    cluster_name: str | None = None
    emulate: bool = False
    state_file: Path | None = None
    concurrency: int = 10
    env: Mapping[str, str] = field(default_factory=dict)
    clock: Callable[[], float] | None = None
    inline_workers: bool = False


def backend_module(name: str) -> Any:
    if name not in BACKENDS:
        raise ConfigError("provider", f"unknown provider {name!r} (known: {', '.join(sorted(BACKENDS))})")
    return importlib.import_module(BACKENDS[name])


def build_provider(name: str, ctx: ProviderContext) -> CloudProvider:
    return backend_module(name).build(ctx)
