"""The Go toolchain as this project uses it, in one place: where `go` is, the caches every Go build
shares, and a cross-process lock for builders.

Used by `cloudprovider-grpc build-front` (the compiled front, `front/binary.py`) and by the test
suite's Go builds (`tests/support/gotools.py`), so both fill and reuse the same module and build
caches under `$XDG_CACHE_HOME/cloudprovider-grpc/go` (default `~/.cache/...`), outside any clone:
every build after the first on a machine is warm.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path

#: Go's official tarball installs here; not every login shell puts it on PATH
_GO_FALLBACK = Path("/usr/local/go/bin/go")


def user_cache() -> Path:
    """The project's directory in the user cache."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cloudprovider-grpc"


def go_cache() -> Path:
    """Go's module and build caches (`mod/`, `build/`, `path/`) shared by every Go build."""
    return user_cache() / "go"


def go_binary() -> str | None:
    found = shutil.which("go")
    if found:
        return found
    return str(_GO_FALLBACK) if _GO_FALLBACK.exists() else None


def go_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for `go` commands: the shared caches, `go` on PATH, and no toolchain
    downloads (GOTOOLCHAIN=local: the installed Go builds, or the build fails with its message)."""
    root = go_cache()
    env = dict(os.environ)
    go = go_binary()
    if go is not None:
        env["PATH"] = f"{Path(go).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(
        GOMODCACHE=str(root / "mod"),
        GOCACHE=str(root / "build"),
        GOPATH=str(root / "path"),
        GOFLAGS="-modcacherw",
        GOTOOLCHAIN="local",
    )
    if extra:
        env.update(extra)
    return env


@contextlib.contextmanager
def file_lock(directory: Path, name: str) -> Iterator[None]:
    """One holder at a time across processes (two test sessions, or a session and `build-front`,
    warming the same cache)."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / f"{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
