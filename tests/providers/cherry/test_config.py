"""Configuration compatibility: the in-tree example and env vars load unchanged; every malformed
input fails at build() with one line naming the key."""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path

import pytest

from cloudprovider_grpc.core.errors import ConfigError
from cloudprovider_grpc.formats.gcfg import parse_gcfg
from cloudprovider_grpc.providers.cherry.config import DEFAULT_API_URL, load_config
from cloudprovider_grpc.providers.registry import NodesSpec, build_provider
from tests.providers.cherry.conftest import ENV, EXAMPLE, example_ctx

pytestmark = pytest.mark.unit


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_intree_example_loads_unchanged() -> None:
    cfg = load_config(example_ctx())
    assert [g.id for g in cfg.groups] == ["pool1", "pool2"]
    assert [(g.min_size, g.max_size) for g in cfg.groups] == [(0, 10), (0, 5)]
    assert cfg.api_url == DEFAULT_API_URL
    assert cfg.token == ENV["CHERRY_AUTH_TOKEN"]
    for name in ("pool1", "pool2"):  # pool1 has no section: it uses [nodegroupdef "default"]
        pool = cfg.pools[name]
        assert (pool.cluster_name, pool.project_id, pool.plan, pool.region, pool.os) == (
            "cluster1", 123456, "113", "EU-Nord-1", "ubuntu_18_04",
        )  # fmt: skip
        assert pool.api_server_endpoint == "10.1.2.3:6443"
        assert pool.cloudinit is not None and pool.cloudinit.fields == {
            "BootstrapTokenID", "BootstrapTokenSecret", "APIServerEndpoint",
        }  # fmt: skip
        assert pool.hostname_pattern is not None
        assert pool.hostname_pattern.fields == {"ClusterName", "NodeGroup", "RandString8"}


def test_secrets_are_not_in_the_config_repr() -> None:
    text = repr(load_config(example_ctx()))
    assert ENV["CHERRY_AUTH_TOKEN"] not in text and ENV["BOOTSTRAP_TOKEN_SECRET"] not in text


def test_global_section_is_the_default_and_per_pool_project_and_endpoint_are_honoured(tmp_path: Path) -> None:
    ini = tmp_path / "cc.ini"
    ini.write_text(
        "; comment\n"
        "[Global]\n"
        "Cluster-Name = prod\n"
        "project-id = 10\n"
        "api-server-endpoint = 10.0.0.1:6443\n"
        "region = eu_nord_1\n"
        'plan = "e3_1240v3"   # trailing comment\n'
        "os = ubuntu_22_04\n"
        "ssh-key-ids = 11\n"
        "ssh-key-ids = 12\n"
        "os-partition-size = 40\n"
        '[nodegroupdef "big"]\n'
        "project-id = 20\n"
        "api-server-endpoint = 10.9.9.9:6443\n"
        "plan = e5_1620v4\n"
        "min-size = 1\n"
        "max-size = 4\n"
    )
    ctx = dataclasses.replace(
        example_ctx(), cloud_config=ini, cluster_name=None, nodes=(NodesSpec(0, 3, "small"),)
    )
    cfg = load_config(ctx)
    assert {g.id: (g.min_size, g.max_size) for g in cfg.groups} == {"big": (1, 4), "small": (0, 3)}
    small, big = cfg.pools["small"], cfg.pools["big"]
    assert (small.project_id, small.api_server_endpoint, small.plan) == (10, "10.0.0.1:6443", "e3_1240v3")
    assert (big.project_id, big.api_server_endpoint, big.plan) == (20, "10.9.9.9:6443", "e5_1620v4")
    assert big.region == "eu_nord_1" and big.cluster_name == "prod"  # other keys fall back to [global]
    assert small.ssh_key_ids == (11, 12) and small.os_partition_size == 40
    assert cfg.project_ids == (10, 20)


def test_yaml_options_give_the_same_settings_and_override_the_file() -> None:
    ctx = example_ctx(
        cloud_config=None,
        cluster_name=None,
        options={
            "cluster-name": "yamlcluster",
            "api-url": "http://127.0.0.1:9/v1",
            "global": {
                "project-id": 5,
                "region": "eu_west_1",
                "plan": "cloud_vps_1",
                "os": "debian_12_64bit",
            },
            "pools": {
                "pool1": {"plan": "cloud_vps_4", "ssh-key-ids": [1, 2], "hostname-pattern": "{{.NodeGroup}}"}
            },
            "reserved": {"cpu": "100m", "memory": "512Mi"},
        },
    )
    cfg = load_config(ctx)
    assert cfg.api_url == "http://127.0.0.1:9/v1/"
    assert cfg.pools["pool1"].plan == "cloud_vps_4" and cfg.pools["pool1"].ssh_key_ids == (1, 2)
    assert cfg.pools["pool2"].plan == "cloud_vps_1"
    assert cfg.pools["pool1"].cluster_name == "yamlcluster"
    assert cfg.reserved == {"cpu": "100m", "memory": "512Mi"}

    over = load_config(example_ctx(options={"pools": {"pool2": {"plan": "e3_1240v3"}}}))
    assert over.pools["pool2"].plan == "e3_1240v3" and over.pools["pool2"].region == "EU-Nord-1"


def test_env_overrides_for_api_url_and_controller_label() -> None:
    ctx = example_ctx()
    env = {
        **ENV,
        "CHERRY_API_URL": "http://127.0.0.1:8080/v1/",
        "CHERRY_CONTROLLER_NODE_IDENTIFIER_LABEL": "ctl",
    }
    cfg = load_config(dataclasses.replace(ctx, env=env))
    assert cfg.api_url == "http://127.0.0.1:8080/v1/" and cfg.controller_label == "ctl"


