"""Cached builds of everything upstream the real-CA and conformance suites run.

All Go builds go through `tests/support/gotools.py` (one cache outside the clone, binaries keyed by
the content of the source they come from), so a warm run rebuilds nothing:

- `ca_binary(version)`: cluster-autoscaler from the trimmed snapshot in
  `../shared/upstream/cluster-autoscaler/<version>/` with `-tags externalgrpc`;
- `control_plane()`: kube-apiserver, kube-scheduler and kube-controller-manager from module
  `k8s.io/kubernetes` at the version CA 1.36.1's go.mod pins (master pins the same one), built inside
  that go.mod so the staging modules resolve; one build serves every CA version;
- `conformance_harness(version)`: `tests/conformance` linked against CA's own externalgrpc package
  of that snapshot (a `replace` to it), the generation selected by a build tag;
- `etcd()`: Debian's `etcd-server` package, fetched with `apt-get download` and unpacked with
  `dpkg -x` (never installed as a service).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support import gotools

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = ROOT.parent / "shared" / "upstream" / "cluster-autoscaler"
CONFORMANCE_SRC = ROOT / "tests" / "conformance"

#: CA snapshot -> the build tag that selects its adapter in tests/conformance/ca_*.go
GENERATIONS = {"1.34.1": "ca_1_34", "1.36.1": "ca_1_36", "master": "ca_master"}

#: the snapshot whose go.mod pins the control plane (k8s.io/kubernetes v1.36.2; master pins the same)
CONTROL_PLANE_FROM = "1.36.1"


def snapshot(version: str) -> Path:
    """The snapshot directory of a CA version (holding `cluster-autoscaler/` and, for master, the
    `sigs-cluster-autoscaler/` module its go.mod replaces)."""
    path = UPSTREAM / version
    if not (path / "cluster-autoscaler" / "go.mod").is_file():
        raise RuntimeError(f"CA {version} snapshot not found at {path} (see ../shared/upstream/README.md)")
    return path


def _copy_snapshot(version: str):
    def prepare(scratch: Path) -> Path:
        shutil.copytree(snapshot(version), scratch / version)
        return scratch / version / "cluster-autoscaler"

    return prepare


def ca_binary(version: str) -> Path:
    """The cluster-autoscaler executable of `version`, built once per snapshot content."""
    key = gotools.tree_key(snapshot(version), extra="tags=externalgrpc")
    out = gotools.go_build(
        f"cluster-autoscaler-{version}", key, _copy_snapshot(version), ["."], tags=["externalgrpc"]
    )
    return out / "cluster-autoscaler"


def kubernetes_version() -> str:
    """The k8s.io/kubernetes version the control plane is built at (from CA's go.mod)."""
    gomod = (snapshot(CONTROL_PLANE_FROM) / "cluster-autoscaler" / "go.mod").read_text()
    found = re.search(r"^\s*k8s\.io/kubernetes\s+(v\S+)", gomod, re.M)
    if not found:
        raise RuntimeError("CA's go.mod does not require k8s.io/kubernetes")
    return found[1]


CONTROL_PLANE = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")


def control_plane() -> Path:
    """The directory holding kube-apiserver, kube-scheduler and kube-controller-manager."""
    base = snapshot(CONTROL_PLANE_FROM) / "cluster-autoscaler"
    version = kubernetes_version()
    major, minor = version.lstrip("v").split(".")[:2]
    # what the release build stamps (hack/lib/version.sh); unstamped, the binaries call themselves
    # v0.0.0-master, which clients parsing the server version would choke on
    stamp = " ".join(
        f"-X k8s.io/component-base/version.{name}={value}"
        for name, value in (
            ("gitVersion", version),
            ("gitMajor", major),
            ("gitMinor", minor),
            ("gitTreeState", "clean"),
        )
    )
    key = gotools.tree_key(base / "go.mod", base / "go.sum", extra=version + stamp)
    packages = [f"k8s.io/kubernetes/cmd/{name}" for name in CONTROL_PLANE]
    return gotools.go_build(
        f"kube-{version}", key, _copy_snapshot(CONTROL_PLANE_FROM), packages, ldflags=stamp
    )


def _harness_gomod(version: str) -> str:
    """go.mod of the harness for one CA generation: CA's own requirements and replaces (they pin the
    k8s.io staging modules), plus a replace of CA's module itself to the snapshot; relative paths in
    CA's replaces are made absolute."""
    ca_dir = (snapshot(version) / "cluster-autoscaler").resolve()
    text = (ca_dir / "go.mod").read_text()
    text = re.sub(r"^module .*$", "module cloudprovider-grpc/tests/conformance", text, count=1, flags=re.M)

    def absolute(match: re.Match[str]) -> str:
        return f"=> {(ca_dir / match[1]).resolve()}"

    text = re.sub(r"=>\s*(\.\.?/\S*)", absolute, text)
    return text + (
        "\nrequire k8s.io/autoscaler/cluster-autoscaler v0.0.0\n"
        f"\nreplace k8s.io/autoscaler/cluster-autoscaler => {ca_dir}\n"
    )


def conformance_harness(version: str) -> Path:
    """The conformance harness binary speaking through CA `version`'s externalgrpc package."""
    sources = sorted(CONFORMANCE_SRC.glob("*.go"))
    key = gotools.tree_key(*sources, snapshot(version), extra=GENERATIONS[version])

    def prepare(scratch: Path) -> Path:
        for src in sources:
            shutil.copy2(src, scratch / src.name)
        (scratch / "go.mod").write_text(_harness_gomod(version))
        shutil.copy2(snapshot(version) / "cluster-autoscaler" / "go.sum", scratch / "go.sum")
        return scratch

    out = gotools.go_build(f"conformance-{version}", key, prepare, ["."], tags=[GENERATIONS[version]])
    return out / "conformance"


def etcd() -> Path:
    """etcd from Debian's etcd-server package, unpacked under the shared cache."""
    root = gotools.cache_root() / "bin"
    for found in sorted(root.glob("etcd-*/usr/bin/etcd")):
        return found
    with gotools.build_lock("etcd"):
        for found in sorted(root.glob("etcd-*/usr/bin/etcd")):
            return found
        debs = gotools.cache_root() / "debs"
        debs.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(
            ["apt-get", "download", "etcd-server"], cwd=debs, capture_output=True, text=True, check=False
        )
        packages = sorted(debs.glob("etcd-server_*.deb"))
        if proc.returncode != 0 or not packages:
            raise RuntimeError(f"apt-get download etcd-server failed:\n{proc.stdout}\n{proc.stderr}")
        deb = packages[-1]
        version = deb.name.split("_")[1]
        partial = root / f".etcd-{version}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        subprocess.run(["dpkg", "-x", str(deb), str(partial)], check=True, capture_output=True)
        dest = root / f"etcd-{version}"
        partial.rename(dest)
        return dest / "usr" / "bin" / "etcd"


GRPCURL_VERSION = "v1.9.3"


def grpcurl() -> Path:
    return gotools.go_install("github.com/fullstorydev/grpcurl/cmd/grpcurl", GRPCURL_VERSION, "grpcurl")


def _main(argv: list[str]) -> int:
    """`python -m tests.realca.builds conformance VERSION` prints shell assignments of the harness and
    grpcurl paths (for run.sh); `... warm [VERSION...]` builds everything and prints how long each took."""
    import shlex
    import time

    if len(argv) == 2 and argv[0] == "conformance":
        print(f"CONFORMANCE_BIN={shlex.quote(str(conformance_harness(argv[1])))}")
        print(f"GRPCURL_BIN={shlex.quote(str(grpcurl()))}")
        return 0
    if argv and argv[0] == "warm":
        versions = argv[1:] or list(GENERATIONS)
        steps: list[tuple[str, object]] = [("etcd", etcd), ("control plane", control_plane)]
        for version in versions:
            steps.append((f"CA {version}", lambda v=version: ca_binary(v)))
            steps.append((f"harness on CA {version}", lambda v=version: conformance_harness(v)))
        for name, build in steps:
            start = time.monotonic()
            result = build()  # type: ignore[operator]
            print(f"{name}: {time.monotonic() - start:.0f} s -> {result}", flush=True)
        return 0
    print("usage: python -m tests.realca.builds conformance VERSION | warm [VERSION...]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
