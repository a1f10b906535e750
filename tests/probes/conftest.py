"""The probe suite: every backend in tests/support/backends.py, held to the same figures (issue 14).

Each probe runs real `cloudprovider-grpc serve` processes on loopback; a backend joins by being
registered in BACKENDS. `benchmarks/robustness.py` runs the same probes at full size and prints figures.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.backends import BACKENDS, BackendUnderTest
from tests.support.clouds import ExternalCloud


@pytest.fixture(params=BACKENDS, ids=[b.id for b in BACKENDS])
def backend(request: pytest.FixtureRequest) -> BackendUnderTest:
    return request.param


@pytest.fixture
def cloud_factory(backend: BackendUnderTest, tmp_path: Path) -> Iterator:
    """Starts the backend's external cloud (skips backends whose cloud lives in the server)."""
    started: list[ExternalCloud] = []

    def make(state_file: Path | None = None) -> ExternalCloud:
        if backend.cloud is None:
            pytest.skip(f"{backend.name}: its cloud lives inside the server process (nothing to reach into)")
        cloud = backend.cloud(tmp_path, state_file)
        started.append(cloud)
        return cloud

    yield make
    for cloud in started:
        cloud.stop()
