"""Server assembly over real sockets: port exclusivity, health, metrics, certificate reload,
graceful shutdown of a real process on SIGTERM."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cloudprovider_grpc.config.settings import Settings
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.providers.driver import Machine
from cloudprovider_grpc.providers.machinery.machines.provider import MachineProvider
from cloudprovider_grpc.providers.sim import SimCloud, SimDriver, SimOptions
from cloudprovider_grpc.server.assembly import ServerStartError, start_server
from tests.support.certs import write_pki
from tests.support.ports import free_port
from tests.support.servers import channel, sim_server, stub

pytestmark = pytest.mark.integration


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_second_server_on_the_same_port_fails_loudly() -> None:
    with sim_server() as first:
        settings = Settings(address=f"127.0.0.1:{first.port}", metrics_address="")
        with pytest.raises(ServerStartError, match=f"cannot listen on 127.0.0.1:{first.port}"):
            start_server(settings)
        # the first one is unaffected
        assert len(stub(channel(first)).NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups) == 3


def test_health_service_and_metrics_endpoint() -> None:
    with sim_server() as handle:
        ch = channel(handle)
        health = health_pb2_grpc.HealthStub(ch)
        for service in ("", "clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider"):
            resp = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert resp.status == health_pb2.HealthCheckResponse.SERVING
        s = stub(ch)
        for _ in range(3):
            s.NodeGroups(pb.NodeGroupsRequest())
        with pytest.raises(grpc.RpcError):
            s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="missing"))
        base = f"http://127.0.0.1:{handle.metrics_port}"
        assert http_get(base + "/healthz") == (200, "ok\n")
        status, text = http_get(base + "/metrics")
        assert status == 200
        assert 'cloudprovider_grpc_rpc_requests_total{code="OK",method="NodeGroups"}' in text
        assert 'cloudprovider_grpc_rpc_requests_total{code="NOT_FOUND",method="NodeGroupTargetSize"}' in text
        assert (
            'cloudprovider_grpc_rpc_duration_seconds_bucket{code="OK",le="0.001",method="NodeGroups"}' in text
        )
        assert 'cloudprovider_grpc_node_group_target_size{backend="sim",group="general"} 1.0' in text
        assert 'cloudprovider_grpc_node_group_machines{backend="sim",group="general"} 1.0' in text
        assert http_get(base + "/nope")[0] == 404
    # after shutdown the port no longer answers
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(base + "/healthz", timeout=2)


@pytest.mark.parametrize("front", ["auto", "off"])  # through the compiled front (when built) and without
def test_certificate_files_are_reread_when_they_change(tmp_path: Path, front: str) -> None:
    live = write_pki(tmp_path / "live")
    rotated = write_pki(tmp_path / "rotated")  # a new CA, server and client certificate
    with sim_server(pki=live, front=front) as handle:
        old_client = channel(handle, live)
        assert stub(old_client).NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups
        old_ca = live.read("ca")
        # rotate: a Kubernetes Secret update replaces the files (atomically, like the ..data swap)
        for name in ("server.crt", "server.key", "ca.crt"):
            tmp = live.dir / f".{name}.new"
            shutil.copy(rotated.dir / name, tmp)
            os.replace(tmp, live.dir / name)
        new_client = channel(handle, rotated)
        assert stub(new_client).NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups
        # a fresh connection that trusts only the old CA is now refused: the server shows the new cert
        stale = grpc.secure_channel(
            f"localhost:{handle.port}",
            grpc.ssl_channel_credentials(
                root_certificates=old_ca,
                private_key=rotated.read("client_key"),
                certificate_chain=rotated.read("client_cert"),
            ),
        )
        with pytest.raises(grpc.RpcError) as info:
            stub(stale).NodeGroups(pb.NodeGroupsRequest(), timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE


class SlowListDriver(SimDriver):
    """A cloud whose listing holds until released, so a Refresh is in flight when shutdown starts."""

    def __init__(self, cloud: SimCloud) -> None:
        super().__init__(cloud)
        self.listing = threading.Event()
        self.entered = threading.Event()
        self.release = threading.Event()

    def list_machines(self) -> list[Machine]:
        if not self.listing.is_set():  # the server's start-up refresh goes through at once
            self.listing.set()
            return super().list_machines()
        self.entered.set()
        self.release.wait(10)
        return super().list_machines()


def test_graceful_stop_lets_in_flight_rpcs_finish() -> None:
    cloud = SimCloud(SimOptions.model_validate({"groups": [{"id": "g", "max_size": 3}]}))
    driver = SlowListDriver(cloud)
    provider = MachineProvider(driver, inline_workers=True)
    handle = start_server(Settings(address="127.0.0.1:0", metrics_address=""), provider=provider)
    s = stub(channel(handle))
    result: dict[str, object] = {}

    def refresh() -> None:
        try:
            s.Refresh(pb.RefreshRequest(), timeout=5)
            result["ok"] = True
        except grpc.RpcError as exc:
            result["error"] = exc.code()

    t = threading.Thread(target=refresh)
    t.start()
    assert driver.entered.wait(10)  # the Refresh is now inside the listing
    stopper = threading.Thread(target=handle.stop, kwargs={"grace": 5})
    stopper.start()
    driver.release.set()
    stopper.join()
    t.join()
    assert result == {"ok": True}
    with pytest.raises(grpc.RpcError) as info:
        s.NodeGroups(pb.NodeGroupsRequest(), timeout=2)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def test_sigterm_shuts_the_process_down_cleanly() -> None:
    port, mport = free_port(), free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cloudprovider_grpc",
            "serve",
            "--address",
            f"127.0.0.1:{port}",
            "--metrics-address",
            f"127.0.0.1:{mport}",
            "--log-format",
            "json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if http_get(f"http://127.0.0.1:{mport}/healthz")[0] == 200:
                    break
            except urllib.error.URLError:
                time.sleep(0.1)
        ch = grpc.insecure_channel(f"127.0.0.1:{port}")
        assert len(stub(ch).NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups) == 3
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == 0
        assert '"msg": "received SIGTERM, shutting down (grace 10s)"' in err
        assert '"msg": "server stopped"' in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
