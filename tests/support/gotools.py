"""Go-built tools for the tests (grpcurl, helm, kustomize, the conformance client),
built once and cached OUTSIDE the clone, so every run after the first on a machine is warm.

One location for every Go build of the project: `$XDG_CACHE_HOME/cloudprovider-grpc/go` (default
`~/.cache/cloudprovider-grpc/go`), with `mod/` (GOMODCACHE), `build/` (GOCACHE) and `bin/` (built
binaries, one directory per tool and version so a version bump never reuses a stale binary).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from cloudprovider_grpc.front.gotoolchain import file_lock, go_binary, go_cache
from cloudprovider_grpc.front.gotoolchain import go_env as _go_env
from tests.preparation.gate import may_build


def cache_root() -> Path:
    return go_cache()


#: The Go compiler's collector at a quarter of its default frequency: the suite's builds (thousands
#: of Kubernetes packages on 2 cores, 24 GiB) spent about 5 % less CPU compiling k8s.io/apiserver's
#: server package this way (181 s against 190 s of user and system time, fresh build caches).
BUILD_GOGC = "400"
#: No symbol table or DWARF in the executable: a shorter link. (The compiler's flags stay Go's
#: defaults unless a build names its own, so `go vet` of the same sources reuses the packages the
#: build compiled: tests/test_conformance.py vets the client's tree.)
LDFLAGS = "-s -w"


def go_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for `go` commands: shared caches, no toolchain downloads, and the
    compiler's collector set for build speed (BUILD_GOGC)."""
    return _go_env({"GOGC": BUILD_GOGC, **(extra or {})})


def installed(version: str, binary: str) -> Path:
    """Where `go_install` puts `binary` at `version` (whether or not it is there yet)."""
    return cache_root() / "bin" / f"{binary}-{version}" / binary


def go_install(
    package: str, version: str, binary: str, *, timeout: float = 1800, step: str | None = None
) -> Path:
    """`go install package@version` into `bin/<binary>-<version>/`; a no-op when already built.
    In a test, a binary that is not built yet fails the test (gate.py): `step` (default `binary`)
    names the preparation step that builds it.

    Several test sessions may ask at once (developers and CI share the cache): one builds under a lock,
    into a scratch directory renamed into place, so nobody ever runs a half-written binary.
    Raises RuntimeError (with Go's output) when Go is missing or the build fails."""
    exe = installed(version, binary)
    dest = exe.parent
    if exe.exists():
        return exe
    may_build(step or binary)
    if go_binary() is None:
        raise RuntimeError("Go is not installed (needed to build " + binary + ")")
    with build_lock(f"{binary}-{version}"):
        if exe.exists():
            return exe
        partial = cache_root() / "bin" / f".{binary}-{version}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        try:
            proc = subprocess.run(
                ["go", "install", f"{package}@{version}"],
                env=go_env({"GOBIN": str(partial)}),
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
            if proc.returncode != 0 or not (partial / binary).exists():
                raise RuntimeError(f"go install {package}@{version} failed:\n{proc.stdout}\n{proc.stderr}")
            shutil.rmtree(dest, ignore_errors=True)  # an empty or stale directory from an older layout
            partial.rename(dest)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return exe


def go_module_dir(module: str, version: str, *, step: str, timeout: float = 600) -> Path:
    """`go mod download module@version` into the shared module cache; the unpacked module's directory.

    For test data that a project publishes inside its Go module (cert-manager's CRDs in
    `deploy/crds/`, prometheus-operator's in `example/prometheus-operator-crd/`): the module proxy is
    an ordinary package registry, and the cache makes every run after the first offline.
    Raises RuntimeError (with Go's output) when Go is missing or the download fails. In a test, a
    module not downloaded yet fails the test, naming preparation `step` (gate.py)."""
    unpacked = module_unpacked(module, version)
    if unpacked.is_dir():  # go unpacks a module elsewhere and renames it into place when complete
        return unpacked
    may_build(step)
    if go_binary() is None:
        raise RuntimeError(f"Go is not installed (needed to download {module}@{version})")
    proc = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        env=go_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        # Outside any go.mod, so no project module influences the download.
        cwd=_neutral_dir(),
    )
    info: dict[str, str] = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    if proc.returncode != 0 or "Dir" not in info or info.get("Error"):
        raise RuntimeError(
            f"go mod download {module}@{version} failed:\n{info.get('Error', '')}{proc.stderr}"
        )
    return Path(info["Dir"])


