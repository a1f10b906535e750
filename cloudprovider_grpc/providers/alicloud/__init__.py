"""AliCloud backend (pool shape: ESS scaling groups); the registry entry points live in `wiring.py`."""

from cloudprovider_grpc.providers.alicloud.client import AliClient
from cloudprovider_grpc.providers.alicloud.driver import AliCloudDriver
from cloudprovider_grpc.providers.alicloud.wiring import (
    EMULATOR_CREDENTIALS,
    build_driver,
    build_emulator,
    make_client,
)

__all__ = [
    "EMULATOR_CREDENTIALS",
    "AliClient",
    "AliCloudDriver",
    "build_driver",
    "build_emulator",
    "make_client",
]
