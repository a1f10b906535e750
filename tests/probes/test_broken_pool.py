"""One broken pool must not break the others: the healthy pool keeps refreshing and
scales up and down normally, Refresh succeeds because something could be listed, and the broken pool
reports its error (log, errorInfo on its placeholders, metrics), end to end over real processes.
Refresh answers UNAVAILABLE only when nothing could be listed.

How a pool breaks depends on the cloud (`ExternalCloud.broken_status`): where one project, nodepool
or scaling group can be denied to us (Cherry, Exoscale IAM, AliCloud RAM), every call about it
answers 403, its listing included; where the credential is account-wide and one call lists the whole
cluster (Vultr, SPC), the cloud refuses to grow it (400) while it still lists. Either way its
scale-up must fail visibly on its own placeholders and nowhere else."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from tests.support.backends import BackendUnderTest
from tests.support.probes import REFRESH_EVERY, settle, start_server
from tests.support.waits import instances, poll, refresh

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_one_broken_pool_leaves_the_others_working(
    backend: BackendUnderTest, cloud_factory, tmp_path: Path
) -> None:
    cloud = cloud_factory()
    healthy, broken = list(cloud.groups)[:2]
    start, broken_before = len(cloud.machines(healthy)), sorted(cloud.machines(broken))
    server = start_server(backend, tmp_path, cloud=cloud)
    try:
        s = server.stub()
        cloud.break_group(broken)
        assert refresh(s), "Refresh must succeed while one pool can still be listed"
        # the healthy pool scales up...
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=healthy, delta=3), timeout=5)
        ids = settle(s, healthy, start + 3)
        assert len(cloud.machines(healthy)) == start + 3
        # ...and down
        victim = ids[0]
        s.NodeGroupDeleteNodes(
            pb.NodeGroupDeleteNodesRequest(
                id=healthy, nodes=[pb.ExternalGrpcNode(providerID=victim, name=victim)]
            ),
            timeout=5,
        )
        assert settle(s, healthy, start + 2) == ids[1:]
        assert len(cloud.machines(healthy)) == start + 2
        # the broken pool: a scale-up there is accepted and its failure shows on its placeholders
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=broken, delta=1), timeout=5)

        def failed() -> list[pb.Instance] | None:
            refresh(s)
            got = [i for i in instances(s, broken) if i.status.HasField("errorInfo")]
            return got or None

        errored = poll(failed, 60, f"{broken}'s failure on its placeholders", REFRESH_EVERY)
        assert errored[0].status.errorInfo.errorMessage
        assert all("pending-" in i.id for i in errored), "only the broken pool's placeholders fail"
        assert sorted(cloud.machines(broken)) == broken_before
        assert not any(i.status.HasField("errorInfo") for i in instances(s, healthy))
        assert refresh(s)
        metrics = server.metrics()
    finally:
        server.close()
    failures = [
        line for line in server.output().splitlines() if broken in line and '"level": "error"' in line
    ]
    assert failures, f"no error line names {broken}"
    assert f'group="{healthy}"' in metrics
    assert f'status="{cloud.broken_status}"' in metrics  # the cloud's refusals are counted


def test_refresh_is_unavailable_only_when_nothing_can_be_listed(
    backend: BackendUnderTest, cloud_factory, tmp_path: Path
) -> None:
    cloud = cloud_factory()
    server = start_server(backend, tmp_path, cloud=cloud)
    try:
        s = server.stub()
        assert refresh(s)
        cloud.refuse_all()
        try:
            s.Refresh(pb.RefreshRequest(), timeout=10)
            code = grpc.StatusCode.OK
        except grpc.RpcError as exc:
            code = exc.code()
    finally:
        server.close()
    assert code == grpc.StatusCode.UNAVAILABLE
