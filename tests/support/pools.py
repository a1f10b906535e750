"""The pool-shape tests' cloud and server (tests/providers/test_pools_scaling.py and
test_pools_recovery.py): the sim backend in pool mode behind a real gRPC port, with
`CountingDriver` recording every call that changes the cloud and able to fail them like a bad
network, and the few calls the tests make as CA would.

The sim cloud owns each group's desired size, converges on it by itself, deletes *random* instances
when the size drops below the count (as VKE does), and removes named instances while lowering the
size.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence

from cloudprovider_grpc.config.settings import Settings
from cloudprovider_grpc.core.clouderrors import CloudError
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc
from cloudprovider_grpc.providers.driver import Machine, RemoveOutcome
from cloudprovider_grpc.providers.machinery.pools.provider import PoolProvider
from cloudprovider_grpc.providers.sim import SimCloud, SimOptions, SimPoolDriver
from cloudprovider_grpc.server.assembly import ServerHandle, start_server


class CountingDriver(SimPoolDriver):
    """SimPoolDriver that records set_size/remove calls and can fail a fraction of them: 'lost'
    (the cloud applied it, the answer never came) or 'refused' (a 503 before anything happened)."""

    def __init__(self, cloud: SimCloud, fault_rate: float = 0.0, seed: int = 1) -> None:
        super().__init__(cloud)
        self.pushes: list[int] = []
        self.removals: list[list[str]] = []
        self.fault_rate = fault_rate
        self.faults = 0
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def _fault(self) -> str | None:
        with self._lock:
            if self._rng.random() >= self.fault_rate:
                return None
            self.faults += 1
            return self._rng.choice(["lost", "refused"])

    def set_size(self, group: str, size: int) -> None:
        fault = self._fault()
        if fault == "refused":
            raise CloudError("503 Service Unavailable", transient=True, status=503)
        with self._lock:
            self.pushes.append(size)
        super().set_size(group, size)
        if fault == "lost":
            raise CloudError("read timed out", transient=True)

    def remove_machines(self, group: str, machines: Sequence[Machine]) -> RemoveOutcome:
        fault = self._fault()
        if fault == "refused":
            raise CloudError("429 Too Many Requests", transient=True, status=429)
        with self._lock:
            self.removals.append([m.id for m in machines])
        outcome = super().remove_machines(group, machines)
        if fault == "lost":
            raise CloudError("read timed out", transient=True)
        return outcome


def _cloud(
    max_size: int = 20, initial: int = 0, delay: float = 0.0, min_size: int = 0, **fail: object
) -> SimCloud:
    group: dict[str, object] = {
        "id": "g",
        "min_size": min_size,
        "max_size": max_size,
        "initial_size": initial,
    }
    if fail:
        group["fail"] = fail
    return SimCloud(
        SimOptions.model_validate(
            {"shape": "pools", "provisioning_delay": delay, "deletion_delay": 0, "groups": [group]}
        )
    )


def _serve(provider: PoolProvider) -> ServerHandle:
    return start_server(Settings(address="127.0.0.1:0", metrics_address=""), provider=provider)


def _alive(cloud: SimCloud) -> list[str]:
    return sorted(m.id for m in cloud.machines.values() if m.deleted_at is None)


def _instances(s: pb_grpc.CloudProviderStub, gid: str = "g") -> list[pb.Instance]:
    return list(s.NodeGroupNodes(pb.NodeGroupNodesRequest(id=gid)).instances)


def _target(s: pb_grpc.CloudProviderStub, gid: str = "g") -> int:
    return s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id=gid)).targetSize


def _eventually(s: pb_grpc.CloudProviderStub, check: Callable[[], bool], rounds: int = 200) -> None:
    """Refresh until `check` holds: each Refresh is one CA loop; background work runs between them."""
    for _ in range(rounds):
        s.Refresh(pb.RefreshRequest())
        if check():
            return
        threading.Event().wait(0.02)
    raise AssertionError("condition not reached")


def _delete(s: pb_grpc.CloudProviderStub, *ids: str, gid: str = "g") -> None:
    s.NodeGroupDeleteNodes(
        pb.NodeGroupDeleteNodesRequest(id=gid, nodes=[pb.ExternalGrpcNode(providerID=i) for i in ids])
    )
