"""Mutual TLS on every backend's server process: clients without a certificate, with one from an
untrusted CA, or in plaintext are refused; a rotated certificate is used by new connections; a rotated
pair that does not match is rejected and the old pair keeps serving."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import grpc
import pytest

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc
from tests.support.backends import BackendUnderTest
from tests.support.certs import Pki, write_pki
from tests.support.probes import start_server
from tests.support.waits import poll

pytestmark = pytest.mark.integration


def call(port: int, pki: Pki | None, cert: str | None = "client") -> grpc.StatusCode:
    target = f"localhost:{port}"
    if pki is None:
        ch = grpc.insecure_channel(target)
    else:
        creds = grpc.ssl_channel_credentials(
            root_certificates=pki.read("ca"),
            private_key=pki.read(f"{cert}_key") if cert else None,
            certificate_chain=pki.read(f"{cert}_cert") if cert else None,
        )
        ch = grpc.secure_channel(target, creds)
    try:
        pb_grpc.CloudProviderStub(ch).NodeGroups(pb.NodeGroupsRequest(), timeout=5)
        return grpc.StatusCode.OK
    except grpc.RpcError as exc:
        return exc.code()
    finally:
        ch.close()


def replace(src: Path, dst: Path) -> None:
    tmp = dst.with_name(f".{dst.name}.new")
    shutil.copy(src, tmp)
    os.replace(tmp, dst)  # atomic, like the kubelet's Secret volume swap


def test_tls_refusal_and_rotation(backend: BackendUnderTest, tmp_path: Path) -> None:
    live = write_pki(tmp_path / "live")
    rotated = write_pki(tmp_path / "rotated")
    tls = ["--tls-cert", str(live.server_cert), "--tls-key", str(live.server_key), "--tls-ca", str(live.ca)]
    server = start_server(backend, tmp_path, extra=tls)
    try:
        port = server.port
        assert call(port, live) == grpc.StatusCode.OK
        assert call(port, live, cert=None) == grpc.StatusCode.UNAVAILABLE
        assert call(port, live, cert="rogue") == grpc.StatusCode.UNAVAILABLE
        assert call(port, None) == grpc.StatusCode.UNAVAILABLE
        # a broken rotation: the new certificate with the old key is rejected, the old pair stays
        replace(rotated.server_cert, live.server_cert)
        assert call(port, live) == grpc.StatusCode.OK
        poll(lambda: "changed TLS files rejected" in server.output(), 10, "the rejection to be logged")
        assert "new handshakes use them" not in server.output()
        # the rest of the rotation arrives: new connections use the new pair
        replace(rotated.server_key, live.server_key)
        replace(rotated.ca, live.ca)
        assert call(port, rotated) == grpc.StatusCode.OK
        assert call(port, live) == grpc.StatusCode.UNAVAILABLE  # trusts only the old CA
        assert "new handshakes use them" in server.output()
    finally:
        server.close()


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("http_proxy", "https_proxy", "grpc_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(var, raising=False)
