"""The compiled front for the test suite: built once per source version into the user cache, so every
server the suite starts with the default `--front auto` (in-process `start_server` and `serve`
subprocesses alike: conformance, real CA, probes) runs through it."""

from __future__ import annotations

from pathlib import Path

from cloudprovider_grpc.front import binary
from tests.support import gotools


def ensure_front() -> Path | None:
    """The front's binary, built if needed; None when Go is missing or the build fails outside CI
    (the suite then exercises the Python-only path). Under CI=true a missing front is a failure."""
    try:
        return binary.build()
    except (RuntimeError, OSError) as exc:
        if gotools.in_ci():
            raise RuntimeError(f"CI must run the suite through the compiled front: {exc}") from exc
        return None
