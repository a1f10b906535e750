"""Where the compiled front (`cpg-front`) comes from: an explicit path, or a build from the Go sources
shipped in this directory into the user's cache, keyed by a hash of those sources.

Why built on the user's machine rather than shipped: the package stays pure Python (README command 1
needs nothing but python3), and the binary is always made from exactly the sources next to this
file. `cloudprovider-grpc build-front` runs the build; `serve --front auto` uses the binary when it
is there and serves from Python alone when it is not.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from cloudprovider_grpc.front.gotoolchain import file_lock, go_binary, user_cache
from cloudprovider_grpc.front.gotoolchain import go_env as _go_env

SOURCE_DIR = Path(__file__).resolve().parent
BINARY_NAME = "cpg-front"


def sources() -> list[Path]:
    """The Go module: every .go file, go.mod and go.sum."""
    return sorted([*SOURCE_DIR.glob("*.go"), SOURCE_DIR / "go.mod", SOURCE_DIR / "go.sum"])


def source_key() -> str:
    """A short hash of the sources' names and bytes: an edited front never reuses an old binary."""
    digest = hashlib.sha256()
    for path in sources():
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def cache_root() -> Path:
    return user_cache()


def cached_binary() -> Path:
    return cache_root() / "front" / source_key() / BINARY_NAME


def locate(override: Path | None) -> tuple[Path | None, str]:
    """(the binary to run or None, why not). An explicit path wins; else the cached build."""
    candidate = override if override is not None else cached_binary()
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return candidate, ""
    if override is not None:
        return None, f"front binary {str(override)!r} is not an executable file"
    return None, "no compiled front built for this version (run `cloudprovider-grpc build-front`)"


def go_env() -> dict[str, str]:
    """The shared Go environment (`gotoolchain.go_env`), with cgo off: a static binary that runs in
    any image."""
    return _go_env({"CGO_ENABLED": "0"})


def build(timeout: float = 900) -> Path:
    """Build the front into the cache (a no-op when this version is there) and return its path.

    The sources are copied to a scratch directory first (the installed package may be read-only) and
    the binary is renamed into place only once complete, under a lock, so concurrent builders never
    run a half-written file. Raises RuntimeError with Go's output when Go is missing or fails."""
    dest = cached_binary()
    if dest.is_file():
        return dest
    go = go_binary()
    if go is None:
        raise RuntimeError("Go is not installed: the compiled front cannot be built (serve uses Python)")
    with file_lock(cache_root() / "front" / "locks", source_key()):
        if dest.is_file():
            return dest
        dest.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="cpg-front-build-") as tmp:
            work = Path(tmp)
            for src in sources():
                shutil.copyfile(src, work / src.name)
            out = work / BINARY_NAME
            proc = subprocess.run(
                [go, "build", "-trimpath", "-o", str(out), "."],
                cwd=work,
                env=go_env(),
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
            if proc.returncode != 0 or not out.is_file():
                raise RuntimeError(f"go build of the front failed:\n{proc.stdout}{proc.stderr}".rstrip())
            partial = dest.with_name(f".{BINARY_NAME}.{os.getpid()}.partial")
            shutil.copyfile(out, partial)
            partial.chmod(0o755)
            partial.rename(dest)
    return dest
