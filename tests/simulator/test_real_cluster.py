"""The simulator on a real cluster: objects created in a real kube-apiserver, dumped with the real
`kubectl get ... -o json`, read back by `--from-dump` and by `--from-cluster` through the official
client; both give the same scenario, and the scenario written to a file runs to the same report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from cloudprovider_grpc.cli import main
from cloudprovider_grpc.simulator import parse_scenario

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KINDS = "nodes,pods,daemonsets,pdb,priorityclasses,configmaps"


def _objects(ns: str) -> tuple[str, list[str]]:
    """The manifests for one test's namespace (cluster-scoped names carry the namespace too), and
    the status patch of its nodes (a Node's status is set through its subresource, as kubelets do)."""
    node = f"general-0-{ns}"
    static = f"cp-{ns}"
    docs = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node, "labels": {"cloudprovider-grpc.io/node-group": "general"}},
            "spec": {"providerID": "sim://general/0"},
        },
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": static, "labels": {"role": "control-plane"}},
            "spec": {"taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]},
        },
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": f"high-{ns}"},
            "value": 1000,
        },
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "kube-proxy", "namespace": ns},
            "spec": {
                "selector": {"matchLabels": {"app": "kube-proxy"}},
                "template": {
                    "metadata": {"labels": {"app": "kube-proxy"}},
                    "spec": {
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [
                            {
                                "name": "p",
                                "image": "x",
                                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                            }
                        ],
                    },
                },
            },
        },
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": ns},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 1},
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cluster-autoscaler-priority-expander", "namespace": ns},
            "data": {"priorities": "10:\n  - general\n"},
        },
    ]
    manifests = "\n---\n".join(yaml.safe_dump(d) for d in docs)
    return manifests, [node, static]


def _pods(ns: str, rs_uid: str, node: str) -> str:
    pods = []
    for i in range(3):
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"web-6d4b7c9f8-{i}",
                    "namespace": ns,
                    "labels": {"app": "web", "pod-template-hash": "6d4b7c9f8"},
                    "ownerReferences": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "ReplicaSet",
                            "name": "web-6d4b7c9f8",
                            "uid": rs_uid,
                            "controller": True,
                        }
                    ],
                },
                "spec": {
                    "nodeName": node,
                    "priorityClassName": f"high-{ns}",
                    "containers": [
                        {
                            "name": "web",
                            "image": "x",
                            "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
                        }
                    ],
                },
            }
        )
    return "\n---\n".join(yaml.safe_dump(p) for p in pods)


@pytest.fixture
def cluster(control_plane) -> tuple[object, str, list[str]]:
    ns = control_plane.namespace("sim")
    manifests, nodes = _objects(ns)
    control_plane.kubectl("apply", "-f", "-", input=manifests)
    for name in nodes:
        status = {"status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}}}
        control_plane.kubectl(
            "patch", "node", name, "--subresource=status", "--type=merge", "-p", json.dumps(status)
        )
    rs = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "web-6d4b7c9f8", "namespace": ns},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "x"}]},
            },
        },
    }
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(rs))
    uid = control_plane.kubectl(
        "get", "rs", "web-6d4b7c9f8", "-n", ns, "-o", "jsonpath={.metadata.uid}"
    ).stdout
    control_plane.kubectl("apply", "-f", "-", input=_pods(ns, uid, nodes[0]))
    return control_plane, ns, nodes


def _mine(data: dict, ns: str, nodes: list[str]) -> dict:
    """What in a scenario comes from this test's objects (the apiserver is shared)."""
    return {
        "workloads": [w for w in data.get("workloads", []) if w.get("namespace") == ns],
        "daemonsets": [d for d in data.get("daemonsets", []) if d.get("namespace") == ns],
        "static_nodes": [n for n in data.get("static_nodes", []) if n["name"] in nodes],
        "autoscaler": data.get("autoscaler", {}),
    }


def test_from_dump_and_from_cluster_read_the_same_cluster(cluster, tmp_path: Path, capsys) -> None:
    plane, ns, nodes = cluster
    dump = tmp_path / "cluster.json"
    dump.write_text(plane.kubectl("get", KINDS, "-A", "-o", "json").stdout)
    common = ["--provider", "sim", "--duration", "10m", "--quiet", "--set", "autoscaler.expander=priority"]
    from_dump, from_cluster = tmp_path / "dump.yaml", tmp_path / "live.yaml"
    assert main(["simulate", "--from-dump", str(dump), *common, "--write-scenario", str(from_dump),
                 "--out", str(tmp_path / "a")]) == 0  # fmt: skip
    assert main(["simulate", "--from-cluster", "--kubeconfig", str(plane.kubeconfig), *common,
                 "--write-scenario", str(from_cluster), "--out", str(tmp_path / "b")]) == 0  # fmt: skip
    capsys.readouterr()
    a, b = yaml.safe_load(from_dump.read_text()), yaml.safe_load(from_cluster.read_text())
    assert _mine(a, ns, nodes) == _mine(b, ns, nodes)
    mine = _mine(a, ns, nodes)
    web = parse_scenario(a).workloads
    web = next(w for w in web if w.namespace == ns)
    assert (web.name, web.kind, web.replicas, web.priority) == ("web", "Deployment", 3, 1000)
    assert web.pdb is not False and web.pdb.max_unavailable == 1
    assert [n["name"] for n in mine["static_nodes"]] == [nodes[1]]
    assert mine["daemonsets"][0]["requests"] == {"cpu": "100m", "memory": "128Mi"}
    # the written file is an ordinary scenario: run again, it decides exactly what the snapshot did
    assert (
        main(["simulate", str(from_dump), "--provider", "sim", "--quiet", "--out", str(tmp_path / "c")]) == 0
    )
    first = json.loads((tmp_path / "a" / "report.json").read_text())
    again = json.loads((tmp_path / "c" / "report.json").read_text())
    assert first["decisions"] == again["decisions"] and first["timeline"] == again["timeline"]
