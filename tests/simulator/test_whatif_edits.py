"""What-if edits on a scenario mapping: each form of --scale, --set, --add-workload and
--drain-group, and the errors that name what is wrong."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cloudprovider_grpc.simulator import parse_scenario, whatif
from cloudprovider_grpc.simulator.scenario import ScenarioError

pytestmark = pytest.mark.unit


def base() -> dict:
    return {
        "name": "w",
        "duration": "1h",
        "workloads": [
            {"name": "web", "replicas": 4, "schedule": [{"at": "10m", "replicas": 6}]},
            {"name": "web2", "namespace": "other", "replicas": 1},
            {"name": "batch", "kind": "Job", "replicas": 3},
        ],
    }


@pytest.mark.parametrize(
    ("spec", "replicas"),
    [
        ("deployment/web=2x", [8, 1, 3]),
        ("web=0.5x", [2, 1, 3]),
        ("default/deployment/web=10", [10, 1, 3]),
        ("job/batch=2x", [4, 1, 6]),
    ],
)
def test_scale_forms(spec: str, replicas: list[int]) -> None:
    data = whatif.apply(base(), scales=[spec])
    assert [w["replicas"] for w in data["workloads"]] == replicas
    parse_scenario(data)


def test_scale_also_scales_the_schedule() -> None:
    data = whatif.apply(base(), scales=["web=2x"])
    assert data["workloads"][0]["schedule"] == [{"at": "10m", "replicas": 12}]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("deployment/nope=2x", "no such workload (workloads: batch, web, web2)"),
        ("job/web=2x", "no such workload"),
        ("cronjob/web=2x", "unknown kind 'cronjob'"),
        ("web", "expected [NAMESPACE/][KIND/]NAME=FACTORx or =REPLICAS"),
    ],
)
def test_scale_errors_say_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(ScenarioError, match=re.escape(message)):
        whatif.apply(base(), scales=[spec])


def test_set_reaches_mappings_and_list_items_and_reads_yaml_values() -> None:
    data = whatif.apply(
        base(),
        sets=["autoscaler.scale-down-unneeded-time=5m", "workloads.2.replicas=7", "node_groups.g.max_size=3"],
    )
    s = parse_scenario(data)
    assert s.autoscaler.scale_down_unneeded_time == 300.0
    assert s.workloads[2].replicas == 7 and s.node_groups["g"].max_size == 3
    with pytest.raises(ScenarioError, match="is not an index of a list of 3"):
        whatif.apply(base(), sets=["workloads.9.replicas=1"])
    with pytest.raises(ScenarioError, match=r"expected KEY\.PATH=VALUE"):
        whatif.apply(base(), sets=["autoscaler"])


def test_added_workloads_from_manifests_and_entries(tmp_path: Path) -> None:
    f = tmp_path / "add.yaml"
    f.write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: extra.app}\n"
        "spec:\n  replicas: 3\n  template:\n    metadata: {labels: {app: extra}}\n"
        "    spec: {containers: [{name: c, resources: {requests: {cpu: 250m}}}]}\n"
        "---\nworkloads:\n  - {name: later, replicas: 2, start: 30m}\n"
    )
    data = whatif.apply(base(), add=[str(f)], scales=["extra-app=2x"])
    s = parse_scenario(data)
    added = {w.name: w for w in s.workloads[3:]}
    assert added["extra-app"].replicas == 6 and added["extra-app"].container_requests() == [{"cpu": "250m"}]
    assert added["later"].start == 1800.0
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n")
    with pytest.raises(ScenarioError, match="Service is not a workload"):
        whatif.apply(base(), add=[str(bad)])


def test_drain_is_a_group_node_event() -> None:
    s = parse_scenario(whatif.apply(base(), drain=["general"]))
    assert [(e.group, e.drain, e.at) for e in s.node_events] == [("general", True, 0.0)]
    with pytest.raises(ScenarioError, match="give exactly one of 'node' and 'group'"):
        parse_scenario({**base(), "node_events": [{"at": 0, "drain": True}]})
