"""A provider of the front tests' own (tests/front/): one group whose size the test sets on demand,
by RPC, on Refresh or from a background thread, so each way a state change reaches the compiled
front can be tested on its own; and a server in front of it with the compiled front on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from cloudprovider_grpc.config.settings import Settings
from cloudprovider_grpc.core.errors import NotFound
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc
from cloudprovider_grpc.providers.contract import CloudProvider, Instance, NodeGroup, NodeRef
from cloudprovider_grpc.server.assembly import ServerHandle, start_server


class Dial(CloudProvider):
    """One group whose size the test sets: by RPC, on Refresh (from `cloud_size`) or in the
    background (`set_size`, as a worker would). `versioned=False` is a backend that cannot tell its
    state version."""

    name = "dial"

    def __init__(self, versioned: bool = True) -> None:
        self._lock = threading.Lock()
        self.size = 1
        self.cloud_size = 1
        self.version = 1
        self.versioned = versioned
        self.watchers: list[Callable[[int], None]] = []
        self.group = NodeGroup("g", 0, 100)
        self.refresh_entered = threading.Event()
        self.refresh_release = threading.Event()
        self.refresh_release.set()
        self.change_while_reading = 0
        self.members: set[str] = set()  # providerIDs outside "dial://g/" that belong to the group
        self.refresh_drops_members = False

    def _change(self, size: int) -> None:
        with self._lock:
            self.size = size
            self.version += 1
            version = self.version
        for callback in self.watchers:
            callback(version)

    def set_size(self, size: int) -> None:
        self._change(size)

    def state_version(self) -> int | None:
        return self.version if self.versioned else None

    def watch_state(self, callback: Callable[[int], None]) -> None:
        if self.versioned:
            self.watchers.append(callback)

    def node_groups(self) -> list[NodeGroup]:
        return [self.group]

    def node_group_for_node(self, node: NodeRef) -> NodeGroup | None:
        if "pool" in node.labels:
            return self.group if node.labels["pool"] == "g" else None
        member = node.provider_id.startswith("dial://g/") or node.provider_id in self.members
        return self.group if member else None

    def adopt(self, provider_id: str) -> None:
        """The group takes in a machine (as a listing showing a new one would)."""
        self.members.add(provider_id)
        self._change(self.size)

    def refresh(self) -> None:
        self.refresh_entered.set()
        self.refresh_release.wait(30)
        if self.refresh_drops_members:
            self.members.clear()
        self._change(self.cloud_size)

    def target_size(self, group_id: str) -> int:
        if group_id != "g":
            raise NotFound(f"node group {group_id!r} not found")
        size = self.size
        if self.change_while_reading:  # another thread's change lands while this answer is computed
            self.change_while_reading -= 1
            self._change(size)
        return size

    def increase_size(self, group_id: str, delta: int) -> None:
        self._change(self.target_size(group_id) + delta)

    def decrease_target_size(self, group_id: str, delta: int) -> None:
        self._change(self.target_size(group_id) + delta)

    def delete_nodes(self, group_id: str, nodes: list[NodeRef]) -> None:
        self._change(self.target_size(group_id) - len(nodes))

    def nodes(self, group_id: str) -> list[Instance]:
        return []


@contextmanager
def dial_server(provider: Dial) -> Iterator[ServerHandle]:
    settings = Settings(address="127.0.0.1:0", metrics_address="127.0.0.1:0", front="on")
    handle = start_server(settings, provider=provider)
    try:
        assert handle.front is not None
        yield handle
    finally:
        handle.stop(grace=2)


def target(s: pb_grpc.CloudProviderStub, group: str = "g") -> int:
    return s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id=group), timeout=5).targetSize


def wait_until(what: str, check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)
