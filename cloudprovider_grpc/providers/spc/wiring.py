"""StackPointCloud wiring: `build_driver(ctx)` for the server, `build_emulator(...)` for `emulate spc`.

Everything is validated in `build_driver` (no network I/O), so `serve` and `check-config` fail fast
with one line naming the bad key. With `ctx.emulate` the bundled emulator starts on a free loopback
port with the demo cluster (two autoscaled AWS pools) under the configured organization and cluster
ids, accepting the configured token, and stops with the provider.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from cloudprovider_grpc.core.addresses import split_host_port
from cloudprovider_grpc.core.clock import Clock
from cloudprovider_grpc.core.errors import ConfigError
from cloudprovider_grpc.emulators.spc import SpcEmulator
from cloudprovider_grpc.providers.registry import BuiltDriver, ProviderContext, assemble
from cloudprovider_grpc.providers.spc.client import SpcClient
from cloudprovider_grpc.providers.spc.config import (
    EMULATOR_DEFAULT_CLUSTER,
    EMULATOR_DEFAULT_ORG,
    EMULATOR_DEFAULT_TOKEN,
    EmulatorOptions,
    SpcConfig,
    load_config,
)
from cloudprovider_grpc.providers.spc.driver import SpcDriver

__all__ = ["build_driver", "build_emulator", "make_client"]


def make_client(config: SpcConfig, api_url: str | None = None, clock: Clock | None = None) -> SpcClient:
    return SpcClient(
        api_url or config.api_url,
        config.token,
        config.org_id,
        config.cluster_id,
        clock=clock,
        **config.tuning.client_kwargs(),
    )


def _emulator(
    token: str,
    org: int,
    cluster: int,
    emu: EmulatorOptions,
    address: str,
    state_file: Path | None,
    clock: Clock | None = None,
) -> SpcEmulator:
    """The demo cluster under `org`/`cluster`, accepting `token`. Node states run on `clock` (the
    server's: virtual in a simulation), real time without one."""
    host, port_n = split_host_port(address)
    emulator = SpcEmulator(
        host or "127.0.0.1",
        port_n,
        tokens={token: {org}},
        draft_seconds=emu.draft_seconds,
        building_seconds=emu.building_seconds,
        provisioned_seconds=emu.provisioned_seconds,
        deleting_seconds=emu.deleting_seconds,
        pool_cpu_memory=emu.pool_cpu_memory,
        rate_limit_per_s=emu.rate_limit,
        state_file=state_file,
        clock=clock,
    )
    if emu.pools:
        emulator.add_cluster(org, cluster, name="Emulated Cluster")
        for p in emu.pools:
            emulator.add_pool(
                cluster,
                name=p.name,
                size=p.instance_size,
                min_count=p.min_count,
                max_count=p.max_count,
                autoscaled=p.autoscaled,
                running=p.running,
                labels=p.labels,
                gpu_size=p.gpu_instance_size,
                gpu_count=p.gpu_core_count,
                capacity=p.capacity,
            )
    else:
        emulator.seed_demo(org, cluster)
    return emulator


def build_driver(ctx: ProviderContext) -> BuiltDriver:
    """The SPC driver: validated config -> client -> driver (the registry adds the machinery). The
    catalogue is static (the SDK's machine table); its TTL only bounds how long a template built from
    a pool's JSON (labels, GPUs) is reused after the pool changes."""
    config = load_config(ctx)
    return assemble(
        ctx,
        lambda api_url: SpcDriver(
            config,
            make_client(config, api_url, ctx.clock),
            clock=ctx.clock.monotonic if ctx.clock is not None else None,
        ),
        start_emulator=lambda: _emulator(
            config.token, config.org_id, config.cluster_id, config.emulator, "127.0.0.1:0", None, ctx.clock
        ).start(),
        tuning=config.tuning,
    )


def build_emulator(ctx: ProviderContext, address: str, state_file: Path | None) -> SpcEmulator:
    """A standalone emulator (`cloudprovider-grpc emulate spc`): the demo cluster under
    ORGANIZATION_ID / CLUSTER_ID (default 1 / 1), accepting CLUSTER_API_TOKEN (default
    `spc-emulator-token`); the `spc.emulator` options of the config apply."""
    try:
        config: SpcConfig | None = load_config(dataclasses.replace(ctx, emulate=True))
    except ConfigError:
        config = None
    if config is not None:
        token, org, cluster, emu = config.token, config.org_id, config.cluster_id, config.emulator
    else:
        token, org, cluster, emu = (
            EMULATOR_DEFAULT_TOKEN,
            EMULATOR_DEFAULT_ORG,
            EMULATOR_DEFAULT_CLUSTER,
            EmulatorOptions(),
        )
    emulator = _emulator(token, org, cluster, emu, address, state_file)
    started = emulator.start()
    assert isinstance(started, SpcEmulator)
    return started
