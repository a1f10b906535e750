"""Configuration: the in-tree env vars verbatim, the new keys, and one-line errors naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cloudprovider_grpc.core.errors import ConfigError
from cloudprovider_grpc.providers.exoscale.config import (
    EMULATOR_KEY,
    EMULATOR_SECRET,
    EMULATOR_ZONE,
    load_config,
)
from cloudprovider_grpc.providers.registry import NodesSpec, ProviderContext
from tests.providers.exoscale.conftest import ENV, KEY, SECRET, ZONE

pytestmark = pytest.mark.unit


def ctx(env: dict[str, str] | None = None, **kw: Any) -> ProviderContext:
    return ProviderContext(env=dict(ENV if env is None else env), **kw)


def test_in_tree_environment_verbatim() -> None:
    config = load_config(ctx(nodes=(NodesSpec(1, 5, "workers"), NodesSpec(2, 3, "batch"))))
    assert (config.zone, config.api_key, config.api_secret) == (ZONE, KEY, SECRET)
    # EXOSCALE_API_ENVIRONMENT defaults to "api": https://api-<zone>.exoscale.com/v2
    assert config.endpoint == f"https://api-{ZONE}.exoscale.com/v2/"
    assert config.spec_names == ("workers", "batch")
    assert config.sks_cluster == "" and config.instance_pools == ()


def test_api_environment_builds_the_host() -> None:
    config = load_config(ctx({**ENV, "EXOSCALE_API_ENVIRONMENT": "ppapi"}))
    assert config.endpoint == f"https://ppapi-{ZONE}.exoscale.com/v2/"


def test_secret_file_values_are_stripped() -> None:
    """A mounted Secret file ends with a newline; the header must not."""
    config = load_config(ctx({**ENV, "EXOSCALE_API_KEY": f" {KEY}\n", "EXOSCALE_API_SECRET": f"{SECRET}\n"}))
    assert (config.api_key, config.api_secret) == (KEY, SECRET)


@pytest.mark.parametrize(
    ("missing", "message"),
    [
        ("EXOSCALE_ZONE", "no Exoscale zone specified"),
        ("EXOSCALE_API_KEY", "no Exoscale API key specified"),
        ("EXOSCALE_API_SECRET", "no Exoscale API secret specified"),
    ],
)
def test_in_tree_required_variables(missing: str, message: str) -> None:
    env = {k: v for k, v in ENV.items() if k != missing}
    with pytest.raises(ConfigError) as info:
        load_config(ctx(env))
    assert info.value.key == missing and info.value.problem == message


@pytest.mark.parametrize(
    ("env", "key", "fragment"),
    [
        ({"EXOSCALE_API_SECRET": "two words"}, "EXOSCALE_API_SECRET", "whitespace"),
        ({"EXOSCALE_API_KEY": "EXO,x"}, "EXOSCALE_API_KEY", "comma"),
        ({"EXOSCALE_API_SECRET": "caf\u00e9"}, "EXOSCALE_API_SECRET", "cannot be sent in an HTTP header"),
        ({"EXOSCALE_ZONE": "CH GVA 2"}, "EXOSCALE_ZONE", "not a zone name"),
        ({"EXOSCALE_API_ENVIRONMENT": "api.example"}, "EXOSCALE_API_ENVIRONMENT", "host label"),
        ({"EXOSCALE_API_ENDPOINT": "ftp://x"}, "EXOSCALE_API_ENDPOINT", "not an http(s) URL"),
        ({"EXOSCALE_INSTANCE_POOLS": "*,batch"}, "EXOSCALE_INSTANCE_POOLS", "cannot be combined"),
    ],
)
def test_bad_values_name_their_key(env: dict[str, str], key: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(ctx({**ENV, **env}))
    assert info.value.key == key and fragment in info.value.problem
    assert "\n" not in str(info.value)
    assert SECRET not in str(info.value)


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({"bogus": 1}, "exoscale.bogus"),
        ({"retries": -1}, "exoscale.retries"),
        ({"rate-limit": 0}, "exoscale.rate-limit"),
        ({"reserved": {"memory": "lots"}}, "exoscale.reserved.memory"),
        ({"unbounded-max-size": 0}, "exoscale.unbounded-max-size"),
        ({"emulator": {"quota-mode": "maybe"}}, "exoscale.emulator.quota-mode"),
        ({"emulator": {"auth-failure-status": 500}}, "exoscale.emulator.auth-failure-status"),
        ({"emulator": {"nope": 1}}, "exoscale.emulator.nope"),
        ({"emulator": {"stock": {"standard.colossal": 0}}}, "exoscale.emulator.stock.standard.colossal"),
        ({"emulator": {"stock": {"standard.large": -1}}}, "exoscale.emulator.stock.standard.large"),
        ({"emulator": {"nodepools": []}}, "exoscale.emulator.nodepools"),
        ({"emulator": {"nodepools": [{"size": 1}]}}, "exoscale.emulator.nodepools[0].name"),
        ({"emulator": {"nodepools": [{"name": "a", "id": "A"}]}}, "exoscale.emulator.nodepools[0].id"),
        ({"emulator": {"nodepools": [{"name": "a", "zone": "x"}]}}, "exoscale.emulator.nodepools[0].zone"),
        ({"emulator": {"nodepools": [{"name": "a"}, {"name": "a"}]}}, "exoscale.emulator.nodepools"),
        (
            {"emulator": {"nodepools": [{"name": "a", "taints": {"k": {"effect": "Never"}}}]}},
            "exoscale.emulator.nodepools[0].taints",
        ),
    ],
)
def test_bad_options_name_their_key(options: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(ctx(options=options))
    assert info.value.key == key


def test_new_keys_from_env_win_over_yaml() -> None:
    options = {
        "sks-cluster": "from-yaml",
        "instance-pools": ["a", "b"],
        "api-endpoint": "http://127.0.0.1:1/v2",
    }
    config = load_config(ctx({**ENV, "EXOSCALE_SKS_CLUSTER": "prod"}, options=options))
    assert config.sks_cluster == "prod"
    assert config.instance_pools == ("a", "b")
    assert config.endpoint == "http://127.0.0.1:1/v2/"
    config = load_config(ctx({**ENV, "EXOSCALE_INSTANCE_POOLS": "x, y ,x"}, options=options))
    assert config.instance_pools == ("x", "y")


def test_no_cloud_config_file(tmp_path: Path) -> None:
    f = tmp_path / "cc"
    f.write_text("[global]\n")
    with pytest.raises(ConfigError) as info:
        load_config(ctx(cloud_config=f))
    assert info.value.key == "cloud-config"


def test_duplicate_nodes_spec_is_refused() -> None:
    with pytest.raises(ConfigError, match="named twice"):
        load_config(ctx(nodes=(NodesSpec(1, 2, "w"), NodesSpec(1, 3, "w"))))


def test_emulate_needs_nothing_and_honours_given_credentials() -> None:
    bare = load_config(ProviderContext(emulate=True))
    assert (bare.zone, bare.api_key, bare.api_secret) == (EMULATOR_ZONE, EMULATOR_KEY, EMULATOR_SECRET)
    assert bare.instance_pools == ("*",)  # the demo's standalone pool joins the demo nodepools
    given = load_config(ctx(emulate=True))
    assert (given.zone, given.api_key, given.api_secret) == (ZONE, KEY, SECRET)


def test_secrets_never_in_repr() -> None:
    config = load_config(ctx())
    assert SECRET not in repr(config) and KEY not in repr(config)


def test_shipped_example_config_is_valid() -> None:
    from cloudprovider_grpc.config.settings import load_settings

    root = Path(__file__).resolve().parents[3]
    settings = load_settings(root / "examples" / "exoscale.yaml")
    assert settings.provider == "exoscale"
    config = load_config(settings.provider_context(env=dict(ENV)))
    assert config.sks_cluster == "my-cluster" and config.spec_names == ("workers", "gpu")
    assert config.reserved == {"cpu": "200m", "memory": "1Gi"}
