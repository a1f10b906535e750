"""Cherry Servers backend (machine shape); the registry entry points live in `wiring.py`."""

from cloudprovider_grpc.providers.cherry.client import CherryClient
from cloudprovider_grpc.providers.cherry.driver import CherryDriver
from cloudprovider_grpc.providers.cherry.wiring import build_driver, build_emulator, make_client

__all__ = ["CherryClient", "CherryDriver", "build_driver", "build_emulator", "make_client"]
