"""The project's image, built from the repository's Dockerfile with podman, on base images made
from Debian's packages (no container registry is needed, none is reachable where the suite runs).

The Dockerfile's defaults (`python:…-slim-bookworm`, `golang:…-bookworm`) stay what a real build
uses; here its PYTHON_IMAGE and GO_IMAGE build arguments name two local images instead:
- the Python base: `mmdebstrap --variant=minbase` of bookworm with python3, its venv module and
  python-is-python3 (the official image's `python` command), imported with `podman import`;
- the Go base: that image plus the Go toolchain the Dockerfile's GO_IMAGE names, taken from the Go
  module proxy (`golang.org/toolchain`, the module `go` itself switches toolchains with).

Everything is cached outside the clone (tests/realnode/host.py): the root filesystem tarball, and
podman's own storage, whose layer cache makes a warm build of an unchanged tree take seconds.
podman runs with runc and a containers.conf that asks for no rlimits and no pids limit, which a
root without CAP_SYS_RESOURCE (some CI sandboxes) cannot set.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cloudprovider_grpc.front.gotoolchain import file_lock, user_cache
from tests.preparation.gate import active, may_build
from tests.realnode.host import cache
from tests.support import gotools

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
SUITE = "bookworm"
PYTHON_PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates")
#: documentation, manuals and translations stay out of the base (as the slim images leave them out)
DPKG_EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/locale/*", "/usr/share/info/*")
CONTAINERS_CONF = """\
[containers]
default_ulimits = []
pids_limit = 0
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""
RUN_ROOT = "/run/cloudprovider-grpc-podman"
#: what the tests tag the image as (a release tag is a different string; the chart's values name it)
REPOSITORY = "localhost/cloudprovider-grpc"
#: the tag the preparation phase builds for the tier's tests
SUITE_TAG = "realnode"


