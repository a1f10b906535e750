"""Exoscale wiring: `build_driver(ctx)` for the server, `build_emulator(...)` for `emulate exoscale`,
and `check_config(ctx, driver)` for the read-only checks `check-config` adds (quota headroom).

`build_driver` validates everything and does no network I/O. With `ctx.emulate` the bundled API
emulator starts on a free loopback port, seeded with the configured credentials (so the normal
configuration is honoured), the configured zone, the demo cloud (an SKS cluster with two nodepools
and one standalone pool) plus one nodepool per `--nodes` name, and stops with the provider.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from cloudprovider_grpc.core.addresses import split_host_port
from cloudprovider_grpc.core.clock import Clock
from cloudprovider_grpc.core.clouderrors import CloudError
from cloudprovider_grpc.emulators.exoscale import ExoscaleEmulator
from cloudprovider_grpc.providers.driver import DriverBase
from cloudprovider_grpc.providers.exoscale.client import ExoscaleClient
from cloudprovider_grpc.providers.exoscale.config import (
    EMULATOR_KEY,
    EMULATOR_SECRET,
    ExoscaleConfig,
    load_config,
)
from cloudprovider_grpc.providers.exoscale.driver import ExoscaleDriver
from cloudprovider_grpc.providers.registry import BuiltDriver, ProviderContext, assemble

__all__ = ["EMULATOR_CREDENTIALS", "build_driver", "build_emulator", "check_config", "make_client"]


#: what the standalone emulator accepts when the environment names no key (printed at its start:
#: a user must not read the source to learn it; these are the emulator's, never a cloud's)
EMULATOR_CREDENTIALS = (
    f"EXOSCALE_API_KEY={EMULATOR_KEY} EXOSCALE_API_SECRET={EMULATOR_SECRET} "
    "(or the key and secret set in the environment)"
)


def make_client(
    config: ExoscaleConfig, endpoint: str | None = None, clock: Clock | None = None
) -> ExoscaleClient:
    return ExoscaleClient(
        endpoint or config.endpoint,
        config.api_key,
        config.api_secret,
        clock=clock,
        **config.tuning.client_kwargs(),
    )


def emulator_for(
    config: ExoscaleConfig, address: str, state_file: Path | None, clock: Clock | None = None
) -> ExoscaleEmulator:
    """An emulator accepting the configured key, seeded with the demo cloud or the configured
    `emulator.nodepools` (unless a state file already holds a cloud) and one nodepool per --nodes
    name they lack. Its machines boot on `clock` (the server's: virtual in a simulation)."""
    host, port_n = split_host_port(address)
    emu = config.emulator
    emulator = ExoscaleEmulator(
        host or "127.0.0.1",
        port_n,
        zone=config.zone,
        keys={config.api_key: config.api_secret},
        boot_seconds=emu.boot_seconds,
        destroy_seconds=emu.destroy_seconds,
        operation_polls=emu.operation_polls,
        operation_seconds=emu.operation_seconds,
        quota_limit=emu.quota_limit,
        quota_mode=emu.quota_mode,
        stock=emu.stock,
        conflict_mode=emu.conflict_mode,
        auth_failure_status=emu.auth_failure_status,
        rate_limit_per_s=emu.rate_limit,
        state_file=state_file,
        clock=clock,
    )
    if emu.demo and not (state_file and state_file.exists()):
        emulator.seed_demo(
            config.sks_cluster or "demo",
            extra_nodepools=[s.name for s in config.specs if "*" not in config.instance_pools],
            nodepools=emu.seed_nodepools(),
        )
    return emulator


def build_driver(ctx: ProviderContext) -> BuiltDriver:
    """The Exoscale driver: validated config -> signing client -> driver (the registry adds the
    pool machinery)."""
    config = load_config(ctx)
    return assemble(
        ctx,
        lambda endpoint: ExoscaleDriver(config, make_client(config, endpoint, ctx.clock), clock=ctx.clock),
        start_emulator=lambda: emulator_for(config, "127.0.0.1:0", None, ctx.clock).start(),
        tuning=config.tuning,
    )


def build_emulator(ctx: ProviderContext, address: str, state_file: Path | None) -> ExoscaleEmulator:
    """A standalone emulator (`cloudprovider-grpc emulate exoscale`): the key and secret from
    EXOSCALE_API_KEY/EXOSCALE_API_SECRET (or the documented emulator defaults), the demo cloud."""
    config = load_config(dataclasses.replace(ctx, emulate=True))
    emulator = emulator_for(config, address, state_file)
    emulator.start()
    return emulator


def check_config(ctx: ProviderContext, driver: DriverBase) -> list[str]:
    """Read-only checks against the API for `check-config`: the groups that would be managed and
    every max size beyond what the `instance` quota leaves. Returns report lines (warnings start
    with "warning:", failures with "error:"); a cloud that cannot be reached is a failure line,
    not raised. `driver` is the one `check-config` refreshed: listing again through it logs
    nothing it already logged."""
    assert isinstance(driver, ExoscaleDriver)
    lines: list[str] = []
    try:
        quota = driver.client.get_quota("instance")
        pools = driver.list_pools()
    except CloudError as err:
        return [f"error: exoscale API check failed: {err.message}"]
    limit, usage = quota.get("limit"), quota.get("usage")
    if not isinstance(limit, int) or not isinstance(usage, int):
        return ["error: exoscale get-quota answered no limit/usage"]
    lines.append(
        f"exoscale instance quota: {'unlimited' if limit < 0 else limit} (in use {usage}); "
        f"{len(pools)} group(s) found"
    )
    remaining = None if limit < 0 else max(0, limit - usage)
    for pool in pools:
        g = pool.config
        if pool.listing_error is not None:
            lines.append(f"warning: group {g.name} ({g.id}): {pool.listing_error.message}")
            continue
        lines.append(f"group {g.name} ({g.id}): size {pool.desired}, bounds {g.min_size}..{g.max_size}")
        if remaining is not None and g.max_size - pool.desired > remaining:
            lines.append(
                f"warning: group {g.name}: max size {g.max_size} needs {g.max_size - pool.desired} more "
                f"instance(s) but the instance quota leaves {remaining}"
            )
    return lines
