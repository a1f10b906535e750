"""`check-config` asks the cloud: against each cloud's API emulator on loopback (which refuses
wrong credentials with the cloud's own status and body), good credentials list the groups `serve`
would offer and exit 0; bogus ones exit 1 naming the cloud's answer; `--offline` does not ask. A
group with no template and no machine to copy is a failure (and `serve` names it after Refresh,
once a minute); with the price expander among CA's flags, groups without a price are named."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from cloudprovider_grpc.commands import checkconfig
from cloudprovider_grpc.providers.contract import InstanceState
from cloudprovider_grpc.providers.driver import CloudError, GroupConfig, Machine, MachineDriver
from cloudprovider_grpc.providers.machinery.machines.provider import MachineProvider
from tests.support.clouds import (
    AliCloudCloud,
    CherryCloud,
    ExoscaleCloud,
    ExternalCloud,
    SpcCloud,
    VultrCloud,
)

pytestmark = pytest.mark.integration

#: cloud -> (its adapter, the variable to spoil, what the cloud answers a wrong credential)
CLOUDS: dict[str, tuple[Callable[[Path], ExternalCloud], str, tuple[str, ...]]] = {
    "cherry": (lambda tmp: CherryCloud(tmp), "CHERRY_AUTH_TOKEN", ("401", "missing or invalid API token")),
    "vultr": (VultrCloud, "VULTR_API_KEY", ("401", "Invalid API token.")),
    "exoscale": (ExoscaleCloud, "EXOSCALE_API_SECRET", ("403",)),
    "alicloud": (AliCloudCloud, "ACCESS_KEY_ID", ("InvalidAccessKeyId.NotFound",)),
    "spc": (SpcCloud, "CLUSTER_API_TOKEN", ("401", "Invalid token.")),
}


def check(cloud: ExternalCloud, env: Mapping[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("CLOUDPROVIDER_GRPC_")}
    return subprocess.run(
        [sys.executable, "-m", "cloudprovider_grpc", "check-config", *cloud.serve_args, *extra],
        capture_output=True,
        text=True,
        timeout=120,
        env={**base, **env},
        check=False,
    )


@pytest.fixture(params=sorted(CLOUDS))
def cloud(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    made = CLOUDS[request.param][0](tmp_path)
    yield request.param, made
    made.stop()


def test_good_credentials_list_the_groups_serve_offers(cloud: tuple[str, ExternalCloud]) -> None:
    name, c = cloud
    out = check(c, c.env)
    assert out.returncode == 0, out.stderr
    (line,) = [ln for ln in out.stdout.splitlines() if ln.startswith("configuration OK")]
    assert f"provider {name}, {len(c.groups)} node group(s) " in line
    for gid, (lo, hi) in c.groups.items():
        assert f"{gid} {lo}..{hi}" in line, (gid, line)
    assert "cloud API listed with these credentials" in line


def test_bogus_credentials_fail_naming_the_clouds_answer(cloud: tuple[str, ExternalCloud]) -> None:
    name, c = cloud
    _, variable, answer = CLOUDS[name]
    out = check(c, {**c.env, variable: "bogus-credential-0000000000"})
    assert out.returncode == 1, out.stdout + out.stderr
    assert "configuration OK" not in out.stdout
    for words in answer:
        assert words in out.stderr, (words, out.stderr)
    assert "bogus-credential" not in out.stderr + out.stdout  # a secret never shows, even a wrong one
    # --offline validates only, and says so
    offline = check(c, {**c.env, variable: "bogus-credential-0000000000"}, "--offline")
    assert offline.returncode == 0, offline.stderr
    assert "cloud API not asked (--offline)" in offline.stdout


def test_a_revoked_credential_fails_the_check() -> None:
    """The emulated cloud stops accepting every credential (all projects denied, keys revoked)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        c = VultrCloud(Path(tmp))
        try:
            assert check(c, c.env).returncode == 0
            c.refuse_all()
            out = check(c, c.env)
            assert out.returncode == 1 and "Invalid API token." in out.stderr, out.stderr
        finally:
            c.stop()


@pytest.mark.parametrize("name", ["alicloud", "exoscale", "spc", "vultr"])
def test_a_nodes_spec_naming_no_group_fails_with_a_suggestion(name: str, tmp_path: Path) -> None:
    """A typo in `--nodes` on a cloud whose groups are discovered: exit 1 with the nearest group
    (a misspelt name) or the list of them (a name near none), each line printed once."""
    c = CLOUDS[name][0](tmp_path)
    try:
        gid = next(iter(c.groups))
        out = check(c, c.env, "--nodes", f"1:3:{gid}x")
        assert out.returncode == 1, out.stdout + out.stderr
        assert "configuration OK" not in out.stdout
        assert f"--nodes 1:3:{gid}x names no node group the {name} API lists" in out.stderr, out.stderr
        assert "did you mean" in out.stderr, out.stderr
        far = check(c, c.env, "--nodes", "1:3:zzzzzz")
        assert far.returncode == 1 and "did you mean one of " in far.stderr, far.stderr
        lines = [ln for ln in (far.stdout + far.stderr).splitlines() if ln.strip()]
        assert len(lines) == len(set(lines)), lines  # no warning printed twice
    finally:
        c.stop()


