"""`serve --provider alicloud --emulate` with nothing else, with the operator's own credentials, and
`emulate alicloud` standalone, as real processes and over real sockets."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc
from cloudprovider_grpc.providers.alicloud.config import load_config
from cloudprovider_grpc.providers.alicloud.driver import AliCloudDriver
from cloudprovider_grpc.providers.alicloud.wiring import build_driver, make_client
from cloudprovider_grpc.providers.registry import NodesSpec, ProviderContext
from tests.support.ports import free_port

pytestmark = pytest.mark.integration

MARKER = "MarkerSecretValue-7f3a9c"


def clean_env(**extra: str) -> dict[str, str]:
    keep = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ACCESS_KEY", "ALICLOUD", "ALIBABA", "REGION_ID"))
    }
    return {**keep, **extra}


def wait_serving(port: int, proc: subprocess.Popen[str]) -> pb_grpc.CloudProviderStub:
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        grpc.channel_ready_future(channel).result(timeout=30)
    except grpc.FutureTimeoutError:
        proc.kill()
        raise AssertionError(f"server did not start: {proc.communicate()[1][-2000:]}") from None
    return pb_grpc.CloudProviderStub(channel)


def test_serve_emulate_alone_and_with_given_credentials_keeps_them_out_of_the_output(tmp_path: Path) -> None:
    port = free_port()
    env = clean_env(ACCESS_KEY_ID="LTAI5tMarkerKeyId0001", ACCESS_KEY_SECRET=MARKER, REGION_ID="cn-shanghai")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cloudprovider_grpc",
            "serve",
            "--provider",
            "alicloud",
            "--emulate",
            "--address",
            f"127.0.0.1:{port}",
            "--metrics-address",
            "",
            "--log-level",
            "debug",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        s = wait_serving(port, proc)
        s.Refresh(pb.RefreshRequest(), timeout=10)
        groups = [g.id for g in s.NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups]
        assert groups == ["asg-bp1demogeneral000001", "asg-bp1demogpu00000000001"]
        nodes = s.NodeGroupNodes(pb.NodeGroupNodesRequest(id=groups[0]), timeout=5).instances
        assert [i.id.split(".")[0] for i in nodes] == ["cn-shanghai"]  # the configured region, honoured
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=groups[1], delta=1), timeout=5)
        end = time.monotonic() + 20
        while time.monotonic() < end:
            s.Refresh(pb.RefreshRequest(), timeout=10)
            if any(
                i.id.startswith("cn-shanghai.i-")
                for i in s.NodeGroupNodes(pb.NodeGroupNodesRequest(id=groups[1])).instances
            ):
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the GPU group never got its instance")
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err[-2000:]
    assert MARKER not in out + err
    assert "target 0 -> 1" in err  # the logs were really written (and scanned above)


def test_standalone_emulator_for_metadata_mode(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cloudprovider_grpc", "emulate", "alicloud", "--address", f"127.0.0.1:{port}"],
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == f"alicloud API emulator listening on http://127.0.0.1:{port}/"
        url = f"http://127.0.0.1:{port}/"
        env = {
            "METADATA_ENDPOINT": url,
            "ALICLOUD_ESS_ENDPOINT": url,
            "ALICLOUD_ECS_ENDPOINT": url,
            "ALICLOUD_VPC_ENDPOINT": url,
        }
        config = load_config(ProviderContext(nodes=(NodesSpec(0, 10, "asg-bp1demogeneral000001"),), env=env))
        driver = AliCloudDriver(config, make_client(config))
        (pool,) = driver.list_pools()
        assert pool.desired == 1 and [m.id.split(".")[0] for m in pool.machines] == ["cn-hangzhou"]
        driver.close()
    finally:
        proc.terminate()
        proc.communicate(timeout=20)


def test_build_without_network_io_and_the_emulator_stops_with_the_server() -> None:
    built = build_driver(ProviderContext(emulate=True, env={}))
    assert built.on_stop is not None and isinstance(built.driver, AliCloudDriver)
    assert {g.id for g in built.driver.groups()} == {"asg-bp1demogeneral000001", "asg-bp1demogpu00000000001"}
    built.on_stop()
    offline = build_driver(
        ProviderContext(nodes=(NodesSpec(0, 1, "asg-x"),), env={"REGION_ID": "cn-beijing"})
    )
    assert offline.on_stop is None and offline.driver.groups()[0].id == "asg-x"  # nothing was contacted


def test_rrsa_token_stays_out_of_debug_logs(tmp_path: Path) -> None:
    """The OIDC token travels in AssumeRoleWithOIDC's query string (as the vendor's clients send it);
    urllib3 logs request lines at debug level, so the token must be masked there too."""
    token = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJtYXJrZXIifQ.TokenMarker7f3a9c"
    token_file = tmp_path / "oidc-token"
    token_file.write_text(token + "\n")
    port = free_port()
    env = clean_env(
        ALIBABA_CLOUD_OIDC_PROVIDER_ARN="acs:ram::1234567890:oidc-provider/ack-rrsa-c1",
        ALIBABA_CLOUD_OIDC_TOKEN_FILE=str(token_file),
        ALIBABA_CLOUD_ROLE_ARN="acs:ram::1234567890:role/ca",
        ALIBABA_CLOUD_SESSION_NAME="cluster-autoscaler",
        REGION_ID="cn-hangzhou",
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cloudprovider_grpc",
            "serve",
            "--provider",
            "alicloud",
            "--emulate",
            "--address",
            f"127.0.0.1:{port}",
            "--metrics-address",
            "",
            "--log-level",
            "debug",
            "--log-format",
            "text",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        s = wait_serving(port, proc)
        s.Refresh(pb.RefreshRequest(), timeout=10)
        assert len(s.NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups) == 2
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=20)
    assert "AssumeRoleWithOIDC" in err or "assumed role" in err  # the exchange was logged
    assert "TokenMarker7f3a9c" not in out + err
