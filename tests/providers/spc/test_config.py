"""SPC configuration: the fork's environment and override file, gen 1 --nodes, every error one line."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from cloudprovider_grpc.core.errors import ConfigError
from cloudprovider_grpc.providers.registry import NodesSpec
from cloudprovider_grpc.providers.spc.config import load_config
from tests.providers.spc.conftest import CLUSTER, ORG, TOKEN, spc_ctx

pytestmark = pytest.mark.unit


def test_the_forks_environment_is_read_verbatim() -> None:
    config = load_config(spc_ctx())
    assert (config.token, config.org_id, config.cluster_id) == (TOKEN, ORG, CLUSTER)
    assert config.api_url == "https://api.stackpoint.io/"
    assert config.path == f"orgs/{ORG}/clusters/{CLUSTER}"
    assert TOKEN not in repr(config)


def test_spc_base_api_url_is_accepted_and_spc_api_base_url_wins() -> None:
    env = dict(spc_ctx().env)
    del env["SPC_API_BASE_URL"]
    env["SPC_BASE_API_URL"] = "https://spc.example.com/api/"
    assert load_config(spc_ctx(env=env)).api_url == "https://spc.example.com/api/"
    env["SPC_API_BASE_URL"] = "http://127.0.0.1:9/"
    assert load_config(spc_ctx(env=env)).api_url == "http://127.0.0.1:9/"


@pytest.mark.parametrize(
    ("missing", "secret_key"),
    [
        ("CLUSTER_API_TOKEN", "api-token"),
        ("SPC_API_BASE_URL", "api-url"),
        ("ORGANIZATION_ID", "organization-id"),
        ("CLUSTER_ID", "cluster-id"),
    ],
)
def test_each_required_variable_is_named_with_its_secret_key(missing: str, secret_key: str) -> None:
    env = {k: v for k, v in spc_ctx().env.items() if k != missing}
    with pytest.raises(ConfigError) as err:
        load_config(spc_ctx(env=env))
    assert str(err.value).startswith(f"invalid configuration: {missing}: is required and missing")
    assert f"key {secret_key}" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("ORGANIZATION_ID", "four", "is not a positive integer"),
        ("CLUSTER_ID", "0", "is not a positive integer"),
        ("SPC_API_BASE_URL", "api.stackpoint.io", r"is not an http\(s\) URL"),
    ],
)
def test_malformed_values_are_named(key: str, value: str, problem: str) -> None:
    env = {**spc_ctx().env, key: value}
    with pytest.raises(ConfigError, match=f"^invalid configuration: {key}: .*{problem}"):
        load_config(spc_ctx(env=env))


def test_the_token_is_stripped_and_must_be_header_safe() -> None:
    env = {**spc_ctx().env, "CLUSTER_API_TOKEN": f"  {TOKEN}\n"}
    assert load_config(spc_ctx(env=env)).token == TOKEN
    env["CLUSTER_API_TOKEN"] = "abc\r\nX-Evil: 1"
    with pytest.raises(ConfigError) as err:
        load_config(spc_ctx(env=env))
    assert "CLUSTER_API_TOKEN: contains characters that cannot be sent" in str(err.value)
    assert "abc" not in str(err.value) and "Evil" not in str(err.value)


def test_emulate_needs_no_configuration() -> None:
    config = load_config(spc_ctx(env={}, emulate=True))
    assert (config.org_id, config.cluster_id, config.token) == (1, 1, "spc-emulator-token")


def test_yaml_keys_stand_in_for_the_environment_and_unknown_ones_are_refused() -> None:
    ctx = spc_ctx(
        env={"CLUSTER_API_TOKEN": TOKEN},
        options={
            "api-url": "https://spc.internal",
            "organization-id": 7,
            "cluster-id": "8",
            "draft-timeout": 300,
        },
    )
    config = load_config(ctx)
    assert (config.api_url, config.org_id, config.cluster_id, config.draft_timeout) == (
        "https://spc.internal/",
        7,
        8,
        300.0,
    )
    with pytest.raises(ConfigError, match=r"^invalid configuration: spc\.throttle: unknown option"):
        load_config(spc_ctx(options={"throttle": 60}))
    with pytest.raises(ConfigError, match=r"spc\.emulator\.build-seconds: unknown option"):
        load_config(spc_ctx(options={"emulator": {"build-seconds": 1}}))
    with pytest.raises(ConfigError, match=r"spc\.draft-timeout: must be above 0"):
        load_config(spc_ctx(options={"draft-timeout": 0}))


def test_gen1_nodes_and_narrowing_specs() -> None:
    ctx = spc_ctx(
        nodes=(
            NodesSpec.parse("1:8:t2.medium"),  # gen 1, id "default"
            NodesSpec.parse("0:4:m4.xlarge:big"),  # gen 1 with an id
            NodesSpec.parse("0:3:autoscaling-spcabc1234-pool-2"),  # narrows a discovered pool
        )
    )
    config = load_config(ctx)
    assert [(g.group_id, g.size, g.min_size, g.max_size) for g in config.gen1] == [
        ("autoscaling-default", "t2.medium", 1, 8),
        ("autoscaling-big", "m4.xlarge", 0, 4),
    ]
    assert config.narrow == ((0, 3, "autoscaling-spcabc1234-pool-2"),)
    with pytest.raises(ConfigError, match="is given twice"):
        load_config(
            spc_ctx(nodes=(NodesSpec.parse("0:1:t2.medium"), NodesSpec.parse("0:2:t2.large:default")))
        )
    with pytest.raises(ConfigError, match=r"nodes \(0:1:t2.medium:a:b\)"):
        load_config(spc_ctx(nodes=(NodesSpec.parse("0:1:t2.medium:a:b"),)))


def test_node_pools_file_replaces_the_listing(tmp_path: Path) -> None:
    f = tmp_path / "nodepools"
    pools = [
        {
            "pk": 5,
            "instance_id": "spcabc1234-pool-1",
            "instance_size": "t2.medium",
            "autoscaled": True,
            "min_count": 0,
            "max_count": 3,
        }
    ]
    f.write_text(json.dumps(pools))
    assert load_config(spc_ctx(options={"node-pools-file": str(f)})).pools_override == tuple(pools)
    env = {**spc_ctx().env, "SPC_NODE_POOLS_FILE": str(f)}
    assert load_config(spc_ctx(env=env)).pools_override == tuple(pools)
    # an optional ConfigMap that is not there: the API is listed, as in the fork
    assert load_config(spc_ctx(options={"node-pools-file": str(tmp_path / "absent")})).pools_override is None
    for text, problem in (
        ("{not json", "is not JSON"),
        ('{"pk": 1}', "must hold a JSON array"),
        ('[{"pk": 1}]', "item 0 has no 'instance_id'"),
        (
            '[{"pk": 1, "instance_id": "p", "autoscaled": true, "min_count": 3, "max_count": 1}]',
            "0 <= min_count <= max_count",
        ),
    ):
        f.write_text(text)
        with pytest.raises(ConfigError, match=f"^invalid configuration: spc.node-pools-file: .*{problem}"):
            load_config(spc_ctx(options={"node-pools-file": str(f)}))


def test_provider_id_template_is_checked_strictly() -> None:
    config = load_config(spc_ctx(options={"provider-id-template": "gce://proj/{{.Zone}}/{{.Name}}"}))
    assert config.provider_id_template is not None
    assert config.provider_id_template.fields == {"Zone", "Name"}
    for bad, problem in (
        ("gce://{{.Project}}/x", "unknown field .Project"),
        ("static", "uses no field"),
        ("{{.Zone | x}}", "unsupported action"),
    ):
        with pytest.raises(ConfigError, match=f"spc.provider-id-template: .*{problem}"):
            load_config(spc_ctx(options={"provider-id-template": bad}))


def test_emulator_options() -> None:
    config = load_config(
        dataclasses.replace(spc_ctx(), options={"emulator": {"draft-seconds": 0, "pool-cpu-memory": True}})
    )
    assert config.emulator.draft_seconds == 0 and config.emulator.pool_cpu_memory
