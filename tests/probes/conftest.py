"""The probe suite: every backend in tests/support/backends.py, held to the same figures.

Each probe runs real `cloudprovider-grpc serve` processes on loopback; a backend joins by being
registered in BACKENDS. `benchmarks/robustness.py` runs the same probes at full size and prints figures.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.backends import BACKENDS, BackendUnderTest
from tests.support.clouds import ExternalCloud

#: Why each probe that needs a cloud of its own cannot apply to a backend whose cloud lives inside the
#: server process (`sim`, `sim-pools`). The sim's own failure options (`fail.stockout_after`,
#: `fail.error_rate`) make creations fail, which the conformance run holds the sim to (its faulty
#: server); none of them makes a request fail, stall or lose its answer.
IN_PROCESS_REASONS = {
    "test_faults": "the sim cloud is called in-process: no request can fail, time out or lose its answer",
    "test_kill": "the sim cloud dies with the killed server: nothing is left to count or to resume against",
    "test_shutdown": "the sim cloud does no I/O: no handler can be blocked on it",
    "test_broken_pool": (
        "the sim cloud lists every group in one in-process call that cannot fail, and its config cannot "
        "change while serving: no group can be broken beside healthy ones"
    ),
    "test_secret_scan": "the sim cloud takes no token that could be refused",
}


@pytest.fixture(params=BACKENDS, ids=[b.id for b in BACKENDS])
def backend(request: pytest.FixtureRequest) -> BackendUnderTest:
    return request.param


@pytest.fixture
def cloud_factory(backend: BackendUnderTest, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator:
    """Starts the backend's external cloud; a backend whose cloud lives in the server is skipped with
    the precise reason the probe cannot apply to it (IN_PROCESS_REASONS)."""
    started: list[ExternalCloud] = []

    def make(state_file: Path | None = None) -> ExternalCloud:
        if backend.cloud is None:
            module = request.module.__name__.rpartition(".")[2]
            pytest.skip(f"{backend.name}: {IN_PROCESS_REASONS[module]}")
        cloud = backend.cloud(tmp_path, state_file)
        started.append(cloud)
        return cloud

    yield make
    for cloud in started:
        cloud.stop()
