"""SIGKILL mid-scale-up: the server process dies without any chance to clean up, a new process
starts on the same journal, and the cloud ends with exactly what CA asked for.

Both server lives are real `cloudprovider-grpc serve` processes talking to a real Cherry emulator
over HTTP; CA's side is a gRPC client on a real port.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
import yaml

from cloudprovider_grpc.emulators.cherry import CherryEmulator
from cloudprovider_grpc.emulators.faults import FaultPlan
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from tests.providers.cherry.conftest import ENV, EXAMPLE
from tests.providers.cherry.test_e2e import pool_servers
from tests.support.ports import free_port
from tests.support.servers import stub
from tests.support.waits import poll

pytestmark = pytest.mark.integration


def _serve(tmp: Path, emulator: CherryEmulator, rate_limit: float) -> tuple[subprocess.Popen, object]:
    cfg = tmp / f"config-{rate_limit}.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "concurrency": 1,
                "cherry": {"api-url": emulator.base_url, "rate-limit": rate_limit, "read-timeout": 2.0},
            }
        )
    )
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cloudprovider_grpc", "serve", "--provider", "cherry", "--config", str(cfg),
         "--cloud-config", str(EXAMPLE), "--cluster-name", "cluster1", "--nodes", "0:10:pool1",
         "--state-file", str(tmp / "journal.json"),
         "--address", f"127.0.0.1:{port}", "--metrics-address", ""],
        env={**{k: v for k, v in os.environ.items() if not k.startswith("CLOUDPROVIDER_GRPC_")}, **ENV},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    grpc.channel_ready_future(channel).result(timeout=30)
    return proc, stub(channel)


def test_sigkill_mid_scale_up_then_restart_on_the_journal(emulator: CherryEmulator, tmp_path: Path) -> None:
    # first life: the cloud creates the first two servers, then refuses every create (429, nothing
    # processed), so the kill lands after exactly two of five however fast this machine runs
    emulator.set_faults(FaultPlan(rate=1.0, kinds=("throttle",), methods=frozenset({"POST"}), pass_first=2))
    proc, s = _serve(tmp_path, emulator, rate_limit=2)
    try:
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="pool1", delta=5), timeout=5)
        poll(lambda: len(pool_servers(emulator, "pool1")) >= 2, 30, "the first two servers")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    poll(lambda: emulator.in_flight() == 0, 10, "the dead process's requests to be answered")
    emulator.set_faults(None)
    assert len(pool_servers(emulator, "pool1")) == 2  # killed mid-way, after exactly the creates let through

    # second life on the same journal: the accepted creations resume, token lookup first
    proc, s = _serve(tmp_path, emulator, rate_limit=1000)
    try:

        def resumed() -> list[str] | None:
            s.Refresh(pb.RefreshRequest(), timeout=10)
            ids = [i.id for i in s.NodeGroupNodes(pb.NodeGroupNodesRequest(id="pool1"), timeout=5).instances]
            done = len(pool_servers(emulator, "pool1")) == 5 and all("pending-" not in i for i in ids)
            return ids if done else None

        ids = poll(resumed, 60, "five servers, none pending")
        servers = pool_servers(emulator, "pool1")
        assert len(servers) == 5  # nothing lost
        assert len({r["tags"]["k8s-create-token"] for r in servers}) == 5  # nothing doubled
        assert s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="pool1"), timeout=5).targetSize == 5
        assert sorted(ids) == sorted(f"cherryservers://{r['id']}" for r in servers)
    finally:
        proc.terminate()
        proc.wait(20)


def test_emulate_command_serves_the_api_standalone(tmp_path: Path) -> None:
    """`cloudprovider-grpc emulate cherry --address HOST:PORT --state FILE`, as users' CI runs it."""
    port = free_port()
    state = tmp_path / "cloud.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cloudprovider_grpc", "emulate", "cherry", "--address", f"127.0.0.1:{port}",
         "--state", str(state), "--cloud-config", str(EXAMPLE), "--cluster-name", "cluster1",
         "--nodes", "0:3:pool1"],
        env={**{k: v for k, v in os.environ.items() if not k.startswith("CLOUDPROVIDER_GRPC_")}, **ENV},
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        line = proc.stdout.readline()
        assert line.strip() == f"cherry API emulator listening on http://127.0.0.1:{port}/v1/"
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/projects/123456/servers",
            headers={"Authorization": f"Bearer {ENV['CHERRY_AUTH_TOKEN']}"},
        )
        with urllib.request.urlopen(request, timeout=5) as resp:
            assert resp.status == 200 and json.loads(resp.read()) == []
        bad = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/projects/123456/servers", headers={"Authorization": "Bearer nope"}
        )
        try:
            urllib.request.urlopen(bad, timeout=5)
            raise AssertionError("an unknown token was accepted")
        except urllib.error.HTTPError as exc:
            assert exc.code == 401
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
