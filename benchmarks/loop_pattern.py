"""The read RPCs one cluster-autoscaler loop makes, shared by the API-calls-per-loop benchmarks.

The pattern of CA 1.36.1 (tests/conformance/loop.go models it call by call): after Refresh,
NodeGroups once; NodeGroupForNode once for every node in a group, and for a node in no group as
often as the CA release asks (CA does not cache an empty answer): 6 on 1.36 (the template provider
1, cluster state's readiness 2, the scale-down pre-filter 1, the quota tracker new in 1.36 1, the
soft-taint filter 1), 5 on 1.35, 4 on 1.34 (`FOREIGN_ASKS`, the same table as loop.go's
`forNodeUngroupedByCA`); 3 TargetSize per group; 2 GetOptions per node (CA was measured asking
about 4 at 1,000 nodes; these benchmarks count the cloud API calls the reads cause, not the reads);
NodeGroupNodes for G/12 groups (CA's instance cache lists every group every 2 minutes, one loop in
12 at a 10 s scan interval); TemplateNodeInfo per group, as on a loop where no group has a usable
node to copy (the most CA asks; a steady loop asks none); GPULabel and GetAvailableGPUTypes (the
most: a quiet loop asks the second never); on a scale-up loop, the price expander's
PricingNodePrice of each group's template node (`template-node-for-<group>-<random>`) and
PricingPodPrice per pending pod, over now..now+1h.
Answers UNIMPLEMENTED count as answered (optional RPCs).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.protos import k8s_pb2

#: NodeGroupForNode asks per loop for a node outside every group, by CA minor release (not cached)
FOREIGN_ASKS = {"1.36": 6, "1.35": 5, "1.34": 4}
#: the release whose loop the benchmarks replay
CA_RELEASE = "1.36"


def next_hour() -> dict[str, dict[str, int]]:
    """The pricing window CA's price expander asks about: now..now+1h."""
    now = int(time.time())
    return {"startTimestamp": {"seconds": now}, "endTimestamp": {"seconds": now + 3600}}


def pending_pod_bytes() -> bytes:
    """A pending pod (500m cpu, 1Gi) as CA sends it in PricingPodPrice.pod_bytes."""
    pod = k8s_pb2.Pod()
    pod.metadata.name = "web-1"
    container = pod.spec.containers.add(name="web")
    container.resources.requests["cpu"].string = "500m"
    container.resources.requests["memory"].string = "1Gi"
    return pod.SerializeToString()


def one_loop(
    stub: Any,
    groups: Sequence[str],
    nodes: Sequence[pb.ExternalGrpcNode],
    *,
    foreign: Sequence[pb.ExternalGrpcNode] = (),
    scale_up: bool = False,
    release: str = CA_RELEASE,
    timed: Callable[[str, float], None] | None = None,
) -> int:
    """Make every read RPC of one CA loop (after its Refresh) as CA `release` makes it; return how many
    were made. `timed(rpc, seconds)`, if given, is told how long each call took."""
    count = 0
    pod = pending_pod_bytes()

    def call(rpc: str, req: Any) -> None:
        nonlocal count
        count += 1
        started = time.perf_counter()
        try:
            getattr(stub, rpc)(req, timeout=5)
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise
        finally:
            if timed is not None:
                timed(rpc, time.perf_counter() - started)

    call("NodeGroups", pb.NodeGroupsRequest())
    for node in nodes:
        call("NodeGroupForNode", pb.NodeGroupForNodeRequest(node=node))
    for node in foreign:
        for _ in range(FOREIGN_ASKS[release]):
            call("NodeGroupForNode", pb.NodeGroupForNodeRequest(node=node))
    for gid in groups:
        for _ in range(3):
            call("NodeGroupTargetSize", pb.NodeGroupTargetSizeRequest(id=gid))
    for i, _node in enumerate(nodes):
        for _ in range(2):
            gid = groups[i % len(groups)]
            call("NodeGroupGetOptions", pb.NodeGroupAutoscalingOptionsRequest(id=gid))
    for gid in groups[: max(1, len(groups) // 12)]:
        call("NodeGroupNodes", pb.NodeGroupNodesRequest(id=gid))
    for gid in groups:
        call("NodeGroupTemplateNodeInfo", pb.NodeGroupTemplateNodeInfoRequest(id=gid))
    call("GPULabel", pb.GPULabelRequest())
    call("GetAvailableGPUTypes", pb.GetAvailableGPUTypesRequest())
    if scale_up:
        window = next_hour()
        for gid in groups:
            node = pb.ExternalGrpcNode(name=f"template-node-for-{gid}-{random.getrandbits(63)}")
            call("PricingNodePrice", pb.PricingNodePriceRequest(node=node, **window))
            for _ in range(5):
                call("PricingPodPrice", pb.PricingPodPriceRequest(pod_bytes=pod, **window))
    return count
