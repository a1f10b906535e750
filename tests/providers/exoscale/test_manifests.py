"""The Exoscale kustomize overlays' pod, materialised with the in-tree Secret `exoscale-api-credentials`,
passes `check-config` against the emulator and finds its nodepool. (Rendering, schemas and the Secret's
names and keys are checked for every cloud by tests/deploy/.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cloudprovider_grpc.emulators.exoscale import ExoscaleEmulator
from tests.deploy_support import issuer
from tests.deploy_support.pods import ContainerView, pod_containers
from tests.deploy_support.tools import kustomize_build as render
from tests.providers.exoscale.conftest import KEY, SECRET, ZONE

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
OVERLAYS = {
    "sidecar": ROOT / "manifests/providers/exoscale",
    "standalone": ROOT / "manifests/providers/exoscale/standalone",
}
#: the in-tree example Secret (cloudprovider/exoscale/examples/generate-secret.sh): key -> our variable
IN_TREE_SECRET = "exoscale-api-credentials"


def ours(objects: list[dict[str, Any]]) -> ContainerView:
    (workload,) = [
        o
        for o in objects
        if o["kind"] == "Deployment" and any(c["name"] == "cloudprovider-grpc" for c in pod_containers(o))
    ]
    secret = {"api-key": KEY.encode(), "api-secret": SECRET.encode(), "api-zone": ZONE.encode()}
    return ContainerView(
        workload, "cloudprovider-grpc", objects, {**issuer.issue(objects), IN_TREE_SECRET: secret}
    )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_check_config_accepts_the_pod(overlay: str, tmp_path: Path) -> None:
    mat = ours(render(OVERLAYS[overlay])).materialize(tmp_path / "pod")
    emu = ExoscaleEmulator(zone=ZONE, keys={KEY: SECRET})
    emu.add_nodepool(emu.add_cluster("my-cluster"), "workers", size=2)
    with emu:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CLOUDPROVIDER_GRPC_", "EXOSCALE_"))}
        env.update(mat.env, EXOSCALE_API_ENDPOINT=emu.base_url)
        result = subprocess.run(
            [sys.executable, "-m", "cloudprovider_grpc", "check-config", *mat.args[1:]],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "group workers" in result.stdout and "configuration OK: provider exoscale" in result.stdout
    assert SECRET not in result.stdout + result.stderr
