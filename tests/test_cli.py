"""The command line: versions, check-config, and one clear line (exit 2) for every bad setting."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cloudprovider_grpc import __version__
from cloudprovider_grpc.config.settings import load_settings
from cloudprovider_grpc.core.errors import ConfigError

pytestmark = pytest.mark.integration


def run(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("CLOUDPROVIDER_GRPC_")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "cloudprovider_grpc", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=full_env,
        cwd=cwd,
    )


def test_version() -> None:
    out = run("version")
    assert out.returncode == 0
    assert out.stdout.startswith(f"cloudprovider-grpc {__version__} (grpcio 1.")


def test_check_config_defaults() -> None:
    out = run("check-config")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (
        "configuration OK: provider sim, 3 node group(s) [general 1..10, highmem 0..5, gpu 0..3], "
        "gRPC 127.0.0.1:8086 (plaintext), metrics 127.0.0.1:8087; cloud API listed with these credentials"
    )


def test_plaintext_beyond_loopback_must_be_asked_for() -> None:
    out = run("check-config", "--address", ":8086")
    assert out.returncode == 2
    assert out.stderr.startswith(
        "cloudprovider-grpc: invalid configuration: address: :8086 is reachable beyond"
    )
    out = run("check-config", "--address", ":8086", "--allow-plaintext", "--metrics-address", "")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith(
        "gRPC :8086 (plaintext), metrics disabled; cloud API listed with these credentials"
    )


def test_a_broken_yaml_file_is_reported_with_its_line(tmp_path: Path) -> None:
    cfg = tmp_path / "broken.yaml"
    cfg.write_text("provider: sim\nnodes:\n  - '0:3:a'\n  bad: [\n")
    out = run("check-config", "--config", str(cfg))
    assert out.returncode == 2
    assert out.stderr.startswith(f"cloudprovider-grpc: invalid configuration: config: {cfg}:4:")
    assert len(out.stderr.strip().splitlines()) == 1


def test_check_config_nodes_flag_defines_sim_groups() -> None:
    out = run("check-config", "--nodes", "0:4:small", "--nodes", "2:8:big")
    assert out.returncode == 0, out.stderr
    assert "2 node group(s) [small 0..4, big 2..8]" in out.stdout


@pytest.mark.parametrize(
    ("args", "yaml_text", "env", "key"),
    [
        (["--nodes", "5:1:pool"], None, {}, "nodes"),
        (["--nodes", "nonsense"], None, {}, "nodes"),
        (["--provider", "nope"], None, {}, "provider"),
        (["--address", "bogus"], None, {}, "address"),
        (["--tls-cert", "README.md"], None, {}, "tls"),
        (["--tls-cert", "missing.pem", "--tls-key", "missing.key"], None, {}, "tls"),
        (["--config", "missing.yaml"], None, {}, "config"),
        ([], "adress: ':9000'\n", {}, "adress"),
        ([], "- a list\n", {}, "config"),
        ([], "sim:\n  groups:\n    - {id: a, min_size: 3, max_size: 1}\n", {}, "sim.groups.0"),
        ([], "sim:\n  groups:\n    - {id: a, capacity: {cpu: '1gi'}}\n", {}, "sim.groups.0.capacity"),
        (
            [],
            "sim:\n  groups:\n    - {id: a, options: {scale_down_unneded_time: 1}}\n",
            {},
            "sim.groups.0.options",
        ),
        ([], None, {"CLOUDPROVIDER_GRPC_CONCURRENCY": "0"}, "concurrency"),
        ([], None, {"CLOUDPROVIDER_GRPC_LOG_FORMAT": "xml"}, "log_format"),
    ],
)
def test_invalid_configuration_is_one_line_naming_the_key(
    tmp_path: Path, args: list[str], yaml_text: str | None, env: dict[str, str], key: str
) -> None:
    if yaml_text is not None:
        (tmp_path / "config.yaml").write_text(yaml_text)
        args = [*args, "--config", str(tmp_path / "config.yaml")]
    for command in ("check-config", "serve"):
        out = run(command, *args, env=env)  # invalid settings stop before anything binds a port
        assert out.returncode == 2, (command, out.stdout, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1, out.stderr
        assert lines[0].startswith(f"cloudprovider-grpc: invalid configuration: {key}: "), lines[0]
        assert "Traceback" not in out.stderr and out.stdout == ""


def test_sources_precedence_flags_env_secrets_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        "allow_plaintext: true\naddress: ':1111'\nmetrics_address: ':2222'\n"
        "cluster_name: from-yaml\nlog_level: debug\n"
    )
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "cloudprovider_grpc_cluster_name").write_text("from-secret")
    for k in list(os.environ):
        if k.startswith("CLOUDPROVIDER_GRPC_"):
            monkeypatch.delenv(k)
    s = load_settings(cfg)
    assert (s.address, s.metrics_address, s.cluster_name, s.log_level) == (
        ":1111",
        ":2222",
        "from-yaml",
        "debug",
    )
    monkeypatch.setenv("CLOUDPROVIDER_GRPC_SECRETS_DIR", str(secrets))
    assert load_settings(cfg).cluster_name == "from-secret"
    monkeypatch.setenv("CLOUDPROVIDER_GRPC_ADDRESS", ":3333")
    monkeypatch.setenv("CLOUDPROVIDER_GRPC_CLUSTER_NAME", "from-env")
    s = load_settings(cfg)
    assert (s.address, s.cluster_name) == (":3333", "from-env")
    s = load_settings(cfg, {"address": ":4444", "cluster_name": None})
    assert (s.address, s.metrics_address, s.cluster_name) == (":4444", ":2222", "from-env")
    monkeypatch.setenv("CLOUDPROVIDER_GRPC_CONFIG", str(cfg))
    monkeypatch.delenv("CLOUDPROVIDER_GRPC_ADDRESS")
    assert load_settings().address == ":1111"


def test_backend_sections_and_secret_files_reach_the_provider(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("provider: sim\nsim:\n  provisioning_delay: 5\n  groups: [{id: x, max_size: 2}]\n")
    secrets = tmp_path / "s"
    secrets.mkdir()
    (secrets / "SOME_CLOUD_TOKEN").write_text("s3cr3t\n")
    settings = load_settings(cfg, {"secrets_dir": secrets})
    ctx = settings.provider_context(env={})
    assert ctx.options == {"provisioning_delay": 5, "groups": [{"id": "x", "max_size": 2}]}
    assert ctx.env["SOME_CLOUD_TOKEN"] == "s3cr3t"
    assert "s3cr3t" not in repr(settings)


def test_config_error_names_key() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(None, {"grpc_workers": 0})
    assert info.value.key == "grpc_workers"


def test_example_config_is_valid() -> None:
    out = run("check-config", "--config", "examples/sim.yaml", cwd=Path(__file__).resolve().parent.parent)
    assert out.returncode == 0, out.stderr
    assert "3 node group(s) [web 2..20, batch-spot 0..50, gpu 0..4]" in out.stdout


def test_a_port_in_use_is_one_line_of_ours_without_grpc_core_lines() -> None:
    """`serve --front off` on a taken port: our one line with the fix, none of the gRPC core's own
    log lines (which point at GRPC_VERBOSITY rather than at the port)."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if k not in ("GRPC_VERBOSITY",)}
        out = subprocess.run(
            [sys.executable, "-m", "cloudprovider_grpc", "serve", "--provider", "sim", "--front", "off",
             "--address", f"127.0.0.1:{port}", "--metrics-address", "127.0.0.1:0"],
            capture_output=True, text=True, timeout=60, env=env, check=False,
        )  # fmt: skip
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert lines == [
        f"cloudprovider-grpc: cannot listen on 127.0.0.1:{port}: the port is in use or the host is not "
        "an address of this machine (choose another with --address)"
    ], out.stderr
