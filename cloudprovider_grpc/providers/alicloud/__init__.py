"""AliCloud backend (pool shape: ESS scaling groups); the registry entry points live in `wiring.py`."""

from cloudprovider_grpc.providers.alicloud.client import AliClient
from cloudprovider_grpc.providers.alicloud.driver import AliCloudDriver
from cloudprovider_grpc.providers.alicloud.wiring import build_driver, build_emulator, make_client

__all__ = ["AliClient", "AliCloudDriver", "build_driver", "build_emulator", "make_client"]
