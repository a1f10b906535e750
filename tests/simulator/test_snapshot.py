"""A scenario from Kubernetes objects: nodes matched to groups through NodeGroupForNode, pods
grouped by controller, what cannot be modelled listed; CA's flags; the written file round-trips."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from cloudprovider_grpc.simulator import parse_scenario
from cloudprovider_grpc.simulator.cli import group_source, write_scenario
from cloudprovider_grpc.simulator.flags import parse_flags, read_flag_text
from cloudprovider_grpc.simulator.snapshot import build_scenario, load_dump
from tests.simulator import dumps

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).resolve().parents[3] / "shared" / "golden" / "k8s-api" / "v1.35.0"
WEB = {"cpu": "500m", "memory": "1Gi"}


def _snapshot(extra: list[dict], flags: list[str] | None = None):
    with group_source(None, "sim", False) as client:
        nodes = dumps.backend_nodes(client)
        names = [n["metadata"]["name"] for n in nodes]
        objects = [*nodes, *dumps.deployment_pods("web", 4, WEB, names), *extra]
        return build_scenario(objects, client, provider="sim", flags=flags), nodes


def test_nodes_match_their_groups_and_pods_become_one_workload_per_controller() -> None:
    control = dumps.node("cp-1", "", {"cpu": "2", "memory": "4Gi", "pods": "110"}, {"role": "cp"})
    control["spec"]["taints"] = [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    snap, nodes = _snapshot([control, dumps.daemonset("kube-proxy", {"cpu": "100m", "memory": "128Mi"})])
    assert snap.groups_of_nodes == {"cp-1": None, **{n["metadata"]["name"]: "general" for n in nodes}}
    s = parse_scenario(snap.scenario)
    assert [(w.name, w.kind, w.replicas, w.container_requests()) for w in s.workloads] == [
        ("web", "Deployment", 4, [WEB])
    ]
    assert [(n.name, n.capacity, n.taints[0].key) for n in s.static_nodes] == [
        ("cp-1", {"cpu": "2", "memory": "4Gi"}, "node-role.kubernetes.io/control-plane")
    ]
    assert s.daemonsets[0].requests == {"cpu": "100m", "memory": "128Mi"}
    assert s.provider == "sim"


def test_what_cannot_be_modelled_is_listed() -> None:
    pod = dumps.deployment_pods("db", 1, WEB, ["general-0"])[0]
    pod["metadata"]["ownerReferences"][0].update(kind="StatefulSet", name="db")
    pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}]
    pod["spec"]["schedulerName"] = "volcano"
    job = dumps.deployment_pods("nightly", 1, WEB, ["general-0"])[0]
    job["metadata"]["ownerReferences"][0].update(kind="Job", name="nightly")
    snap, _ = _snapshot([pod, job])
    text = "\n".join(snap.notes)
    assert "job/nightly in default: its 1 pods run to the end of the simulation" in text
    assert "statefulset/db in default mounts 1 persistent volume(s)" in text
    assert "placed by scheduler 'volcano'" in text
    assert [w["name"] for w in snap.scenario["workloads"]] == ["web", "nightly", "db"]


def test_priority_classes_pdbs_and_the_priority_expander_configmap_apply() -> None:
    pc = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "high"},
        "value": 1000,
    }
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "minAvailable": "50%"},
    }
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cluster-autoscaler-priority-expander", "namespace": "kube-system"},
        "data": {"priorities": "10:\n  - highmem\n50:\n  - gen.*\n"},
    }
    with group_source(None, "sim", False) as client:
        nodes = dumps.backend_nodes(client)
        pods = dumps.deployment_pods("web", 4, WEB, [n["metadata"]["name"] for n in nodes])
        for p in pods:
            p["spec"]["priorityClassName"] = "high"
        snap = build_scenario(
            [*nodes, *pods, pc, pdb, cm], client, provider="sim", flags=["--expander=priority"]
        )
    s = parse_scenario(snap.scenario)
    web = s.workloads[0]
    assert (web.priority, web.pdb.min_available) == (1000, 2)
    assert s.priorities == {10: ["highmem"], 50: ["gen.*"]}
    assert s.autoscaler.expander == "priority"


def test_autoscaler_flags_as_pasted_from_a_deployment() -> None:
    text = """
        - ./cluster-autoscaler
        - --cloud-provider=externalgrpc
        - --scale-down-unneeded-time=5m
        - --balance-similar-node-groups
        - --balancing-ignore-label=a
        - --balancing-ignore-label b
        - --v=4
    """
    options, notes = parse_flags(read_flag_text(text))
    assert options == {
        "scale-down-unneeded-time": "5m",
        "balance-similar-node-groups": True,
        "balancing-ignore-label": ["a", "b"],
    }
    assert notes == ["CA flags with no effect on the simulated decisions, ignored: --cloud-provider, --v"]


def test_the_autoscalers_own_pod_gives_its_flags_and_version() -> None:
    ca = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "ca-1", "namespace": "kube-system"},
        "spec": {
            "containers": [
                {
                    "name": "ca",
                    "image": "registry.k8s.io/autoscaling/cluster-autoscaler:v1.35.0",
                    "command": ["./cluster-autoscaler", "--scale-down-delay-after-add=3m"],
                }
            ]
        },
        "status": {"phase": "Running"},
    }
    snap, _ = _snapshot([ca], flags=["--scale-down-delay-after-add=1m"])
    s = parse_scenario(snap.scenario)
    assert (s.autoscaler.version, s.autoscaler.scale_down_delay_after_add) == ("1.35", 60.0)


def test_the_written_scenario_round_trips(tmp_path: Path) -> None:
    snap, _ = _snapshot([dumps.daemonset("kube-proxy", {"cpu": "100m"})])
    snap.notes.append("an example note")
    path = tmp_path / "s.yaml"
    write_scenario(path, copy.deepcopy(snap.scenario), snap.notes)
    text = path.read_text()
    assert text.startswith("# Written by") and "# an example note\n" in text
    assert parse_scenario(yaml.safe_load(text)) == parse_scenario(snap.scenario)


def test_objects_with_every_field_set_convert_or_are_listed(tmp_path: Path) -> None:
    """Kubernetes' own fully populated Pod and Node (every field set) through the converter."""
    if not GOLDEN.is_dir():
        pytest.skip("the shared golden objects are not beside the checkout")
    pod = json.loads((GOLDEN / "core.v1.Pod.json").read_text())
    node = json.loads((GOLDEN / "core.v1.Node.json").read_text())
    del pod["metadata"]["deletionTimestamp"]
    pod["status"]["phase"] = "Running"
    pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1"}
    dump = tmp_path / "dump.json"
    dump.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [pod, node]}))
    with group_source(None, "sim", False) as client:
        snap = build_scenario(load_dump(dump), client, provider="sim")
    s = parse_scenario(snap.scenario)
    assert len(s.workloads) == 1 and len(s.static_nodes) == 1
    assert any("persistent volume" in n for n in snap.notes)


def test_a_controllers_pods_with_different_specs_are_counted_once_each() -> None:
    """Pods equal to the first are not serialized; each different spec counts once."""
    pods = dumps.deployment_pods("api", 5, WEB, ["general-0"])
    pods[2]["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1", "memory": "1Gi"}
    pods[4]["spec"]["containers"] = copy.deepcopy(pods[2]["spec"]["containers"])  # a rollout's second pod
    snap, _ = _snapshot(pods)
    assert (
        "deployment/api in default: 5 pods with 2 different specs (a rollout?); the first is used"
        in snap.notes
    )
    same, _ = _snapshot(dumps.deployment_pods("api", 5, WEB, ["general-0"]))
    assert not [n for n in same.notes if "different specs" in n]
