"""Vultr VKE wiring: `build_driver(ctx)` for the server, `build_emulator(...)` for `emulate vultr`.

Everything is validated in `build_driver` (no network I/O there), so `serve` and `check-config` fail
fast with one line naming the bad key. With `ctx.emulate`, the bundled API emulator is started on a
free loopback port, seeded with the configured key and cluster (the demo pools unless
`vultr.emulator.pools` says otherwise), and stopped with the provider.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from cloudprovider_grpc.core.addresses import split_host_port
from cloudprovider_grpc.core.clock import Clock
from cloudprovider_grpc.core.errors import ConfigError
from cloudprovider_grpc.emulators.vultr import VultrEmulator
from cloudprovider_grpc.emulators.vultr import seed as emulator_seed
from cloudprovider_grpc.providers.registry import BuiltDriver, ProviderContext, assemble
from cloudprovider_grpc.providers.vultr.client import VultrClient
from cloudprovider_grpc.providers.vultr.config import (
    EMULATOR_DEFAULT_TOKEN,
    EMULATOR_DEMO_CLUSTER,
    TOKEN_ENV,
    EmulatorOptions,
    VultrConfig,
    load_config,
)
from cloudprovider_grpc.providers.vultr.driver import VultrDriver

__all__ = ["build_driver", "build_emulator", "make_client"]


def make_client(config: VultrConfig, api_url: str | None = None, clock: Clock | None = None) -> VultrClient:
    """`api_url` (an emulator's) may end in /v2/ like the configured one: request paths carry it."""
    base = (api_url or config.api_url).removesuffix("v2/")
    return VultrClient(
        base, config.token, page_size=config.page_size, clock=clock, **config.tuning.client_kwargs()
    )


def _emulator_for(
    token: str,
    cluster_id: str,
    emu: EmulatorOptions,
    address: str,
    state_file: Path | None,
    clock: Clock | None = None,
) -> VultrEmulator:
    """An emulator that accepts `token` and holds `cluster_id` with the configured (or demo) pools;
    its nodes boot on `clock` (the server's: virtual in a simulation), real time without one."""
    host, port_n = split_host_port(address)
    emulator = VultrEmulator(
        host or "127.0.0.1",
        port_n,
        tokens=[token],
        provision_seconds=emu.provision_seconds,
        page_size=emu.page_size,
        node_limit=emu.node_limit,
        stock=emu.stock,
        rate_limit_per_s=emu.rate_limit,
        state_file=state_file,
        clock=clock,
    )
    if state_file is None or not state_file.exists():
        emulator.add_cluster(
            cluster_id,
            emu.seed_pools() or emulator_seed.DEMO_POOLS,
            region=emu.region,
        )
    return emulator


def build_driver(ctx: ProviderContext) -> BuiltDriver:
    """The VKE driver: validated config -> client -> driver (the registry adds the pool machinery)."""
    config = load_config(ctx)
    return assemble(
        ctx,
        lambda api_url: VultrDriver(config, make_client(config, api_url, ctx.clock)),
        start_emulator=lambda: _emulator_for(
            config.token, config.cluster_id, config.emulator, "127.0.0.1:0", None, ctx.clock
        ).start(),
        tuning=config.tuning,
    )


def build_emulator(ctx: ProviderContext, address: str, state_file: Path | None) -> VultrEmulator:
    """A standalone emulator (`cloudprovider-grpc emulate vultr`), seeded from the configuration:
    its key (or $VULTR_API_KEY, or the documented default `vultr-emulator-token`) and cluster id (or
    the demo cluster's), with the demo pools unless `vultr.emulator.pools` names others."""
    try:
        config: VultrConfig | None = load_config(dataclasses.replace(ctx, emulate=True))
    except ConfigError:
        config = None
    if config is not None:
        token, cluster, emu = config.token, config.cluster_id, config.emulator
    else:
        token = ctx.env.get(TOKEN_ENV, "").strip() or EMULATOR_DEFAULT_TOKEN
        cluster, emu = EMULATOR_DEMO_CLUSTER, EmulatorOptions()
    emulator = _emulator_for(token, cluster, emu, address, state_file)
    emulator.start()
    return emulator