def module_unpacked(module: str, version: str) -> Path:
    """Where the module cache holds `module@version` unpacked (whether or not it is there yet)."""
    return cache_root() / "mod" / f"{_escape(module)}@{version}"


def _escape(module: str) -> str:
    """A module path as the module cache spells it on disk (an upper-case letter as `!` and lower)."""
    return "".join(f"!{c.lower()}" if c.isupper() else c for c in module)


def _neutral_dir() -> Path:
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    return root


def in_ci() -> bool:
    """CI=true: a missing tool is a failure there, never a skip."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


#: The GitHub Actions workflow linter (it also runs shellcheck on `run:` steps when one is on PATH).
ACTIONLINT = ("github.com/rhysd/actionlint/cmd/actionlint", "v1.7.12", "actionlint")
# ---------------------------------------------------------------- builds from a source tree


def tree_key(*roots: Path, extra: str = "") -> str:
    """A short content hash of every file under `roots` (names and bytes) plus `extra`.

    Binaries built from a source tree are cached under this key, so an edit to the source (or a
    different source tree) builds afresh and an unchanged tree never rebuilds."""
    digest = hashlib.sha256(extra.encode())
    for root in roots:
        files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
        for path in files:
            digest.update(str(path.relative_to(root if root.is_dir() else root.parent)).encode())
            digest.update(b"\0")
            digest.update(path.read_bytes())
            digest.update(b"\0")
    return digest.hexdigest()[:16]


def build_lock(name: str) -> contextlib.AbstractContextManager[None]:
    """One builder per binary at a time, across processes (two suites warming the same cache)."""
    return file_lock(cache_root() / "locks", name)


def built_dir(name: str, key: str) -> Path:
    """Where `go_build` puts the build of `name` at `key` (whether or not it is there yet)."""
    return cache_root() / "bin" / f"{name}-{key}"


def go_build(
    name: str,
    key: str,
    prepare: Callable[[Path], Path],
    packages: Sequence[str],
    *,
    tags: Sequence[str] = (),
    ldflags: str = LDFLAGS,
    gcflags: str = "",
    env: Mapping[str, str] | None = None,
    timeout: float = 3600,
    step: str | None = None,
) -> Path:
    """Build `packages` into `bin/<name>-<key>/` (one executable per package, named after its last
    path element) and return that directory; a no-op when it is already there.

    `prepare(workdir)` lays out the module to build inside `workdir` (a scratch copy under the cache,
    so `-mod=mod` may complete go.mod/go.sum without touching the clone or shared sources) and
    returns the directory to run `go build` in. `env` adds to the shared Go environment (such as
    CGO_ENABLED=0). The result is moved into place only when every package built, so an interrupted
    build is never mistaken for a cached one. In a test, a build not made yet fails the test,
    naming preparation `step` (default `name`; gate.py)."""
    dest = built_dir(name, key)
    if dest.is_dir():
        return dest
    may_build(step or name)
    if go_binary() is None:
        raise RuntimeError(f"Go is not installed (needed to build {name})")
    with build_lock(f"{name}-{key}"):
        if dest.is_dir():
            return dest
        scratch = cache_root() / "src" / f"{name}-{key}"
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        out = cache_root() / "bin" / f".{name}-{key}.partial"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        try:
            cwd = prepare(scratch)
            cmd = ["go", "build", "-mod=mod", "-o", str(out) + os.sep]
            if tags:
                cmd += ["-tags", ",".join(tags)]
            if ldflags:
                cmd += ["-ldflags", ldflags]
            if gcflags:
                cmd += ["-gcflags", gcflags]
            proc = subprocess.run(
                [*cmd, *packages],
                cwd=cwd,
                env=go_env(dict(env) if env else None),
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
            if proc.returncode != 0:
                raise RuntimeError(
                    f"go build {name} ({' '.join(packages)}) failed:\n{proc.stdout}\n{proc.stderr}"
                )
            out.rename(dest)
        finally:
            shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(scratch, ignore_errors=True)
    return dest
