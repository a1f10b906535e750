"""The SPC kustomize overlay reads the fork's Secret and ConfigMap unchanged, and the pod's own
configuration passes check-config (tests/deploy/ holds the checks every overlay passes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy_support.pods import ContainerView, flag_value, load_documents
from tests.deploy_support.tools import kustomize_build as render

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MANIFESTS = Path(__file__).resolve().parents[3] / "manifests"


def test_the_overlay_wires_the_stackpointio_secret_keys_to_the_forks_variables() -> None:
    objects = render(MANIFESTS / "providers/spc")
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    view = ContainerView(deployment, "cloudprovider-grpc", objects)
    assert flag_value(view.args, "--provider") == "spc"
    refs = {
        v["name"]: (v["valueFrom"]["secretKeyRef"]["name"], v["valueFrom"]["secretKeyRef"]["key"])
        for v in view.container["env"]
        if "valueFrom" in v
    }
    assert refs == {
        "CLUSTER_API_TOKEN": ("stackpointio", "api-token"),
        "SPC_API_BASE_URL": ("stackpointio", "api-url"),
        "ORGANIZATION_ID": ("stackpointio", "organization-id"),
        "CLUSTER_ID": ("stackpointio", "cluster-id"),
    }
    volume = next(
        v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "stackpoint-node-pools"
    )
    assert volume["configMap"] == {"name": "stackpoint-node-pools", "optional": True, "defaultMode": 0o440}
    pools_file = next(v["value"] for v in view.container["env"] if v["name"] == "SPC_NODE_POOLS_FILE")
    assert view.mount_path_of(pools_file) is not None and pools_file.endswith("/nodepools")
    assert not any(o["kind"] == "Secret" for o in objects)  # never overwrites the real Secret
    (example,) = load_documents(MANIFESTS / "providers/spc/secrets.example.yaml")
    assert example["metadata"]["name"] == "stackpointio"
    assert set(example["stringData"]) == {"api-token", "api-url", "organization-id", "cluster-id"}
