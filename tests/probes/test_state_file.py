"""`--state-file` from the outside (the journal is providers/machinery/journal.py): a corrupt or
torn journal stops startup with one line naming the file and exit 2, never a traceback; a journal
written while scaling is always whole JSON with no temporary file left behind."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from tests.support.backends import BackendUnderTest
from tests.support.probes import start_server
from tests.support.waits import groups
from tests.test_cli import run

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    "content",
    [b"{not json", b'{"version": 2, "backend": "x", "shape": "machines", "pend', b"\xff\xfe\x00", b"[]"],
)
def test_a_corrupt_journal_is_one_line_naming_the_file(
    backend: BackendUnderTest, tmp_path: Path, content: bytes
) -> None:
    journal = tmp_path / "journal.json"
    journal.write_bytes(content)
    out = run("serve", *backend.serve_args, "--state-file", str(journal), "--metrics-address", "")
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"cloudprovider-grpc: invalid configuration: state-file: {journal} ")
    assert "Traceback" not in out.stderr


def test_the_journal_written_while_scaling_is_whole(backend: BackendUnderTest, tmp_path: Path) -> None:
    journal = tmp_path / "journal.json"
    server = start_server(backend, tmp_path, extra=["--state-file", str(journal)])
    try:
        s = server.stub()
        bounds = groups(s)
        gid = max(bounds, key=lambda g: bounds[g][1])
        for _ in range(3):
            s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=gid, delta=1), timeout=5)
            if journal.exists():
                json.loads(journal.read_bytes())  # never torn, even while being rewritten
        server.signal(signal.SIGTERM)
        assert server.wait(30) == 0
    finally:
        server.close()
    if journal.exists():
        assert isinstance(json.loads(journal.read_bytes()), dict)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".journal.json")]
