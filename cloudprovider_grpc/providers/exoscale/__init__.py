"""Exoscale backend (pool shape): SKS nodepools and standalone Instance Pools; the registry entry
points live in `wiring.py`."""

from cloudprovider_grpc.providers.exoscale.client import ExoscaleClient
from cloudprovider_grpc.providers.exoscale.driver import ExoscaleDriver
from cloudprovider_grpc.providers.exoscale.wiring import (
    EMULATOR_CREDENTIALS,
    build_driver,
    build_emulator,
    check_config,
    make_client,
)

__all__ = [
    "EMULATOR_CREDENTIALS",
    "ExoscaleClient",
    "ExoscaleDriver",
    "build_driver",
    "build_emulator",
    "check_config",
    "make_client",
]
