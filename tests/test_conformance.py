"""Conformance against cluster-autoscaler's externalgrpc client behaviour, in Go, over real sockets.

This is the pytest entry point of `tests/conformance/run.sh` (see README "## Conformance"): it builds
the Go harness and grpcurl, starts three servers on loopback with mutual TLS, drives them with the wire
schemas of CA master, 1.34.2 and 1.33.0, and runs the README's grpcurl examples. Go is not a Python
dependency, so outside CI the test skips when Go is missing; in CI (CI=true) a missing Go or a missing
schema directory is a failure, never a skip.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.conformance

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "tests" / "conformance" / "run.sh"
GOLDEN = ROOT.parent / "shared" / "golden" / "externalgrpc"

#: every RPC of the service and the upstream client function that issues it; each must appear in a
#: passed check, so no RPC goes unexercised by the CA-shaped client.
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


#: what the older CA generations must get right (their legacy fields)
LEGACY_CHECKED = (
    "NodeGroup.TemplateNodeInfo",
    "NodeGroup.GetOptions",
    "PricingModel.NodePrice",
    "PricingModel.PodPrice",
)


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _unavailable(reason: str) -> None:
    if _in_ci():
        pytest.fail(f"conformance cannot run in CI: {reason}")
    pytest.skip(f"conformance skipped: {reason}")


#: backends the suite drives: the sim cloud with its documented demo groups (exact expectations), and
#: each emulated cloud through a config file (generic expectations)
TARGETS = {
    "sim-demo": [],
    "cherry-emulate": ["--config", str(ROOT / "tests" / "conformance" / "cherry-emulate.yaml")],
    "sim-pools": ["--config", str(ROOT / "tests" / "conformance" / "sim-pools.yaml")],
    "vultr-emulate": ["--config", str(ROOT / "tests" / "conformance" / "vultr-emulate.yaml")],
    "exoscale-emulate": ["--config", str(ROOT / "tests" / "conformance" / "exoscale-emulate.yaml")],
    "alicloud-emulate": ["--config", str(ROOT / "tests" / "conformance" / "alicloud-emulate.yaml")],
    "spc-emulate": ["--config", str(ROOT / "tests" / "conformance" / "spc-emulate.yaml")],
}


@pytest.mark.timeout(1500)  # a cold Go module download and build takes about two minutes here
@pytest.mark.parametrize("target", sorted(TARGETS))
def test_conformance_run_passes(target: str) -> None:
    if shutil.which("go") is None and not Path("/usr/local/go/bin/go").is_file():
        _unavailable("no `go` on PATH; install Go >= 1.26 to run tests/conformance/run.sh")
    if not GOLDEN.is_dir():
        _unavailable(f"upstream schema dumps not found at {GOLDEN}")
    proc = subprocess.run(
        ["bash", str(RUN), *TARGETS[target]],
        cwd=ROOT,
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=1400,
        check=False,
    )
    out = proc.stdout
    print(out)
    print(proc.stderr, file=sys.stderr)
    failed = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert proc.returncode == 0 and not failed, (
        f"{len(failed)} conformance check(s) failed; output:\n{out[-8000:]}\n{proc.stderr[-3000:]}"
    )
    assert "conformance: " in out and ", 0 failed" in out, out[-2000:]
    grpcurl = re.search(r"^grpcurl examples: (\d+) passed, (\d+) failed$", out, re.M)
    assert grpcurl and int(grpcurl[1]) >= 4 and grpcurl[2] == "0", out[-2000:]

    passed = [line for line in out.splitlines() if line.startswith("ok ")]
    missing = [rpc for rpc, fn in UPSTREAM_CALLERS.items() if not any(fn in line for line in passed)]
    assert not missing, f"RPCs no passed check exercised: {missing}"
    for release in ("[v1.34.2]", "[v1.33.0]"):
        for fn in (
            "NodeGroup.TemplateNodeInfo",
            "NodeGroup.GetOptions",
            "PricingModel.NodePrice",
            "PricingModel.PodPrice",
        ):
            assert any(release in line and fn in line for line in passed), f"{fn} not proven for {release}"
