"""Regenerate the committed protobuf/gRPC Python code from proto/.

Run with the pinned grpcio-tools (see pyproject's `dev` extra):
`python scripts/gen_protos.py [OUTDIR [PROTO_ROOT]]` (PROTO_ROOT defaults to the repository's proto/).
Writes `*_pb2.py`, `*_pb2.pyi` (protoc's own stubs) and `*_pb2_grpc.py` under OUTDIR (default: the
repository root, i.e. into `cloudprovider_grpc/protos/`). tests/grpcapi/test_generated.py regenerates into a
temporary directory and fails on any difference, so a stale checkout cannot pass CI.
"""

from __future__ import annotations

import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"


def proto_files(proto_root: Path = PROTO_ROOT) -> list[Path]:
    return sorted(proto_root.rglob("*.proto"))


def generate(out_dir: Path, proto_root: Path = PROTO_ROOT) -> None:
    """Compile every .proto under proto_root into out_dir; raise on protoc failure."""
    include = Path(protoc.__file__).parent / "_proto"  # bundled well-known types
    args = [
        "grpc_tools.protoc",
        f"-I{proto_root}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
    ] + [str(p.relative_to(proto_root)) for p in proto_files(proto_root)]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")


if __name__ == "__main__":
    generate(
        Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT,
        Path(sys.argv[2]) if len(sys.argv) > 2 else PROTO_ROOT,
    )
