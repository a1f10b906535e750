"""The committed generated code is exactly what scripts/gen_protos.py makes from proto/ today.

A stale `_pb2.py` (someone edited a .proto and forgot to regenerate, or hand-edited generated code)
would make the server speak a schema nobody reviewed; this fails the build instead.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
GENERATED_DIR = ROOT / "cloudprovider_grpc" / "protos"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def _generated(directory: Path) -> dict[str, bytes]:
    return {
        path.name: path.read_bytes()
        for path in sorted(directory.iterdir())
        if path.is_file() and path.name.endswith(GENERATED_SUFFIXES)
    }


def test_committed_generated_code_matches_a_fresh_generation(tmp_path: Path) -> None:
    if importlib.util.find_spec("grpc_tools") is None:
        pytest.skip("grpcio-tools is not installed (it is in the `test` extra): cannot regenerate")
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_protos.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"gen_protos.py failed:\n{result.stdout}\n{result.stderr}"

    fresh = _generated(tmp_path / "cloudprovider_grpc" / "protos")
    committed = _generated(GENERATED_DIR)
    assert fresh, "the generator produced nothing"
    sources = sorted(p.name for p in (ROOT / "proto" / "cloudprovider_grpc" / "protos").glob("*.proto"))
    assert {name.removesuffix(".proto") + "_pb2.py" for name in sources} <= set(fresh)

    orphans = sorted(set(committed) - set(fresh))
    assert not orphans, f"committed generated files without a .proto source: {orphans}"
    missing = sorted(set(fresh) - set(committed))
    assert not missing, f"generated files not committed: {missing} (run scripts/gen_protos.py)"
    stale = sorted(name for name in fresh if fresh[name] != committed[name])
    assert not stale, f"stale generated files: {stale} (run: python scripts/gen_protos.py)"
