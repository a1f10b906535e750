"""The code style promise, checked in CI: ruff's lint rules and formatting (config in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
RUFF = Path(sys.executable).parent / "ruff"


def test_ruff_check_is_clean() -> None:
    out = subprocess.run([str(RUFF), "check", "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:]


def test_ruff_format_is_clean() -> None:
    out = subprocess.run(
        [str(RUFF), "format", "--check", "."], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout[-3000:]


#: what mypy checks in CI (config in pyproject.toml, pydantic plugin on): the whole package (the
#: shared machinery and every backend, the gRPC service and server, the HTTP layer, the simulator)
MYPY_PATHS = ("cloudprovider_grpc",)


def test_mypy_is_clean() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "mypy", *MYPY_PATHS], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stdout[-3000:]
