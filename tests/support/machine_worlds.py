"""A one-group sim cloud served through the shared machine machinery on a real gRPC port: the
world of the machinery's stress tests (tests/providers/test_machines.py and its neighbours)."""

from __future__ import annotations

from cloudprovider_grpc.config.settings import Settings
from cloudprovider_grpc.providers.machinery.machines.provider import MachineProvider
from cloudprovider_grpc.providers.sim import SimCloud, SimOptions
from cloudprovider_grpc.server.assembly import ServerHandle, start_server


def sim_cloud(max_size: int = 20, initial: int = 0, delay: float = 0.0) -> SimCloud:
    return SimCloud(
        SimOptions.model_validate(
            {
                "provisioning_delay": delay,
                "deletion_delay": 0,
                "groups": [{"id": "g", "min_size": 0, "max_size": max_size, "initial_size": initial}],
            }
        )
    )


def serve(provider: MachineProvider) -> ServerHandle:
    return start_server(Settings(address="127.0.0.1:0", metrics_address=""), provider=provider)


def alive(cloud: SimCloud) -> list[str]:
    return sorted(m.id for m in cloud.machines.values() if m.deleted_at is None)
