"""One `HOST:PORT` reader for every listener: the metrics port and each emulator split an address
the same way, and a port that is not a number is a ConfigError naming the setting."""

from __future__ import annotations

import pytest

from cloudprovider_grpc.core.addresses import host_of, is_loopback, split_host_port
from cloudprovider_grpc.core.errors import ConfigError
from cloudprovider_grpc.server.metrics_port import http_address

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("address", "parts"),
    [
        ("127.0.0.1:8087", ("127.0.0.1", 8087)),
        (":9", ("", 9)),
        ("[::1]:443", ("::1", 443)),
        ("a.b:1", ("a.b", 1)),
    ],
)
def test_split(address: str, parts: tuple[str, int]) -> None:
    assert split_host_port(address) == parts


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.0.1:http", ""])
def test_a_port_that_is_not_a_number_names_the_setting(address: str) -> None:
    with pytest.raises(ConfigError) as err:
        split_host_port(address, "metrics_address")
    assert err.value.key == "metrics_address" and "is not HOST:PORT" in str(err.value)


def test_loopback_and_the_host_as_written() -> None:
    assert is_loopback("127.0.0.2:1") and is_loopback("[::1]:1") and is_loopback("LOCALHOST:1")
    assert not is_loopback(":1") and not is_loopback("0.0.0.0:1") and not is_loopback("example.com:1")
    assert host_of("[::1]:8086") == "[::1]"


def test_the_metrics_port_reads_an_empty_host_as_every_interface() -> None:
    assert http_address(":8087") == ("0.0.0.0", 8087)
    assert http_address("[::1]:8087") == ("::1", 8087)
