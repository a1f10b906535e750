"""Cherry Servers wiring: `build_driver(ctx)` for the server, `build_emulator(...)` for `emulate cherry`.

Everything is validated in `build` (no network I/O there), so `serve` and `check-config` fail fast
with one line naming the bad key. With `ctx.emulate`, the bundled API emulator is started on a free
loopback port, seeded from the configuration (projects, token, plan stock), and stopped with the
provider.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from cloudprovider_grpc.core.addresses import split_host_port
from cloudprovider_grpc.core.clock import Clock
from cloudprovider_grpc.core.errors import ConfigError
from cloudprovider_grpc.emulators.cherry.emulator import DEFAULT_TEAM, CherryEmulator
from cloudprovider_grpc.providers.cherry.client import CherryClient
from cloudprovider_grpc.providers.cherry.config import EMULATOR_DEFAULT_TOKEN, CherryConfig, load_config
from cloudprovider_grpc.providers.cherry.driver import CherryDriver
from cloudprovider_grpc.providers.cherry.emulator_options import EmulatorOptions
from cloudprovider_grpc.providers.registry import BuiltDriver, ProviderContext, assemble

__all__ = ["build_driver", "build_emulator", "make_client"]


def make_client(config: CherryConfig, api_url: str | None = None, clock: Clock | None = None) -> CherryClient:
    return CherryClient(api_url or config.api_url, config.token, clock=clock, **config.tuning.client_kwargs())


def _emulator_for(
    config: CherryConfig | None,
    env_token: str,
    emu: EmulatorOptions,
    address: str,
    state_file: Path | None,
    clock: Clock | None = None,
) -> CherryEmulator:
    """An emulator seeded from `config` (its token, projects, stock) or, without one, from the
    environment's token and defaults. Servers deploy on `clock` (the server's: virtual in a
    simulation), real time without one."""
    host, port_n = split_host_port(address)
    token = config.token if config else (env_token or EMULATOR_DEFAULT_TOKEN)
    projects = config.project_ids if config else ()
    return CherryEmulator(
        host or "127.0.0.1",
        port_n,
        tokens={token: DEFAULT_TEAM},
        projects=dict.fromkeys(projects, DEFAULT_TEAM),
        stock=emu.stock,
        deploy_seconds=emu.deploy_seconds,
        terminate_seconds=emu.terminate_seconds,
        rate_limit_per_s=emu.rate_limit,
        state_file=state_file,
        clock=clock,
    )


def build_driver(ctx: ProviderContext) -> BuiltDriver:
    """The Cherry driver: validated config -> client -> driver (the registry adds the machinery)."""
    config = load_config(ctx)
    return assemble(
        ctx,
        lambda api_url: CherryDriver(config, make_client(config, api_url, ctx.clock)),
        start_emulator=lambda: _emulator_for(
            config, "", config.emulator, "127.0.0.1:0", None, ctx.clock
        ).start(),
        tuning=config.tuning,
    )


def build_emulator(ctx: ProviderContext, address: str, state_file: Path | None) -> CherryEmulator:
    """A standalone emulator (`cloudprovider-grpc emulate cherry`), seeded from the configuration
    when it is complete; otherwise with the token from CHERRY_AUTH_TOKEN (or the documented default
    `cherry-emulator-token`), the project ids the config names, and default stock."""
    try:
        config: CherryConfig | None = load_config(dataclasses.replace(ctx, emulate=True))
    except ConfigError:
        config = None
    emu = config.emulator if config else EmulatorOptions()
    emulator = _emulator_for(config, ctx.secret("CHERRY_AUTH_TOKEN"), emu, address, state_file)
    if config is None:
        for pid in _project_ids_hint(ctx):
            emulator.add_project(pid)
    return emulator.start()


def _project_ids_hint(ctx: ProviderContext) -> list[int]:
    """Project ids named anywhere in an incomplete config; project 1 when there are none."""
    found: set[int] = set()
    sections = [ctx.options.get("global") or {}, *(ctx.options.get("pools") or {}).values()]
    for section in sections:
        if isinstance(section, dict):
            value = section.get("project-id", section.get("project_id"))
            if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
                found.add(int(value))
    if ctx.cloud_config is not None:
        try:
            from cloudprovider_grpc.formats.gcfg import parse_gcfg

            for sec in parse_gcfg(ctx.cloud_config.read_text()):
                for value in sec.values.get("project-id", []):
                    if value.strip().isdigit():
                        found.add(int(value))
        except (OSError, ConfigError):
            pass
    return sorted(found) or [1]
