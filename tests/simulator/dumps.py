"""Kubernetes objects as `kubectl get -o json` prints them, for snapshot tests: nodes for a
backend's machines (built from its own listing and templates), a Deployment's pods, a DaemonSet."""

from __future__ import annotations

from typing import Any

from cloudprovider_grpc.simulator.client import CAClient
from cloudprovider_grpc.simulator.model import node_name_for


def node(name: str, provider_id: str, allocatable: dict[str, str], labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {**labels, "kubernetes.io/hostname": name}},
        "spec": {"providerID": provider_id},
        "status": {
            "allocatable": allocatable,
            "capacity": allocatable,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def backend_nodes(client: CAClient) -> list[dict[str, Any]]:
    """A Node for every running machine of every group the backend serves, shaped as its template."""
    client.refresh()
    out = []
    for g in client.node_groups():
        tpl = client.template(g.id)
        assert tpl is not None, g.id
        alloc = {k: q.string for k, q in tpl.status.allocatable.items()}
        for inst in client.nodes(g.id):
            out.append(node(node_name_for(inst.id), inst.id, alloc, dict(tpl.metadata.labels)))
    return out


def deployment_pods(
    name: str, replicas: int, requests: dict[str, str], node_names: list[str], namespace: str = "default"
) -> list[dict[str, Any]]:
    """Running pods of a Deployment (through its ReplicaSet), spread over `node_names`."""
    hash_ = "5d8f7c9b6"
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-{hash_}-{i:05d}",
                "namespace": namespace,
                "labels": {"app": name, "pod-template-hash": hash_},
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "ReplicaSet",
                        "name": f"{name}-{hash_}",
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "nodeName": node_names[i % len(node_names)] if node_names else None,
                "containers": [{"name": "main", "image": "nginx", "resources": {"requests": requests}}],
            },
            "status": {"phase": "Running" if node_names else "Pending"},
        }
        for i in range(replicas)
    ]


def daemonset(name: str, requests: dict[str, str], namespace: str = "kube-system") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "template": {
                "spec": {
                    "containers": [{"name": name, "image": "x", "resources": {"requests": requests}}],
                    "tolerations": [{"operator": "Exists"}],
                }
            }
        },
    }


def as_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}}
