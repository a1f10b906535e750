"""StackPointCloud backend (machine shape); the registry entry points live in `wiring.py`."""

from cloudprovider_grpc.providers.spc.client import SpcClient
from cloudprovider_grpc.providers.spc.driver import SpcDriver
from cloudprovider_grpc.providers.spc.wiring import build_driver, build_emulator, make_client

__all__ = ["SpcClient", "SpcDriver", "build_driver", "build_emulator", "make_client"]
