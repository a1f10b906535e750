"""Scenario format: durations, CA flag names and defaults, precise validation errors, the schema."""

import json

import pytest

from cloudprovider_grpc.simulator.scenario import (
    SCHEMA_PATH,
    ScenarioError,
    json_schema,
    load_scenario,
    parse_duration,
    parse_scenario,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "text, seconds",
    [("10s", 10), ("10m", 600), ("1h30m", 5400), ("500ms", 0.5), ("0", 0), (90, 90), (1.5, 1.5), ("10", 10)],
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["10x", "1.5.2", "m", "", "-5s", "-5", -1, True])
def test_bad_durations(bad):
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_defaults_are_cas():
    s = parse_scenario({"name": "x", "duration": "1h"})
    o = s.autoscaler
    assert (o.scan_interval, o.expander, o.max_nodes_total) == (10.0, "least-waste", 0)
    assert (o.max_node_provision_time, o.scale_down_unneeded_time, o.scale_down_delay_after_add) == (
        900,
        600,
        600,
    )
    assert (o.scale_down_utilization_threshold, o.max_scale_down_parallelism, o.max_drain_parallelism) == (
        0.5,
        10,
        1,
    )
    assert (o.initial_node_group_backoff_duration, o.max_node_group_backoff_duration) == (300, 1800)
    assert (o.cores_total, o.memory_total, o.balance_similar_node_groups) == ("0:320000", "0:6400000", False)
    assert s.provider == "sim"


def test_flag_names_are_accepted():
    s = parse_scenario(
        {
            "name": "x",
            "duration": 60,
            "autoscaler": {"scan-interval": "30s", "expander": "priority,least-waste"},
            "priorities": {10: ["a"]},
        }
    )
    assert s.autoscaler.scan_interval == 30
    assert s.autoscaler.expander == "priority,least-waste"


@pytest.mark.parametrize(
    "data, fragment",
    [
        ({"duration": "1h"}, "name: required, not given"),
        ({"name": "x", "duraton": "1h"}, "duraton: unknown key; did you mean 'duration'?"),
        (
            {"name": "x", "duration": "1h", "autoscaler": {"scan_intervall": "1s"}},
            "autoscaler.scan_intervall",
        ),
        ({"name": "x", "duration": "1h", "autoscaler": {"expander": "random,price"}}, "nothing may follow"),
        ({"name": "x", "duration": "1h", "autoscaler": {"expander": "priority"}}, "needs a 'priorities' map"),
        (
            {"name": "x", "duration": "1h", "workloads": [{"name": "w", "requests": {"cpu": "1x"}}]},
            "workloads.0.requests.cpu",
        ),
        ({"name": "x", "duration": "1h", "workloads": [{"name": "w"}, {"name": "w"}]}, "unique: w"),
        (
            {"name": "x", "duration": "1h", "workloads": [{"name": "w", "start": "10m", "end": "5m"}]},
            "after 'start'",
        ),
        (
            {
                "name": "x",
                "duration": "1h",
                "workloads": [{"name": "w", "node_affinity": [{"key": "k", "operator": "In"}]}],
            },
            "at least one value",
        ),
        ({"name": "x", "duration": "1h", "autoscaler": {"cores-total": "10:5"}}, "MIN <= MAX"),
        ({"name": "x", "duration": "soon"}, "duration"),
    ],
)
def test_validation_errors_name_the_key(data, fragment):
    with pytest.raises(ScenarioError, match=r"src\.yaml") as err:
        parse_scenario(data, "src.yaml")
    assert fragment in str(err.value)


def test_replicas_over_time():
    s = parse_scenario(
        {
            "name": "x",
            "duration": "1h",
            "workloads": [
                {
                    "name": "w",
                    "replicas": 2,
                    "start": "5m",
                    "end": "50m",
                    "schedule": [{"at": "10m", "replicas": 6}, {"at": "20m", "replicas": 1}],
                }
            ],
        }
    )
    w = s.workloads[0]
    assert [w.replicas_at(t) for t in (0, 300, 599, 600, 1200, 2999, 3000)] == [0, 2, 2, 6, 1, 1, 0]


def test_load_errors(tmp_path):
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ScenarioError, match="not valid YAML"):
        load_scenario(bad)
    bad.write_text("- a list\n")
    with pytest.raises(ScenarioError, match="mapping"):
        load_scenario(bad)


def test_committed_schema_matches_the_model():
    assert json.loads(SCHEMA_PATH.read_text()) == json_schema()


def test_guide_scenario_reference_example_is_valid():
    # the simulator guide's reference block (pods that constrain each other, node state, the cluster
    # around the groups), completed with name and duration
    import re
    from pathlib import Path

    import yaml

    guide = (Path(__file__).resolve().parents[2] / "docs" / "simulator.md").read_text()
    section = guide[guide.index("**Scenario reference:") :]
    block = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    s = parse_scenario({"name": "readme", "duration": "1h", **yaml.safe_load(block)})
    web = s.workloads[0]
    assert web.host_ports == [8080] and web.pdb.max_unavailable == 1
    assert [e.node for e in s.node_events] == ["general-0", "general-1", "general-2", "general-3"]
    assert s.static_nodes[0].count == 2 and s.node_ready_delay == 45.0