# ---------------------------------------------------------------------------------------------
# Validation before the API: every problem at once, and the key a typo meant


def invalid(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    from cloudprovider_grpc.cli import main

    capsys.readouterr()
    assert main(["check-config", "--offline", *argv]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    return line


@pytest.mark.parametrize(
    ("cloud", "missing"),
    [
        ("exoscale", ("EXOSCALE_ZONE", "EXOSCALE_API_KEY", "EXOSCALE_API_SECRET")),
        ("spc", ("CLUSTER_API_TOKEN", "SPC_API_BASE_URL", "ORGANIZATION_ID", "CLUSTER_ID")),
    ],
)
def test_every_missing_input_is_reported_at_once(
    cloud: str, missing: tuple[str, ...], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in missing:
        monkeypatch.delenv(name, raising=False)
    line = invalid(capsys, "--provider", cloud)
    assert f"{len(missing)} problems: " in line, line
    for name in missing:
        assert f"{name}: " in line, (name, line)


@pytest.mark.parametrize(
    ("yaml_text", "where", "meant"),
    [
        ("log_levle: debug\n", "log_levle", "log_level"),
        ("tls:\n  cret: /x\n", "tls.cret", "cert"),
        ("leader_elect:\n  lease_duraton: 15s\n", "leader_elect.lease_duraton", "lease_duration"),
        ("sim:\n  groupz: []\n", "sim.groupz", "groups"),
        ("exoscale:\n  sks-clustr: x\n", "exoscale.sks-clustr", "sks-cluster"),
        ("alicloud:\n  remove-polcy: x\n", "alicloud.remove-polcy", "remove-policy"),
        (
            "alicloud:\n  emulator:\n    pending-secnds: 1\n",
            "alicloud.emulator.pending-secnds",
            "pending-seconds",
        ),
    ],
)
def test_an_unknown_key_names_the_nearest_known_one(
    yaml_text: str, where: str, meant: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(yaml_text)
    provider = yaml_text.split(":")[0] if yaml_text.startswith(("sim", "exoscale", "alicloud")) else "sim"
    line = invalid(capsys, "--config", str(config), "--provider", provider, "--emulate")
    assert f"{where}" in line and f"did you mean {meant!r}?" in line, line


@pytest.mark.parametrize("cloud", ["alicloud", "cherry", "exoscale", "spc", "vultr"])
def test_every_unknown_key_of_a_cloud_section_is_named_in_the_one_line(
    cloud: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(f"{cloud}:\n  foo-bar: 1\n  rate-limt: 2\n")
    line = invalid(capsys, "--config", str(config), "--provider", cloud, "--emulate")
    assert f"{cloud}.foo-bar: unknown option" in line, line
    assert "'rate-limt': unknown option; did you mean 'rate-limit'?" in line, line


def test_an_unknown_key_far_from_any_lists_the_known_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("tls:\n  zzzzzz: 1\n")
    line = invalid(capsys, "--config", str(config))
    assert "tls.zzzzzz: unknown key (known: ca, cert, key)" in line, line


class _ShapelessDriver(MachineDriver):
    """A cloud whose catalogue knows no machine shape: group "empty" has no machine to copy, group
    "running" has one."""

    name = "shapeless"
    id_prefix = "shapeless://"

    def groups(self) -> list[GroupConfig]:
        return [GroupConfig("empty", 0, 5), GroupConfig("running", 1, 5)]

    def list_machines(self) -> list[Machine]:
        return [Machine("shapeless://1", "running", InstanceState.RUNNING, "running-1")]

    def create_machine(self, group: str, token: str) -> Machine:
        raise CloudError("read-only test cloud")

    def delete_machine(self, machine: Machine) -> None:
        raise CloudError("read-only test cloud")


def test_a_group_with_no_template_and_no_machine_is_a_failure() -> None:
    provider = MachineProvider(_ShapelessDriver(), inline_workers=True)
    try:
        provider.refresh()
        report = checkconfig.Report(groups=list(provider.node_groups()))
        checkconfig._templates_and_prices(provider, report, price_expander=False)
    finally:
        provider.stop(timeout=0)
    assert len(report.failures) == 1, report.failures
    assert report.failures[0].startswith("node group empty: no template is known and it has no machine")
    assert "min size 1" in report.failures[0]


def test_serve_names_a_group_with_no_template_source_after_refresh_once_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from cloudprovider_grpc.config.settings import Settings
    from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
    from cloudprovider_grpc.server.assembly import start_server
    from tests.support.servers import channel, stub

    caplog.set_level(logging.WARNING, logger="cloudprovider_grpc.grpcapi")
    settings = Settings(address="127.0.0.1:0", metrics_address="")
    handle = start_server(settings, provider=MachineProvider(_ShapelessDriver(), inline_workers=True))
    try:
        s = stub(channel(handle))
        for _ in range(3):
            s.Refresh(pb.RefreshRequest(), timeout=5)
    finally:
        handle.stop(1)
    warned = [r.getMessage() for r in caplog.records if "have no template" in r.getMessage()]
    assert len(warned) == 1, warned  # the first Refresh, then once a minute
    assert "'empty'" in warned[0] and "'running'" not in warned[0] and "min size 1" in warned[0]


def test_groups_without_a_price_are_named_with_the_price_expander(tmp_path: Path) -> None:
    config = tmp_path / "sim.yaml"
    groups = [
        {"id": "priced", "max_size": 3, "price_per_hour": 0.2},
        {"id": "free", "max_size": 3},
    ]
    config.write_text(json.dumps({"sim": {"groups": groups}}))  # JSON is YAML
    base = {k: v for k, v in os.environ.items() if not k.startswith("CLOUDPROVIDER_GRPC_")}

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "cloudprovider_grpc", "check-config", "--provider", "sim"]
        return subprocess.run(
            [*command, "--config", str(config), *extra],
            capture_output=True,
            text=True,
            timeout=120,
            env=base,
            check=False,
        )

    priced = run("--autoscaler-flags=--expander=price")
    assert priced.returncode == 0, priced.stderr
    (warning,) = [ln for ln in priced.stdout.splitlines() if ln.startswith("warning: no price")]
    assert warning.split("node group(s) ")[1].split(":")[0] == "free"
    assert "no scale-up at all" in warning
    for other in (run("--autoscaler-flags=--expander=least-waste"), run()):
        assert other.returncode == 0 and "warning" not in other.stdout, other.stdout


# ---------------------------------------------------------------------------------------------
# group_options: the per-group autoscaling options of every backend


def _group_options_config(tmp_path: Path, section: Mapping[str, object]) -> Path:
    config = tmp_path / "options.yaml"
    config.write_text(json.dumps({"cluster_name": "demo", "group_options": section}))  # JSON is YAML
    return config


def _check_cherry(config: Path) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("CLOUDPROVIDER_GRPC_")}
    command = [sys.executable, "-m", "cloudprovider_grpc", "check-config", "--provider", "cherry"]
    return subprocess.run(
        [*command, "--emulate", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        env=base,
        check=False,
    )


def test_a_valid_group_options_section_is_accepted(tmp_path: Path) -> None:
    """Against the emulated cloud's demo pools, named by id; Go durations and seconds both taken."""
    section = {"pool1": {"max_node_startup_time": "20m", "scale_down_unneeded_time": 300}}
    out = _check_cherry(_group_options_config(tmp_path, section))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "configuration OK" in out.stdout and "pool1 0..10" in out.stdout


def test_a_group_options_entry_naming_no_group_fails_with_a_suggestion(tmp_path: Path) -> None:
    section = {"pool1": {"max_node_startup_time": 600}, "pol2": {"max_node_startup_time": "30m"}}
    out = _check_cherry(_group_options_config(tmp_path, section))
    assert out.returncode == 1, out.stdout + out.stderr
    failures = [ln for ln in out.stderr.splitlines() if ln.startswith("cloudprovider-grpc: check-config:")]
    assert len(failures) == 1, out.stderr  # pool1 exists
    assert "group_options.pol2: names no node group the cherry API lists (by id or name)" in failures[0]
    assert "did you mean 'pool2'?" in failures[0]
    assert "pol2" not in out.stdout and out.stderr.count("pol2") == 1, out.stderr  # told once


def test_every_bad_group_option_is_named_in_the_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    section = {
        "pool1": {"max_node_startup_tme": "20m", "scale_down_utilization_threshold": 2},
        "pool2": {"max_node_provision_time": "soon", "zero_or_max_node_scaling": "yes"},
        "pool3": 5,
    }
    config = _group_options_config(tmp_path, section)
    line = invalid(capsys, "--config", str(config), "--provider", "cherry", "--emulate")
    assert "5 problems" in line, line
    typo = "group_options.pool1.max_node_startup_tme: unknown option; did you mean 'max_node_startup_time'?"
    assert typo in line, line
    assert "group_options.pool1.scale_down_utilization_threshold: must be between 0 and 1, got 2" in line
    assert "group_options.pool2.max_node_provision_time: 'soon' is not a duration" in line
    assert "group_options.pool2.zero_or_max_node_scaling: 'yes' is not true or false" in line
    assert "group_options.pool3: expected a mapping of option names to values" in line
