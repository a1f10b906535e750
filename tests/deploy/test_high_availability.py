"""High availability in the layouts: the standalone ones run two replicas with one leader on a
Lease (rolling update that starts the new pod first, anti-affinity, a PodDisruptionBudget, RBAC
for its Lease, its pod's label and `--kube-status`); the sidecar ones elect no leader; our chart
refuses more than one replica without leader election."""

from __future__ import annotations

import pytest

from tests.deploy_support.layouts import OUR_CHART, render_ours
from tests.deploy_support.pods import container, flag_value, pod_spec
from tests.deploy_support.rendered import (
    OUR_CONTAINER,
    SIDECARS,
    STANDALONES,
    kube_status,
    leader_elected,
    our_args,
    our_workload,
    rendered,
)
from tests.deploy_support.tools import Objects, helm_template_error

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: the rules `--kube-status` needs (server/kubereport.py): its one ConfigMap, and Events on it
#: and on Nodes
STATUS_RULES = [
    ("", "configmaps", ("create",), None),
    ("", "configmaps", ("get", "update"), ("cloudprovider-grpc-status",)),
    ("", "events", ("create", "patch"), None),
]


def status_rbac(objects: Objects) -> dict[str, list[tuple[object, ...]]]:
    """The rules our server's ServiceAccount is granted besides leader election's (its Lease, its
    own pod's label), by namespace ("" for cluster-wide): what `--kube-status` was given."""
    account = (pod_spec(our_workload(objects)) or {})["serviceAccountName"]
    bound = {
        (b["roleRef"]["kind"], b["roleRef"]["name"])
        for b in objects
        if b["kind"] in ("RoleBinding", "ClusterRoleBinding")
        and any(s["kind"] == "ServiceAccount" and s["name"] == account for s in b["subjects"])
    }
    out: dict[str, list[tuple[object, ...]]] = {}
    for o in objects:
        if (o["kind"], o["metadata"]["name"]) not in bound:
            continue
        for r in o["rules"]:
            if r["apiGroups"] == ["coordination.k8s.io"] or r["resources"] == ["pods"]:
                continue
            (group,) = r["apiGroups"]
            (resource,) = r["resources"]
            names = tuple(r["resourceNames"]) if "resourceNames" in r else None
            out.setdefault(o["metadata"].get("namespace", ""), []).append(
                (group, resource, tuple(r["verbs"]), names)
            )
    return {ns: sorted(rules, key=str) for ns, rules in out.items()}


def lease_name(objects: Objects) -> str:
    ours = container(our_workload(objects), OUR_CONTAINER)
    env = {v["name"]: v.get("value") for v in ours.get("env") or []}
    name = flag_value(our_args(objects), "--leader-elect-resource-name")
    return name or env.get("CLOUDPROVIDER_GRPC_LEADER_ELECT__RESOURCE_NAME") or "cloudprovider-grpc"


@pytest.mark.parametrize("layout", STANDALONES)
def test_standalone_runs_two_replicas_with_one_leader(layout: str) -> None:
    objects = rendered(layout)
    workload = our_workload(objects)
    spec, pod = workload["spec"], pod_spec(workload) or {}
    assert spec["replicas"] == 2 and leader_elected(objects)
    # an upgrade starts the new pod first: the old leader hands over to it
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    ours = container(workload, OUR_CONTAINER)
    # leader and standby both Ready, or a rollout never removes an old pod (maxUnavailable 0)
    assert ours["readinessProbe"]["httpGet"]["path"] == "/readyz/replica"
    env = {v["name"]: v.get("valueFrom") for v in ours["env"]}
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}  # the Lease holder's identity
    # the pod the leader labels is its own
    assert env["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    # the address a leader publishes on the Lease for its predecessor to forward calls to
    assert env["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    labels = spec["template"]["metadata"]["labels"]
    assert anti["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= labels.items()
    (pdb,) = [
        o
        for o in objects
        if o["kind"] == "PodDisruptionBudget"
        and o["spec"]["selector"]["matchLabels"].items() <= labels.items()
    ]
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    # RBAC: the pod's ServiceAccount may get, update and watch its one Lease, and create it
    account = pod["serviceAccountName"]
    bound = {
        b["roleRef"]["name"]
        for b in objects
        if b["kind"] == "RoleBinding"
        and any(s["kind"] == "ServiceAccount" and s["name"] == account for s in b["subjects"])
    }
    rules = [
        r
        for o in objects
        if o["kind"] == "Role" and o["metadata"]["name"] in bound
        for r in o["rules"]
        if r["apiGroups"] == ["coordination.k8s.io"]
    ]
    assert sorted((r["verbs"], r.get("resourceNames")) for r in rules) == [
        (["create"], None),
        (["get", "update", "watch"], [lease_name(objects)]),
    ]
    assert all(r["resources"] == ["leases"] for r in rules)
    # ... and label its own pod leader or standby (a pod's name is not known in advance)
    pod_rules = [
        r
        for o in objects
        if o["kind"] == "Role" and o["metadata"]["name"] in bound
        for r in o["rules"]
        if r["resources"] == ["pods"]
    ]
    assert [(r["apiGroups"], r["verbs"], r.get("resourceNames")) for r in pod_rules] == [
        ([""], ["get", "patch"], None)
    ]
    # --kube-status: its ConfigMap and Events beside it, Events in `default` for Nodes, Nodes read
    assert kube_status(objects)
    namespace = next(o["metadata"]["namespace"] for o in objects if o["kind"] == "Deployment")
    assert status_rbac(objects) == {
        namespace: sorted(STATUS_RULES, key=str),
        "default": [("", "events", ("create", "patch"), None)],
        "": [("", "nodes", ("get",), None)],
    }


@pytest.mark.parametrize("layout", SIDECARS)
def test_sidecar_layout_has_no_leader_election(layout: str) -> None:
    assert not leader_elected(rendered(layout))


def test_our_chart_refuses_replicas_without_a_leader() -> None:
    error = helm_template_error(OUR_CHART, set_values=["replicas=2", "leaderElection.enabled=false"])
    assert "leaderElection.enabled" in error
    one = render_ours("replicas=1", "leaderElection.enabled=false", "kubeStatus.enabled=false")
    workload = our_workload(one)
    assert workload["spec"]["strategy"] == {"type": "Recreate"} and not leader_elected(one)
    assert (pod_spec(workload) or {})["automountServiceAccountToken"] is False
    assert not [o for o in one if "Role" in o["kind"]]
    # the status alone mounts the token too, and grants only what it needs
    status_only = render_ours("replicas=1", "leaderElection.enabled=false")
    assert (pod_spec(our_workload(status_only)) or {})["automountServiceAccountToken"] is True
    assert kube_status(status_only) and status_rbac(status_only)["default"] == [
        ("", "events", ("create", "patch"), None)
    ]
