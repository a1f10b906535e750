"""Configuration: every in-tree input accepted verbatim, every problem one line naming its key."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudprovider_grpc.core.errors import ConfigError
from cloudprovider_grpc.providers.alicloud.config import load_config
from cloudprovider_grpc.providers.alicloud.credentials import EMULATOR_ACCESS_KEY_ID
from cloudprovider_grpc.providers.registry import NodesSpec, ProviderContext
from tests.providers.alicloud.conftest import AK, ENV, GROUP_A, PROVIDER_ARN, REGION, ROLE_ARN, SK, rrsa_env

pytestmark = pytest.mark.unit

NODES = (NodesSpec(1, 10, GROUP_A),)


def load(env: dict[str, str], **kw) -> object:
    return load_config(ProviderContext(nodes=kw.pop("nodes", NODES), env=env, **kw))


def error(env: dict[str, str], **kw) -> ConfigError:
    with pytest.raises(ConfigError) as exc:
        load(env, **kw)
    assert "\n" not in str(exc.value)
    return exc.value


def test_access_key_mode_with_the_in_tree_variables_and_groups_from_nodes() -> None:
    config = load({**ENV, "ACCESS_KEY_SECRET": f"  {SK}\n"})
    assert config.credentials.mode == "access-key"
    assert (config.credentials.access_key_id, config.credentials.access_key_secret) == (AK, SK)
    assert config.region == REGION
    assert [(g.id, g.min_size, g.max_size) for g in config.groups] == [(GROUP_A, 1, 10)]
    assert SK not in repr(config)


def test_rrsa_mode_new_and_old_variable_names(tmp_path: Path) -> None:
    new = rrsa_env(tmp_path)
    config = load(new)
    assert config.credentials.mode == "rrsa"
    assert (config.credentials.role_arn, config.credentials.oidc_provider_arn) == (ROLE_ARN, PROVIDER_ARN)
    assert config.credentials.oidc_token_file == tmp_path / "oidc-token"
    old = {
        "ALICLOUD_OIDC_PROVIDER_ARN": new["ALIBABA_CLOUD_OIDC_PROVIDER_ARN"],
        "ALICLOUD_OIDC_TOKEN_FILE_PATH": new["ALIBABA_CLOUD_OIDC_TOKEN_FILE"],
        "ALICLOUD_ROLE_ARN": new["ALIBABA_CLOUD_ROLE_ARN"],
        "ALICLOUD_SESSION_NAME": new["ALIBABA_CLOUD_SESSION_NAME"],
        "REGION_ID": REGION,
    }
    legacy = load(old).credentials

    def fields(c):
        return (c.mode, c.role_arn, c.oidc_provider_arn, c.oidc_token_file, c.session_name)

    assert fields(legacy) == fields(config.credentials)


def test_precedence_access_key_then_rrsa_then_metadata(tmp_path: Path) -> None:
    assert (
        load({**rrsa_env(tmp_path), "ACCESS_KEY_ID": AK, "ACCESS_KEY_SECRET": SK}).credentials.mode
        == "access-key"
    )
    meta = load({"METADATA_ENDPOINT": "http://127.0.0.1:9"})
    assert meta.credentials.mode == "ecs-ram-role" and meta.region == ""
    assert meta.metadata_endpoint == "http://127.0.0.1:9/"
    assert load({}).metadata_endpoint == "http://100.100.100.200/"


def test_a_credential_mode_given_in_part_names_what_is_missing(tmp_path: Path) -> None:
    assert error({"ACCESS_KEY_ID": AK, "REGION_ID": REGION}).key == "ACCESS_KEY_SECRET"
    assert error({"ACCESS_KEY_SECRET": SK, "REGION_ID": REGION}).key == "ACCESS_KEY_ID"
    partial = rrsa_env(tmp_path)
    del partial["ALIBABA_CLOUD_ROLE_ARN"]
    assert error(partial).key == "ALIBABA_CLOUD_ROLE_ARN"
    assert error({**rrsa_env(tmp_path), "ALIBABA_CLOUD_ROLE_ARN": "ca-role"}).key == "ALIBABA_CLOUD_ROLE_ARN"
    missing_file = {**rrsa_env(tmp_path), "ALIBABA_CLOUD_OIDC_TOKEN_FILE": str(tmp_path / "nope")}
    assert error(missing_file).key == "ALIBABA_CLOUD_OIDC_TOKEN_FILE"


def test_region_is_required_except_with_the_metadata_server() -> None:
    assert error({"ACCESS_KEY_ID": AK, "ACCESS_KEY_SECRET": SK}).key == "REGION_ID"
    assert error({**ENV, "REGION_ID": "Hangzhou"}).key == "REGION_ID"


def test_secrets_must_be_header_safe() -> None:
    err = error({**ENV, "ACCESS_KEY_SECRET": "abc\ndef"})
    assert err.key == "ACCESS_KEY_SECRET" and "abc" not in str(err)


def test_groups_only_from_nodes_as_in_tree() -> None:
    assert error(ENV, nodes=()).key == "nodes"
    assert error(ENV, nodes=(NodesSpec(0, 1, "asg bad"),)).key == "nodes (asg bad)"
    assert error(ENV, nodes=(NodesSpec(0, 1, GROUP_A), NodesSpec(0, 2, GROUP_A))).key.startswith("nodes")


def test_endpoint_overrides_from_env_or_yaml() -> None:
    config = load(
        {**ENV, "ALICLOUD_ESS_ENDPOINT": "ess-vpc.cn-hangzhou.aliyuncs.com"},
        options={
            "ecs-endpoint": "http://127.0.0.1:8080",
            "sts-endpoint": "https://sts-vpc.cn-hangzhou.aliyuncs.com/",
        },
    )
    assert config.ess_endpoint == "https://ess-vpc.cn-hangzhou.aliyuncs.com/"
    assert config.ecs_endpoint == "http://127.0.0.1:8080/"
    assert config.sts_endpoint == "https://sts-vpc.cn-hangzhou.aliyuncs.com/"
    assert error({**ENV, "ALICLOUD_ECS_ENDPOINT": "ftp://x"}).key == "ALICLOUD_ECS_ENDPOINT"


def test_yaml_options_are_validated() -> None:
    assert error(ENV, options={"nope": 1}).key == "alicloud.nope"
    assert error(ENV, options={"remove-policy": "delete"}).key == "alicloud.remove-policy"
    assert error(ENV, options={"reserved": {"cpu": "lots"}}).key == "alicloud.reserved.cpu"
    assert (
        error(ENV, options={"emulator": {"stock": {"ecs.g7.xlarge": -1}}}).key
        == "alicloud.emulator.stock.ecs.g7.xlarge"
    )
    assert (
        error(ENV, options={"emulator": {"instance-types": ["x"]}}).key == "alicloud.emulator.instance-types"
    )
    types = load(
        ENV, options={"emulator": {"instance-types": {GROUP_A: "ecs.g7.2xlarge"}}}
    ).emulator.instance_types
    assert dict(types) == {GROUP_A: "ecs.g7.2xlarge"}
    config = load(ENV, options={"remove-policy": "recycle", "reserved": {"cpu": "100m"}, "catalog-ttl": 60})
    assert (config.remove_policy, dict(config.reserved), config.tuning.catalog_ttl) == (
        "recycle",
        {"cpu": "100m"},
        60.0,
    )


def test_cloud_config_file_global_section_and_env_wins(tmp_path: Path) -> None:
    path = tmp_path / "cloud-config"
    path.write_text(f"[Global]\nRegionId = cn-shanghai\nAccessKeyID = {AK}\nAccessKeySecret = {SK}\n")
    config = load({}, cloud_config=path)
    assert (config.credentials.mode, config.region) == ("access-key", "cn-shanghai")
    assert load({"REGION_ID": REGION}, cloud_config=path).region == REGION
    path.write_text("[nodegroup]\nx = 1\n")
    assert error({}, cloud_config=path).key.startswith("cloud-config")
    path.write_text("")
    assert load(ENV, cloud_config=path).credentials.mode == "access-key"


def test_emulate_alone_is_a_demo_region_and_honours_given_credentials() -> None:
    demo = load({}, nodes=(), emulate=True)
    assert demo.demo_groups and len(demo.groups) == 2 and demo.region == "cn-hangzhou"
    assert demo.credentials.access_key_id == EMULATOR_ACCESS_KEY_ID
    given = load(ENV, emulate=True)
    assert given.credentials.access_key_id == AK and not given.demo_groups


def test_auto_discovery_in_cas_format_or_as_a_mapping() -> None:
    text = load(
        ENV, nodes=(), options={"auto-discovery": "asg:tag=k8s.io/cluster-autoscaler/enabled,team=ml"}
    )
    assert dict(text.discovery_tags) == {"k8s.io/cluster-autoscaler/enabled": "", "team": "ml"}
    assert text.groups == ()
    mapping = load(ENV, options={"auto-discovery": {"tags": {"k8s.io/cluster-autoscaler/c1": None}}})
    assert dict(mapping.discovery_tags) == {"k8s.io/cluster-autoscaler/c1": ""} and len(mapping.groups) == 1
    for bad in ("mig:tag=x", "asg:label=x", {"labels": {"a": "b"}}, "asg:tag="):
        assert error(ENV, options={"auto-discovery": bad}).key == "alicloud.auto-discovery"
