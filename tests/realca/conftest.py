"""One control plane per test session for every real-CA test (starting it costs ~15 s; each test
empties the cluster when it ends). The tests are marked `realca`: `pytest -m "not realca"` leaves
them out. Outside CI a missing Go, snapshot or `apt-get` skips them; in CI (CI=true) it fails."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.realca import builds
from tests.realca.cluster import ControlPlane, start_control_plane
from tests.support import gotools


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def unavailable(reason: str) -> None:
    if in_ci():
        pytest.fail(f"real-CA tests cannot run in CI: {reason}")
    pytest.skip(f"real-CA tests skipped: {reason}")


def require_tools() -> None:
    if gotools.go_binary() is None:
        unavailable("no Go toolchain (install Go >= 1.26)")
    if not builds.UPSTREAM.is_dir():
        unavailable(f"CA snapshots not found at {builds.UPSTREAM}")
    if shutil.which("apt-get") is None and not list(
        (gotools.cache_root() / "bin").glob("etcd-*/usr/bin/etcd")
    ):
        unavailable("no apt-get to fetch Debian's etcd-server package")


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    require_tools()
    plane = start_control_plane(Path(tmp_path_factory.mktemp("control-plane")))
    try:
        yield plane
    finally:
        plane.stop()
