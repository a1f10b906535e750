"""The inspection commands (`groups`, `nodes`, `scale`, `delete`, `options`, `template`) against a
real server on a loopback port, in plaintext and with mutual TLS: their tables, their JSON, and the
exit codes scripts rely on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cloudprovider_grpc.cli import main
from cloudprovider_grpc.commands import inspect as inspect_cli
from cloudprovider_grpc.server.assembly import ServerHandle
from tests.support.certs import Pki
from tests.support.ports import free_port
from tests.support.servers import sim_server

pytestmark = pytest.mark.integration


def cli(capsys: pytest.CaptureFixture[str], handle: ServerHandle, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([*args, "--server", f"localhost:{handle.port}"])
    out = capsys.readouterr()
    return code, out.out, out.err


def cli_json(capsys: pytest.CaptureFixture[str], handle: ServerHandle, *args: str) -> object:
    code, out, err = cli(capsys, handle, *args, "-o", "json")
    assert code == 0, err
    return json.loads(out)


def test_groups_as_a_table_and_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    with sim_server() as handle:
        code, out, _ = cli(capsys, handle, "groups")
        assert code == 0
        header, *rows = out.splitlines()
        assert header.split() == ["GROUP", "MIN", "MAX", "TARGET", "DEBUG"]
        assert [r.split()[:4] for r in rows] == [
            ["general", "1", "10", "1"],
            ["highmem", "0", "5", "0"],
            ["gpu", "0", "3", "0"],
        ]
        groups = cli_json(capsys, handle, "groups")
        assert [(g["id"], g["minSize"], g["maxSize"], g["targetSize"]) for g in groups] == [  # type: ignore[union-attr]
            ("general", 1, 10, 1),
            ("highmem", 0, 5, 0),
            ("gpu", 0, 3, 0),
        ]


def test_scale_up_then_down_then_delete(capsys: pytest.CaptureFixture[str]) -> None:
    with sim_server() as handle:
        code, out, _ = cli(capsys, handle, "scale", "highmem", "+3")
        assert (code, out) == (0, "highmem: target size 0 -> 3\n")
        nodes = cli_json(capsys, handle, "nodes", "highmem")
        assert [n["state"] for n in nodes] == ["creating"] * 3  # type: ignore[index,union-attr]
        # -N lowers the target by machines not yet created, as CA's DecreaseTargetSize
        result = cli_json(capsys, handle, "scale", "highmem", "-1")
        assert result == {"id": "highmem", "delta": -1, "targetSizeBefore": 3, "targetSize": 2}
        code, out, _ = cli(capsys, handle, "scale", "general", "+1")
        assert code == 0
        result = cli_json(capsys, handle, "delete", "general", "sim://general/0")
        assert result == {"id": "general", "deleted": ["sim://general/0"]}
        groups = {g["id"]: g["targetSize"] for g in cli_json(capsys, handle, "groups")}  # type: ignore[union-attr]
        assert groups == {"general": 1, "highmem": 2, "gpu": 0}
        states = {n["id"]: n["state"] for n in cli_json(capsys, handle, "nodes", "general")}  # type: ignore[index,union-attr]
        assert states.get("sim://general/0", "deleting") == "deleting", states


def test_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with sim_server() as handle:
        code, _, err = cli(capsys, handle, "nodes", "nope")
        assert code == inspect_cli.EXIT_NOT_FOUND and "NOT_FOUND" in err and "nope" in err
        code, _, err = cli(capsys, handle, "scale", "gpu", "+4")
        assert code == inspect_cli.EXIT_REFUSED and "max size 3" in err
        code, _, err = cli(capsys, handle, "scale", "gpu", "4")
        assert code == inspect_cli.EXIT_USAGE and "+N" in err
        code, _, err = cli(capsys, handle, "delete", "general", "sim://general/99")
        assert code in (inspect_cli.EXIT_NOT_FOUND, inspect_cli.EXIT_REFUSED), err
    port = free_port()  # nothing listens there any more
    capsys.readouterr()
    assert main(["groups", "--server", f"127.0.0.1:{port}", "--timeout", "2"]) == inspect_cli.EXIT_UNREACHABLE
    assert "UNAVAILABLE" in capsys.readouterr().err


def test_usage_errors_exit_2_from_a_real_process() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "cloudprovider_grpc", "scale", "general"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == inspect_cli.EXIT_USAGE and "+N|-N" in proc.stderr
    helped = subprocess.run(
        [sys.executable, "-m", "cloudprovider_grpc", "groups", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Exit codes: 0 done" in helped.stdout and "--tls-ca" in helped.stdout


def test_options_with_and_without_overrides(capsys: pytest.CaptureFixture[str]) -> None:
    with sim_server() as handle:  # the demo's gpu group overrides three options
        result = cli_json(capsys, handle, "options", "gpu")
        assert result["options"]["scaleDownUnneededTime"] == "300s"  # type: ignore[index]
        assert result["options"]["scaleDownUtilizationThreshold"] == 0.3  # type: ignore[index]
        # the rest are CA's defaults, echoed
        assert result["options"]["maxNodeProvisionTime"] == "900s"  # type: ignore[index]
        assert result["options"]["maxNodeStartupTime"] == "1200s"  # type: ignore[index]  # its own
        code, out, _ = cli(capsys, handle, "options", "highmem")
        assert code == 0 and "no per-group options" in out


def test_template_node(capsys: pytest.CaptureFixture[str]) -> None:
    with sim_server() as handle:
        node = cli_json(capsys, handle, "template", "gpu")
        labels = node["metadata"]["labels"]  # type: ignore[index]
        assert labels["node.kubernetes.io/instance-type"] == "sim-8x32-t4"
        code, out, _ = cli(capsys, handle, "template", "gpu")
        assert code == 0 and "node.kubernetes.io/instance-type: sim-8x32-t4" in out and "capacity:" in out


def test_mutual_tls(capsys: pytest.CaptureFixture[str], pki: Pki) -> None:
    tls = ["--tls-ca", str(pki.ca), "--tls-cert", str(pki.client_cert), "--tls-key", str(pki.client_key)]
    with sim_server(pki=pki) as handle:
        code, out, err = cli(capsys, handle, "groups", *tls)
        assert code == 0 and "general" in out, err
        # without a client certificate the handshake fails: unreachable, not a server error
        code, _, err = cli(capsys, handle, "groups", "--tls-ca", str(pki.ca))
        assert code == inspect_cli.EXIT_UNREACHABLE, err
        assert "add --tls-cert and --tls-key" in err, err
        # plaintext against TLS: gRPC says only "Socket closed"; we say why
        code, _, err = cli(capsys, handle, "groups")
        assert code == inspect_cli.EXIT_UNREACHABLE and "add --tls-ca" in err, err
        # a CA that did not sign the server's certificate
        code, _, err = cli(capsys, handle, "groups", *tls[:1], str(pki.client_cert), *tls[2:])
        assert code == inspect_cli.EXIT_UNREACHABLE and "not signed by --tls-ca" in err, err
        # the certificate names localhost and 127.0.0.1, not the name asked for
        code, _, err = cli(capsys, handle, "groups", *tls, "--tls-server-name", "other.example")
        assert code == inspect_cli.EXIT_UNREACHABLE and "--tls-server-name" in err, err
        code, _, err = cli(capsys, handle, "groups", "--tls-cert", str(pki.client_cert))
        assert code == inspect_cli.EXIT_USAGE and "--tls-ca" in err
        code, _, err = cli(capsys, handle, "groups", "--tls-ca", str(Path(pki.dir) / "missing.crt"))
        assert code == inspect_cli.EXIT_USAGE and "missing.crt" in err


@pytest.mark.parametrize(("cloud", "name"), [("vultr", "general"), ("exoscale", "workers")])
def test_a_group_is_addressed_by_the_clouds_name_as_well_as_its_id(
    cloud: str, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Vultr and Exoscale groups are UUIDs; the pool's name (what `groups` shows in its debug
    column and the status page next to the id) works in every command, the id still does, and a
    name no group carries is NOT_FOUND as before."""
    from cloudprovider_grpc.config.settings import Settings
    from cloudprovider_grpc.providers.registry import ProviderContext, build_provider
    from cloudprovider_grpc.server.assembly import start_server

    provider = build_provider(cloud, ProviderContext(emulate=True, inline_workers=True))
    provider.refresh()
    handle = start_server(
        Settings(address="127.0.0.1:0", metrics_address="127.0.0.1:0", front="off"), provider=provider
    )
    try:
        groups = cli_json(capsys, handle, "groups")
        (gid,) = [g["id"] for g in groups if f" {name} " in g["debug"]]  # type: ignore[index,union-attr]
        assert gid != name
        before = next(g["targetSize"] for g in groups if g["id"] == gid)  # type: ignore[index,union-attr]
        result = cli_json(capsys, handle, "scale", name, "+2")
        assert result["targetSize"] == before + 2, result  # type: ignore[index,call-overload]
        after = {g["id"]: g["targetSize"] for g in cli_json(capsys, handle, "groups")}  # type: ignore[union-attr]
        assert after[gid] == before + 2
        nodes = cli_json(capsys, handle, "nodes", name)
        assert len(nodes) == before + 2  # type: ignore[arg-type]
        assert cli_json(capsys, handle, "nodes", gid) == nodes
        code, _, err = cli(capsys, handle, "scale", f"{name}-typo", "+1")
        assert code == inspect_cli.EXIT_NOT_FOUND and "NOT_FOUND" in err, err
    finally:
        handle.stop(grace=1)


