"""`HOST:PORT` addresses as the flags and settings give them: one split (the port after the last
colon, an IPv6 host in brackets) for every listener the server opens, so the gRPC port, the
metrics port and each emulator read an address the same way."""

from __future__ import annotations

import ipaddress

from cloudprovider_grpc.core.errors import ConfigError


def split_host_port(address: str, setting: str = "address") -> tuple[str, int]:
    """(host, port) of `address`; the host keeps its brackets off and is "" for all interfaces.
    ConfigError naming `setting` when the port is not a number."""
    host, _, port = address.rpartition(":")
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        raise ConfigError(setting, f"{address!r} is not HOST:PORT") from None


def host_of(address: str) -> str:
    """The host part of HOST:PORT exactly as written (brackets kept), for messages and for binding
    the same interface again."""
    return address.rpartition(":")[0]


def is_loopback(address: str) -> bool:
    """True when HOST:PORT binds only this host's loopback interface (127.0.0.0/8, ::1, localhost)."""
    host = host_of(address).strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # "" (all interfaces), a name that may resolve anywhere
