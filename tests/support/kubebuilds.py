"""The suite's Kubernetes programs and packages, as the preparation phase builds or fetches them:
kube-apiserver, helm and kustomize from one Go module (tests/controlplane), the node binaries
(tests/realnode/k8s) at the same release, and Debian packages unpacked into the user cache.

All are cached outside the clone (`tests/support/gotools.py`); a test only looks them up, and one
not built yet fails the test naming its preparation step (tests/preparation/gate.py).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cloudprovider_grpc.front.gotoolchain import file_lock, user_cache
from tests.preparation.gate import may_build
from tests.support import gotools

#: The Go module kube-apiserver, helm and kustomize are built from.
SOURCE = Path(__file__).resolve().parent.parent / "controlplane"
#: cgo off (as for the front: a static binary, and the standard library's build cache is shared).
BUILD_ENV = {"CGO_ENABLED": "0"}
#: No optimization or inlining in any package: measured (benchmarks/controlplane.py and a build of
#: k8s.io/api/... with and without) to cut the compilers' CPU time by about a fifth, for a server
#: that only ever sees test traffic; and no DWARF from the compiler (the linker drops it anyway):
#: about 9 % less compiler CPU (190 s against 209 s of user and system time for k8s.io/apiserver's
#: server package, fresh build caches).
GCFLAGS = "all=-N -l -dwarf=false"
#: A cold build of kube-apiserver on 2 cores (Go modules, ~2,000 packages, the link).
BUILD_TIMEOUT = 3600.0


def module_version(module: str) -> str:
    """The version of `module` tests/controlplane/go.mod requires."""
    for line in (SOURCE / "go.mod").read_text().splitlines():
        parts = line.split()
        if parts[:1] == ["require"]:
            parts = parts[1:]
        if len(parts) >= 2 and parts[0] == module and (len(parts) == 2 or parts[2] == "//"):
            return parts[1]
    raise RuntimeError(f"{SOURCE / 'go.mod'} requires no {module}")


def kubernetes_version() -> str:
    """The k8s.io/kubernetes release tests/controlplane/go.mod builds."""
    return module_version("k8s.io/kubernetes")


def ldflags() -> str:
    """No symbol table or DWARF (a shorter link for a binary this size), and the release stamped in
    where Kubernetes' own build stamps it, so /version and discovery report the real version."""
    version = kubernetes_version()
    major, minor = version.lstrip("v").split(".")[:2]
    stamp = "k8s.io/component-base/version"
    return f"-s -w -X {stamp}.gitVersion={version} -X {stamp}.gitMajor={major} -X {stamp}.gitMinor={minor}"


def _k8s_key(source: Path, package: str = ".") -> str:
    extra = f"{ldflags()} {GCFLAGS} {sorted(BUILD_ENV.items())}"
    return gotools.tree_key(source, extra=extra if package == "." else f"{extra} {package}")


def k8s_built(name: str, source: Path, package: str = ".") -> bool:
    """Whether `_build_k8s(name, source, ..., package)` would find its build cached."""
    return (gotools.built_dir(name, _k8s_key(source, package)) / name).is_file()


def _build_k8s(name: str, source: Path, step: str, package: str = ".") -> Path:
    """`package` (the module's own main package, or one its go.mod names as a `tool`) of the Go
    module in `source` (go.mod, go.sum, main.go) built as `name`, once per version of its files and
    the build flags (cached under a hash of both). Every program built from one module this way
    shares one set of dependency versions and flags, so each reuses the packages the others
    compiled into Go's build cache. Raises RuntimeError when Go or the proxy fails."""

    def prepare(scratch: Path) -> Path:
        for file in ("go.mod", "go.sum", "main.go"):
            shutil.copy2(source / file, scratch / file)
        return scratch

    built = gotools.go_build(
        name,
        _k8s_key(source, package),
        prepare,
        [package],
        ldflags=ldflags(),
        gcflags=GCFLAGS,
        env=BUILD_ENV,
        timeout=BUILD_TIMEOUT,
        step=step,
    )
    return built / name


def build_apiserver() -> Path:
    """kube-apiserver from tests/controlplane."""
    return _build_k8s("kube-apiserver", SOURCE, "control-plane")


@dataclass(frozen=True)
class KubeTool:
    """A Go program the deployment tests run, built from tests/controlplane's module (its go.mod's
    `tool` directives) with kube-apiserver's flags, after it: most of its packages (client-go,
    apimachinery, kubectl's libraries) are then already in Go's build cache (a cold helm took about
    5 minutes as a `go install` of its own, about half a minute this way)."""

    binary: str
    #: the module that pins its version in tests/controlplane/go.mod
    module: str
    package: str

    @property
    def version(self) -> str:
        return module_version(self.module)

    def built(self) -> bool:
        return k8s_built(self.binary, SOURCE, self.package)

    def build(self) -> Path:
        return _build_k8s(self.binary, SOURCE, self.binary, self.package)


HELM = KubeTool("helm", "helm.sh/helm/v3", "helm.sh/helm/v3/cmd/helm")
#: The release k8s.io/kubernetes itself requires (kubectl's kustomize), so its packages are shared.
KUSTOMIZE = KubeTool("kustomize", "sigs.k8s.io/kustomize/kustomize/v5", "sigs.k8s.io/kustomize/kustomize/v5")


#: The realnode tier's kubelet, kube-proxy, kube-scheduler and kube-controller-manager, one executable.
NODE_SOURCE = SOURCE.parent / "realnode" / "k8s"


def build_node_components() -> Path:
    """`k8s-node` (kubelet, kube-proxy, kube-scheduler, kube-controller-manager; the first names one)
    from tests/realnode/k8s, built and cached exactly as kube-apiserver is, at the same release."""
    return _build_k8s("k8s-node", NODE_SOURCE, "k8s-node")


def debian_package(package: str, step: str) -> Path:
    """Debian's `package` unpacked into the user cache (never installed: no root, no service); the
    directory standing for its root. Fetched once per machine, under a lock, renamed into place
    only when complete; in a test, one not fetched yet fails the test, naming preparation `step`."""
    base = user_cache() / "debian"
    dest = base / package
    if dest.is_dir():
        return dest
    may_build(step)
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise RuntimeError(f"apt-get and dpkg-deb are needed to fetch Debian's {package}")
    with file_lock(base / "locks", package):
        if dest.is_dir():
            return dest
        scratch = base / f".{package}.partial"
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        try:
            _run(["apt-get", "download", package], cwd=scratch)
            debs = sorted(scratch.glob(f"{package}_*.deb"))
            if len(debs) != 1:
                raise RuntimeError(f"apt-get download {package} left {[d.name for d in debs]}")
            _run(["dpkg-deb", "-x", str(debs[0]), str(scratch / "root")])
            (scratch / "root").rename(dest)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return dest


def _run(cmd: Sequence[str], *, cwd: Path | None = None) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr.strip()}")
