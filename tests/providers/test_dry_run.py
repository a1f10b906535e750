"""`serve --dry-run` on every backend's emulator: the cloud is listed (credentials, group discovery,
node mapping), CA's reads are answered, each write CA asks for is logged as one line, counted and
refused with its description, and not one write request reaches the cloud."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from tests.support.backends import BACKENDS, BackendUnderTest
from tests.support.probes import start_server
from tests.support.waits import groups, instances, poll, refresh

pytestmark = pytest.mark.integration

EMULATED = [b for b in BACKENDS if b.cloud is not None]


def write_requests(cloud) -> list[str]:
    """Requests that change the cloud: every API here reads with GET only (AliCloud's RPC calls
    included: its client sends reads as GET and writes as POST)."""
    return [f"{e.method} {e.path}" for e in cloud.emulator.request_log() if e.method != "GET"]


@pytest.mark.parametrize("backend", EMULATED, ids=[b.id for b in EMULATED])
def test_dry_run_lists_answers_and_writes_nothing(backend: BackendUnderTest, tmp_path: Path) -> None:
    assert backend.cloud is not None
    cloud = backend.cloud(tmp_path, None)
    server = None
    try:
        server = start_server(backend, tmp_path, cloud=cloud, extra=["--dry-run"])
        s = server.stub()
        assert refresh(s)
        listed = groups(s)
        assert set(listed) == set(cloud.groups)  # credentials work and the groups were discovered
        gid = next(g for g, (_, hi) in cloud.groups.items() if hi - len(cloud.machines(g)) >= 2)
        before = sorted(i.id for i in instances(s, gid))
        # node mapping: a machine the cloud holds maps to its group
        for other, _ in cloud.groups.items():
            for machine in instances(s, other):
                node = pb.ExternalGrpcNode(providerID=machine.id, name=machine.id.rsplit("/", 1)[-1])
                answer = s.NodeGroupForNode(pb.NodeGroupForNodeRequest(node=node), timeout=5)
                assert answer.nodeGroup.id == other

        with pytest.raises(grpc.RpcError) as refused:
            s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=gid, delta=2), timeout=5)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert f"dry run: would create 2 machines in {gid}" in (refused.value.details() or "")
        if backend.provider in ("vultr", "exoscale"):  # a UUID: the line names the pool as well
            assert f"in {gid} (pool" in (refused.value.details() or ""), refused.value.details()
        # an invalid request still gets its own precise answer, before the dry run is considered
        with pytest.raises(grpc.RpcError) as invalid:
            s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=gid, delta=1000), timeout=5)
        assert invalid.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "above its max size" in (invalid.value.details() or "")

        # nothing changed in what CA sees, and nothing is on its way to the cloud
        for _ in range(3):
            assert refresh(s)
        assert sorted(i.id for i in instances(s, gid)) == before
        assert s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id=gid), timeout=5).targetSize == len(
            before
        )

        poll(lambda: "would create 2 machines" in server.output(), 10, "the dry-run log line")
        lines = [line for line in server.output().splitlines() if "dry run: would" in line]
        assert len(lines) == 1, lines  # one line per write, the refused one only
        metric = f'cloudprovider_grpc_dry_run_writes_total{{backend="{backend.provider}",kind="create"}} 1.0'
        assert metric in server.metrics()
        assert any(e.method == "GET" for e in cloud.emulator.request_log())  # it did list the cloud
        assert write_requests(cloud) == []
    finally:
        if server is not None:
            server.close()
        cloud.stop()
    assert "Traceback" not in server.output()
