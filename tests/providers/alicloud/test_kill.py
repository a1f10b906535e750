"""SIGKILL while a ScaleWithAdjustment is in flight: the server dies without any chance to clean up,
ESS (the emulator) still applies the request, a new process starts on the same journal, and the
group ends with exactly what CA asked for: absolute sizes never double.

Both server lives are real `cloudprovider-grpc serve` processes talking to the emulator over HTTP;
CA's side is a gRPC client on a real port."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from cloudprovider_grpc.emulators import FaultPlan
from cloudprovider_grpc.emulators.alicloud import AliCloudEmulator
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from tests.providers.alicloud.conftest import ENV, GROUP_A
from tests.support.ports import free_port
from tests.support.servers import ManualClock, stub
from tests.support.waits import poll

pytestmark = pytest.mark.integration


def serve(emulator: AliCloudEmulator, journal: Path) -> tuple[subprocess.Popen[bytes], object]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLOUDPROVIDER_GRPC_")}
    env.update(ENV)
    env.update({f"ALICLOUD_{p}_ENDPOINT": emulator.base_url for p in ("ESS", "ECS", "VPC", "STS")})
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cloudprovider_grpc",
            "serve",
            "--provider",
            "alicloud",
            "--nodes",
            f"0:10:{GROUP_A}",
            "--state-file",
            str(journal),
            "--address",
            f"127.0.0.1:{port}",
            "--metrics-address",
            "",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    grpc.channel_ready_future(channel).result(timeout=30)
    return proc, stub(channel)


def test_sigkill_with_a_scale_in_flight_then_restart(
    emulator: AliCloudEmulator, emu_clock: ManualClock, tmp_path: Path
) -> None:
    journal = tmp_path / "journal.json"
    proc, s = serve(emulator, journal)
    try:
        s.Refresh(pb.RefreshRequest(), timeout=10)
        # changes are answered after 3 s: the request reaches ESS, the answer never reaches us
        emulator.set_faults(
            FaultPlan(rate=1.0, kinds=("slow",), slow_seconds=3.0, methods=frozenset({"POST"}))
        )
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=GROUP_A, delta=3), timeout=5)
        poll(lambda: emulator.in_flight() == 1, 30, "the scale request to be held by the cloud")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    poll(lambda: emulator.in_flight() == 0, 30, "ESS to finish the request of the dead process")
    emulator.set_faults(None)
    assert emulator.group_record(GROUP_A)["DesiredCapacity"] == 5
    proc, s = serve(emulator, journal)
    try:

        def recovered() -> bool:
            s.Refresh(pb.RefreshRequest(), timeout=10)
            return s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id=GROUP_A), timeout=5).targetSize == 5

        poll(recovered, 30, "the restarted server to recover the scale")
        emu_clock.advance(31)
        s.Refresh(pb.RefreshRequest(), timeout=10)
        instances = s.NodeGroupNodes(pb.NodeGroupNodesRequest(id=GROUP_A), timeout=5).instances
        assert len(instances) == 5 and all(
            i.status.instanceState == pb.InstanceStatus.instanceRunning for i in instances
        )
        assert len(emulator.group_instances(GROUP_A)) == 5  # 2 + 3, never more
        assert emulator.group_record(GROUP_A)["DesiredCapacity"] == 5
        assert sum(1 for a in emulator.activity_records(GROUP_A) if a["CreatedCapacity"]) == 1
    finally:
        proc.terminate()
        proc.wait(timeout=20)
