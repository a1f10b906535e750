"""The front tests need the compiled front: where it is not built (Go missing), they are skipped."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _front_built(compiled_front: Path | None) -> None:
    if compiled_front is None:
        pytest.skip("the compiled front is not built here (Go missing); CI always builds it")
