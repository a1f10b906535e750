"""The command line with the Exoscale backend: `emulate exoscale`, `serve --emulate` with no other
configuration, and `check-config` reporting max sizes beyond the instance quota."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import exoscale.api.v2 as sdk
import grpc
import pytest

from cloudprovider_grpc.emulators.exoscale import ExoscaleEmulator
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc
from tests.providers.exoscale.conftest import ENV, KEY, SECRET
from tests.support.ports import free_port

pytestmark = pytest.mark.integration


def clean_env(**extra: str) -> dict[str, str]:
    ours = ("CLOUDPROVIDER_GRPC_", "EXOSCALE_")
    return {**{k: v for k, v in os.environ.items() if not k.startswith(ours)}, **extra}


@contextmanager
def process(*args: str, env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "cloudprovider_grpc", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def test_emulate_command_serves_the_demo_cloud_and_keeps_state(tmp_path: Path) -> None:
    port = free_port()
    state = tmp_path / "exoscale.json"
    args = ("emulate", "exoscale", "--address", f"127.0.0.1:{port}", "--state", str(state))
    with process(*args, env=clean_env(EXOSCALE_API_KEY=KEY, EXOSCALE_API_SECRET=SECRET)) as proc:
        assert proc.stdout is not None
        assert (
            proc.stdout.readline().strip()
            == f"exoscale API emulator listening on http://127.0.0.1:{port}/v2/"
        )
        api = sdk.Client(KEY, SECRET, url=f"http://127.0.0.1:{port}/v2")
        (cluster,) = api.list_sks_clusters()["sks-clusters"]
        assert cluster["name"] == "demo"
        assert sorted(n["name"] for n in cluster["nodepools"]) == ["gpu", "workers"]
        standalone = [p for p in api.list_instance_pools()["instance-pools"] if "manager" not in p]
        assert [p["name"] for p in standalone] == ["batch"]
        workers = next(n for n in cluster["nodepools"] if n["name"] == "workers")
        api.scale_sks_nodepool(id=cluster["id"], sks_nodepool_id=workers["id"], size=4)
    with process(*args, env=clean_env(EXOSCALE_API_KEY=KEY, EXOSCALE_API_SECRET=SECRET)) as proc:
        assert proc.stdout is not None and "listening" in proc.stdout.readline()
        again = sdk.Client(KEY, SECRET, url=f"http://127.0.0.1:{port}/v2")
        assert again.get_sks_nodepool(id=cluster["id"], sks_nodepool_id=workers["id"])["size"] == 4


def test_serve_with_emulate_needs_no_other_configuration() -> None:
    port = free_port()
    args = (
        "serve",
        "--provider",
        "exoscale",
        "--emulate",
        "--address",
        f"127.0.0.1:{port}",
        "--metrics-address",
        "",
    )
    with process(*args, env=clean_env()), grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        grpc.channel_ready_future(ch).result(timeout=30)
        s = pb_grpc.CloudProviderStub(ch)
        s.Refresh(pb.RefreshRequest(), timeout=10)
        found = s.NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups
        names = sorted(g.debug.split()[3] for g in found)
        assert names == ["batch", "gpu", "workers"]


def test_check_config_reports_max_beyond_the_quota() -> None:
    emu = ExoscaleEmulator(keys={KEY: SECRET}, quota_limit=20)
    with emu:
        cid = emu.add_cluster("prod")
        emu.add_nodepool(cid, "workers", size=2)
        emu.add_nodepool(cid, "gpu", size=0)
        env = clean_env(**ENV, EXOSCALE_API_ENDPOINT=emu.base_url)
        result = subprocess.run(
            [sys.executable, "-m", "cloudprovider_grpc", "check-config", "--provider", "exoscale",
             "--nodes", "1:40:workers", "--nodes", "0:10:gpu"],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "exoscale instance quota: 20 (in use 2)" in out
    assert (
        "warning: group workers: max size 40 needs 38 more instance(s) but the instance quota leaves 18"
        in out
    )
    assert "warning: group gpu" not in out
    assert "configuration OK: provider exoscale" in out
    assert SECRET not in out + result.stderr


def test_the_standalone_emulator_prints_the_credentials_it_accepts() -> None:
    """With no key in the environment, the emulator's start says which key and secret it accepts,
    and those work: nobody has to read the source to connect."""
    port = free_port()
    with process("emulate", "exoscale", "--address", f"127.0.0.1:{port}", env=clean_env()) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("exoscale API emulator listening on ")
        line = proc.stdout.readline().strip()
        assert line.startswith("exoscale API emulator accepts EXOSCALE_API_KEY="), line
        words = dict(w.split("=", 1) for w in line.split() if "=" in w)
        api = sdk.Client(
            words["EXOSCALE_API_KEY"], words["EXOSCALE_API_SECRET"], url=f"http://127.0.0.1:{port}/v2"
        )
        (cluster,) = api.list_sks_clusters()["sks-clusters"]
        assert cluster["name"] == "demo"
