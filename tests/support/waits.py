"""Waiting on events, and the CA-side calls tests wait with: the one set of polling helpers for the
whole suite (probes, per-cloud end-to-end tests, conformance).

A test waits for what it needs to see (a condition over what the server answers), never for a fixed
time; `poll` and `eventually` fail with what was awaited when it does not come.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import grpc

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc

T = TypeVar("T")


def poll(check: Callable[[], T | None], timeout: float, what: str, interval: float = 0.05) -> T:
    """`check()` until it returns something truthy, or fail after `timeout` seconds saying `what`."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def refresh(s: pb_grpc.CloudProviderStub, timeout: float = 30) -> bool:
    """One Refresh, as CA calls it every loop; False when the cloud was unavailable (a test may be
    failing it on purpose). Any other error is raised."""
    try:
        s.Refresh(pb.RefreshRequest(), timeout=timeout)
        return True
    except grpc.RpcError as exc:
        if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            return False
        raise


def eventually(
    s: pb_grpc.CloudProviderStub, cond: Callable[[], bool], timeout: float = 60.0, what: str = "condition"
) -> None:
    """Refresh and check `cond()` until it holds (CA's loop, fast-forwarded)."""

    def refreshed() -> bool:
        refresh(s)
        return cond()

    poll(refreshed, timeout, what)


def groups(s: pb_grpc.CloudProviderStub) -> dict[str, tuple[int, int]]:
    """Node group id -> (min, max)."""
    return {g.id: (g.minSize, g.maxSize) for g in s.NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups}


def instances(s: pb_grpc.CloudProviderStub, gid: str) -> list[pb.Instance]:
    return list(s.NodeGroupNodes(pb.NodeGroupNodesRequest(id=gid), timeout=5).instances)


def target(s: pb_grpc.CloudProviderStub, gid: str) -> int:
    return s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id=gid), timeout=5).targetSize
