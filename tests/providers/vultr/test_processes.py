"""Real processes, as users run them: `cloudprovider-grpc emulate vultr` standalone, a
`cloudprovider-grpc serve --provider vultr` process pointed at it with the key in the environment
(which must never appear in its output, debug logs included), and `serve --provider vultr --emulate`
with no other configuration."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.providers.vultr.config import EMULATOR_DEMO_CLUSTER
from tests.support.ports import free_port
from tests.support.servers import stub

pytestmark = pytest.mark.integration

MARKER = "VultrKeyMarker7f3a9c"
CLI = [sys.executable, "-m", "cloudprovider_grpc"]


def _env(**extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CLOUDPROVIDER_GRPC_", "VULTR_"))}
    return {**clean, **extra}


def _wait(cond: Callable[[], bool], timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


def _groups(s) -> list[pb.NodeGroup]:
    try:
        s.Refresh(pb.RefreshRequest(), timeout=10)
        return list(s.NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups)
    except grpc.RpcError:
        return []


def _pool(base: str, label: str) -> dict:
    req = urllib.request.Request(
        f"{base}v2/kubernetes/clusters/{EMULATOR_DEMO_CLUSTER}/node-pools?per_page=100",
        headers={"Authorization": f"Bearer {MARKER}"},
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        return next(p for p in json.loads(resp.read())["node_pools"] if p["label"] == label)


def test_standalone_emulator_and_a_server_process_with_the_key_in_the_environment(tmp_path: Path) -> None:
    emu_port, grpc_port = free_port(), free_port()
    emulator = subprocess.Popen(
        [*CLI, "emulate", "vultr", "--address", f"127.0.0.1:{emu_port}",
         "--state", str(tmp_path / "cloud.json")],
        env=_env(VULTR_API_KEY=MARKER), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    server = None
    try:
        assert emulator.stdout is not None
        line = emulator.stdout.readline()
        assert line.strip() == f"vultr API emulator listening on http://127.0.0.1:{emu_port}/v2/"
        base = f"http://127.0.0.1:{emu_port}/"
        config = tmp_path / "config.yaml"
        config.write_text(f"vultr:\n  cluster_id: {EMULATOR_DEMO_CLUSTER}\n  page_size: 1\n")
        server = subprocess.Popen(
            [*CLI, "serve", "--provider", "vultr", "--config", str(config),
             "--address", f"127.0.0.1:{grpc_port}", "--metrics-address", "", "--log-level", "debug"],
            env=_env(VULTR_API_KEY=MARKER, VULTR_API_URL=base),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as ch:
            s = stub(ch)
            _wait(lambda: len(_groups(s)) == 2)
            general = next(g for g in _groups(s) if "general" in g.debug)
            s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=general.id, delta=2), timeout=5)
            _wait(lambda: _pool(base, "general")["node_quantity"] == 3)
            assert _pool(base, "highmem")["node_quantity"] == 1
        server.send_signal(signal.SIGTERM)
        output, _ = server.communicate(timeout=30)
        assert server.returncode == 0, output[-2000:]
        assert "node-pools" in output  # debug logging was on: the API calls were logged
        assert MARKER not in output
    finally:
        if server is not None and server.poll() is None:
            server.kill()
            server.communicate()
        emulator.send_signal(signal.SIGTERM)
        assert emulator.wait(20) == 0


def test_serve_emulate_needs_no_other_configuration() -> None:
    port = free_port()
    server = subprocess.Popen(
        [*CLI, "serve", "--provider", "vultr", "--emulate",
         "--address", f"127.0.0.1:{port}", "--metrics-address", ""],
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            s = stub(ch)
            _wait(lambda: sorted(g.debug.split()[2] for g in _groups(s)) == ["general", "highmem"])
            bounds = sorted((g.minSize, g.maxSize) for g in _groups(s))
            assert bounds == [(1, 5), (1, 10)]
        server.send_signal(signal.SIGTERM)
        output, _ = server.communicate(timeout=30)
        assert server.returncode == 0, output[-2000:]
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
