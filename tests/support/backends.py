"""Every backend, as the suites that hold all backends to the same standard see it.

The probe suite (fuzzing, races, faults, kills, secret scans), conformance and the real-CA end-to-end
tests are parametrised over `BACKENDS`: a new backend joins them by adding one entry here. Each entry
starts the backend with `cloudprovider-grpc serve <serve_args>` against its bundled emulator with no
other configuration (issue "Hostile input": `--emulate` must work alone).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.clouds import CherryCloud, ExternalCloud


@dataclass(frozen=True)
class BackendUnderTest:
    """One backend for the cross-backend suites.

    `serve_args` follow `cloudprovider-grpc serve` and select the backend with its emulator.
    `secret_env` names the environment variables that carry the backend's secrets; a suite may set
    them to marker values (the emulator is then seeded to accept them) and scan all output for the
    markers. `shape` is "machines" or "pools" (which machinery serves it). `cloud(tmp_dir, state_file)`
    starts the backend's emulated cloud in the test process (tests/support/clouds.py) for the probes
    that inject faults, break one pool, kill the server or count what the cloud holds; None when the
    backend's cloud lives inside the server process (those probes skip it, saying why)."""

    name: str
    serve_args: tuple[str, ...]
    secret_env: tuple[str, ...] = ()
    shape: str = "machines"
    extra_env: Mapping[str, str] = field(default_factory=dict)
    cloud: Callable[[Path, Path | None], ExternalCloud] | None = None

    @property
    def id(self) -> str:
        return self.name


BACKENDS: tuple[BackendUnderTest, ...] = (
    BackendUnderTest("sim", ("--provider", "sim")),
    BackendUnderTest(
        "cherry",
        ("--provider", "cherry", "--emulate"),
        secret_env=("CHERRY_AUTH_TOKEN", "BOOTSTRAP_TOKEN_SECRET"),
        cloud=lambda tmp, state: CherryCloud(tmp, state_file=state),
    ),
)


def backend(name: str) -> BackendUnderTest:
    return next(b for b in BACKENDS if b.name == name)
