"""The compiled front for the test suite: built once per source version into the user cache, so every
server the suite starts with the default `--front auto` (in-process `start_server` and `serve`
subprocesses alike: conformance, real CA, probes) runs through it."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

from cloudprovider_grpc.front import binary
from tests.preparation.gate import may_build, outcome
from tests.support import gotools


def ensure_front() -> Path | None:
    """The front's binary (built by the preparation phase); None when Go is missing outside CI
    (the suite then exercises the Python-only path). Under CI=true a missing front is a failure."""
    if binary.cached_binary().is_file():
        return binary.cached_binary()
    prepared = outcome("front")
    if prepared is not None and prepared.startswith("unavailable:") and not gotools.in_ci():
        return None  # no Go here: the Python-only path, as without a front
    may_build("front")
    try:
        return binary.build()
    except (RuntimeError, OSError) as exc:
        if gotools.in_ci():
            raise RuntimeError(f"CI must run the suite through the compiled front: {exc}") from exc
        return None


def serve(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """`cloudprovider-grpc serve` as a process in its own process group (as started from a terminal),
    text logs piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "cloudprovider_grpc", "serve", "--log-format", "text", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )


def children(pid: int) -> list[int]:
    """The child processes of `pid` (the server's fronts), from /proc."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
            found += [int(p) for p in (task / "children").read_text().split()]
    return found


def gone(pid: int) -> bool:
    """True once `pid` has exited (a zombie counts: it was killed, its parent has not reaped it yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"
