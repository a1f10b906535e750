"""Every manifest file parses and is used; the RBAC component, every layout (its objects in the
right namespace) and every cloud's example Secrets validate against the Kubernetes 1.33+ JSON
schemas (strict), or for cert-manager and prometheus-operator kinds against those projects' CRDs
(tests/deploy_support/crds.py); and each validator refuses a misspelt field."""

from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest

from tests.deploy_support import crds
from tests.deploy_support.layouts import KUSTOMIZATION_FILE, MANIFESTS, NAMESPACE, render_ours
from tests.deploy_support.pods import container, find, load_documents
from tests.deploy_support.rendered import (
    CA_CONTAINER,
    CA_DEPLOYMENT,
    LAYOUTS,
    SCHEMA_VERSIONS,
    rendered,
    validate,
)
from tests.deploy_support.tools import kustomize_build

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: Kinds that never carry metadata.namespace.
CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "Namespace",
    "CustomResourceDefinition",
    "PriorityClass",
}


def all_yaml_files() -> list[Path]:
    return sorted(MANIFESTS.rglob("*.yaml"))


@pytest.mark.parametrize("path", all_yaml_files(), ids=lambda p: str(p.relative_to(MANIFESTS)))
def test_every_manifest_file_parses(path: Path) -> None:
    docs = load_documents(path)
    assert docs, f"{path} is empty"
    for doc in docs:
        assert isinstance(doc, dict) and doc.get("apiVersion") and doc.get("kind"), doc


def test_every_resource_file_is_used() -> None:
    """No stray YAML: each file is a kustomization, referenced by one, or a Secrets example."""
    referenced = set(MANIFESTS.glob("providers/**/secrets*.example.yaml"))
    for kfile in MANIFESTS.rglob(KUSTOMIZATION_FILE):
        referenced.add(kfile)
        (spec,) = load_documents(kfile)
        entries = [*(spec.get("resources") or []), *(p["path"] for p in spec.get("patches") or [])]
        referenced.update((kfile.parent / e).resolve() for e in entries)
    stray = [p for p in all_yaml_files() if p.resolve() not in referenced]
    assert not stray, stray


def test_rbac_component_renders_and_validates() -> None:
    """The RBAC component both kustomize layouts include, rendered and validated on its own."""
    objects = kustomize_build(MANIFESTS / "cluster-autoscaler-rbac")
    assert {o["kind"] for o in objects} == {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    }
    for version in SCHEMA_VERSIONS:
        for obj in objects:
            kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_layout_renders_namespaced_objects(layout: str) -> None:
    objects = rendered(layout)
    assert objects
    for obj in objects:
        namespace = obj["metadata"].get("namespace")
        if obj["kind"] in CLUSTER_SCOPED:
            assert namespace is None, obj["metadata"]
        elif obj["kind"] in ("Role", "RoleBinding") and obj["metadata"]["name"].endswith("-node-events"):
            # --kube-status records Events on Nodes, which Kubernetes keeps in `default`
            assert namespace == "default", obj["metadata"]
        else:
            assert namespace == NAMESPACE, obj["metadata"]


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_objects_validate_against_schemas(layout: str, version: str) -> None:
    for obj in rendered(layout):
        validate(obj, version)


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
@pytest.mark.parametrize(
    "path",
    sorted(MANIFESTS.glob("providers/**/secrets*.example.yaml")),
    ids=lambda p: str(p.parent.relative_to(MANIFESTS / "providers")),
)
def test_example_secrets_validate(path: Path, version: str) -> None:
    for obj in load_documents(path):
        assert obj["kind"] == "Secret"
        kubernetes_validate.validate(obj, version, strict=True)


def test_schema_validation_rejects_typos() -> None:
    """Every validator refuses unknown fields, so a misspelt key cannot slip through as valid."""
    deployment = copy.deepcopy(find(rendered("sidecar"), "Deployment", CA_DEPLOYMENT))
    container(deployment, CA_CONTAINER)["volumeMount"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, SCHEMA_VERSIONS[0], strict=True)
    cert = copy.deepcopy(find(rendered("standalone"), "Certificate", "cloudprovider-grpc-server"))
    crds.validate(cert)
    cert["spec"]["dnsName"] = ["x"]
    with pytest.raises(jsonschema.ValidationError, match="dnsName"):
        crds.validate(cert)
    cert = copy.deepcopy(find(rendered("standalone"), "Certificate", "cloudprovider-grpc-server"))
    cert["spec"]["usages"] = ["server auth", "server-auth"]
    with pytest.raises(jsonschema.ValidationError, match="server-auth"):
        crds.validate(cert)
    issuer_obj = copy.deepcopy(find(rendered("standalone"), "Issuer", "cloudprovider-grpc-ca"))
    issuer_obj["spec"]["ca"]["secret"] = issuer_obj["spec"]["ca"].pop("secretName")
    with pytest.raises(jsonschema.ValidationError):
        crds.validate(issuer_obj)
    monitor = [o for o in render_ours("serviceMonitor.enabled=true") if o["kind"] == "ServiceMonitor"]
    assert len(monitor) == 1
    crds.validate(monitor[0])
    monitor[0]["spec"]["endpoints"][0]["intervall"] = "30s"
    with pytest.raises(jsonschema.ValidationError, match="intervall"):
        crds.validate(monitor[0])
