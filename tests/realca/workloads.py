"""Workloads the scenarios create in the real cluster, and waits on what the cluster then does."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tests.realca.cluster import REGISTRAR_LABEL, wait_for
from tests.realca.kube import JSON, Kube

NAMESPACE = "default"


@dataclass(frozen=True)
class Workload:
    """A Deployment of identical pods (pause containers: nothing ever runs them)."""

    name: str
    replicas: int
    cpu: str
    memory: str
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, str]] = ()

    def manifest(self) -> JSON:
        pod_spec: JSON = {
            "containers": [
                {
                    "name": "app",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": self.cpu, "memory": self.memory}},
                }
            ],
            "terminationGracePeriodSeconds": 0,
        }
        if self.node_selector:
            pod_spec["nodeSelector"] = dict(self.node_selector)
        if self.tolerations:
            pod_spec["tolerations"] = [dict(t) for t in self.tolerations]
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": self.name, "namespace": NAMESPACE},
            "spec": {
                "replicas": self.replicas,
                "selector": {"matchLabels": {"app": self.name}},
                "template": {"metadata": {"labels": {"app": self.name}}, "spec": pod_spec},
            },
        }


DEPLOYMENTS = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments"


def apply(kube: Kube, workload: Workload) -> None:
    kube.create(DEPLOYMENTS, workload.manifest())


def scale(kube: Kube, name: str, replicas: int) -> None:
    kube.merge_patch(f"{DEPLOYMENTS}/{name}", {"spec": {"replicas": replicas}})


def pods(kube: Kube, app: str) -> list[JSON]:
    return [p for p in kube.items(f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=f"app={app}")]


def running_on(kube: Kube, app: str) -> dict[str, str]:
    """pod name -> node name, for the workload's Running pods."""
    return {
        p["metadata"]["name"]: p["spec"]["nodeName"]
        for p in pods(kube, app)
        if p.get("status", {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    }


def wait_running(kube: Kube, app: str, count: int, timeout: float, watch: Sequence = ()) -> dict[str, str]:
    found: dict[str, str] = {}

    def check() -> bool:
        nonlocal found
        found = running_on(kube, app)
        return len(found) == count

    wait_for(f"{count} running pods of {app}", check, timeout, watch=watch)
    return found


def nodes(kube: Kube) -> dict[str, JSON]:
    return {
        n["metadata"]["name"]: n for n in kube.items("/api/v1/nodes", labelSelector=f"{REGISTRAR_LABEL}=true")
    }


def cleanup(kube: Kube, timeout: float = 60) -> None:
    """Remove every Deployment and pod the scenarios made, and the registrar's Nodes."""
    for dep in kube.items(DEPLOYMENTS):
        kube.delete(f"{DEPLOYMENTS}/{dep['metadata']['name']}")
    for pod in kube.items(f"/api/v1/namespaces/{NAMESPACE}/pods"):
        kube.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{pod['metadata']['name']}", grace_seconds=0)
    for name in nodes(kube):
        kube.delete(f"/api/v1/nodes/{name}")
    wait_for(
        "an empty cluster",
        lambda: (
            not kube.items(DEPLOYMENTS)
            and not kube.items(f"/api/v1/namespaces/{NAMESPACE}/pods")
            and not nodes(kube)
        ),
        timeout,
    )
