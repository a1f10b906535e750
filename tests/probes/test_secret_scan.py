"""Marker secrets, each with the trailing newline `kubectl create secret --from-file` leaves, must never
appear in any log line, metric or error message: while serving and scaling, when the cloud refuses the
token, and when the process stops at startup."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

import grpc
import pytest

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from tests.support import fuzz
from tests.support.backends import BackendUnderTest
from tests.support.probes import serve_command, start_server
from tests.support.waits import groups, refresh
from tests.test_cli import run

pytestmark = pytest.mark.integration


def markers(backend: BackendUnderTest) -> dict[str, str]:
    if not backend.secret_env:
        pytest.skip(f"{backend.name} reads no secrets")
    return {name: f"MARKER-{name.lower().replace('_', '-')}-7c1e9a\n" for name in backend.secret_env}


def assert_clean(text: str, secrets: dict[str, str], where: str) -> None:
    for name, value in secrets.items():
        assert value.strip() not in text, f"{name} leaked into {where}"


def exercise(s, ch: grpc.Channel, fallback_group: str = "") -> list[str]:
    """CA's calls, some failing, plus a burst of hostile ones; every error message returned.
    `fallback_group` is named when the server offers no group (one that discovers its groups from a
    cloud that never accepted the token): the calls are then refused NOT_FOUND, messages all the same."""
    details: list[str] = []
    gid = next(iter(groups(s)), fallback_group)
    calls = [
        lambda: s.Refresh(pb.RefreshRequest(), timeout=10),
        lambda: s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=gid, delta=1), timeout=5),
        lambda: s.NodeGroupNodes(pb.NodeGroupNodesRequest(id=gid), timeout=5),
        lambda: s.NodeGroupTemplateNodeInfo(pb.NodeGroupTemplateNodeInfoRequest(id=gid), timeout=5),
        lambda: s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="no-such-group"), timeout=5),
        lambda: s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=gid, delta=10_000), timeout=5),
        lambda: s.Refresh(pb.RefreshRequest(), timeout=10),
    ]
    for call in calls:
        try:
            call()
        except grpc.RpcError as exc:
            details.append(exc.details() or "")
    tally = fuzz.Tally()
    for case in fuzz.cases(seed=3, count=150):
        fuzz.send(ch, case, tally)
    details.extend(tally.bad)
    return details


def test_no_secret_in_logs_metrics_or_errors_while_serving(backend: BackendUnderTest, tmp_path: Path) -> None:
    secrets = markers(backend)
    server = start_server(backend, tmp_path, env=secrets, extra=["--log-level", "debug"])
    try:
        s = server.stub()
        details = exercise(s, server.channel())
        metrics = server.metrics()
        server.signal(signal.SIGTERM)
        assert server.wait(30) == 0
    finally:
        server.close()
    assert_clean(server.output(), secrets, "the log")
    assert_clean(metrics, secrets, "/metrics")
    assert_clean("\n".join(details), secrets, "error messages")


def test_no_secret_when_the_cloud_refuses_the_token(
    backend: BackendUnderTest, cloud_factory, tmp_path: Path
) -> None:
    secrets = markers(backend)
    cloud = cloud_factory()  # accepts its own token, not the markers
    server = start_server(backend, tmp_path, cloud=cloud, env=secrets, extra=["--log-level", "debug"])
    try:
        s = server.stub()
        assert not refresh(s)  # the cloud answers 401: UNAVAILABLE
        details = exercise(s, server.channel(), fallback_group=next(iter(cloud.groups)))
        metrics = server.metrics()
    finally:
        server.close()
    assert_clean(server.output(), secrets, "the log")
    assert_clean(metrics, secrets, "/metrics")
    assert_clean("\n".join(details), secrets, "error messages")


def test_no_secret_when_startup_fails(backend: BackendUnderTest, tmp_path: Path) -> None:
    secrets = markers(backend)
    name = backend.secret_env[0]
    outputs: list[str] = []
    # 1. a secret that cannot be an HTTP header: one line naming the variable, exit 2
    bad = dict(secrets, **{name: secrets[name].strip() + "\x01tail\n"})
    out = run("serve", *backend.serve_args, "--metrics-address", "", env=bad)
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith(f"cloudprovider-grpc: invalid configuration: {name}: ")
    outputs.append(out.stdout + out.stderr)
    # 2. the port is taken
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = run("serve", *backend.serve_args, "--address", f"127.0.0.1:{port}", "--metrics-address", "",
                  env=secrets)  # fmt: skip
    assert out.returncode == 1, out.stderr
    outputs.append(out.stdout + out.stderr)
    # 3. the journal cannot be read
    journal = tmp_path / "journal"
    journal.mkdir()
    out = run(
        "serve", *backend.serve_args, "--state-file", str(journal), "--metrics-address", "", env=secrets
    )
    assert out.returncode == 2, out.stderr
    outputs.append(out.stdout + out.stderr)
    # 4. a crash nobody foresaw, with the token inside the exception (as a failed header check once was)
    code = (
        "import os, sys\n"
        "import cloudprovider_grpc.server.assembly as server\n"
        "from cloudprovider_grpc import cli\n"
        f"def boom(*a, **k): raise RuntimeError('Bearer ' + os.environ[{name!r}])\n"
        "server.serve_forever = boom\n"
        "sys.exit(cli.main(sys.argv[1:]))\n"
    )
    python = serve_command(backend, None)[0]
    proc = subprocess.run(
        [python, "-c", code, "serve", *backend.serve_args, "--metrics-address", ""],
        capture_output=True, text=True, timeout=60, env={**os.environ, **secrets},
    )  # fmt: skip
    assert proc.returncode == 1 and "RuntimeError: Bearer ***" in proc.stderr, proc.stderr
    outputs.append(proc.stdout + proc.stderr)
    for i, text in enumerate(outputs, 1):
        assert "Traceback" not in text or i == 4
        assert_clean(text, secrets, f"startup failure {i}")
