"""The test suite's Kubernetes control plane (tests/support/controlplane.py) is a real one: kubectl
and the official Python client both talk to it, and RBAC is enforced for non-admin identities."""

from __future__ import annotations

import json

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tests.support.controlplane import ControlPlane
from tests.support.kubebuilds import kubernetes_version
from tests.support.rbac import Grant, wait_allowed

# Slow: the first test of a session waits for the apiserver's build (once per machine) and startup.
pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _lease(name: str, namespace: str, holder: str) -> str:
    return json.dumps(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
        }
    )


def test_apiserver_is_ready_and_serves_the_pinned_release(control_plane: ControlPlane) -> None:
    assert control_plane.url.startswith("https://127.0.0.1:")
    assert control_plane.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"
    version = json.loads(control_plane.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == kubernetes_version()


def test_kubectl_applies_a_lease_that_the_python_client_reads(control_plane: ControlPlane) -> None:
    ns = control_plane.namespace()
    assert ns != control_plane.namespace(), "namespace() must hand out a fresh name each time"
    control_plane.kubectl("apply", "-f", "-", input=_lease("leader", ns, "replica-a"))

    got = json.loads(control_plane.kubectl("get", "lease", "leader", "-n", ns, "-o", "json").stdout)
    assert got["spec"]["holderIdentity"] == "replica-a"

    with config.new_client_from_config(config_file=str(control_plane.kubeconfig)) as api:
        leases = client.CoordinationV1Api(api).list_namespaced_lease(ns).items
    assert [(lease.metadata.name, lease.spec.holder_identity) for lease in leases] == [
        ("leader", "replica-a")
    ]


def test_service_account_gets_what_its_role_grants_and_nothing_else(control_plane: ControlPlane) -> None:
    ns = control_plane.namespace()
    control_plane.kubectl("apply", "-f", "-", input=_lease("leader", ns, "replica-a"))
    kubeconfig = control_plane.token_kubeconfig(ns, "reader")
    control_plane.kubectl("create", "role", "lease-reader", "--verb=get,list", "--resource=leases", "-n", ns)
    control_plane.kubectl(
        "create", "rolebinding", "reader", "--role=lease-reader", f"--serviceaccount={ns}:reader", "-n", ns
    )
    wait_allowed(control_plane, kubeconfig, Grant("get", "leases.coordination.k8s.io", ns))

    as_reader = control_plane.kubectl("get", "lease", "leader", "-n", ns, "-o", "name", kubeconfig=kubeconfig)
    assert as_reader.stdout.strip() == "lease.coordination.k8s.io/leader"
    refused = control_plane.kubectl(
        "apply", "-f", "-", input=_lease("leader", ns, "intruder"), kubeconfig=kubeconfig, check=False
    )
    assert refused.returncode != 0
    assert "forbidden" in refused.stderr.lower(), refused.stderr

    with config.new_client_from_config(config_file=str(kubeconfig)) as api:
        coordination = client.CoordinationV1Api(api)
        assert coordination.read_namespaced_lease("leader", ns).spec.holder_identity == "replica-a"
        with pytest.raises(ApiException) as denied:
            coordination.delete_namespaced_lease("leader", ns)
        assert denied.value.status == 403
        with pytest.raises(ApiException) as elsewhere:
            client.CoreV1Api(api).list_namespaced_config_map(ns)
        assert elsewhere.value.status == 403
