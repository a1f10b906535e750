"""First run: every backend runs with `--emulate` and nothing else, the shipped
examples work as printed, and the small surprises are gone (one listening line, a named empty
metrics address, a YAML error with its line)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.backends import BACKENDS, BackendUnderTest
from tests.support.waits import poll
from tests.test_cli import run

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("backend", BACKENDS, ids=[b.id for b in BACKENDS])
def test_check_config_with_emulate_alone(backend: BackendUnderTest) -> None:
    out = run("check-config", *backend.serve_args)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("configuration OK: provider "), out.stdout


@pytest.mark.parametrize("example", sorted(p.name for p in (ROOT / "examples").glob("*.yaml")))
def test_every_shipped_configuration_checks_against_the_emulator(example: str) -> None:
    """Real-cloud examples need their secrets; against the emulator each must need nothing else."""
    out = run("check-config", "--config", f"examples/{example}", "--emulate", cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "configuration OK" in out.stdout


def test_every_backend_ships_a_configuration_and_a_scenario() -> None:
    from cloudprovider_grpc.providers.registry import BACKENDS as PROVIDERS

    for name in PROVIDERS:
        assert (ROOT / "examples" / f"{name}.yaml").is_file(), name
    providers = {
        yaml.safe_load(p.read_text()).get("provider", "sim")
        for p in (ROOT / "examples" / "scenarios").glob("*.yaml")
    }
    assert set(PROVIDERS) <= providers, f"no scenario for {sorted(set(PROVIDERS) - providers)}"


@pytest.mark.slow
def test_the_cherry_scenario_and_another_backend_on_a_sim_scenario(tmp_path: Path) -> None:
    # a sim scenario (its cloud: section is sim's) run on Cherry: Cherry runs on its own defaults
    burst = yaml.safe_load((ROOT / "examples/scenarios/burst.yaml").read_text())
    short = dict(burst, duration="3m", workloads=[dict(burst["workloads"][0], replicas=4, end="2m")])
    (tmp_path / "short.yaml").write_text(yaml.safe_dump(short))
    for args in (
        ["examples/scenarios/cherry.yaml", "--emulate"],
        [str(tmp_path / "short.yaml"), "--provider", "cherry", "--emulate"],
    ):
        out = run("simulate", *args, "--out", str(tmp_path / "out"), cwd=ROOT)
        assert out.returncode == 0, out.stderr
        assert "node(s) added" in out.stdout and " 0 node(s) added" not in out.stdout
    assert (
        "note: the scenario's cloud: section is for 'sim'; 'cherry' runs with its own defaults" in out.stdout
    )


def test_emulate_prints_one_listening_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLOUDPROVIDER_GRPC_")}
    out_file = tmp_path / "out"
    with out_file.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cloudprovider_grpc", "emulate", "cherry"],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    try:
        poll(lambda: "listening" in out_file.read_text(), 30, "the listening line")
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert out_file.read_text().count("listening") == 1, out_file.read_text()
