"""The option readers every backend's configuration shares (providers/options.py)."""

from __future__ import annotations

import pytest

from cloudprovider_grpc.core.errors import ConfigError
from cloudprovider_grpc.providers.options import (
    ClientTuning,
    check_known,
    read_float,
    read_int,
    read_reserved,
    read_url,
)

pytestmark = pytest.mark.unit


def test_numbers_are_range_checked_with_the_key_named() -> None:
    assert read_float("2.5", "x.timeout") == 2.5
    assert read_int("7", "x.retries") == 7
    for bad, reader in (
        (True, read_float),
        ("nan", read_float),
        (-1, read_float),
        ("3.5", read_int),
        (-2, read_int),
    ):
        with pytest.raises(ConfigError) as err:
            reader(bad, "x.key")
        assert str(err.value).startswith("invalid configuration: x.key:")
    with pytest.raises(ConfigError, match="above 0"):
        read_float(0, "x.rate", allow_zero=False)


def test_client_tuning_reads_any_spelling_over_the_backend_defaults() -> None:
    defaults = ClientTuning(read_timeout=4.0, rate_limit=20.0)
    tuning = defaults.read({"read_timeout": 2, "Rate-Limit": "5"}, "vultr")
    assert (tuning.read_timeout, tuning.rate_limit, tuning.retries) == (2.0, 5.0, defaults.retries)
    assert tuning.client_kwargs()["timeout"] == (defaults.connect_timeout, 2.0)
    with pytest.raises(ConfigError, match=r"vultr\.retry-budget"):
        defaults.read({"retry-budget": 0}, "vultr")


def test_urls_reserved_and_unknown_keys() -> None:
    assert read_url(" http://127.0.0.1:9/v2 ", "x.api-url") == "http://127.0.0.1:9/v2/"
    with pytest.raises(ConfigError, match=r"x\.api-url"):
        read_url("ftp://host/", "x.api-url")
    assert read_reserved({"cpu": "100m", "memory": "512Mi"}, "x.reserved") == {
        "cpu": "100m",
        "memory": "512Mi",
    }
    with pytest.raises(ConfigError, match=r"x.reserved.cpu"):
        read_reserved({"cpu": "lots"}, "x.reserved")
    with pytest.raises(ConfigError, match=r"x.read-timout: unknown option"):
        check_known({"read-timout": 1}, "x", ClientTuning.KEYS)
