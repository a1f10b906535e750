"""The Exoscale kustomize overlays: they render, validate against the Kubernetes schemas, read the
in-tree Secret `exoscale-api-credentials` unchanged, and our CLI accepts the resulting pod."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from cloudprovider_grpc.providers.exoscale import ExoscaleEmulator
from tests.deploy_support import certmanager
from tests.deploy_support.kustomize import pod_containers, render
from tests.deploy_support.pods import ContainerView, flag_value
from tests.exoscale.conftest import KEY, SECRET, ZONE

ROOT = Path(__file__).resolve().parents[2]
OVERLAYS = {
    "sidecar": ROOT / "manifests/providers/exoscale",
    "standalone": ROOT / "manifests/providers/exoscale/standalone",
}
#: the in-tree example Secret (cloudprovider/exoscale/examples/generate-secret.sh): key -> our variable
IN_TREE_SECRET = "exoscale-api-credentials"
KEYS = {"EXOSCALE_API_KEY": "api-key", "EXOSCALE_API_SECRET": "api-secret", "EXOSCALE_ZONE": "api-zone"}


def ours(objects: list[dict[str, Any]]) -> ContainerView:
    (workload,) = [
        o
        for o in objects
        if o["kind"] == "Deployment" and any(c["name"] == "cloudprovider-grpc" for c in pod_containers(o))
    ]
    secret = {"api-key": KEY.encode(), "api-secret": SECRET.encode(), "api-zone": ZONE.encode()}
    return ContainerView(
        workload, "cloudprovider-grpc", objects, {**certmanager.issue(objects), IN_TREE_SECRET: secret}
    )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_validates_and_reads_the_in_tree_secret(overlay: str) -> None:
    objects = render(OVERLAYS[overlay])
    latest = max(kubernetes_validate.utils.all_versions(), key=lambda v: tuple(map(int, v.split("."))))
    for obj in objects:
        if certmanager.is_cert_manager(obj):
            certmanager.validate(obj)
        else:
            kubernetes_validate.validate(obj, latest, strict=True)
    view = ours(objects)
    refs = {v["name"]: v["valueFrom"]["secretKeyRef"] for v in view.container["env"] if "valueFrom" in v}
    assert {var: (r["name"], r["key"]) for var, r in refs.items()} == {
        var: (IN_TREE_SECRET, key) for var, key in KEYS.items()
    }
    assert not any(r.get("optional") for r in refs.values())
    assert flag_value(view.args, "--provider") == "exoscale" and "--nodes" in view.args
    assert not [o for o in objects if o["kind"] == "Secret"]  # never overwrites the user's Secret


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
