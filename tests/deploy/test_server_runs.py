"""Our container's command, run as the pod would: `check-config` accepts each layout's arguments
with the files and environment the pod would have (and refuses a broken one, or a cherry pod
without the bootstrap Secret its cloudinit needs, in one line naming what is wrong), and
the server started that way answers cluster-autoscaler as its cloud-config says: over its unix
socket for the sidecar, over mutual TLS for the standalone layouts."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc
from tests.deploy_support import issuer
from tests.deploy_support.pods import ContainerView, config_data, container, flag_value
from tests.deploy_support.rendered import (
    LAYOUTS,
    OUR_CONTAINER,
    RUNNABLE,
    ca_cloud_config,
    deploying_section,
    example_secrets,
    kube_status,
    leader_elected,
    our_workload,
    rendered,
    split_host_port,
)
from tests.deploy_support.tools import Objects
from tests.support.ports import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# The console script the image's ENTRYPOINT names, as installed in this environment.
_SCRIPT = Path(sys.executable).parent / "cloudprovider-grpc"
CLI = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "cloudprovider_grpc.cli"]


def materialize_ours(objects: Objects, root: Path, secrets: Objects) -> Any:
    extra = issuer.issue(objects)
    for obj in secrets:
        extra[obj["metadata"]["name"]] = config_data(secrets, "Secret", obj["metadata"]["name"])
    view = ContainerView(our_workload(objects), OUR_CONTAINER, objects, extra)
    return view.materialize(root), extra


#: Environment variables that configure the server or a cloud (the in-tree names each backend reads).
SERVER_ENV_PREFIXES = (
    "CLOUDPROVIDER_GRPC_", "CHERRY_", "BOOTSTRAP_TOKEN_", "EXOSCALE_", "ACCESS_KEY_", "REGION_ID",
    "ALIBABA_CLOUD_", "ALICLOUD_", "METADATA_ENDPOINT", "CLUSTER_API_TOKEN", "SPC_", "ORGANIZATION_ID",
    "CLUSTER_ID",
)  # fmt: skip


def pod_env(env: dict[str, str]) -> dict[str, str]:
    """This process's environment minus anything that could configure the server, plus the pod's."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith(SERVER_ENV_PREFIXES)}, **env}


def run_cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, env=pod_env(env), cwd=cwd, timeout=60, check=False
    )


@pytest.mark.parametrize("layout", RUNNABLE)
def test_check_config_accepts_layout_args(layout: str, tmp_path: Path) -> None:
    objects = rendered(layout)
    mat, _ = materialize_ours(objects, tmp_path / "pod", example_secrets(layout))
    result = run_cli(["check-config", "--offline", *mat.args[1:]], mat.env, tmp_path)
    assert result.returncode == 0, f"check-config {shlex.join(mat.args[1:])}\n{result.stdout}{result.stderr}"
    assert "configuration OK" in result.stdout


