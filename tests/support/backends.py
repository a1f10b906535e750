"""Every backend, as the suites that hold all backends to the same standard see it.

The probe suite (fuzzing, races, faults, kills, secret scans), conformance and the real-CA end-to-end
tests are parametrised over `BACKENDS`: a new backend joins them by adding one entry here. Each entry
starts the backend with `cloudprovider-grpc serve <serve_args>` against its bundled emulator with no
other configuration (issue "Hostile input": `--emulate` must work alone).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@dataclass(frozen=True)
class BackendUnderTest:
    """One backend for the cross-backend suites.

    `serve_args` follow `cloudprovider-grpc serve` and select the backend with its emulator.
    `secret_env` names the environment variables that carry the backend's secrets; a suite may set
    them to marker values (the emulator is then seeded to accept them) and scan all output for the
    markers. `shape` is "machines" or "pools" (which machinery serves it)."""

    name: str
    serve_args: tuple[str, ...]
    secret_env: tuple[str, ...] = ()
    shape: str = "machines"
    extra_env: Mapping[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.name


BACKENDS: tuple[BackendUnderTest, ...] = (
    BackendUnderTest("sim", ("--provider", "sim")),
    BackendUnderTest("sim-pools", ("--config", str(EXAMPLES / "sim-pools.yaml")), shape="pools"),
    BackendUnderTest(
        "cherry",
        ("--provider", "cherry", "--emulate"),
        secret_env=("CHERRY_AUTH_TOKEN", "BOOTSTRAP_TOKEN_SECRET"),
    ),
    BackendUnderTest(
        "vultr", ("--provider", "vultr", "--emulate"), secret_env=("VULTR_API_KEY",), shape="pools"
    ),
    BackendUnderTest(
        "exoscale",
        ("--provider", "exoscale", "--emulate"),
        secret_env=("EXOSCALE_API_KEY", "EXOSCALE_API_SECRET"),
        shape="pools",
    ),
    BackendUnderTest(
        "alicloud",
        ("--provider", "alicloud", "--emulate"),
        secret_env=("ACCESS_KEY_SECRET",),
        shape="pools",
        extra_env={"ACCESS_KEY_ID": "LTAI5tProbeAccessKey0001", "REGION_ID": "cn-hangzhou"},
    ),
    BackendUnderTest("spc", ("--provider", "spc", "--emulate"), secret_env=("CLUSTER_API_TOKEN",)),
)


def backend(name: str) -> BackendUnderTest:
    return next(b for b in BACKENDS if b.name == name)
