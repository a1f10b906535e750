"""One misconfigured pool (its project answers 403) must not break the others (issue 14, item 7): the
healthy pool keeps refreshing and scales up and down normally, Refresh succeeds because something
could be listed, and the broken pool reports its error (log, errorInfo on its placeholders, metrics),
end to end over real processes. Refresh answers UNAVAILABLE only when nothing could be listed."""

from __future__ import annotations

from pathlib import Path

import grpc

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from tests.support.backends import BackendUnderTest
from tests.support.probes import REFRESH_EVERY, instances, poll, refresh, settle, start_server


def test_one_pool_answering_403_leaves_the_others_working(
    backend: BackendUnderTest, cloud_factory, tmp_path: Path
) -> None:
    cloud = cloud_factory()
    healthy, broken = list(cloud.groups)[:2]
    server = start_server(backend, tmp_path, cloud=cloud)
    try:
        s = server.stub()
        cloud.break_group(broken)
        assert refresh(s), "Refresh must succeed while one pool can still be listed"
        # the healthy pool scales up...
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=healthy, delta=3), timeout=5)
        ids = settle(s, healthy, 3)
        assert len(cloud.machines(healthy)) == 3
        # ...and down
        victim = ids[0]
        s.NodeGroupDeleteNodes(
            pb.NodeGroupDeleteNodesRequest(
                id=healthy, nodes=[pb.ExternalGrpcNode(providerID=victim, name=victim)]
            ),
            timeout=5,
        )
        assert settle(s, healthy, 2) == ids[1:]
        assert len(cloud.machines(healthy)) == 2
        # the broken pool: a scale-up there is accepted and its failure shows on its placeholders
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=broken, delta=1), timeout=5)

        def failed() -> list[pb.Instance] | None:
            refresh(s)
            got = [i for i in instances(s, broken) if i.status.HasField("errorInfo")]
            return got or None

        errored = poll(failed, 60, f"{broken}'s failure on its placeholders", REFRESH_EVERY)
        assert errored[0].status.errorInfo.errorMessage
        assert cloud.machines(broken) == []
        assert refresh(s)
        metrics = server.metrics()
    finally:
        server.close()
    assert "403" in server.output() or "denied" in server.output().lower()
    assert f'group="{healthy}"' in metrics
    assert 'status="403"' in metrics  # the cloud's refusals are counted


def test_refresh_is_unavailable_only_when_nothing_can_be_listed(
    backend: BackendUnderTest, cloud_factory, tmp_path: Path
) -> None:
    cloud = cloud_factory()
    server = start_server(backend, tmp_path, cloud=cloud)
    try:
        s = server.stub()
        for gid in cloud.groups:
            cloud.break_group(gid)
        try:
            s.Refresh(pb.RefreshRequest(), timeout=10)
            code = grpc.StatusCode.OK
        except grpc.RpcError as exc:
            code = exc.code()
    finally:
        server.close()
    assert code == grpc.StatusCode.UNAVAILABLE
