"""Configuration compatibility: the in-tree JSON cloud-config loads unchanged; the key may come from
the environment or a secrets file; every malformed input fails at build with one line naming the key."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cloudprovider_grpc.core.errors import ConfigError
from cloudprovider_grpc.providers.registry import NodesSpec, ProviderContext
from cloudprovider_grpc.providers.vultr.config import (
    DEFAULT_API_URL,
    EMULATOR_DEFAULT_TOKEN,
    EMULATOR_DEMO_CLUSTER,
    load_config,
)
from tests.providers.vultr.conftest import CLOUD_CONFIG, CLUSTER, TOKEN

pytestmark = pytest.mark.integration


def test_intree_cloud_config_loads_unchanged() -> None:
    cfg = load_config(ProviderContext(cloud_config=CLOUD_CONFIG))
    assert (cfg.cluster_id, cfg.token, cfg.api_url) == (CLUSTER, TOKEN, DEFAULT_API_URL)
    assert cfg.nodes == () and cfg.warnings == ()


def test_the_token_is_never_in_the_repr() -> None:
    assert TOKEN not in repr(load_config(ProviderContext(cloud_config=CLOUD_CONFIG)))


def test_env_key_wins_over_the_file_and_is_stripped() -> None:
    cfg = load_config(ProviderContext(cloud_config=CLOUD_CONFIG, env={"VULTR_API_KEY": "  envkey123\n"}))
    assert cfg.token == "envkey123"


def test_key_from_a_secrets_directory_file(tmp_path: Path) -> None:
    """The secrets directory offers its files as environment variables (config.Settings)."""
    from cloudprovider_grpc.config.settings import Settings

    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "VULTR_API_KEY").write_text("filekey456\n")
    cc = tmp_path / "cc.json"
    cc.write_text('{"cluster_id": "%s"}'.replace("%s", CLUSTER))
    settings = Settings(provider="vultr", cloud_config=cc, secrets_dir=secrets)
    cfg = load_config(settings.provider_context(env={}))
    assert (cfg.cluster_id, cfg.token) == (CLUSTER, "filekey456")


def test_api_url_from_file_yaml_and_env(tmp_path: Path) -> None:
    cc = tmp_path / "cc.json"
    cc.write_text(
        '{"cluster_id": "%s", "token": "t", "api_url": "http://127.0.0.1:9/v2"}'.replace("%s", CLUSTER)
    )
    assert load_config(ProviderContext(cloud_config=cc)).api_url == "http://127.0.0.1:9/"
    ctx = ProviderContext(cloud_config=cc, options={"api-url": "http://127.0.0.1:8/"})
    assert load_config(ctx).api_url == "http://127.0.0.1:8/"
    ctx = dataclasses.replace(ctx, env={"VULTR_API_URL": "https://vultr.example/"})
    assert load_config(ctx).api_url == "https://vultr.example/"


def test_yaml_cluster_id_and_tuning_keys() -> None:
    cfg = load_config(
        ProviderContext(
            env={"VULTR_API_KEY": "k"},
            options={"cluster_id": CLUSTER, "read-timeout": 2.5, "page_size": 7, "reserved": {"cpu": "100m"}},
        )
    )
    assert (cfg.cluster_id, cfg.tuning.read_timeout, cfg.page_size, dict(cfg.reserved)) == (
        CLUSTER, 2.5, 7, {"cpu": "100m"},
    )  # fmt: skip


def test_the_file_is_decoded_as_go_decodes_it(tmp_path: Path) -> None:
    """json.Unmarshal into the in-tree struct: case-insensitive keys (a repeated one: the later wins),
    unknown keys ignored (we warn), null is empty."""
    cc = tmp_path / "cc.json"
    cc.write_text(
        '{"Cluster_ID": "x", "cluster_id": "%s", "TOKEN": "k", "region": "ewr"}'.replace("%s", CLUSTER)
    )
    cfg = load_config(ProviderContext(cloud_config=cc))
    assert (cfg.cluster_id, cfg.token) == (CLUSTER, "k")
    assert cfg.warnings == (
        "cloud-config: ignoring unknown key 'region' (known: api_url, cluster_id, token)",
    )
    cc.write_text('{"cluster_id": null, "token": "k"}')
    with pytest.raises(ConfigError) as info:
        load_config(ProviderContext(cloud_config=cc))
    assert info.value.problem == "empty cluster ID was supplied"


def test_a_misspelt_file_key_is_named_in_the_error_it_causes(tmp_path: Path) -> None:
    """`clusterid` for `cluster_id`: the one error line names the empty cluster id and the ignored
    key with the key it meant, not just the first."""
    cc = tmp_path / "cc.json"
    cc.write_text(json.dumps({"clusterid": CLUSTER, "token": "k"}))
    with pytest.raises(ConfigError) as info:
        load_config(ProviderContext(cloud_config=cc))
    line = str(info.value)
    assert "empty cluster ID was supplied" in line
    assert "ignoring unknown key 'clusterid'; did you mean 'cluster_id'?" in line, line


def test_min_zero_is_reported_and_treated_as_one() -> None:
    ctx = ProviderContext(cloud_config=CLOUD_CONFIG, nodes=(NodesSpec(0, 5, "general"),))
    cfg = load_config(ctx)
    assert len(cfg.warnings) == 1
    assert "min size 0 is treated as 1" in cfg.warnings[0] and "general" in cfg.warnings[0]


def test_emulate_needs_nothing() -> None:
    cfg = load_config(ProviderContext(emulate=True))
    assert (cfg.cluster_id, cfg.token) == (EMULATOR_DEMO_CLUSTER, EMULATOR_DEFAULT_TOKEN)
    # ... and honours what is configured
    cfg = load_config(ProviderContext(emulate=True, env={"VULTR_API_KEY": "mine"}, cloud_config=CLOUD_CONFIG))
    assert (cfg.cluster_id, cfg.token) == (CLUSTER, "mine")


def _file(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "cloud-config"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        ("cluster_id = x\ntoken = y\n", "cloud-config", "is not JSON"),  # the README's INI claim
        ("[1, 2]", "cloud-config", "must hold a JSON object"),
        ('{"cluster_id": "", "token": "t"}', "cloud-config cluster_id", "empty cluster ID was supplied"),
        (
            '{"cluster_id": "%s", "token": ""}'.replace("%s", CLUSTER),
            "cloud-config token",
            "empty token was supplied",
        ),
        (
            '{"cluster_id": "%s", "token": "tok\\u00e9-zq9x"}'.replace("%s", CLUSTER),
            "cloud-config token",
            "cannot be sent in an HTTP header",
        ),
        (
            '{"cluster_id": "%s", "token": "tok\\nline-zq9x"}'.replace("%s", CLUSTER),
            "cloud-config token",
            "cannot be sent in an HTTP header",
        ),
        ('{"cluster_id": "../../x", "token": "t"}', "cloud-config cluster_id", "is not a VKE cluster id"),
        ('{"cluster_id": 5, "token": "t"}', "cloud-config cluster_id", "expected a string"),
        (
            '{"cluster_id": "%s", "token": "t", "api_url": "ftp://x"}'.replace("%s", CLUSTER),
            "cloud-config api_url",
            "http(s)",
        ),
    ],
)
def test_each_malformed_file_gives_one_line_naming_the_key(
    tmp_path: Path, text: str, key: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(ProviderContext(cloud_config=_file(tmp_path, text)))
    assert info.value.key == key
    assert problem in info.value.problem
    assert "\n" not in str(info.value)
    assert "zq9x" not in str(info.value)  # the token is never quoted


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"options": {"bogus": 1}}, "vultr.bogus"),
        ({"options": {"read_timeout": 0}}, "vultr.read-timeout"),
        ({"options": {"retries": -1}}, "vultr.retries"),
        ({"options": {"page_size": 0}}, "vultr.page-size"),
        ({"options": {"rate_limit": "fast"}}, "vultr.rate-limit"),
        ({"options": {"reserved": {"cpu": "lots"}}}, "vultr.reserved.cpu"),
        ({"options": {"emulator": {"speed": 1}}}, "vultr.emulator.speed"),
        ({"options": {"emulator": {"pools": [{"label": "a"}]}}}, "vultr.emulator.pools[0].plan"),
        (
            {"options": {"emulator": {"pools": [{"id": "../x", "label": "a", "plan": "vc2-1c-2gb"}]}}},
            "vultr.emulator.pools[0].id",
        ),
        ({"options": {"emulator": {"stock": {"vc2-1c-2gb": -1}}}}, "vultr.emulator.stock.vc2-1c-2gb"),
        ({"options": {"emulator": {"stock": [1]}}}, "vultr.emulator.stock"),
        (
            {"options": {"emulator": {"pools": [{"id": "p1", "label": "a", "plan": "x"}] * 2}}},
            "vultr.emulator.pools",
        ),
        ({"env": {"VULTR_API_KEY": "bad\x01key"}}, "VULTR_API_KEY"),
        ({"env": {"VULTR_API_URL": "nope"}}, "VULTR_API_URL"),
        ({"nodes": (NodesSpec(0, 0, "general"),)}, "nodes (general)"),
    ],
)
def test_each_malformed_setting_gives_one_line_naming_the_key(change: dict[str, Any], key: str) -> None:
    ctx = dataclasses.replace(ProviderContext(cloud_config=CLOUD_CONFIG), **change)
    with pytest.raises(ConfigError) as info:
        load_config(ctx)
    assert info.value.key == key
    assert "\n" not in str(info.value)


def test_missing_cloud_config_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(ProviderContext(cloud_config=tmp_path / "absent"))
    assert info.value.key == "cloud-config" and "cannot read" in info.value.problem


def test_check_config_reports_min_zero_and_a_bad_key(tmp_path: Path) -> None:
    """`check-config --offline` (a real process) validates without network I/O: OK with a warning line for a
    min of 0; one line naming the key and exit 2 for a bad file."""
    base = [sys.executable, "-m", "cloudprovider_grpc", "check-config", "--offline", "--provider", "vultr"]
    ok = subprocess.run(
        [*base, "--cloud-config", str(CLOUD_CONFIG), "--nodes", "0:5:general"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert "configuration OK: provider vultr" in ok.stdout
    assert "min size 0 is treated as 1" in ok.stdout + ok.stderr
    assert TOKEN not in ok.stdout + ok.stderr
    bad = subprocess.run(
        [*base, "--cloud-config", str(_file(tmp_path, "cluster_id = x\n"))],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "cloud-config" in bad.stderr