def _ini(tmp_path: Path, replace: tuple[str, str] | None = None, extra: str = "") -> Path:
    text = EXAMPLE.read_text()
    if replace:
        assert replace[0] in text
        text = text.replace(replace[0], replace[1], 1)
    path = tmp_path / "bad.ini"
    path.write_text(text + extra)
    return path


BAD_FILES = [
    ("project-id=123456", "project-id=YOUR_CHERRYSERVERS_PROJECT_ID", "project-id"),
    ("os=ubuntu_18_04", "os=ubuntu_18_04\nssh-key-ids=12x", "ssh-key-ids"),
    ("cloudinit=IyEv", "cloudinit=!!not base64!!IyEv", "cloudinit"),
    ("hostname-pattern=k8s-", "hostname-pattern={{.Nope}}-k8s-", "hostname-pattern"),
    ("plan=113", "plan=113\ncolour=red", "colour"),
    ('[nodegroupdef "pool2"]', '[pools]\nx=1\n[nodegroupdef "pool2"]', "[pools]"),
    ("plan=113", "plan=113\nthis line is not a setting", "cloud-config"),
    ("region=EU-Nord-1\n", "region=\n", "region"),
    ("os=ubuntu_18_04", 'os="ubuntu_18_04', "os"),
]


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        *BAD_FILES,
        ("os=ubuntu_18_04", "os=ubuntu_18_04\nos-partition-size=big", "os-partition-size"),
        ("cloudinit=IyEv", "cloudinit=" + b64("{{.Bogus}}") + "\n#IyEv", "cloudinit"),
        ("cloudinit=IyEv", "cloudinit=" + b64("{{if .NodeGroup}}x{{end}}") + "\n#IyEv", "cloudinit"),
        ("cloudinit=IyEv", "cloudinit=" + base64.b64encode(b"\xff\xfe").decode() + "\n#IyEv", "cloudinit"),
    ],
)
def test_each_malformed_file_gives_one_line_naming_the_key(
    tmp_path: Path, old: str, new: str, key: str
) -> None:
    ctx = example_ctx(cloud_config=_ini(tmp_path, (old, new)))
    with pytest.raises(ConfigError) as err:
        build_provider("cherry", ctx)
    message = str(err.value)
    assert "\n" not in message
    assert key in err.value.key, message


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"env": {k: v for k, v in ENV.items() if k != "CHERRY_AUTH_TOKEN"}}, "CHERRY_AUTH_TOKEN"),
        ({"env": {**ENV, "BOOTSTRAP_TOKEN_ID": ""}}, "BOOTSTRAP_TOKEN_ID"),
        ({"env": {k: v for k, v in ENV.items() if k != "BOOTSTRAP_TOKEN_SECRET"}}, "BOOTSTRAP_TOKEN_SECRET"),
        ({"env": {**ENV, "CHERRY_MANAGER": "graphql"}}, "CHERRY_MANAGER"),
        ({"env": {**ENV, "CHERRY_API_URL": "ftp://example"}}, "CHERRY_API_URL"),
        ({"cluster_name": None}, "cluster-name"),
        ({"nodes": ()}, "nodes"),
        ({"nodes": (NodesSpec(0, 3, "bad-"),)}, "nodes"),
        ({"cloud_config": Path("/nonexistent/cloud-config")}, "cloud-config"),
        ({"options": {"bogus": 1}}, "cherry.bogus"),
        ({"options": {"reserved": {"cpu": "lots"}}}, "cherry.reserved.cpu"),
        ({"options": {"api-url": "not a url"}}, "cherry.api-url"),
        ({"options": {"rate-limit": 0}}, "cherry.rate-limit"),
        ({"options": {"retries": -1}}, "cherry.retries"),
        ({"options": {"pools": {"pool1": {"ssh-key-ids": ["x"]}}}}, "cherry.pools.pool1.ssh-key-ids"),
        ({"options": {"pools": {"pool1": {"flavour": "x"}}}}, "cherry.pools.pool1.flavour"),
        ({"options": {"emulator": {"stock": {"e3_1240v3": {"eu_nord_1": -1}}}}}, "cherry.emulator.stock"),
    ],
)
def test_each_malformed_setting_gives_one_line_naming_the_key(change: dict, key: str) -> None:
    ctx = example_ctx()
    options = change.pop("options", None)
    ctx = dataclasses.replace(ctx, **change)
    if options is not None:
        ctx = dataclasses.replace(ctx, options={**ctx.options, **options})
    with pytest.raises(ConfigError) as err:
        build_provider("cherry", ctx)
    assert "\n" not in str(err.value)
    assert key in err.value.key, str(err.value)


def test_missing_token_is_fine_when_emulating() -> None:
    env = {k: v for k, v in ENV.items() if k != "CHERRY_AUTH_TOKEN"}
    cfg = load_config(dataclasses.replace(example_ctx(), env=env, emulate=True))
    assert cfg.token == "cherry-emulator-token"


def test_gcfg_quirks() -> None:
    sections = parse_gcfg(
        '[Global]\nA-Key = one two  ; c\nquoted = "a;b\\"c"\nflag\nlist = 1\nlist =\nlist = 3\n'
        "long = abc\\\n  def\n"
        '[NodeGroupDef "Mixed Case"]\nx=1\n'
    )
    glob, sub = sections
    assert glob.name == "global" and sub.name == "nodegroupdef" and sub.sub == "Mixed Case"
    assert glob.values["a-key"] == ["one two"]
    assert glob.values["quoted"] == ['a;b"c']
    assert glob.values["flag"] == ["true"]
    assert glob.values["list"] == ["3"]  # a blank value resets a multi-valued variable
    assert glob.values["long"] == ["abc  def"]