@dataclass(frozen=True)
class Podman:
    """podman with the tier's own storage, configuration and runtime."""

    home: Path

    @classmethod
    def create(cls) -> Podman:
        home = cache() / "podman"
        home.mkdir(parents=True, exist_ok=True)
        conf = home / "containers.conf"
        if not conf.exists() or conf.read_text() != CONTAINERS_CONF:
            conf.write_text(CONTAINERS_CONF)
        podman = cls(home)
        podman.share_build_caches()
        return podman

    def share_build_caches(self) -> None:
        """The Dockerfile's cache mounts are the host's own Go caches (and pip's): the builder keeps
        a cache mount in `$TMPDIR/buildah-cache/<id>`, made here a link to the host's directory. So
        the image's front build finds every module and compiled package the host's build of the
        same sources left (the same Go release), and a cold machine compiles the front once, not
        twice."""
        parent = self.tmp() / "buildah-cache"
        parent.mkdir(parents=True, exist_ok=True)
        text = DOCKERFILE.read_text()
        for name, target in build_caches().items():
            if f"id={name}," not in text:
                raise RuntimeError(f"the Dockerfile has no cache mount {name} any more")
            link = parent / name
            target.mkdir(parents=True, exist_ok=True)
            if link.is_symlink() and link.resolve() == target.resolve():
                continue
            if link.is_dir() and not link.is_symlink():
                shutil.rmtree(link)
            link.unlink(missing_ok=True)
            link.symlink_to(target, target_is_directory=True)

    def tmp(self) -> Path:
        return self.home / "tmp"

    def command(self, *args: str) -> list[str]:
        return [
            "podman",
            f"--root={self.home / 'storage'}",
            # podman refuses a run root longer than 50 characters: a short one under /run (root's)
            f"--runroot={RUN_ROOT}",
            "--runtime=runc",
            "--cgroup-manager=cgroupfs",
            *args,
        ]

    def env(self) -> dict[str, str]:
        # TMPDIR: where the builder keeps the Dockerfile's cache mounts (share_build_caches)
        return {
            **os.environ,
            "CONTAINERS_CONF": str(self.home / "containers.conf"),
            "TMPDIR": str(self.tmp()),
        }

    def run(
        self, *args: str, timeout: float = 120, check: bool = True, input: bytes | None = None
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            self.command(*args),
            env=self.env(),
            input=input.decode() if input is not None else None,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"podman {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
        return proc

    def exists(self, image: str) -> bool:
        return self.run("image", "exists", image, check=False).returncode == 0


def build_caches() -> dict[str, Path]:
    """The Dockerfile's cache mount ids, and the host's directory each one is."""
    pip = os.environ.get("PIP_CACHE_DIR") or str(user_cache().parent / "pip")
    return {
        "cloudprovider-grpc-gomod": gotools.cache_root() / "mod",
        "cloudprovider-grpc-gobuild": gotools.cache_root() / "build",
        "cloudprovider-grpc-pip": Path(pip),
    }


#: the host's CA bundle (Debian's path, which Debian's pip and Go both read)
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


def host_trust() -> list[str]:
    """The host's CA bundle mounted read-only over the base's during the build's RUN steps (never
    part of a layer): a network that reaches the registries through a TLS-inspecting proxy is
    trusted inside the build exactly as on the host."""
    return [f"--volume={CA_BUNDLE}:{CA_BUNDLE}:ro"] if CA_BUNDLE.is_file() else []


def _key(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


def python_base_name() -> str:
    return f"localhost/cpg-python-base:{SUITE}-{_key(SUITE, *PYTHON_PACKAGES, *DPKG_EXCLUDES)}"


def go_base_name(python: str | None = None) -> str:
    """The Go base made on `python` (the Python base by default)."""
    return f"localhost/cpg-go-base:{go_version()}-{_key(python or python_base_name())}"


def python_base(podman: Podman) -> str:
    """The Python base image (see the module doc), made once per package list."""
    image = python_base_name()
    key = image.rsplit("-", 1)[1]
    if podman.exists(image):
        return image
    may_build("python-base")
    with file_lock(cache() / "locks", "python-base"):
        if podman.exists(image):
            return image
        tarball = cache() / "rootfs" / f"python-{SUITE}-{key}.tar"
        if not tarball.exists():
            tarball.parent.mkdir(parents=True, exist_ok=True)
            partial = tarball.with_name(f".{tarball.name}.partial")
            cmd = ["mmdebstrap", "--quiet", "--variant=minbase", "--format=tar"]
            cmd += [f"--include={','.join(PYTHON_PACKAGES)}"]
            cmd += [f"--dpkgopt=path-exclude={pattern}" for pattern in DPKG_EXCLUDES]
            cmd += [SUITE, str(partial)]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
            if proc.returncode != 0:
                partial.unlink(missing_ok=True)
                raise RuntimeError(f"mmdebstrap exited {proc.returncode}:\n{proc.stderr[-3000:]}")
            partial.rename(tarball)
        podman.run("import", "--change", 'CMD ["/bin/bash"]', str(tarball), image, timeout=600)
    return image


def go_version() -> str:
    """The Go release of the Dockerfile's GO_IMAGE default (`golang:1.26.8-bookworm` -> 1.26.8)."""
    found = re.search(r"^ARG GO_IMAGE=golang:([0-9.]+)-", DOCKERFILE.read_text(), re.MULTILINE)
    if found is None:
        raise RuntimeError("the Dockerfile's GO_IMAGE default names no golang:<release> image")
    return found.group(1)


def go_base(podman: Podman, python: str) -> str:
    """The Go base image: the Python base plus the toolchain from the module proxy."""
    version = go_version()
    image = go_base_name(python)
    if podman.exists(image):
        return image
    may_build("go-base")
    with file_lock(cache() / "locks", "go-base"):
        if podman.exists(image):
            return image
        toolchain = gotools.go_module_dir(
            "golang.org/toolchain", f"v0.0.1-go{version}.linux-amd64", step="go-base"
        )
        context = cache() / "go-base-context"
        shutil.rmtree(context, ignore_errors=True)
        context.mkdir(parents=True)
        try:
            shutil.copytree(toolchain, context / "go")
            # Module zips keep no file modes: the toolchain's executables are made so here.
            (context / "Containerfile").write_text(
                f"FROM {python}\n"
                "COPY go /usr/local/go\n"
                "RUN chmod a+x /usr/local/go/bin/* /usr/local/go/pkg/tool/*/*\n"
                "ENV PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "
                "GOTOOLCHAIN=local\n"
            )
            podman.run("build", "--network=host", *host_trust(), "-t", image, str(context), timeout=900)
        finally:
            shutil.rmtree(context, ignore_errors=True)
    return image


@dataclass(frozen=True)
class Built:
    """The image as built, with the podman that holds it."""

    podman: Podman
    image: str


def build(podman: Podman, tag: str, build_args: Sequence[str] = ()) -> str:
    """The repository's Dockerfile built as `REPOSITORY:tag` on the local bases (the layer cache
    makes an unchanged tree's build a matter of seconds). The build reaches PyPI and the Go module
    proxy through the host's network, as a build on a workstation does."""
    may_build("image")
    python = python_base(podman)
    go = go_base(podman, python)
    image = f"{REPOSITORY}:{tag}"
    with file_lock(cache() / "locks", "image-build"):
        podman.run(
            "build",
            "--network=host",
            *host_trust(),
            "--build-arg",
            f"PYTHON_IMAGE={python}",
            "--build-arg",
            f"GO_IMAGE={go}",
            *[a for arg in build_args for a in ("--build-arg", arg)],
            "-f",
            str(DOCKERFILE),
            "-t",
            image,
            str(ROOT),
            timeout=1800,
        )
    return image


def prepared(podman: Podman, tag: str) -> str:
    """`REPOSITORY:tag` as the preparation phase built it from this tree before the first test; built
    here only outside a prepared run (gate.py)."""
    image = f"{REPOSITORY}:{tag}"
    if active() and podman.exists(image):
        return image
    may_build("image")
    return build(podman, tag)


def size_and_layers(podman: Podman, image: str) -> tuple[int, list[tuple[int, str]]]:
    """The image's size in bytes and its layers (size, the instruction that made it), newest first."""
    size = int(podman.run("image", "inspect", "--format={{.Size}}", image).stdout.strip())
    history = json.loads(podman.run("history", "--no-trunc", "--format=json", image).stdout)
    return size, [(int(entry.get("size", 0)), str(entry.get("CreatedBy", ""))) for entry in history]
