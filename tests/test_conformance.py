"""Conformance through cluster-autoscaler's own externalgrpc client code, over real sockets.

The pytest entry point of `tests/conformance/run.sh` (README "## Conformance"): for every backend of
`tests/support/backends.py` (today sim, sim-pools, cherry, vultr, exoscale, alicloud, spc; a new backend
joins by being registered there) and every CA generation whose source snapshot sits in
`../shared/upstream/cluster-autoscaler/` (1.34.1 with the legacy wire fields, 1.36.1, master), the
Go harness is linked against that CA's `externalgrpc` package (built once, cached outside the clone)
and drives three servers on loopback with mutual TLS through CA's own `CloudProvider`, `NodeGroup`
and `PricingModel`. The README's grpcurl examples run once. Outside CI the test skips when Go or
the snapshots are missing; in CI (CI=true) that is a failure, never a skip.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.realca import builds
from tests.support import gotools
from tests.support.backends import BACKENDS, BackendUnderTest

# `realca` too: it builds CA from source, so `pytest -m "not realca"` leaves it out as well
pytestmark = [pytest.mark.conformance, pytest.mark.realca]

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "tests" / "conformance" / "run.sh"
GOLDEN = ROOT.parent / "shared" / "golden" / "externalgrpc"

#: every RPC of the service and the upstream client function that issues it; each must appear in a
#: passed check, so no RPC goes unexercised by CA's client.
UPSTREAM_CALLERS = {
    "NodeGroups": "CloudProvider.NodeGroups",
    "NodeGroupForNode": "CloudProvider.NodeGroupForNode",
    "PricingNodePrice": "PricingModel.NodePrice",
    "PricingPodPrice": "PricingModel.PodPrice",
    "GPULabel": "CloudProvider.GPULabel",
    "GetAvailableGPUTypes": "CloudProvider.GetAvailableGPUTypes",
    "Cleanup": "CloudProvider.Cleanup",
    "Refresh": "CloudProvider.Refresh",
    "NodeGroupTargetSize": "NodeGroup.TargetSize",
    "NodeGroupIncreaseSize": "NodeGroup.IncreaseSize",
    "NodeGroupDeleteNodes": "NodeGroup.DeleteNodes",
    "NodeGroupDecreaseTargetSize": "NodeGroup.DecreaseTargetSize",
    "NodeGroupNodes": "NodeGroup.Nodes",
    "NodeGroupTemplateNodeInfo": "NodeGroup.TemplateNodeInfo",
    "NodeGroupGetOptions": "NodeGroup.GetOptions",
}


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _unavailable(reason: str) -> None:
    if _in_ci():
        pytest.fail(f"conformance cannot run in CI: {reason}")
    pytest.skip(f"conformance skipped: {reason}")


@pytest.mark.timeout(2400)  # a cold build of one CA generation's harness takes minutes on 2 cores
@pytest.mark.parametrize("version", list(builds.GENERATIONS))
@pytest.mark.parametrize("be", BACKENDS, ids=lambda b: b.name)
def test_conformance_through_cas_own_client(be: BackendUnderTest, version: str, tmp_path: Path) -> None:
    if gotools.go_binary() is None:
        _unavailable("no Go toolchain; install Go >= 1.26 to build CA's client code")
    if not (builds.UPSTREAM / version).is_dir():
        _unavailable(f"CA {version} snapshot not found at {builds.UPSTREAM / version}")
    if not GOLDEN.is_dir():
        _unavailable(f"upstream schema dumps not found at {GOLDEN}")
    harness = builds.conformance_harness(version)
    args = list(be.serve_args)
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "CA_VERSION": version,
        "CONFORMANCE_BIN": str(harness),
        "GRPCURL_BIN": str(builds.grpcurl()),
        # the README's grpcurl lines once, not per CA generation and backend
        "GRPCURL_EXAMPLES": "1" if (be.name, version) == ("sim", "master") else "0",
    }
    if be.conformance_config:
        config = tmp_path / "conformance.yaml"
        config.write_text(be.conformance_config)
        args += ["--config", str(config)]
        env["CONFORMANCE_PROFILE"] = "generic"
    else:
        env["CONFORMANCE_PROFILE"] = "sim" if be.name == "sim" else "generic"
    proc = subprocess.run(
        ["bash", str(RUN), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    out = proc.stdout
    print(out)
    print(proc.stderr, file=sys.stderr)
    failed = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert proc.returncode == 0 and not failed, (
        f"{len(failed)} conformance check(s) failed; output:\n{out[-8000:]}\n{proc.stderr[-3000:]}"
    )
    assert f"harness on CA {version}" in out, out[-2000:]
    assert "conformance: " in out and ", 0 failed" in out, out[-2000:]
    passed = [line for line in out.splitlines() if re.match(r"ok\s+\[", line) and "[grpcurl]" not in line]
    missing = [rpc for rpc, fn in UPSTREAM_CALLERS.items() if not any(fn in line for line in passed)]
    assert not missing, f"RPCs no passed check exercised: {missing}"
    assert all(f"[{version}]" in line for line in passed), "a check ran under another CA generation"
    if env["GRPCURL_EXAMPLES"] == "1":
        grpcurl = re.search(r"^grpcurl examples: (\d+) passed, (\d+) failed$", out, re.M)
        assert grpcurl and int(grpcurl[1]) >= 4 and grpcurl[2] == "0", out[-2000:]
