"""Shared fixtures. Tests start real servers on loopback ports (port 0) and talk over real sockets."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.certs import Pki, write_pki  # noqa: E402
from tests.support.front import ensure_front  # noqa: E402
from tests.support.servers import ManualClock  # noqa: E402

SHARED = ROOT.parent / "shared"


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return write_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.fail(f"{SHARED} (the project's shared/ folder) is missing")
    return SHARED


@pytest.fixture(scope="session", autouse=True)
def compiled_front() -> Path | None:
    """Built before any server starts, so `--front auto` (the default) finds it everywhere."""
    return ensure_front()
