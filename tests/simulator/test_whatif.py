"""What-if edits on a cluster snapshot make the same decisions as the equivalent hand-written
scenario, on every backend (emulated): the snapshot carries the cluster over faithfully, and
the edits mean what they say."""

from __future__ import annotations

import copy

import pytest

from cloudprovider_grpc.providers.registry import BACKENDS
from cloudprovider_grpc.simulator import parse_scenario, run, whatif
from cloudprovider_grpc.simulator.cli import group_source
from cloudprovider_grpc.simulator.snapshot import build_scenario
from tests.simulator import dumps

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WEB = {"cpu": "1", "memory": "1Gi"}
PROXY = {"cpu": "100m", "memory": "128Mi"}


def _decisions(data: dict, provider: str) -> list[tuple]:
    report = run(parse_scenario(data), provider=provider, emulate=True, transport="in-process")
    return [(d.t, d.kind, d.group, d.delta, d.node) for d in report.decisions]


@pytest.mark.parametrize("provider", sorted(BACKENDS))
def test_scaling_a_deployment_of_a_snapshot_matches_the_hand_written_scenario(provider: str) -> None:
    with group_source(None, provider, True) as client:
        nodes = dumps.backend_nodes(client)
        names = [n["metadata"]["name"] for n in nodes]
        objects = [
            *nodes,
            *dumps.deployment_pods("web", 6, WEB, names),
            dumps.daemonset("kube-proxy", PROXY),
        ]
        snap = build_scenario(objects, client, provider=provider, name="snap", duration="2m")
    assert snap.scenario["provider"] == provider
    edited = whatif.apply(copy.deepcopy(snap.scenario), scales=["deployment/web=3x"])
    assert [w["replicas"] for w in edited["workloads"]] == [18]
    by_hand = {
        "name": "snap",
        "duration": "2m",
        "provider": provider,
        "daemonsets": [{"name": "kube-proxy", "requests": PROXY}],
        "workloads": [{"name": "web", "replicas": 18, "requests": WEB}],
    }
    got = _decisions(edited, provider)
    assert any(kind == "scale-up" for _, kind, *_ in got), got
    assert got == _decisions(by_hand, provider)


def test_draining_a_group_matches_cordoning_and_evicting_its_nodes_by_hand() -> None:
    provider = "sim"
    with group_source(None, provider, False) as client:
        nodes = dumps.backend_nodes(client)
        names = [n["metadata"]["name"] for n in nodes]
        objects = [*nodes, *dumps.deployment_pods("web", 3, WEB, names)]
        snap = build_scenario(objects, client, provider=provider, name="snap", duration="2m")
    drained = whatif.apply(copy.deepcopy(snap.scenario), drain=["general"])
    general = [n for n in names if n.startswith("general")]
    by_hand = copy.deepcopy(snap.scenario)
    by_hand["node_events"] = [
        {"at": 0, "node": n, "taints": [{"key": "node.kubernetes.io/unschedulable"}], "drain": True}
        for n in general
    ]
    got = _decisions(drained, provider)
    assert got == _decisions(by_hand, provider)
    # general sits at its min size, so its cordoned node stays; its pods need a node elsewhere
    assert [(k, g) for _, k, g, *_ in got if k == "scale-up"] == [("scale-up", "highmem")], got
    assert not [d for d in _decisions(snap.scenario, provider) if d[1] == "scale-up"]
