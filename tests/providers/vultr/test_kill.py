"""SIGKILL mid-scale-up: a real `cloudprovider-grpc serve --provider vultr --state-file` process dies
while its size push cannot get through, a new process starts on the same journal, and the pool ends
with exactly the size CA asked for (discovered from the cloud, then resumed from the journal)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from cloudprovider_grpc.emulators import FaultPlan
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from tests.providers.vultr.conftest import CLUSTER, TOKEN, new_emulator
from tests.support.ports import free_port
from tests.support.servers import stub

pytestmark = pytest.mark.integration


def _wait(cond: Callable[[], bool], timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


def _serve(config: Path, state: Path, port: int) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLOUDPROVIDER_GRPC_", "VULTR_"))}
    return subprocess.Popen(
        [sys.executable, "-m", "cloudprovider_grpc", "serve", "--provider", "vultr", "--config", str(config),
         "--state-file", str(state), "--address", f"127.0.0.1:{port}", "--metrics-address", ""],
        env={**env, "VULTR_API_KEY": TOKEN}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def _target(s, gid: str) -> int | None:
    try:
        s.Refresh(pb.RefreshRequest(), timeout=10)
        return s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id=gid), timeout=5).targetSize
    except grpc.RpcError:
        return None


def test_sigkill_while_the_push_is_refused_then_restart_on_the_journal(tmp_path: Path) -> None:
    with new_emulator(provision_seconds=0, rate_limit_per_s=None) as emulator:
        general = emulator.pool_id("general")  # 2 nodes
        config = tmp_path / "config.yaml"
        config.write_text(
            f"vultr:\n  cluster_id: {CLUSTER}\n  api_url: http://{emulator.address}/\n  rate_limit: 1000\n"
        )
        state = tmp_path / "state.json"
        emulator.set_faults(FaultPlan(rate=1.0, kinds=("error",), methods=frozenset({"PATCH"})))
        port = free_port()
        first = _serve(config, state, port)
        try:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
                s = stub(ch)
                _wait(lambda: _target(s, general) == 2)
                s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=general, delta=3), timeout=5)
                _wait(lambda: any(e.method == "PATCH" for e in emulator.request_log()))
            first.send_signal(signal.SIGKILL)
            first.wait(10)
        finally:
            if first.poll() is None:
                first.kill()
        assert emulator.pool_record(general)["node_quantity"] == 2  # nothing got through
        emulator.set_faults(None)
        port = free_port()
        second = _serve(config, state, port)
        try:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
                s = stub(ch)
                _wait(
                    lambda: emulator.pool_record(general)["node_quantity"] == 5 and _target(s, general) == 5
                )
            assert len(emulator.node_ids(general)) == 5 and emulator.random_deletions == []
            assert [q for pid, q in emulator.patches if pid == general][-1] == 5
        finally:
            second.send_signal(signal.SIGTERM)
            assert second.wait(30) == 0
