"""TLS files are loaded and pair-checked by check-config, at startup and on every rotation, and the
message names the setting at fault. Over real sockets and real processes."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import grpc
import pytest

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from tests.support.certs import write_pki
from tests.support.servers import channel, sim_server, stub
from tests.test_cli import run

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("damage", "setting", "problem"),
    [
        ("key-from-another-pair", "key", "does not belong to the certificate in"),
        ("key-not-pem", "key", "holds no PEM private key"),
        ("cert-not-pem", "cert", "holds no PEM certificate"),
        ("ca-not-pem", "ca", "holds no PEM certificate"),
        ("key-is-directory", "key", "cannot read"),
    ],
)
def test_check_config_and_serve_load_and_pair_check_the_files(
    tmp_path: Path, damage: str, setting: str, problem: str
) -> None:
    pki = write_pki(tmp_path / "pki")
    other = write_pki(tmp_path / "other")
    files = {"cert": pki.server_cert, "key": pki.server_key, "ca": pki.ca}
    if damage == "key-from-another-pair":
        files["key"] = other.server_key
    elif damage == "key-is-directory":
        files["key"] = tmp_path / "dir.key"
        files["key"].mkdir()
    else:
        bad = tmp_path / f"{damage}.pem"
        bad.write_text("this is not PEM\n")
        files[setting] = bad
    args = ["--tls-cert", str(files["cert"]), "--tls-key", str(files["key"]), "--tls-ca", str(files["ca"])]
    for command in ("check-config", "serve"):
        out = run(command, *args, "--metrics-address", "")
        assert out.returncode == 2, (command, out.stderr)
        line = out.stderr.strip()
        assert "\n" not in line
        expected = "does not exist" if damage == "key-is-directory" else problem
        assert line.startswith(f"cloudprovider-grpc: invalid configuration: tls: {setting}: "), line
        assert expected in line, line
        assert "PRIVATE KEY" not in out.stderr


@pytest.mark.parametrize("front", ["auto", "off"])  # through the compiled front (when built) and without
def test_a_rotated_pair_that_does_not_match_is_rejected_and_the_old_pair_stays(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, front: str
) -> None:
    caplog.set_level(logging.INFO)
    live = write_pki(tmp_path / "live")
    rotated = write_pki(tmp_path / "rotated")
    with sim_server(pki=live, front=front) as handle:
        assert stub(channel(handle, live)).NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups
        # a broken rotation: the new certificate arrives with the old key
        tmp = live.dir / ".server.crt.new"
        shutil.copy(rotated.server_cert, tmp)
        os.replace(tmp, live.server_cert)
        # new connections still get the old, working pair
        for _ in range(3):
            ch = channel(handle, live)
            assert stub(ch).NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups
            ch.close()
        rejected = [r for r in caplog.records if "changed TLS files rejected" in r.getMessage()]
        assert len(rejected) == 1  # once, not on every handshake
        assert "key: " in rejected[0].getMessage() and "does not belong to the certificate" in (
            rejected[0].getMessage()
        )
        assert not [r for r in caplog.records if "new handshakes use them" in r.getMessage()]
        # the matching key follows: now the new pair is used
        tmp = live.dir / ".server.key.new"
        shutil.copy(rotated.server_key, tmp)
        os.replace(tmp, live.server_key)
        tmp = live.dir / ".ca.crt.new"
        shutil.copy(rotated.ca, tmp)
        os.replace(tmp, live.ca)
        ch = channel(handle, rotated)
        assert stub(ch).NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups
        assert [r for r in caplog.records if "new handshakes use them" in r.getMessage()]
        stale = channel(handle, live)
        with pytest.raises(grpc.RpcError):
            stub(stale).NodeGroups(pb.NodeGroupsRequest(), timeout=5)
