"""30% of the cloud's requests fail (5xx before and after processing, 429, timeouts, dropped
connections) while CA scales a pool up and down: the cloud ends with exactly what CA asked for,
nothing doubled, nothing deleted that CA did not name (issue 14, "Keep probing in the project").

Counts are relative to what the group held at the start (a VKE pool never has fewer than one node).
In the pool shape the two deletions name their machines too: the machinery removes exactly those
(never lowers the cloud's size blindly, which would let the cloud pick), so the check is the same."""

from __future__ import annotations

from pathlib import Path

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from tests.support.backends import BackendUnderTest
from tests.support.probes import REFRESH_EVERY, instances, poll, refresh, settle, start_server

FAULT_RATE = 0.3


def test_exact_counts_under_cloud_faults(backend: BackendUnderTest, cloud_factory, tmp_path: Path) -> None:
    cloud = cloud_factory()
    gid = next(iter(cloud.groups))
    base = len(cloud.machines(gid))
    server = start_server(backend, tmp_path, cloud=cloud)
    try:
        s = server.stub()
        cloud.set_faults(FAULT_RATE, seed=7)
        for delta in (3, 2, 1):  # CA grows the group in steps, one loop each
            s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=gid, delta=delta), timeout=5)
            refresh(s)

        def created() -> bool:
            refresh(s)
            got = instances(s, gid)
            return len(got) == base + 6 and not any("pending-" in i.id for i in got)

        poll(created, 120, f"{gid} to hold {base} + 6 created machines under faults", REFRESH_EVERY)
        # a create the cloud executed although its answer was lost may exist twice for a moment (same
        # creation token): the machinery deletes the younger one; the cloud must converge to base + 6
        poll(
            lambda: refresh(s) and len(cloud.machines(gid)) == base + 6,
            60,
            f"the cloud to hold exactly {base} + 6",
            REFRESH_EVERY,
        )
        victims = sorted(i.id for i in instances(s, gid))[:2]
        s.NodeGroupDeleteNodes(
            pb.NodeGroupDeleteNodesRequest(
                id=gid, nodes=[pb.ExternalGrpcNode(providerID=v, name=v) for v in victims]
            ),
            timeout=5,
        )
        poll(
            lambda: refresh(s) and len(cloud.machines(gid)) == base + 4,
            120,
            "the two deletions",
            REFRESH_EVERY,
        )
        cloud.set_faults(0)
        final = settle(s, gid, base + 4)
        assert cloud.faults_injected() > 0, "no request met a fault: the probe proved nothing"
        assert not set(victims) & set(final)
        assert sorted(f"{i}" for i in cloud.machines(gid)) == sorted(x.rsplit("/", 1)[-1] for x in final)
    finally:
        server.close()
