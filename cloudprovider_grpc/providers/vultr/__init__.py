"""Vultr VKE backend (pool shape); the registry entry points live in `wiring.py`."""

from cloudprovider_grpc.providers.vultr.client import VultrClient
from cloudprovider_grpc.providers.vultr.driver import VultrDriver
from cloudprovider_grpc.providers.vultr.wiring import build_driver, build_emulator, make_client

__all__ = ["VultrClient", "VultrDriver", "build_driver", "build_emulator", "make_client"]
