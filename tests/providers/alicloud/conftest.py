"""Fixtures for the AliCloud backend: a real emulator on loopback, keys, and configuration helpers."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cloudprovider_grpc.emulators.alicloud import AliCloudEmulator
from cloudprovider_grpc.providers.alicloud import AliCloudDriver, make_client
from cloudprovider_grpc.providers.alicloud.config import load_config
from cloudprovider_grpc.providers.registry import NodesSpec, ProviderContext
from tests.support.servers import ManualClock

REGION = "cn-hangzhou"
AK = "LTAI5tTestAccessKeyId01"
SK = "test-secret-Wq8x2Lm0aZ"
GROUP_A = "asg-bp1testgroupa0000001"
GROUP_B = "asg-bp1testgroupb0000001"
GPU_GROUP = "asg-bp1testgpu000000001"
OIDC_TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQifQ.c2lnbmF0dXJl"
ROLE_ARN = "acs:ram::1234567890123456:role/ca-role"
PROVIDER_ARN = "acs:ram::1234567890123456:oidc-provider/ack-rrsa-c1"
ENV = {"ACCESS_KEY_ID": AK, "ACCESS_KEY_SECRET": SK, "REGION_ID": REGION}


def seed_groups(emu: AliCloudEmulator) -> None:
    """Two general groups (A starts with 2 instances) and a GPU group, each with a configuration."""
    for gid, itype, desired, zones, tags in (
        (GROUP_A, "ecs.g7.xlarge", 2, ["cn-hangzhou-h", "cn-hangzhou-i"], [{"Key": "pool", "Value": "a"}]),
        (GROUP_B, "ecs.g8y.xlarge", 0, ["cn-hangzhou-j"], [{"Key": "pool", "Value": "b"}]),
        (GPU_GROUP, "ecs.gn7i-c8g1.2xlarge", 0, ["cn-hangzhou-i"], [{"Key": "pool", "Value": "gpu"}]),
    ):
        config_id = "asc-" + gid.removeprefix("asg-")
        emu.add_group(
            {
                "ScalingGroupId": gid,
                "ScalingGroupName": gid.replace("asg-bp1test", "test-"),
                "MinSize": 0,
                "MaxSize": 30,
                "DesiredCapacity": desired,
                "ActiveScalingConfigurationId": config_id,
                "Zones": zones,
                "VSwitchIds": [f"vsw-{z}" for z in zones],
            }
        )
        emu.add_configuration(
            {
                "ScalingConfigurationId": config_id,
                "ScalingGroupId": gid,
                "InstanceType": itype,
                "SystemDiskSize": 100,
                "Tags": tags,
            }
        )


@pytest.fixture
def emu_clock() -> ManualClock:
    return ManualClock(start=1_760_000_000.0)


@pytest.fixture
def emulator(emu_clock: ManualClock) -> Iterator[AliCloudEmulator]:
    emu = AliCloudEmulator(
        region=REGION,
        access_keys={AK: SK},
        oidc_tokens=[OIDC_TOKEN],
        role_arns=[ROLE_ARN],
        metadata_role="ca-node-role",
        pending_seconds=30,
        removing_seconds=10,
        activity_seconds=5,
        clock=emu_clock,
    )
    seed_groups(emu)
    with emu:
        yield emu


def ctx_for(
    emulator: AliCloudEmulator | None, env: dict[str, str] | None = None, **overrides: Any
) -> ProviderContext:
    """AK/SK mode against the emulator, groups A, B and GPU as `--nodes`."""
    environ = dict(ENV if env is None else env)
    if emulator is not None:
        for product in ("ESS", "ECS", "VPC", "STS"):
            environ[f"ALICLOUD_{product}_ENDPOINT"] = emulator.base_url
        environ.setdefault("METADATA_ENDPOINT", emulator.base_url)
    ctx = ProviderContext(
        nodes=(NodesSpec(0, 10, GROUP_A), NodesSpec(0, 5, GROUP_B), NodesSpec(0, 3, GPU_GROUP)),
        env=environ,
        options={"read-timeout": 3.0, "retry-budget": 5.0},
    )
    return dataclasses.replace(ctx, **overrides)


def rrsa_env(tmp_path: Path, token: str = OIDC_TOKEN) -> dict[str, str]:
    token_file = tmp_path / "oidc-token"
    token_file.write_text(token + "\n")
    return {
        "ALIBABA_CLOUD_OIDC_PROVIDER_ARN": PROVIDER_ARN,
        "ALIBABA_CLOUD_OIDC_TOKEN_FILE": str(token_file),
        "ALIBABA_CLOUD_ROLE_ARN": ROLE_ARN,
        "ALIBABA_CLOUD_SESSION_NAME": "cluster-autoscaler",
        "REGION_ID": REGION,
    }


def make_driver(
    emulator: AliCloudEmulator, env: dict[str, str] | None = None, **overrides: Any
) -> AliCloudDriver:
    config = load_config(ctx_for(emulator, env, **overrides))
    return AliCloudDriver(config, make_client(config))
