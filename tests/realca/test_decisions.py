# ruff: noqa: E501 - CA log lines are quoted verbatim
"""Reading CA's decisions from its log, and the vocabulary the simulator comparison uses (no Go,
no cluster: these run in the fast suite)."""

from __future__ import annotations

from tests.realca.autoscaler import Decision, parse_decisions
from tests.realca.cluster import node_name
from tests.realca.compare import from_ca, normalise

# Lines in the exact formats of CA 1.36.1 (orchestrator.go, actuator.go, clusterstate.go,
# static_autoscaler.go), with klog's header as CA prints it.
LOG = """\
I1123 03:40:01.000001       1 orchestrator.go:177] Final scale-up plan: [{small 1->2 (max: 4)}]
I1123 03:40:01.000002       1 executor.go:166] Scale-up: setting group small size to 2
I1123 03:41:01.000001       1 orchestrator.go:177] Final scale-up plan: [{twin 0->3 (max: 4)} {large 0->1 (max: 2)}]
I1123 03:42:01.000001       1 actuator.go:176] Scale-down: removing empty node "sim-twin-1"
I1123 03:42:01.000002       1 actuator.go:269] Scale-down: removing node sim-large-1, utilization: {0.1 0.1 0 cpu 0.1}, pods to reschedule: default/big-1
I1123 03:42:03.000001       1 actuator.go:176] Scale-down: removing empty node "sim-twin-2"
I1123 03:43:01.000001       1 clusterstate.go:1284] Failed adding 1 nodes (1 unseen previously) to group scarce due to OutOfResource.STOCKOUT; errorMessages=[]string{"no capacity"}
W1123 03:43:01.000002       1 clusterstate.go:404] Disabling scale-up for node group scarce until 2026-11-23 03:53:01; errorClass=OutOfResource; errorCode=STOCKOUT
I1123 03:43:03.000001       1 static_autoscaler.go:1116] Some nodes that failed to create were removed, recalculating cluster state.
W1123 03:44:00.000001       1 clusterstate.go:500] No node group for node sim-gone-1, skipping
"""


def test_parse_decisions_in_log_order() -> None:
    assert parse_decisions(LOG) == [
        Decision("scale-up", "small", 1),
        Decision("scale-up", "twin", 3),
        Decision("scale-up", "large", 1),
        Decision("scale-down", node="sim-twin-1"),
        Decision("scale-down", node="sim-large-1"),
        Decision("scale-down", node="sim-twin-2"),
        Decision("failed-scale-up", "scarce", 1),
        Decision("backoff", "scarce"),
        Decision("failed-removed"),
    ]


def test_comparison_vocabulary() -> None:
    groups = {"sim-twin-1": "twin", "sim-twin-2": "twin", "sim-large-1": "large"}
    assert from_ca(parse_decisions(LOG), groups) == [
        ("up", "small", 1),
        ("up", "twin", 3),
        ("up", "large", 1),
        ("down", {"large": 1, "twin": 2}),
        ("failed", "scarce"),
    ]
    # a run of removals is one step however it is ordered or split over loops; a scale-up ends it
    assert normalise([("down", "a", 1), ("up", "b", 1), ("down", "a", 1), ("down", "b", 1)]) == [
        ("down", {"a": 1}),
        ("up", "b", 1),
        ("down", {"a": 1, "b": 1}),
    ]


def test_node_names_are_dns_labels() -> None:
    assert node_name("sim://general/3") == "sim-general-3"
    assert node_name("cherryservers://EU-1/12345") == "cherryservers-eu-1-12345"
    assert len(node_name("x" * 100)) == 63