@pytest.mark.parametrize("layout", [n for n in RUNNABLE if LAYOUTS[n].backend == "cherry"])
def test_cherry_missing_bootstrap_secret_is_reported(layout: str, tmp_path: Path) -> None:
    """The bootstrap Secret is `optional` in the pod, yet a cloudinit that needs it cannot start blind:
    without it the pod still starts, and the server refuses the configuration naming the variable."""
    secrets = [
        s
        for s in example_secrets(layout)
        if s["metadata"]["name"] != "bootstrap-token-cluster-autoscaler-cherry"
    ]
    mat, _ = materialize_ours(rendered(layout), tmp_path / "pod", secrets)
    assert "BOOTSTRAP_TOKEN_ID" not in mat.env and mat.env["CHERRY_AUTH_TOKEN"]
    result = run_cli(["check-config", "--offline", *mat.args[1:]], mat.env, tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "BOOTSTRAP_TOKEN_" in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("layout", ["standalone", "chart-sim"])
@pytest.mark.parametrize(
    ("mutation", "key"),
    [
        (("--nodes", "5:1:pool1"), "nodes"),
        (("--tls-ca", "/etc/cloudprovider-grpc/server/missing.crt"), "tls"),
    ],
)
def test_check_config_rejects_broken_layout_args(
    layout: str, mutation: tuple[str, str], key: str, tmp_path: Path
) -> None:
    """The same wiring with one bad value fails with one line naming the key: check-config checks."""
    mat, _ = materialize_ours(rendered(layout), tmp_path / "pod", [])
    flag, value = mutation
    if flag == "--tls-ca":
        value = str(mat.mounts["/etc/cloudprovider-grpc/server"] / "missing.crt")
    result = run_cli(["check-config", "--offline", *mat.args[1:], flag, value], mat.env, tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and key in lines[0], result.stderr


@dataclass
class ServerRun:
    """A server started by running_server(): where it serves gRPC, its metrics port, and its log once
    it has stopped."""

    grpc_address: str
    metrics_port: int
    output: str = ""

    @property
    def grpc_port(self) -> int:
        return split_host_port(self.grpc_address)[1]


@contextlib.contextmanager
def running_server(
    args: list[str], env: dict[str, str], cwd: Path, *, own_address: bool = False
) -> Iterator[ServerRun]:
    """`cloudprovider-grpc serve` with the layout's args on a free loopback metrics port, and a free
    loopback gRPC port unless `own_address` (the layout's, e.g. a socket in its volume); SIGTERM at
    the end."""
    address = flag_value(args, "--address") if own_address else f"127.0.0.1:{free_port()}"
    assert address, "the layout gives no --address"
    run_ = ServerRun(address, free_port())
    args = [*args, "--metrics-address", f"127.0.0.1:{run_.metrics_port}"]
    if not own_address:
        args += ["--address", run_.grpc_address]
    proc = subprocess.Popen(
        [*CLI, *args], env=pod_env(env), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, f"server exited early: {proc.communicate()[0]}"
            try:
                url = f"http://127.0.0.1:{run_.metrics_port}/healthz"
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield run_
        proc.send_signal(signal.SIGTERM)
        run_.output, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, f"SIGTERM must end the server cleanly:\n{run_.output}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def probe_paths(objects: Objects) -> set[str]:
    ours = container(our_workload(objects), OUR_CONTAINER)
    return {ours[p]["httpGet"]["path"] for p in ("startupProbe", "livenessProbe", "readinessProbe")}


@pytest.mark.parametrize("layout", ["sidecar", "helm-sim"])
def test_sidecar_serves_cluster_autoscaler_over_its_socket(layout: str, tmp_path: Path) -> None:
    """Start our container's command as the pod would, then call it as CA's cloud-config says: over
    the unix socket in the volume both containers mount; the socket is gone after SIGTERM."""
    objects = rendered(layout)
    mat, _ = materialize_ours(objects, tmp_path / "pod", [])
    _, config, _ = ca_cloud_config(objects)
    assert config["address"].startswith("unix:///")
    socket = Path(config["address"].removeprefix("unix://"))
    # the emptyDir, materialized (through a short link when the test's root is too long for a socket)
    local = Path(str(flag_value(mat.args, "--address")).removeprefix("unix://"))
    assert local.name == socket.name and local.resolve().parent == mat.mounts[str(socket.parent)].resolve()
    with running_server(mat.args, mat.env, tmp_path, own_address=True) as server:
        assert server.grpc_address == f"unix://{local}"
        for path in probe_paths(objects):
            with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}{path}", timeout=5) as resp:
                assert resp.status == 200, path
        with grpc.insecure_channel(server.grpc_address) as channel:
            groups = pb_grpc.CloudProviderStub(channel).NodeGroups(pb.NodeGroupsRequest(), timeout=5)
        assert groups.nodeGroups, "the sim backend serves its demo groups"
    assert not os.path.lexists(local)
    # The log line the deployment guide tells the reader to look for (the path is the test's).
    promised = re.search(r"our log says\s+`([^`]+)`", " ".join(deploying_section().split()))
    assert promised, "docs/deploying.md no longer says what our log shows"
    assert promised.group(1).replace(str(socket), str(local)) in server.output, server.output


@pytest.mark.parametrize("layout", ["standalone", "chart-sim"])
def test_standalone_mtls_works_as_cluster_autoscaler_dials(layout: str, tmp_path: Path) -> None:
    """Certificates as cert-manager would issue them from the layout; CA's side as its config says.

    The client verifies the server under the host name in CA's `address` (Go sets ServerName to
    it), presenting the client certificate from the paths in CA's cloud-config.
    """
    objects = rendered(layout)
    mat, secrets = materialize_ours(objects, tmp_path / "pod", [])
    ca_view, config, _ = ca_cloud_config(objects)
    ca_view.extra_secrets = secrets
    ca_pod = ca_view.materialize(tmp_path / "ca-pod")

    def ca_file(field: str) -> bytes:
        mount, rel = ca_view.mount_path_of(config[field]) or ({}, "")
        return (ca_pod.mounts[mount["mountPath"]] / rel).read_bytes()

    host, _ = split_host_port(config["address"])
    # the layout elects a leader on a Lease, which needs an API server: that is held to account in
    # tests/ha/test_election.py; here the wiring of TLS is, on one replica
    # (and writes its status to the API server: tests/server/test_kube_status.py)
    assert leader_elected(objects) and kube_status(objects)
    with running_server(
        [*mat.args, "--leader-elect=false", "--kube-status=false"], mat.env, tmp_path
    ) as server:
        grpc_port = server.grpc_port
        creds = grpc.ssl_channel_credentials(ca_file("cacert"), ca_file("key"), ca_file("cert"))
        options = [("grpc.ssl_target_name_override", host)]
        with grpc.secure_channel(f"127.0.0.1:{grpc_port}", creds, options=options) as channel:
            groups = pb_grpc.CloudProviderStub(channel).NodeGroups(pb.NodeGroupsRequest(), timeout=10)
        assert groups.nodeGroups
        # Without the client certificate the handshake is refused: the port really is mTLS-only.
        anonymous = grpc.ssl_channel_credentials(ca_file("cacert"))
        with (
            grpc.secure_channel(f"127.0.0.1:{grpc_port}", anonymous, options=options) as channel,
            pytest.raises(grpc.RpcError) as err,
        ):
            pb_grpc.CloudProviderStub(channel).NodeGroups(pb.NodeGroupsRequest(), timeout=10)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
