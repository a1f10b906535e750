"""AliCloud wiring: `build_driver(ctx)` for the server, `build_emulator(...)` for `emulate alicloud`.

Everything is validated in `build_driver` without network I/O (a region from the metadata server is
read on the first Refresh). With `ctx.emulate` the bundled emulator starts on a free loopback port,
seeded to accept the configured credentials (the AccessKey, or the RRSA token file's contents and
role) and to hold the configured groups (`--nodes`) or the two demo groups; every endpoint (ESS,
ECS, STS) then points at it, and it stops with the server.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from cloudprovider_grpc.core.addresses import split_host_port
from cloudprovider_grpc.core.clock import Clock
from cloudprovider_grpc.core.errors import ConfigError
from cloudprovider_grpc.emulators.alicloud import AliCloudEmulator, seed
from cloudprovider_grpc.providers.alicloud.client import AliClient, default_endpoint
from cloudprovider_grpc.providers.alicloud.config import (
    EMULATOR_REGION,
    AliConfig,
    EmulatorOptions,
    load_config,
)
from cloudprovider_grpc.providers.alicloud.credentials import (
    EMULATOR_ACCESS_KEY_ID,
    EMULATOR_ACCESS_KEY_SECRET,
    CredentialSource,
    MetadataCredentials,
    OidcCredentials,
    StaticCredentials,
)
from cloudprovider_grpc.providers.alicloud.driver import AliCloudDriver
from cloudprovider_grpc.providers.registry import BuiltDriver, ProviderContext, assemble

__all__ = ["EMULATOR_CREDENTIALS", "build_driver", "build_emulator", "make_client", "make_credentials"]

log = logging.getLogger(__name__)

#: the RAM role the emulated metadata server hands out
EMULATOR_ROLE = "KubernetesWorkerRole-emulated"


#: what the standalone emulator accepts besides the configured AccessKey (printed at its start)
EMULATOR_CREDENTIALS = (
    f"ACCESS_KEY_ID={EMULATOR_ACCESS_KEY_ID} ACCESS_KEY_SECRET={EMULATOR_ACCESS_KEY_SECRET} "
    "(and the AccessKey set in the environment), and the ECS RAM role KubernetesWorkerRole-emulated"
)


def make_credentials(config: AliConfig, sts_url: str = "", metadata_url: str = "") -> CredentialSource:
    creds = config.credentials
    timeout = (config.tuning.connect_timeout, config.tuning.read_timeout)
    if creds.mode == "access-key":
        return StaticCredentials(creds.access_key_id, creds.access_key_secret)
    if creds.mode == "rrsa":
        assert creds.oidc_token_file is not None
        return OidcCredentials(
            sts_url or config.sts_endpoint or default_endpoint("sts", config.region),
            role_arn=creds.role_arn,
            oidc_provider_arn=creds.oidc_provider_arn,
            token_file=creds.oidc_token_file,
            session_name=creds.session_name,
            timeout=timeout,
        )
    return MetadataCredentials(metadata_url or config.metadata_endpoint)


def make_client(config: AliConfig, endpoint: str = "", clock: Clock | None = None) -> AliClient:
    """The client for `config`; `endpoint` (the emulator) replaces every endpoint."""
    return AliClient(
        make_credentials(config, endpoint, endpoint),
        region=config.region,
        ess_url=endpoint or config.ess_endpoint,
        ecs_url=endpoint or config.ecs_endpoint,
        vpc_url=endpoint or config.vpc_endpoint,
        clock=clock,
        **config.tuning.client_kwargs(),
    )


def _emulator_for(
    config: AliConfig | None,
    emu: EmulatorOptions,
    address: str,
    state_file: Path | None,
    env: dict[str, str] | None = None,
    clock: Clock | None = None,
) -> AliCloudEmulator:
    """An emulator accepting the configured (or documented default) credentials; instances move
    through their states on `clock` (the server's: virtual in a simulation)."""
    host, port_n = split_host_port(address)
    keys = {EMULATOR_ACCESS_KEY_ID: EMULATOR_ACCESS_KEY_SECRET}
    tokens: list[str] = []
    roles: list[str] = []
    env = env or {}
    if env.get("ACCESS_KEY_ID", "").strip() and env.get("ACCESS_KEY_SECRET", "").strip():
        keys[env["ACCESS_KEY_ID"].strip()] = env["ACCESS_KEY_SECRET"].strip()
    if config is not None:
        creds = config.credentials
        if creds.mode == "access-key":
            keys[creds.access_key_id] = creds.access_key_secret
        elif creds.mode == "rrsa" and creds.oidc_token_file is not None:
            try:
                tokens.append(creds.oidc_token_file.read_text().strip())
            except OSError as exc:
                raise ConfigError(
                    str(creds.oidc_token_file), f"cannot read the OIDC token file: {exc}"
                ) from None
            roles.append(creds.role_arn)
    emulator = AliCloudEmulator(
        host or "127.0.0.1",
        port_n,
        region=(config.region if config and config.region else EMULATOR_REGION),
        access_keys=keys,
        oidc_tokens=tokens,
        role_arns=roles,
        metadata_role=EMULATOR_ROLE,
        stock=emu.stock,
        pending_seconds=emu.pending_seconds,
        removing_seconds=emu.removing_seconds,
        activity_seconds=emu.activity_seconds,
        sts_duration=emu.sts_duration,
        rate_limit_per_s=emu.rate_limit,
        state_file=state_file,
        clock=clock,
    )
    _seed_groups(emulator, config, emu)
    return emulator


def _seed_groups(emulator: AliCloudEmulator, config: AliConfig | None, emu: EmulatorOptions) -> None:
    """The configured groups (a general-purpose configuration each, starting at their min size),
    or the demo groups when none is configured."""
    if config is None or config.demo_groups:
        for g in seed.DEMO_GROUPS:
            emulator.add_group(g)
        for c in seed.DEMO_CONFIGURATIONS:
            emulator.add_configuration(c)
        return
    for i, group in enumerate(config.groups):
        config_id = f"asc-{group.id.removeprefix('asg-')}"[:40]
        record: dict[str, Any] = {
            "ScalingGroupId": group.id,
            "ScalingGroupName": group.name or group.id,
            "MinSize": group.min_size,
            "MaxSize": group.max_size,
            "DesiredCapacity": group.min_size,
            "EnableDesiredCapacity": True,
            "ActiveScalingConfigurationId": config_id,
            "Zones": [seed.ZONES[i % len(seed.ZONES)]],
            "VSwitchIds": [f"vsw-bp1emulated{seed.ZONES[i % len(seed.ZONES)][-1]}{i:09d}"],
        }
        emulator.add_group(record)
        emulator.add_configuration(
            {
                "ScalingConfigurationId": config_id,
                "ScalingGroupId": group.id,
                "InstanceType": emu.instance_types.get(group.id, "ecs.g7.xlarge"),
                "SystemDiskSize": 120,
                "Tags": [{"Key": "nodepool", "Value": group.name or group.id}],
            }
        )


def build_driver(ctx: ProviderContext) -> BuiltDriver:
    """The AliCloud driver: validated config -> credentials -> client -> driver."""
    config = load_config(ctx)
    return assemble(
        ctx,
        lambda endpoint: AliCloudDriver(config, make_client(config, endpoint or "", ctx.clock)),
        start_emulator=lambda: _emulator_for(
            config, config.emulator, "127.0.0.1:0", None, clock=ctx.clock
        ).start(),
        tuning=config.tuning,
    )


def build_emulator(ctx: ProviderContext, address: str, state_file: Path | None) -> AliCloudEmulator:
    """A standalone emulator (`cloudprovider-grpc emulate alicloud`), seeded from the configuration
    when it is complete (its AccessKey or RRSA token, its `--nodes` groups), else with the
    emulator's default AccessKey and the demo groups. It always serves the metadata server with
    the role `KubernetesWorkerRole-emulated`, for the ECS RAM role mode."""
    try:
        config: AliConfig | None = load_config(dataclasses.replace(ctx, emulate=True))
    except ConfigError as exc:
        log.warning("alicloud emulator: configuration incomplete (%s); seeding the demo region", exc)
        config = None
    emu = config.emulator if config else EmulatorOptions()
    emulator = _emulator_for(config, emu, address, state_file, dict(ctx.env))
    emulator.start()
    return emulator
