"""SIGKILL with accepted changes not yet sent: a new process on the same journal carries them out,
and the cloud ends with exactly what CA asked for (nothing lost, nothing doubled).

Both server lives are real `cloudprovider-grpc serve` processes talking to a real emulator over HTTP;
CA's side is a gRPC client on a real port."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from cloudprovider_grpc.emulators.exoscale import ExoscaleEmulator
from cloudprovider_grpc.emulators.faults import FaultPlan
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from tests.providers.exoscale.conftest import ENV
from tests.support.ports import free_port
from tests.support.servers import stub

pytestmark = pytest.mark.integration


def serve(tmp: Path, emulator: ExoscaleEmulator) -> tuple[subprocess.Popen[bytes], Any]:
    cfg = tmp / "config.yaml"
    cfg.write_text(yaml.safe_dump({"exoscale": {"rate-limit": 1000, "read-timeout": 2.0, "retries": 0}}))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLOUDPROVIDER_GRPC_", "EXOSCALE_"))}
    env.update(ENV, EXOSCALE_API_ENDPOINT=emulator.base_url, EXOSCALE_SKS_CLUSTER="prod")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cloudprovider_grpc", "serve", "--provider", "exoscale", "--config", str(cfg),
         "--nodes", "1:10:workers", "--state-file", str(tmp / "journal.json"),
         "--address", f"127.0.0.1:{port}", "--metrics-address", ""],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    grpc.channel_ready_future(channel).result(timeout=30)
    return proc, stub(channel)


def test_sigkill_before_the_push_then_restart_on_the_journal(
    emulator: ExoscaleEmulator, tmp_path: Path
) -> None:
    gid = emulator.nodepool_by_name("workers")["instance-pool"]["id"]
    victim, survivor = (f"exoscale://{m['id']}" for m in emulator.pool_members(gid))
    # the cloud refuses every change (429, nothing processed): the accepted requests stay unsent
    emulator.set_faults(FaultPlan(rate=1.0, kinds=("throttle",), methods=frozenset({"PUT"})))
    proc, s = serve(tmp_path, emulator)
    try:
        s.Refresh(pb.RefreshRequest(), timeout=10)
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=gid, delta=3), timeout=5)
        node = pb.ExternalGrpcNode(providerID=victim, name="victim")
        s.NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(id=gid, nodes=[node]), timeout=5)
        assert s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id=gid), timeout=5).targetSize == 4
        deadline = time.monotonic() + 30
        while not any(e.method == "PUT" for e in emulator.request_log()) and time.monotonic() < deadline:
            time.sleep(0.02)  # the first push was tried (and refused)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert emulator.nodepool_by_name("workers")["size"] == 2  # nothing reached the cloud
    emulator.set_faults(None)

    proc, s = serve(tmp_path, emulator)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            s.Refresh(pb.RefreshRequest(), timeout=10)
            if emulator.nodepool_by_name("workers")["size"] == 4 and len(emulator.pool_members(gid)) == 5:
                break
            time.sleep(0.05)
        members = {f"exoscale://{m['id']}": m["state"] for m in emulator.pool_members(gid)}
        assert emulator.nodepool_by_name("workers")["size"] == 4  # 2 + 3 - 1, nothing lost or doubled
        assert members[victim] == "destroying" and members[survivor] == "running"  # exactly the named one
        assert len([m for m in members.values() if m != "destroying"]) == 4
        assert s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id=gid), timeout=5).targetSize == 4
    finally:
        proc.terminate()
        proc.wait(15)
