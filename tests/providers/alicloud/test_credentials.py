"""Credential modes against the emulator's STS and metadata server: temporary keys are fetched,
refreshed before they expire, and fetched again when the cloud calls them stale."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cloudprovider_grpc.core.clouderrors import CloudError
from cloudprovider_grpc.emulators.alicloud import AliCloudEmulator
from cloudprovider_grpc.providers.alicloud.config import load_config
from cloudprovider_grpc.providers.alicloud.credentials import MetadataCredentials, OidcCredentials
from cloudprovider_grpc.providers.alicloud.wiring import make_client
from tests.providers.alicloud.conftest import (
    GROUP_A,
    OIDC_TOKEN,
    PROVIDER_ARN,
    REGION,
    ROLE_ARN,
    ctx_for,
    rrsa_env,
)
from tests.support.servers import ManualClock

pytestmark = pytest.mark.integration


def sts_calls(emulator: AliCloudEmulator) -> int:
    return emulator.actions().count("AssumeRoleWithOIDC")


def test_rrsa_key_is_reused_then_refreshed_before_expiry(emulator: AliCloudEmulator, tmp_path: Path) -> None:
    env = rrsa_env(tmp_path)
    clock = ManualClock(start=time.time())
    source = OidcCredentials(
        emulator.base_url,
        role_arn=ROLE_ARN,
        oidc_provider_arn=PROVIDER_ARN,
        token_file=Path(env["ALIBABA_CLOUD_OIDC_TOKEN_FILE"]),
        session_name="ca",
        clock=clock,
    )
    first = source.get()
    assert first.access_key_id.startswith("STS.") and first.expires_at is not None
    assert source.get() is first and sts_calls(emulator) == 1
    clock.t = first.expires_at - 60  # inside the refresh margin (a quarter of 3600 s, at most 300 s)
    second = source.get()
    assert second.access_key_id != first.access_key_id and sts_calls(emulator) == 2
    assert source.redact(f"x {first.access_key_secret} {second.security_token}") == "x *** ***"


def test_rrsa_client_survives_an_expired_key_without_an_error(
    emulator: AliCloudEmulator, tmp_path: Path
) -> None:
    config = load_config(ctx_for(emulator, rrsa_env(tmp_path)))
    client = make_client(config)
    assert [g["ScalingGroupId"] for g in client.describe_scaling_groups([GROUP_A])] == [GROUP_A]
    emulator.expire_temporary_keys()
    emulator.clear_log()
    assert [g["ScalingGroupId"] for g in client.describe_scaling_groups([GROUP_A])] == [GROUP_A]
    assert emulator.actions() == ["DescribeScalingGroups", "AssumeRoleWithOIDC", "DescribeScalingGroups"]
    assert [e.status for e in emulator.request_log()] == [400, 200, 200]


def test_rrsa_token_file_is_reread_and_a_bad_token_refused(
    emulator: AliCloudEmulator, tmp_path: Path
) -> None:
    env = rrsa_env(tmp_path, token="not-the-token")
    client = make_client(load_config(ctx_for(emulator, env)))
    with pytest.raises(CloudError) as err:
        client.describe_scaling_groups([GROUP_A])
    assert err.value.code == "AuthenticationFail.OIDCToken.Invalid" and "not-the-token" not in str(err.value)
    Path(env["ALIBABA_CLOUD_OIDC_TOKEN_FILE"]).write_text(OIDC_TOKEN)  # kubelet rotated the token
    assert [g["ScalingGroupId"] for g in client.describe_scaling_groups([GROUP_A])] == [GROUP_A]


def test_metadata_mode_finds_role_and_region(emulator: AliCloudEmulator) -> None:
    source = MetadataCredentials(emulator.base_url)
    cred = source.get()
    assert cred.security_token and source.region() == REGION and source.role() == "ca-node-role"
    env = {"METADATA_ENDPOINT": emulator.base_url}
    config = load_config(ctx_for(emulator, env))
    assert config.credentials.mode == "ecs-ram-role" and config.region == ""
    client = make_client(config)
    assert client.region == REGION
    assert [g["ScalingGroupId"] for g in client.describe_scaling_groups([GROUP_A])] == [GROUP_A]
    paths = [e.path for e in emulator.request_log() if e.path.startswith("/latest")]
    assert "/latest/meta-data/Ram/security-credentials/ca-node-role" in paths