def test_a_name_two_groups_share_is_refused_and_an_id_always_wins(capsys: pytest.CaptureFixture[str]) -> None:
    """Two Vultr pools labelled `web`, a third whose label is the first one's id: the shared name is
    NOT_FOUND naming both ids, and the id means its own group, never the pool labelled with it."""
    from cloudprovider_grpc.config.settings import Settings
    from cloudprovider_grpc.providers.registry import ProviderContext, build_provider
    from cloudprovider_grpc.server.assembly import start_server

    first = "11111111-1111-4111-8111-111111111111"
    pools = [
        {"id": first, "label": "web", "plan": "vc2-1c-2gb"},
        {"id": "22222222-2222-4222-8222-222222222222", "label": "web", "plan": "vc2-1c-2gb"},
        {
            "id": "33333333-3333-4333-8333-333333333333",
            "label": first,
            "plan": "vc2-1c-2gb",
            "node_quantity": 2,
        },
    ]
    provider = build_provider(
        "vultr", ProviderContext(emulate=True, inline_workers=True, options={"emulator": {"pools": pools}})
    )
    provider.refresh()
    handle = start_server(
        Settings(address="127.0.0.1:0", metrics_address="127.0.0.1:0", front="off"), provider=provider
    )
    try:
        code, _, err = cli(capsys, handle, "nodes", "web")
        assert code == inspect_cli.EXIT_NOT_FOUND, err
        assert first in err and "22222222-2222-4222-8222-222222222222" in err and "use the id" in err, err
        assert len(cli_json(capsys, handle, "nodes", first)) == 1  # the first pool, not the one labelled so
    finally:
        handle.stop(grace=1)


def test_a_tls_failure_is_one_line_with_its_hint_from_a_real_process(pki: Pki) -> None:
    """The gRPC core logs a failed handshake itself (lines naming its own source files); the
    command prints only its line, with the flag to fix."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"}
    with sim_server(pki=pki) as handle:
        proc = subprocess.run(
            [sys.executable, "-m", "cloudprovider_grpc", "groups", "--server", f"localhost:{handle.port}",
             "--tls-ca", str(pki.ca)],
            capture_output=True, text=True, timeout=60, check=False, env=env,
        )  # fmt: skip
    assert proc.returncode == inspect_cli.EXIT_UNREACHABLE
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("cloudprovider-grpc groups: localhost:") and "add --tls-cert and --tls-key" in line
