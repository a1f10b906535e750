"""The command line with `spc`: `serve --provider spc --emulate` alone, `emulate spc`, `check-config`.

Real processes on loopback ports; the fork's environment variables reach them as in the pod."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
import requests

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from tests.support.ports import free_port
from tests.support.servers import stub
from tests.support.waits import poll

pytestmark = pytest.mark.integration

FORK_ENV = ("CLUSTER_API_TOKEN", "SPC_API_BASE_URL", "SPC_BASE_API_URL", "ORGANIZATION_ID", "CLUSTER_ID")


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("CLOUDPROVIDER_GRPC_") and k not in FORK_ENV
    }
    env.update(extra or {})
    return env


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cloudprovider_grpc", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(env),
        check=False,
    )


@contextmanager
def process(*args: str, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "cloudprovider_grpc", *args],
        env=clean_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@contextmanager
def served(*args: str, env: dict[str, str] | None = None) -> Iterator[Any]:
    port = free_port()
    with process(
        "serve",
        "--provider",
        "spc",
        "--address",
        f"127.0.0.1:{port}",
        "--metrics-address",
        "",
        *args,
        env=env,
    ):
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        try:
            grpc.channel_ready_future(channel).result(timeout=30)
            yield stub(channel)
        finally:
            channel.close()


@pytest.mark.slow
def test_serve_with_emulate_needs_nothing_else() -> None:
    with served("--emulate") as s:
        groups = s.NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups
        assert [(g.minSize, g.maxSize) for g in groups] == [(1, 8), (0, 4)]
        assert all(g.id.startswith("autoscaling-spc") for g in groups)
        gid = groups[1].id
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=gid, delta=1), timeout=5)

        def running() -> bool:
            s.Refresh(pb.RefreshRequest(), timeout=10)
            got = s.NodeGroupNodes(pb.NodeGroupNodesRequest(id=gid), timeout=5).instances
            return len(got) == 1 and got[0].status.instanceState == pb.InstanceStatus.instanceRunning

        poll(running, 30, "a running node")  # the demo emulator builds a node in about 7 s


def test_credentials_given_with_emulate_are_honoured() -> None:
    env = {"CLUSTER_API_TOKEN": "marker-token-9f1c", "ORGANIZATION_ID": "7", "CLUSTER_ID": "9"}
    with served("--emulate", env=env) as s:
        groups = s.NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups
        assert len(groups) == 2  # the emulator was seeded with org 7 / cluster 9 and accepts the token


def test_standalone_emulator_and_a_server_pointed_at_it() -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}/"
    with process("emulate", "spc", "--address", f"127.0.0.1:{port}") as emu:
        assert emu.stdout is not None
        assert emu.stdout.readline().strip() == f"spc API emulator listening on {base}"
        r = requests.get(
            f"{base}orgs/1/clusters/1/nodepools",
            headers={"Authorization": "Bearer spc-emulator-token"},
            timeout=5,
        )
        assert r.status_code == 200 and len(r.json()) == 2
        env = {
            "CLUSTER_API_TOKEN": "spc-emulator-token",
            "SPC_API_BASE_URL": base,
            "ORGANIZATION_ID": "1",
            "CLUSTER_ID": "1",
        }
        with served(env=env) as s:
            assert len(s.NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups) == 2


def test_check_config_with_the_forks_environment() -> None:
    env = {
        "CLUSTER_API_TOKEN": "t",
        "SPC_API_BASE_URL": "https://api.stackpoint.io",
        "ORGANIZATION_ID": "4",
        "CLUSTER_ID": "12",
    }
    # offline: validation only, nothing is sent to that address
    out = cli("check-config", "--offline", "--provider", "spc", "--nodes", "0:5:t2.medium:legacy", env=env)
    assert out.returncode == 0, out.stderr
    assert "provider spc, 1 node group(s) [autoscaling-legacy 0..5]" in out.stdout
    del env["CLUSTER_ID"]
    out = cli("check-config", "--provider", "spc", env=env)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "cloudprovider-grpc: invalid configuration: CLUSTER_ID: is required and missing "
        "(Secret stackpointio, key cluster-id)"
    ]


@pytest.mark.parametrize("secret", ["CLUSTER_API_TOKEN"])
def test_a_secret_never_reaches_the_output(secret: str) -> None:
    env = {
        secret: "s3cr3t-marker\x01",
        "SPC_API_BASE_URL": "https://x",
        "ORGANIZATION_ID": "1",
        "CLUSTER_ID": "1",
    }
    out = cli("check-config", "--offline", "--provider", "spc", env=env)
    assert out.returncode == 2 and "s3cr3t" not in out.stdout + out.stderr


def test_the_example_configuration_is_valid() -> None:
    root = Path(__file__).resolve().parents[3]
    env = {
        "CLUSTER_API_TOKEN": "t",
        "SPC_API_BASE_URL": "https://api.stackpoint.io",
        "ORGANIZATION_ID": "4",
        "CLUSTER_ID": "12",
    }
    out = cli("check-config", "--offline", "--config", str(root / "examples" / "spc.yaml"), env=env)
    assert out.returncode == 0 and "configuration OK: provider spc" in out.stdout, out.stderr
