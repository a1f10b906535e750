"""The cluster-autoscaler stand-in the official chart runs in the realnode tier
(tests/conformance/standin), on loopback against a real `serve`: it reads CA's flags and
cloud-config, its loops are answered and its /health-check passes; once the server is gone the
check fails, so the chart's liveness probe restarts it as it would restart cluster-autoscaler. A
stand-in whose health check could not fail would prove nothing in the chart test."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.deploy_support.tools import unavailable
from tests.realnode.official_chart import http_get, standin_binary, standin_report
from tests.support.backends import backend
from tests.support.ports import free_port
from tests.support.probes import start_server
from tests.support.waits import poll

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def binary() -> Path:
    try:
        return standin_binary()
    except RuntimeError as exc:
        unavailable("the cluster-autoscaler stand-in", str(exc))


def test_standin_health_check_follows_its_calls(binary: Path, tmp_path: Path) -> None:
    server = start_server(backend("sim"), tmp_path / "server")
    config = tmp_path / "cloud-config"
    config.write_text(f"address: {server.address}\ngrpc_timeout: 1s\n")
    health = f"127.0.0.1:{free_port()}"
    # as the chart passes them: its own defaults, then CA's cloud-config and scan interval
    args = ["--cloud-provider=externalgrpc", "--namespace=kube-system", "--logtostderr=true", "--v=4"]
    args += [f"--cloud-config={config}", "--scan-interval=200ms", f"--address={health}"]
    standin = subprocess.Popen([str(binary), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        report = poll(
            lambda: (got := standin_report(health)) and got["loops"] >= 3 and got, 30, "three loops"
        )
        assert report["last_ok"] and not report["failed"], report
        assert report["calls"]["NodeGroups"] >= 3 and report["calls"]["NodeGroupTargetSize"] >= 3, report
        assert http_get(health, "/health-check")[0] == 200
        server.close()
        poll(lambda: http_get(health, "/health-check")[0] == 500, 30, "the health check to fail")
        body = http_get(health, "/health-check")[1]
        assert "Refresh" in body, body
    finally:
        server.close()
        standin.terminate()
        output = standin.communicate(timeout=10)[0].decode()
    assert "loop 1 ok" in output and "failed after" in output, output


def test_standin_refuses_another_cloud_provider(binary: Path) -> None:
    proc = subprocess.run([str(binary), "--cloud-provider=aws"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1 and "only externalgrpc" in proc.stderr, proc
